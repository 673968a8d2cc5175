//! The one integration test binary.
mod cli;
mod differential;
mod errors;
mod golden;
mod limits;
mod matrix;
mod seeds;
mod stress;

//! The one integration test binary.
mod cli;
mod differential;
mod errors;
mod golden;
mod seeds;
mod stress;

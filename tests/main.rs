//! The one integration test binary.
mod cli;
mod differential;
mod golden;
mod seeds;

//! The one integration test binary.
mod cli;
mod differential;
mod errors;
mod fuzz_replay;
mod golden;
mod seeds;
mod unsafe_audit;

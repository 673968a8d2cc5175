//! The one integration test binary.
mod aot;
mod aot_matrix;
mod c_harness;
mod capi;
mod cli;
mod differential;
mod errors;
mod fuzz_replay;
mod golden;
mod limits;
mod matrix;
mod seeds;
mod stress;
mod unsafe_audit;

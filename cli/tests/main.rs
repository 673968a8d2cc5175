//! The command-line tool's integration test binary: the tool itself, ahead-of-time objects
//! through it, the bad-input suite over every entry point, and the fuzz replay.
mod aot;
mod aot_matrix;
mod bad_input;
// The C tests' harness is the library's.
#[path = "../../tests/c_harness.rs"]
mod c_harness;
mod cli;
mod fuzz_replay;
mod limits;

//! The library's integration test binary. The command-line tool's tests (ahead-of-time
//! objects included), and the bad-input suites that cover every entry point including the
//! tool, are in `cli/tests/`.
mod c_harness;
mod capi;
mod differential;
mod golden;
mod prepared;
mod seeds;
mod stress;
mod unsafe_audit;

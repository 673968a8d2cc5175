//! The tools around the scatterjit library: `.npy` files in and out, files replaced
//! atomically, the benchmark of the standard suite, and the body of the `.npy` reader's fuzz
//! target. The `scatterjit` binary (`src/main.rs`) is built on them; a framework that only
//! needs kernels depends on the `scatterjit` library alone.
pub mod atomic;
pub mod bench;
#[doc(hidden)]
pub mod fuzz;
pub mod npy;

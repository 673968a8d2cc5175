//! Test support shared by scatterjit's tests, benchmarks, fuzz targets and the `bench`
//! command: the standard workload suite with its deterministic input generator, and the
//! bodies of the fuzz targets over the library (the `.npy` reader's is in the CLI crate).
//!
//! Not a stable API: it changes whenever the suite or the targets do.
#[doc(hidden)]
pub mod fuzz_capi;
#[doc(hidden)]
pub mod fuzzing;
#[cfg(target_os = "linux")]
#[doc(hidden)]
pub mod guarded;
pub mod suite;
pub mod values;

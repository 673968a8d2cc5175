//! scatterjit compiles native kernels for the scatter/gather family of tensor ops at run
//! time with Cranelift: ONNX ScatterElements / Scatter, OpenVINO ScatterElementsUpdate-12,
//! PyTorch `scatter_` / `scatter_reduce_`, GatherElements and Gather.
//!
//! Each (op, dtype, index dtype, rank, axis, reduction) is a [`KernelKey`]; the op IR
//! describes it as loop nests ([`ir::Plan`]), one generic lowering turns those into CLIF,
//! and the native code is cached by key ([`KernelCache`]). Shapes and strides arrive at
//! call time, so strided views, broadcast scalars and PyTorch's larger `src` need no copy.
//!
//! ```
//! use scatterjit::{Reduction, Tensor};
//! let data = Tensor::from_slice(&[1, 5], &[1.0f32, 2.0, 3.0, 4.0, 5.0])?;
//! let indices = Tensor::from_slice(&[1, 2], &[1i64, 1])?;
//! let updates = Tensor::from_slice(&[1, 2], &[1.1f32, 2.1])?;
//! let out = scatterjit::scatter_elements(&data, &indices, &updates, 1, Reduction::Add, true)?;
//! assert_eq!(out.to_vec::<f32>()?, [1.0, 2.0 + 1.1 + 2.1, 3.0, 4.0, 5.0]);
//! # Ok::<(), scatterjit::Error>(())
//! ```
mod abi;
mod alloc;
pub mod aot;
mod api;
pub mod cabi;
mod cache;
mod check;
mod codegen;
mod engine;
pub mod error;
pub mod ffi;
mod jit;
mod kernel;
mod once;
mod partials;
mod recent;
mod strings;
mod tensor;
mod threads;

pub use alloc::{limits, set_limits, with_limits, Limits};
pub use api::{
    explain, gather, gather_elements, kept_calls, kernel_for, run, scatter_, scatter_elements,
};
pub use cache::{CacheStats, KernelCache};
pub use error::{Buffer, Error, Result};
pub use jit::Listing;
pub use jit::STREAM_FROM;
#[doc(hidden)]
pub use jit::{live_code, set_prefetch_from, set_stream_from, LiveCode};
pub use kernel::{
    set_distinct_from, set_engine_threads, set_parallel_grain, set_specialize_after,
    set_tile_picks, splits_from, Geometry, Kernel, Prepared, SPECIALIZE_AFTER,
};
pub use scatterjit_ir as ir;
pub use scatterjit_ir::{DType, KernelKey, Op, OpKind, Reduction, Tensor};
pub use tensor::{overlaps, TensorView, TensorViewMut};
pub use threads::{serial, Pool};

//! The op IR of scatterjit: what each op means, independent of how it is compiled.
//!
//! - [`DType`]: the one table of element types.
//! - [`Op`], [`Reduction`]: ops and attributes as models state them; [`Op::validate`] checks
//!   shapes against the rule table of [`shape`] and produces a [`KernelKey`].
//! - [`Plan`]: a key described as loop nests, the input of the code generator.
//! - [`interp`]: the reference interpreter, the oracle of every test.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dtype;
pub mod element;
pub mod error;
pub mod interp;
pub mod key;
pub mod kind;
pub mod loopnest;
pub mod op;
pub mod reduction;
pub mod shape;
pub mod tensor;

pub use dtype::{DType, DTypeClass};
pub use element::{Complex128, Complex64, Element};
pub use error::{Error, Mismatch, Result};
pub use key::{normalize_axis, KernelKey};
pub use kind::{OpKind, Operand, MAX_RANK, OPERAND_SLOTS};
pub use loopnest::{Access, Combine, Coord, LoopNest, PassKind, Plan, Source};
pub use op::{checked_nbytes, checked_numel, Meta, Op, Validated};
pub use reduction::{MeanAccumulator, Reduction};
pub use shape::{DimRule, Relation};
pub use tensor::{fill_row_major_strides, row_major_strides, unravel, Tensor};

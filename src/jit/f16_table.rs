//! The f16 -> f32 table that JIT code decodes scalar f16 elements through: one load where
//! the arithmetic decoding (`codegen::half::f16_to_f32`) takes 20 instructions, about half
//! of an element-wise f16 add (BENCHMARKS.md). Only code that runs in this process reads
//! it; object files decode arithmetically.

use std::sync::OnceLock;

use scatterjit_ir::{DType, KernelKey};

/// The name JIT code imports the table by.
pub(crate) const SYMBOL: &str = "scatterjit_f16_to_f32";

/// Whether code of `key`'s kernels in this process imports the table: f16 kernels only, so
/// that others neither fill it nor resolve its symbol.
pub(crate) fn serves(key: &KernelKey) -> bool {
    key.dtype() == DType::F16
}

/// Where the table lives: 65,536 f32 bit patterns, entry `h` the decoding of f16 bits `h`,
/// made on first use by the arithmetic decoding's own method, so the same bits
/// ([`crate::codegen::f16_to_f32_bits`]).
pub(crate) fn address() -> *const u8 {
    static TABLE: OnceLock<Box<[u32]>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            (0..=u16::MAX)
                .map(crate::codegen::f16_to_f32_bits)
                .collect()
        })
        .as_ptr()
        .cast()
}

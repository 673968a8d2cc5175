//! Op IR -> Cranelift IR: [`lower`] turns any loop nest into CLIF, [`combine`] holds the
//! per-(reduction, dtype) instructions, [`half`] the f16/bf16 conversions, [`divide`]
//! mean's integer floor division.
pub(crate) mod combine;
pub(crate) mod divide;
pub(crate) mod half;
pub(crate) mod lower;
#[cfg(test)]
mod test_jit;

pub(crate) use half::f16_to_f32_bits;
pub(crate) use lower::{
    build_pass, prefetch_helper_signature, stream_helper_signature, Bounds, Machine, Prefetch,
    FROM_DEST, FROM_SOURCE,
};

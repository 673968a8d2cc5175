//! Op IR -> Cranelift IR: [`lower`] turns any loop nest into CLIF, [`combine`] holds the
//! per-(reduction, dtype) instructions, [`half`] the f16/bf16 conversions.
pub(crate) mod combine;
pub(crate) mod half;
pub(crate) mod lower;

pub(crate) use lower::{build_pass, Machine};

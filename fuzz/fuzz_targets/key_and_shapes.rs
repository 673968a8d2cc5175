//! libFuzzer target; the body is [`scatterjit::fuzzing::key_and_shapes`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| scatterjit::fuzzing::key_and_shapes(data));

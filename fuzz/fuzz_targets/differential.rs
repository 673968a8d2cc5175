//! libFuzzer target; the body is [`scatterjit::fuzzing::differential`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| scatterjit::fuzzing::differential(data));

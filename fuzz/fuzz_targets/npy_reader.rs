//! libFuzzer target; the body is [`scatterjit::fuzzing::npy_reader`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| scatterjit::fuzzing::npy_reader(data));

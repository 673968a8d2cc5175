//! libFuzzer target; the body is [`scatterjit_cli::fuzz::npy_reader`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| scatterjit_cli::fuzz::npy_reader(data));

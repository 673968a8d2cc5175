//! libFuzzer target; the body is [`scatterjit_testkit::fuzzing::key_and_shapes`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| scatterjit_testkit::fuzzing::key_and_shapes(data));

//! libFuzzer target; the body is [`scatterjit_testkit::fuzzing::differential`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| scatterjit_testkit::fuzzing::differential(data));

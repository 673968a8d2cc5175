//! libFuzzer target; the body is [`scatterjit_testkit::fuzz_capi::capi`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| scatterjit_testkit::fuzz_capi::capi(data));

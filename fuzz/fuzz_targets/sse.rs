#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ax_wire::fuzz::sse(data));

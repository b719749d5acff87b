//! libFuzzer entry for the `envelope` target: stage 2's envelope decoding and subject parsing.
//! The body lives in sentinel-fuzz-bodies so the corpus test runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sentinel_fuzz_bodies::envelope(data));

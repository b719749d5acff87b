//! libFuzzer entry for the `pipeline` target: a whole Core fed deliveries, checking ack-after-commit.
//! The body lives in sentinel-fuzz-bodies so the corpus test runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sentinel_fuzz_bodies::pipeline(data));

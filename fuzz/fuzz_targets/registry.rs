//! libFuzzer entry for the `registry` target: one registry file through load, then the canonical round trip.
//! The body lives in sentinel-fuzz-bodies so the corpus test runs it too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sentinel_fuzz_bodies::registry(data));

//! The `envelope` target: stage 2's decoding half and subject parsing on hostile bytes.
//!
//! Owns: feeding the input to [`wire::decode_envelope`] as a payload and, read as UTF-8 (lossy),
//! to [`wire::parse_obs_subject`] as a subject, and checking what each promises of a success:
//! a decoded envelope is within the contract's bounds, and a parsed subject rebuilds to the
//! same text. The decode is also held to serde_json's alone ([`wire::decode_envelope_serde`]),
//! bit for bit, so the hand-written scanner it tries first is fuzzed against its reference.

use sentinel_core::wire;

pub fn envelope(data: &[u8]) {
    let decoded = wire::decode_envelope(data);
    if let Some(difference) = wire::decoding_difference(&decoded, &wire::decode_envelope_serde(data)) {
        panic!("the scanner and serde_json decode differently: {difference}");
    }
    if let Ok(env) = decoded {
        assert!(
            !env.point_id.is_empty() && env.point_id.len() <= wire::POINT_ID_BYTES_MAX,
            "decoded point_id outside its bounds: {:?}",
            env.point_id
        );
        assert!(
            !env.driver_instance.is_empty() && env.driver_instance.len() <= wire::DRIVER_INSTANCE_BYTES_MAX,
            "decoded driver_instance outside its bounds: {:?}",
            env.driver_instance
        );
        assert!(
            env.source_epoch <= i32::MAX as u32 && env.source_seq <= i64::MAX as u64,
            "decoded key beyond the log's integer columns"
        );
        assert!(
            env.detail
                .is_none_or(|d| d.starts_with('{') && d.len() <= wire::DETAIL_BYTES_MAX),
            "decoded detail is not a bounded object"
        );
    }

    let subject = String::from_utf8_lossy(data);
    if let Some((host, instance)) = wire::parse_obs_subject(&subject) {
        assert!(
            !host.is_empty() && !instance.is_empty() && !instance.contains('.'),
            "parsed subject has an empty or dotted token: {subject:?}"
        );
        assert_eq!(
            wire::obs_subject(host, instance),
            subject,
            "a parsed subject must rebuild to itself"
        );
    }
}

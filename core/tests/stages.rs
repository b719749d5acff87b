//! Stages 2–10 through the core's public API: every stage, every quarantine reason, every bad
//! reason (ingest spec, "Ingest pipeline").

mod common;

use common::*;
use sentinel_core::{
    CanonicalValue, Config, Effect, Input, Micros, Quality, QuarantineReason, RetentionClass,
};

fn quarantined(subject: &str, payload: &str) -> sentinel_core::QuarantineEntry {
    let mut core = core();
    let batch = deliver_and_flush(&mut core, vec![delivery(1, subject, payload)]);
    assert!(batch.rows.is_empty(), "expected no row for {payload}");
    assert_eq!(batch.quarantine.len(), 1);
    batch.quarantine.into_iter().next().expect("one entry")
}

fn row(subject: &str, payload: &str) -> sentinel_core::ObsRow {
    let mut core = core();
    let batch = deliver_and_flush(&mut core, vec![delivery(1, subject, payload)]);
    assert!(
        batch.quarantine.is_empty(),
        "unexpected quarantine: {:?}",
        batch.quarantine
    );
    batch.rows.into_iter().next().expect("one row")
}

const A: &str = "obs.plant-a.modbus-1";
const B: &str = "obs.plant-b.bacnet-1";
const C: &str = "obs.plant-c.opc-1";

#[test]
fn stage8_converts_fahrenheit_and_keeps_both_values() {
    let r = row(
        A,
        &envelope("plant.temp", "modbus-1", 1, "71.6", r#","unit":"degF""#),
    );
    let celsius = r.value.as_ref().and_then(CanonicalValue::num).expect("converted");
    assert!((celsius - 22.0).abs() < 1e-9, "{celsius}");
    assert_eq!(r.native_num, Some(71.6));
    assert_eq!(r.unit_native.as_deref(), Some("degF"));
    assert_eq!(r.quality, Quality::Live);
    assert_eq!(r.class, RetentionClass::Measurement);
    assert_eq!(r.registry_version, 7);
    assert_eq!(
        r.ingested_at, T0,
        "ingested_at comes from the delivery, not a clock"
    );
    assert!(r.changed, "first value is a change");
}

#[test]
fn every_quarantine_reason() {
    let ok = |seq| envelope("plant.temp", "modbus-1", seq, "70", "");
    let oversized = format!(
        r#"{{"pad":"{}"}}"#,
        "x".repeat(Config::default().envelope_bytes_max)
    );
    let q = quarantined(A, &oversized);
    assert_eq!(q.reason, QuarantineReason::Oversized);
    assert_eq!(
        q.payload.len(),
        Config::default().envelope_bytes_max,
        "stored truncated to the bound"
    );
    assert_eq!(
        q.payload_bytes as usize,
        oversized.len(),
        "original length recorded"
    );

    assert_eq!(quarantined(A, "{not json").reason, QuarantineReason::Malformed);
    assert_eq!(
        quarantined(A, r#"{"v":1,"point_id":"plant.temp"}"#).reason,
        QuarantineReason::MissingField
    );
    assert_eq!(
        quarantined(A, r#"{"v":9}"#).reason,
        QuarantineReason::UnsupportedVersion
    );
    let bad_time = ok(1).replace(&T0.add_ms(-1_000).to_rfc3339(), "half past nine");
    assert_eq!(quarantined(A, &bad_time).reason, QuarantineReason::BadTimestamp);
    let future = ok(1).replace(
        &T0.add_ms(-1_000).to_rfc3339(),
        &T0.add_ms(3_600_000).to_rfc3339(),
    );
    assert_eq!(quarantined(A, &future).reason, QuarantineReason::FutureTimestamp);
    assert_eq!(
        quarantined("obs.plant-a", &ok(1)).reason,
        QuarantineReason::BadSubject
    );
    let unknown = envelope("plant.nope", "modbus-1", 1, "1", "");
    let q = quarantined(A, &unknown);
    assert_eq!(q.reason, QuarantineReason::UnknownPoint);
    assert_eq!(q.payload, unknown.as_bytes(), "full native payload kept");
    assert_eq!(q.stream_seq, 1);
}

#[test]
fn stage5_wrong_instance_three_ways() {
    // Right instance, wrong host.
    let env = envelope("plant.temp", "modbus-1", 1, "70", "");
    assert_eq!(
        quarantined("obs.plant-b.modbus-1", &env).reason,
        QuarantineReason::WrongInstance
    );
    // A host publishing a point assigned to another host's instance.
    assert_eq!(
        quarantined(B, &envelope("plant.temp", "bacnet-1", 1, "70", "")).reason,
        QuarantineReason::WrongInstance
    );
    // Envelope instance disagrees with the subject's.
    assert_eq!(
        quarantined(A, &envelope("plant.temp", "bacnet-1", 1, "70", "")).reason,
        QuarantineReason::WrongInstance
    );
}

#[test]
fn wrong_instance_is_counted_separately_and_acked_after_commit() {
    let mut core = core();
    let batch = deliver_and_flush(
        &mut core,
        vec![delivery(1, B, &envelope("plant.temp", "bacnet-1", 1, "70", ""))],
    );
    core.handle(T0.add_ms(200), Input::Committed(all_inserted(batch)));
    let effects = drain(&mut core);
    assert_eq!(effects, vec![Effect::Ack(vec![sentinel_core::DeliveryTag(1)])]);
    assert_eq!(core.metrics().wrong_instance(), 1);
    assert_eq!(core.metrics().quarantined_total(), 1);
}

#[test]
fn stage6_unit_mismatch_is_bad_without_conversion() {
    let r = row(
        A,
        &envelope("plant.temp", "modbus-1", 1, "22", r#","unit":"degC""#),
    );
    assert_eq!(r.quality, Quality::Bad);
    assert_eq!(r.reason.as_deref(), Some("unit_mismatch"));
    assert_eq!(r.value, None, "no conversion attempted");
    assert_eq!(r.native_num, Some(22.0));
    assert_eq!(
        r.unit_native.as_deref(),
        Some("degC"),
        "the unit the device actually used"
    );
}

#[test]
fn stage7_bad_values_keep_the_offending_value() {
    let cases = [
        (
            A,
            envelope("plant.temp", "modbus-1", 1, "1000", ""),
            "out_of_range",
            "1000",
        ),
        (
            A,
            envelope("plant.pump", "modbus-1", 1, "7", ""),
            "not_in_codebook",
            "7",
        ),
        (
            A,
            envelope("plant.pump", "modbus-1", 1, "1.5", ""),
            "not_in_codebook",
            "1.5",
        ),
        (
            B,
            envelope("plant.door", "bacnet-1", 1, r#""open""#, ""),
            "type_mismatch",
            "open",
        ),
        (
            A,
            envelope("plant.temp", "modbus-1", 1, "true", ""),
            "type_mismatch",
            "true",
        ),
    ];
    for (subject, env, reason, native) in cases {
        let r = row(subject, &env);
        assert_eq!(r.quality, Quality::Bad, "{env}");
        assert_eq!(r.reason.as_deref(), Some(reason), "{env}");
        assert_eq!(r.native_text.as_deref(), Some(native), "{env}");
        assert_eq!(r.value, None);
        assert!(!r.changed);
    }
    let r = row(A, &envelope("plant.temp", "modbus-1", 1, "null", ""));
    assert_eq!(
        (r.quality, r.reason.as_deref()),
        (Quality::Bad, Some("missing_value"))
    );
    let long = format!(r#""{}""#, "y".repeat(Config::default().text_value_bytes_max + 1));
    let r = row(C, &envelope("plant.label", "opc-1", 1, &long, ""));
    assert_eq!(
        (r.quality, r.reason.as_deref()),
        (Quality::Bad, Some("text_too_long"))
    );
}

#[test]
fn stage7_good_kinds() {
    let r = row(A, &envelope("plant.pump", "modbus-1", 1, "2", ""));
    assert_eq!(r.value.as_ref().and_then(CanonicalValue::text), Some("fault"));
    assert_eq!(r.native_num, Some(2.0));
    let r = row(B, &envelope("plant.door", "bacnet-1", 1, "true", ""));
    assert_eq!(r.value, Some(CanonicalValue::Bool(true)));
    let r = row(
        C,
        &envelope(
            "plant.label",
            "opc-1",
            1,
            r#""Line 3""#,
            r#","detail":{"shift":"B"}"#,
        ),
    );
    assert_eq!(r.value.as_ref().and_then(CanonicalValue::text), Some("Line 3"));
    assert_eq!(r.detail.as_deref(), Some(r#"{"shift":"B"}"#));
}

#[test]
fn driver_asserted_quality_is_kept() {
    let r = row(
        B,
        &envelope(
            "plant.rssi",
            "bacnet-1",
            1,
            "null",
            r#","quality":"unavailable","reason":"link_down""#,
        ),
    );
    assert_eq!(r.quality, Quality::Unavailable);
    assert_eq!(r.reason.as_deref(), Some("link_down"));
    assert_eq!(r.value, None);
}

#[test]
fn stage9_skew_sets_the_flag() {
    let observed = T0.add_ms(-1_000);
    let near = format!(r#","device_time":"{}""#, observed.add_ms(500).to_rfc3339());
    assert!(!row(B, &envelope("plant.rssi", "bacnet-1", 1, "-60", &near)).skew_flagged);
    let far = format!(r#","device_time":"{}""#, observed.add_ms(-60_000).to_rfc3339());
    let r = row(B, &envelope("plant.rssi", "bacnet-1", 1, "-60", &far));
    assert!(r.skew_flagged);
    assert_eq!(r.quality, Quality::Live, "skew flags, it does not degrade");
}

#[test]
fn stage10_deadband_against_the_projection() {
    let mut core = core();
    let first = deliver_and_flush(
        &mut core,
        vec![delivery(1, A, &envelope("plant.temp", "modbus-1", 1, "71.6", ""))],
    );
    core.handle(T0.add_ms(200), Input::Committed(all_inserted(first)));
    drain(&mut core);
    // 71.9 °F is 0.17 °C away: inside the 0.5 °C deadband.
    let within = deliver_and_flush(
        &mut core,
        vec![delivery(2, A, &envelope("plant.temp", "modbus-1", 2, "71.9", ""))],
    );
    assert!(!within.rows[0].changed);
    core.handle(T0.add_ms(300), Input::Committed(all_inserted(within)));
    let effects = drain(&mut core);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Publish { .. })),
        "no edge, no transition"
    );
    let beyond = deliver_and_flush(
        &mut core,
        vec![delivery(3, A, &envelope("plant.temp", "modbus-1", 3, "75", ""))],
    );
    assert!(beyond.rows[0].changed);
}

#[test]
fn observation_time_is_bounded_by_ingest_time_not_a_clock() {
    // observed_at one minute after ingested_at is within the five-minute bound.
    let mut core = core();
    let soon = envelope("plant.temp", "modbus-1", 1, "70", "")
        .replace(&T0.add_ms(-1_000).to_rfc3339(), &T0.add_ms(60_000).to_rfc3339());
    let batch = deliver_and_flush(&mut core, vec![delivery(1, A, &soon)]);
    assert_eq!(batch.rows.len(), 1);
    assert_eq!(batch.rows[0].observed_at, Micros(T0.0 + 60_000_000));
}

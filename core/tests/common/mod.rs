//! Fixtures shared by the core's tests: a small registry built from descriptors directly (the
//! TOML path has its own tests), deliveries, and effect helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use sentinel_core::registry::{
    CommandValue, Conversion, Descriptor, Kind, Range, Registry, RetentionClass, Writable,
};
use sentinel_core::{Config, Core, Delivery, DeliveryTag, Effect, Micros, RestoredState};

pub const T0: Micros = Micros(1_796_000_000_000_000);

pub fn descriptor(id: &str, kind: Kind, class: RetentionClass, host: &str, instance: &str) -> Descriptor {
    Descriptor::new(id, kind, class, host, instance)
}

/// plant.temp: °F device stored in °C, range −40..150 °C, deadband 0.5.
/// plant.pump: enum 0/1/2. plant.door: bool. plant.rssi: dBm diagnostic. plant.label: text.
/// Writable: plant.temp (relinquished to 20 °C), plant.pump (holds), plant.door (to false).
pub fn registry() -> Arc<Registry> {
    let mut temp = descriptor(
        "plant.temp",
        Kind::Number,
        RetentionClass::Measurement,
        "plant-a",
        "modbus-1",
    );
    temp.unit_native = Some("degF".into());
    temp.unit = Some("degC".into());
    temp.conversion = Conversion {
        factor: 5.0 / 9.0,
        offset: -160.0 / 9.0,
    };
    temp.range = Some(Range {
        min: -40.0,
        max: 150.0,
    });
    temp.deadband = 0.5;
    temp.agg_safe = true;
    let mut pump = descriptor(
        "plant.pump",
        Kind::Enum,
        RetentionClass::State,
        "plant-a",
        "modbus-1",
    );
    pump.codebook = Some(BTreeMap::from([
        ("0".into(), "off".into()),
        ("1".into(), "on".into()),
        ("2".into(), "fault".into()),
    ]));
    let door = descriptor(
        "plant.door",
        Kind::Bool,
        RetentionClass::State,
        "plant-b",
        "bacnet-1",
    );
    let mut rssi = descriptor(
        "plant.rssi",
        Kind::Number,
        RetentionClass::Diagnostic,
        "plant-b",
        "bacnet-1",
    );
    rssi.unit_native = Some("dBm".into());
    rssi.unit = Some("dBm".into());
    let label = descriptor(
        "plant.label",
        Kind::Text,
        RetentionClass::Diagnostic,
        "plant-c",
        "opc-1",
    );
    let writable = |relinquish_default: Option<CommandValue>, tolerance: f64| {
        Some(Writable {
            relinquish_default,
            verify_s: 60,
            tolerance,
            min_on_s: None,
            min_off_s: None,
        })
    };
    temp.writable = writable(Some(CommandValue::Number(20.0)), 0.5);
    pump.writable = writable(None, 0.0);
    let mut door = door;
    door.writable = writable(Some(CommandValue::Bool(false)), 0.0);
    Arc::new(
        Registry::compile(
            7,
            "abc123".into(),
            "hash".into(),
            vec![temp, pump, door, rssi, label],
        )
        .expect("fixture registry compiles"),
    )
}

pub fn core() -> Core {
    core_with(Config::default())
}

pub fn core_with(config: Config) -> Core {
    Core::new(config, registry(), 5, &RestoredState::default(), T0).expect("core")
}

pub fn delivery(seq: u64, subject: &str, payload: &str) -> Delivery {
    delivery_at(seq, subject, payload, T0)
}

pub fn delivery_at(seq: u64, subject: &str, payload: &str, ingested_at: Micros) -> Delivery {
    Delivery {
        tag: DeliveryTag(seq),
        stream_seq: seq,
        subject: subject.into(),
        payload: Bytes::copy_from_slice(payload.as_bytes()),
        ingested_at,
        delivered_count: 1,
    }
}

/// An envelope for `point` from `instance` with a JSON `value` and extra raw JSON fields.
pub fn envelope(point: &str, instance: &str, seq: u64, value: &str, extra: &str) -> String {
    format!(
        r#"{{"v":1,"point_id":"{point}","driver_instance":"{instance}","source_epoch":1,"source_seq":{seq},"observed_at":"{}","value":{value}{extra}}}"#,
        T0.add_ms(-1_000).to_rfc3339()
    )
}

pub fn drain(core: &mut Core) -> Vec<Effect> {
    std::iter::from_fn(|| core.poll_effect()).collect()
}

/// Asks for `value` on `plant.pump` (host `plant-a`, instance `modbus-1`) as
/// `operator:alice` at `at`, commits the one arbitration write it makes with its last event
/// (`command_issued`) at `seq`, and returns the effects of that commit.
pub fn request_and_commit(
    core: &mut Core,
    at: Micros,
    command_id: &str,
    value: &str,
    seq: i64,
) -> Vec<Effect> {
    core.handle(
        at,
        sentinel_core::Input::CommandRequested(sentinel_core::CommandRequest {
            command_id: command_id.into(),
            point_id: "plant.pump".into(),
            value: serde_json::json!(value),
            unit: None,
            for_s: None,
            release: false,
            principal: "operator:alice".into(),
            reply_to: None,
            band: None,
        }),
    );
    let effects = drain(core);
    let [Effect::Arbitrate { events, .. }] = effects.as_slice() else {
        panic!("one arbitration write: {effects:?}");
    };
    let seqs = (seq - events.len() as i64 + 1..=seq).collect();
    core.handle(
        at,
        sentinel_core::Input::ControlCommitted(sentinel_core::ControlReport {
            events: events.clone(),
            seqs,
        }),
    );
    drain(core)
}

/// Delivers, flushes on the interval, and returns the single committed batch.
pub fn deliver_and_flush(core: &mut Core, deliveries: Vec<Delivery>) -> sentinel_core::Batch {
    let now = core.now();
    core.handle(now, sentinel_core::Input::Delivered(deliveries));
    let mut effects = drain(core);
    if !effects.iter().any(|e| matches!(e, Effect::Commit(_))) {
        core.handle(now.add_ms(100), sentinel_core::Input::Tick);
        effects.extend(drain(core));
    }
    let mut batches: Vec<_> = effects
        .into_iter()
        .filter_map(|e| match e {
            Effect::Commit(b) => Some(b),
            _ => None,
        })
        .collect();
    assert_eq!(batches.len(), 1, "expected exactly one batch");
    batches.pop().expect("one batch")
}

/// Everything inserted, as a fresh store would answer.
pub fn all_inserted(batch: sentinel_core::Batch) -> sentinel_core::CommitReport {
    let inserted = (0..batch.rows.len() as u32).collect();
    let quarantine_inserted = batch.quarantine.len() as u32;
    sentinel_core::CommitReport {
        batch,
        inserted,
        quarantine_inserted,
    }
}

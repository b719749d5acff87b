//! Shared by the reprocess tests (the conformance bodies in `store_conformance/reprocess.rs`,
//! `tests/reprocess.rs` against PostgreSQL and the binary, and the benchmark): a small registry
//! in two versions that differ in one conversion, and rows built by the pipeline's own stages
//! 6–8 (`pipeline::decide`) under a compiled version, as ingest would have written them.

use std::borrow::Cow;
use std::sync::Arc;

use sentinel_core::pipeline::{self, Asserted};
use sentinel_core::registry::{canonical, source};
use sentinel_core::wire::NativeValue;
use sentinel_core::{Config, DeliveryTag, Micros, ObsKey, ObsRow, Quality, Registry, RegistrySnapshot};
use sentinel_ports::Store;
use sentinel_runtime::registry_dir;

/// The driver instance of every point here.
pub const INSTANCE: &str = "rp-drv";
/// A measurement point whose native unit version 1 gets wrong (`Pa`, factor 0.001) and version
/// 2 corrects (`kPa`, factor 1): the device always reported kilopascals.
pub const PRESSURE: &str = "rp.boiler.pressure";
/// A state-class point, the same in both versions.
pub const LEVEL: &str = "rp.boiler.level";
/// A diagnostic point (short raw horizon), not agg_safe.
pub const RSSI: &str = "rp.boiler.rssi";
pub const POINTS: [&str; 3] = [LEVEL, PRESSURE, RSSI];

fn host_toml(pressure_unit_native: &str) -> String {
    format!(
        r#"host = "rp-host"

[[point]]
id = "{PRESSURE}"
kind = "number"
driver_instance = "{INSTANCE}"
unit_native = "{pressure_unit_native}"
unit = "kPa"
deadband = 0.0
retention = "measurement"
agg_safe = true
freshness_s = 60
archetype = "hardware"
peak_rate_hz = 0.1
event_policy = "on_change"
row_bytes = 96

[[point]]
id = "{LEVEL}"
kind = "number"
driver_instance = "{INSTANCE}"
unit = "percent"
range = {{ min = 0.0, max = 100.0 }}
deadband = 0.0
retention = "state"
agg_safe = true
freshness_s = 60
archetype = "hardware"
peak_rate_hz = 0.1
event_policy = "on_change"
row_bytes = 96

[[point]]
id = "{RSSI}"
kind = "number"
driver_instance = "{INSTANCE}"
unit = "dBm"
deadband = 0.0
retention = "diagnostic"
agg_safe = false
freshness_s = 60
archetype = "hardware"
peak_rate_hz = 0.1
event_policy = "on_change"
row_bytes = 96
"#
    )
}

/// Version `n` (1: the wrong `Pa`, 2: the corrected `kPa`) as the store persists it.
pub fn snapshot(n: u32) -> RegistrySnapshot {
    let unit = if n == 1 { "Pa" } else { "kPa" };
    let registry = crate::bin::workspace_root().join("registry");
    let mut files: Vec<(String, String)> = ["units.toml", "codebooks.toml"]
        .iter()
        .map(|f| {
            (
                f.to_string(),
                std::fs::read_to_string(registry.join(f)).expect("read the sample vocabulary"),
            )
        })
        .collect();
    files.push(("hosts/rp-host.toml".into(), host_toml(unit)));
    let descriptors = source::load(&files).expect("the reprocess registry passes its checks");
    canonical::snapshot(&format!("rp-v{n}"), &descriptors)
}

/// Writes version `n` as a registry folder (`sentinel run --registry DIR` loads it).
pub fn write_dir(n: u32, dir: &std::path::Path) {
    let unit = if n == 1 { "Pa" } else { "kPa" };
    let registry = crate::bin::workspace_root().join("registry");
    std::fs::create_dir_all(dir.join("hosts")).expect("registry folder");
    for f in ["units.toml", "codebooks.toml"] {
        std::fs::copy(registry.join(f), dir.join(f)).expect("copy the sample vocabulary");
    }
    std::fs::write(dir.join("hosts/rp-host.toml"), host_toml(unit)).expect("write the host file");
}

/// Stores version `n` and compiles what the store holds.
pub async fn load<S: Store>(store: &S, n: u32) -> Registry {
    let load = store
        .store_registry(&snapshot(n))
        .await
        .expect("store the registry");
    let stored = store
        .load_registry(Some(load.version))
        .await
        .expect("read the registry")
        .expect("stored");
    registry_dir::compile_stored(stored).expect("compile the stored registry")
}

/// What a driver sent, as far as stages 6–8 read it.
#[derive(Clone, Debug)]
pub struct Sent {
    pub point: &'static str,
    pub seq: u64,
    pub ingested_at: Micros,
    pub observed_at: Micros,
    pub native: Option<f64>,
    pub asserted: Option<Quality>,
    pub reason: Option<&'static str>,
}

/// The row ingest writes for `sent` under `registry` (stages 6–8 by `pipeline::decide`).
pub fn row(registry: &Registry, sent: &Sent) -> ObsRow {
    let idx = registry.resolve(sent.point).expect("point in the registry");
    let point = registry.point(idx);
    let native = sent.native.map_or(NativeValue::Null, NativeValue::Num);
    let decided = pipeline::decide(
        point,
        &Config::default(),
        Asserted {
            quality: sent.asserted,
            reason: sent.reason.map(Cow::Borrowed),
            unit: None,
            value: &native,
        },
    );
    ObsRow {
        point: idx,
        point_id: point.id.clone(),
        class: point.descriptor.retention,
        ingested_at: sent.ingested_at,
        observed_at: sent.observed_at,
        device_time: None,
        value: decided.value,
        native_num: decided.native_num,
        native_text: decided.native_text,
        unit_native: decided.unit_native,
        quality: decided.quality,
        reason: decided.reason,
        detail: None,
        changed: true,
        registry_version: registry.version,
        key: ObsKey {
            driver_instance: Arc::from(INSTANCE),
            source_epoch: 1,
            source_seq: sent.seq,
        },
        skew_flagged: false,
        tag: DeliveryTag(sent.seq),
    }
}

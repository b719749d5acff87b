//! `sentinel storage` against real PostgreSQL (issue 24 item 6), run as a process: a database
//! holding the sample registry and rows in every raw class over two days reports each table's
//! and each partition's rows exactly as committed (with `--exact`, and as PostgreSQL's
//! estimates after ANALYZE without it), bytes that add up, and the projection of the configured
//! horizons at the registry's declared rates, with bytes per row measured once a table holds
//! enough rows and the storage format's measured cost before, as `registry plan` sizes them;
//! and that format cost is what a populated partition measures.

use std::borrow::Cow;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use sentinel_core::registry::PointIdx;
use sentinel_core::{
    Batch, BatchId, CanonicalValue, DeliveryTag, Micros, ObsKey, ObsRow, Quality, RetentionClass,
};
use sentinel_ports::{Lease, Store};
use sentinel_runtime::registry_dir;
use sentinel_store_pg::{
    COMPACT_ROW_BYTES, PACKED_ROW_BYTES, PgStore, PgStoreConfig, RAW_ROW_BYTES, ROLLUP_ROW_BYTES,
};
use sentinel_tests::bin::sentinel_bin;
use sentinel_tests::harness::output_within;
use sentinel_tests::pg::TestDb;
use serde_json::Value;

/// Rows committed per batch.
const BATCH_ROWS: u64 = 2_000;
/// Measurement rows on the first and the second day: together past the CLI's
/// `MEASURED_ROWS_MIN` (10,000), so the table's bytes per row are measured.
const MEASUREMENT_ROWS: [u64; 2] = [7_000, 5_000];
const STATE_ROWS: u64 = 30;
const DIAGNOSTIC_ROWS: u64 = 5;

fn row(point: &str, class: RetentionClass, at: Micros, seq: u64) -> ObsRow {
    ObsRow {
        point: PointIdx(0),
        point_id: Arc::from(point),
        class,
        ingested_at: at,
        observed_at: at,
        device_time: None,
        value: Some(CanonicalValue::Num(seq as f64)),
        native_num: Some(seq as f64),
        native_text: None,
        unit_native: None,
        quality: Quality::Live,
        reason: None::<Cow<'static, str>>,
        detail: None,
        changed: true,
        registry_version: 1,
        key: ObsKey {
            driver_instance: Arc::from("drv-storage"),
            source_epoch: 1,
            source_seq: seq,
        },
        skew_flagged: false,
        tag: DeliveryTag(seq),
    }
}

fn storage(url: &str, extra: &[&str]) -> Value {
    let output = output_within(
        Command::new(sentinel_bin())
            .args(["storage", "--json", "--database-url", url])
            .args(extra),
        Duration::from_secs(60),
    );
    assert!(
        output.status.success(),
        "sentinel storage failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

fn table<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .find(|t| t["table"] == name)
        .unwrap_or_else(|| panic!("no table {name} in {report}"))
}

fn projected<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["projection"]["tables"]
        .as_array()
        .expect("projected tables")
        .iter()
        .find(|t| t["table"] == name)
        .unwrap_or_else(|| panic!("no projection of {name} in {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_reports_each_table_and_partition_and_projects_the_horizons() {
    use RetentionClass::{Diagnostic, Measurement, State};
    let mut db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    // The report runs as the read-only role, as a dashboard host would run it.
    let roles = db.create_roles().await.expect("roles");
    let granted = output_within(
        Command::new(sentinel_bin())
            .args([
                "db",
                "grants",
                "--writer",
                &roles.writer,
                "--reader",
                &roles.reader,
            ])
            .env("SENTINEL_DATABASE_URL", &db.url),
        Duration::from_secs(60),
    );
    assert!(
        granted.status.success(),
        "{}",
        String::from_utf8_lossy(&granted.stderr)
    );
    let reader_url = roles.reader_url.clone();
    let loaded = registry_dir::load_dir(&store, &registry_dir::sample_dir())
        .await
        .expect("load the sample registry");
    let lease = store.acquire().await.expect("acquire");

    let day = |d: &str| Micros::parse_rfc3339(&format!("{d}T00:00:00Z")).expect("instant");
    let days = [day("2026-01-15"), day("2026-01-16")];
    let mut rows = Vec::new();
    let mut seq = 0;
    for (start, n) in days.iter().zip(MEASUREMENT_ROWS) {
        for i in 0..n {
            seq += 1;
            rows.push(row(
                "ahu1.supply_air_temp",
                Measurement,
                start.add_ms(i as i64 * 1_000),
                seq,
            ));
        }
    }
    for (point, class, n) in [
        ("ahu1.mode", State, STATE_ROWS),
        ("gateway.rssi", Diagnostic, DIAGNOSTIC_ROWS),
    ] {
        for i in 0..n {
            seq += 1;
            rows.push(row(point, class, days[0].add_ms(i as i64 * 1_000), seq));
        }
    }
    for (n, chunk) in rows.chunks(BATCH_ROWS as usize).enumerate() {
        store
            .commit(Batch {
                id: BatchId(n as u64 + 1),
                epoch: lease.epoch(),
                rows: chunk.to_vec(),
                quarantine: vec![],
            })
            .await
            .expect("commit");
    }
    drop(lease);

    // Exact counts: each table and each of the two days as committed.
    let exact = storage(&reader_url, &["--exact", "--retention-measurement-days", "45"]);
    let measurement = table(&exact, "raw_measurement");
    assert_eq!(measurement["rows"], MEASUREMENT_ROWS.iter().sum::<u64>());
    assert_eq!(measurement["rows_exact"], true);
    assert_eq!(table(&exact, "raw_state")["rows"], STATE_ROWS);
    assert_eq!(table(&exact, "raw_diagnostic")["rows"], DIAGNOSTIC_ROWS);
    assert_eq!(table(&exact, "rollup_1m")["rows"], 0);
    let per_day: Vec<(String, u64)> = exact["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .filter(|p| p["table"] == "raw_measurement" && p["rows"].as_u64() != Some(0))
        .map(|p| {
            (
                p["from"].as_str().expect("from")[..10].to_owned(),
                p["rows"].as_u64().expect("rows"),
            )
        })
        .collect();
    assert_eq!(
        per_day,
        [
            ("2026-01-15".to_owned(), MEASUREMENT_ROWS[0]),
            ("2026-01-16".to_owned(), MEASUREMENT_ROWS[1])
        ]
    );
    let observations = &exact["observations"];
    assert_eq!(
        observations["rows"],
        MEASUREMENT_ROWS.iter().sum::<u64>() + STATE_ROWS + DIAGNOSTIC_ROWS
    );
    for t in [measurement, observations, &exact["control_event"]] {
        let (heap, index, bytes) = (
            t["heap_bytes"].as_u64().expect("heap"),
            t["index_bytes"].as_u64().expect("index"),
            t["bytes"].as_u64().expect("bytes"),
        );
        assert_eq!(heap + index, bytes, "{t}");
    }
    let measured_bytes_per_row =
        measurement["bytes"].as_f64().expect("bytes") / measurement["rows"].as_f64().expect("rows");
    assert!(
        (measurement["bytes_per_row"].as_f64().expect("bytes/row") - measured_bytes_per_row).abs() < 1e-6
    );
    assert!(measured_bytes_per_row > 0.0);

    // The projection: declared rows per day (recomputed here from the stored registry), the
    // horizon given (45 days) and the measured bytes per row; the state class too few rows to
    // measure, so the storage format's measured cost per row (not the declared `row_bytes`).
    assert_eq!(exact["projection"]["registry_version"], loaded.version);
    let stored = store.load_registry(None).await.expect("load").expect("stored");
    let (mut rate_m, mut rate_s) = (0.0, 0.0);
    for (_, text) in &stored.descriptors {
        let d = sentinel_core::registry::canonical::parse_stored(text).expect("descriptor");
        match d.retention {
            Measurement => rate_m += d.manifest.peak_rate_hz,
            State => rate_s += d.manifest.peak_rate_hz,
            Diagnostic => {}
        }
    }
    let m = projected(&exact, "raw_measurement");
    assert_eq!(m["horizon_days"], 45);
    assert_eq!(m["bytes_per_row_from"], "measured");
    assert!((m["rows_per_day"].as_f64().expect("rows/day") - rate_m * 86_400.0).abs() < 1e-3);
    // Compacted from day seven (the default `--compact-after-days`): 7 days at the measured
    // hot cost, 38 at the compacted format's.
    assert_eq!(m["compacted_days"], 38);
    assert_eq!(
        m["packed_days"], 0,
        "a measured table keeps its own cost on every hot day"
    );
    let expected = rate_m * 86_400.0 * (7.0 * measured_bytes_per_row + 38.0 * COMPACT_ROW_BYTES);
    assert!(
        (m["bytes"].as_f64().expect("bytes") - expected).abs() < 1.0,
        "{m} against {expected}"
    );
    let s = projected(&exact, "raw_state");
    assert_eq!(s["horizon_days"], 90);
    assert_eq!(s["bytes_per_row_from"], "format");
    assert_eq!(s["bytes_per_row"].as_f64(), Some(RAW_ROW_BYTES));
    // Of its 7 hot days, today's and yesterday's as ingest fills them, 5 packed by
    // `sentinel db pack`.
    assert_eq!(s["packed_days"], 5, "{s}");
    assert!((s["rows_per_day"].as_f64().expect("rows/day") - rate_s * 86_400.0).abs() < 1e-3);
    assert!(
        (s["bytes"].as_f64().expect("bytes")
            - rate_s * 86_400.0 * (2.0 * RAW_ROW_BYTES + 5.0 * PACKED_ROW_BYTES + 83.0 * COMPACT_ROW_BYTES))
            .abs()
            < 1.0,
        "{s}"
    );
    assert_eq!(
        projected(&exact, "rollup_1m")["bytes_per_row"].as_f64(),
        Some(ROLLUP_ROW_BYTES)
    );
    // The minute rollup's days are compacted alone a day after they end
    // (`--rollup-compact-after-days`, default 1): 1 hot day of its 90, 89 compacted.
    let minute = projected(&exact, "rollup_1m");
    assert_eq!(
        (minute["horizon_days"].as_u64(), minute["compacted_days"].as_u64()),
        (Some(90), Some(89)),
        "{minute}"
    );

    // `registry plan` sizes the same folder with the same horizons at the format's cost: for
    // every table this database has too few rows to measure, the same projection.
    let plan = output_within(
        Command::new(sentinel_bin()).args([
            "registry",
            "plan",
            registry_dir::sample_dir().to_str().expect("path"),
            "--json",
            "--retention-measurement-days",
            "45",
        ]),
        Duration::from_secs(60),
    );
    assert!(plan.status.success(), "{}", String::from_utf8_lossy(&plan.stderr));
    let plan: Value = serde_json::from_slice(&plan.stdout).expect("one JSON object");
    let planned: Vec<&Value> = plan["disk"]["tables"]
        .as_array()
        .expect("disk tables")
        .iter()
        .collect();
    assert_eq!(planned.len(), 5, "{plan}");
    for p in planned {
        assert_eq!(p["bytes_per_row_from"], "format", "{p}");
        let name = p["table"].as_str().expect("table");
        let reported = projected(&exact, name);
        assert_eq!(p["horizon_days"], reported["horizon_days"], "{name}");
        assert_eq!(p["compacted_days"], reported["compacted_days"], "{name}");
        assert!(
            (p["rows_per_day"].as_f64().expect("rows/day")
                - reported["rows_per_day"].as_f64().expect("rows/day"))
            .abs()
                < 1e-6,
            "{name}"
        );
        if reported["bytes_per_row_from"] == "format" {
            assert_eq!(p["bytes"], reported["bytes"], "{name}");
        }
    }
    // With `--no-compaction` the plan sizes every day hot, as a core run with it stores them.
    let hot = output_within(
        Command::new(sentinel_bin()).args([
            "registry",
            "plan",
            registry_dir::sample_dir().to_str().expect("path"),
            "--json",
            "--no-compaction",
        ]),
        Duration::from_secs(60),
    );
    assert!(hot.status.success(), "{}", String::from_utf8_lossy(&hot.stderr));
    let hot: Value = serde_json::from_slice(&hot.stdout).expect("one JSON object");
    let state = hot["disk"]["tables"]
        .as_array()
        .expect("disk tables")
        .iter()
        .find(|t| t["table"] == "raw_state")
        .expect("raw_state");
    assert_eq!(state["compacted_days"], 0, "{state}");
    // The minute rollups' own age: as the raw rows' (the old rule, 83 days compacted), and
    // never past it.
    let plan_with = |age: &str| {
        output_within(
            Command::new(sentinel_bin()).args([
                "registry",
                "plan",
                registry_dir::sample_dir().to_str().expect("path"),
                "--json",
                "--rollup-compact-after-days",
                age,
            ]),
            Duration::from_secs(60),
        )
    };
    let week = plan_with("7");
    assert!(week.status.success(), "{}", String::from_utf8_lossy(&week.stderr));
    let week: Value = serde_json::from_slice(&week.stdout).expect("one JSON object");
    let minute = week["disk"]["tables"]
        .as_array()
        .expect("disk tables")
        .iter()
        .find(|t| t["table"] == "rollup_1m")
        .expect("rollup_1m");
    assert_eq!(minute["compacted_days"], 83, "{minute}");
    let past = plan_with("8");
    assert!(!past.status.success(), "a rollup age past the raw age is refused");
    assert!(
        String::from_utf8_lossy(&past.stderr)
            .contains("--rollup-compact-after-days (8) must be at most --compact-after-days (7)"),
        "{}",
        String::from_utf8_lossy(&past.stderr)
    );
    assert!(
        (state["bytes"].as_f64().expect("bytes")
            - rate_s * 86_400.0 * (2.0 * RAW_ROW_BYTES + 88.0 * PACKED_ROW_BYTES))
            .abs()
            < 1.0,
        "{state}"
    );

    let total: f64 = exact["projection"]["tables"]
        .as_array()
        .expect("projected")
        .iter()
        .map(|t| t["bytes"].as_f64().expect("bytes"))
        .sum();
    assert!((exact["projection"]["bytes"].as_f64().expect("total") - total).abs() < 1.0);

    // After ANALYZE the planner's estimates are read instead of counting: not exact, and for
    // tables this small ANALYZE counts every row, so the same figures.
    let mut admin = sentinel_tests::harness::pg(&db.url).await;
    sqlx::query("ANALYZE").execute(&mut admin).await.expect("analyze");
    let estimated = storage(&reader_url, &[]);
    let measurement = table(&estimated, "raw_measurement");
    assert_eq!(measurement["rows_exact"], false);
    assert_eq!(measurement["rows"], MEASUREMENT_ROWS.iter().sum::<u64>());

    // The text report for a person: one line per table, estimates marked.
    let text = output_within(
        Command::new(sentinel_bin()).args(["storage", "--database-url", &reader_url]),
        Duration::from_secs(60),
    );
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("raw measurement") && text.contains("~12000"),
        "{text}"
    );
    assert!(
        text.contains(&format!("projected at registry version {}", loaded.version)),
        "{text}"
    );
}

/// [`RAW_ROW_BYTES`], the cost per raw row `registry plan` and `sentinel storage` size a table
/// with, is what PostgreSQL measures for a populated partition: 100,000 rows of 4,000 points
/// with ids of 25–30 bytes from 16 driver instances, as a design-rate hour lays them out
/// (filled server-side, as the rollups bench does), within 15 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_format_cost_per_raw_row_is_what_a_populated_partition_measures() {
    const ROWS: i64 = 100_000;
    let db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let mut admin = sentinel_tests::harness::pg(&db.url).await;
    sqlx::query("SELECT sentinel_ensure_partitions(DATE '2026-01-15', 1)")
        .execute(&mut admin)
        .await
        .expect("partition");
    // The ids' keys, as a registry load assigns them (migration 0014), then the rows.
    sqlx::raw_sql(
        "INSERT INTO point_key (point_id) \
           SELECT 'site' || (p / 100) || '.ahu' || (p % 100) || '.supply_air_temp' FROM generate_series(0, 3999) p; \
         INSERT INTO instance_key (driver_instance) SELECT 'modbus-' || i || '.plant-a' FROM generate_series(0, 15) i",
    )
    .execute(&mut admin)
    .await
    .expect("keys");
    sqlx::query(
        "INSERT INTO observation_measurement (ingested_at, point_key, observed_at, value_num, \
           native_num, unit_native, quality, changed, registry_version, instance_key, source_epoch, source_seq) \
         SELECT t + interval '150 milliseconds', pk.key, \
                t, 20 + (n % 97) * 0.25, 68 + (n % 97) * 0.45, 'degF', \
                CASE WHEN n % 20 = 0 THEN 'stale'::quality ELSE 'live'::quality END, n % 3 = 0, 1, \
                ik.key, 1, n \
         FROM (SELECT n, n % 4000 AS p, TIMESTAMPTZ '2026-01-15' + n * interval '2 milliseconds' AS t \
               FROM generate_series(0, $1 - 1) n) s \
         JOIN point_key pk ON pk.point_id = 'site' || (s.p / 100) || '.ahu' || (s.p % 100) || '.supply_air_temp' \
         JOIN instance_key ik ON ik.driver_instance = 'modbus-' || (s.p % 16) || '.plant-a' \
         ORDER BY n",
    )
    .bind(ROWS)
    .execute(&mut admin)
    .await
    .expect("fill");
    sqlx::query("VACUUM ANALYZE observation_measurement")
        .execute(&mut admin)
        .await
        .expect("vacuum");
    let report = storage(&db.url, &["--exact"]);
    let measurement = table(&report, "raw_measurement");
    assert_eq!(measurement["rows"], ROWS);
    let measured = measurement["bytes_per_row"].as_f64().expect("bytes/row");
    assert!(
        (measured - RAW_ROW_BYTES).abs() <= 0.15 * RAW_ROW_BYTES,
        "a populated partition measures {measured:.1} B a row; the format's cost says {RAW_ROW_BYTES}"
    );
}

/// A report read by a reader that stops early (`| head`) ends quietly: no panic on "Broken
/// pipe" and no exit 101. `registry check` prints with `println!`; its reader is gone before
/// it prints, so the print meets a closed pipe.
#[test]
fn a_report_whose_reader_stopped_early_ends_quietly() {
    use std::os::unix::process::ExitStatusExt as _;
    use std::process::Stdio;
    let sample = registry_dir::sample_dir();
    let mut child = Command::new(sentinel_bin())
        .args(["registry", "check", sample.to_str().expect("path")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sentinel");
    // Closing the only read end: the child's first print meets a closed pipe.
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(output.status.code(), Some(101), "{stderr}");
    assert_eq!(
        output.status.signal(),
        Some(13),
        "ended by SIGPIPE, as `ls | head` ends: {:?} {stderr}",
        output.status
    );
}

//! Retention in the Store port's conformance suite (issue 9 item 2;
//! migrations/0005_retention.sql): the same bodies against the memory model and PostgreSQL.
//!
//! Old data goes only with whole partitions (raw days per class, `rollup_1m` days, `rollup_1h`
//! months), each drop fenced and recorded by one `retention_drop` control event; a dropped day
//! never takes rows again; and a rollup refresh over a range whose raw rows are gone leaves the
//! rollups there as they were (the recompute is clipped at the raw table's mark).

use sentinel_core::{CanonicalValue, Micros, Quality, RetentionClass};
use sentinel_ports::{Lease, Partition, RetainedTable, RetentionCutoffs, RollupGrain, Store, StoreError};

use super::{Backend, RowSpec, at, batch, row, snapshot};

const D1: &str = "2026-01-15T00:00:00Z";
const D2: &str = "2026-01-16T00:00:00Z";
const D4: &str = "2026-01-18T00:00:00Z";
const FAR_PAST: &str = "2000-01-01T00:00:00Z";
const DAY_US: i64 = 86_400_000_000;

fn registry() -> sentinel_core::RegistrySnapshot {
    snapshot(
        "sha-retention",
        "content-retention",
        &[
            (
                "t.flow",
                "h-flow",
                r#"{"agg_safe":true,"id":"t.flow","retention":"measurement"}"#,
            ),
            (
                "t.rssi",
                "h-rssi",
                r#"{"agg_safe":false,"id":"t.rssi","retention":"diagnostic"}"#,
            ),
        ],
    )
}

fn cutoffs(raw_m: &str, raw_s: &str, raw_d: &str, rollup_1m: &str, rollup_1h: &str) -> RetentionCutoffs {
    RetentionCutoffs {
        raw: [at(raw_m), at(raw_s), at(raw_d)],
        rollup_1m: at(rollup_1m),
        rollup_1h: at(rollup_1h),
    }
}

/// Two rows an hour apart on each of the days D1..D3 for `t.flow`, and on D1 for `t.rssi`.
async fn commit_three_days<B: Backend>(b: &B, epoch: u32) {
    let mut rows = Vec::new();
    let mut seq = 0;
    for day in 0..3i64 {
        for hour in [10i64, 11] {
            seq += 1;
            let t = Micros(at(D1).0 + day * DAY_US + hour * 3_600_000_000);
            rows.push(row(RowSpec {
                point: "t.flow",
                seq,
                ingested_at: t,
                observed_at: t,
                value: Some(CanonicalValue::Num(seq as f64)),
                ..RowSpec::default()
            }));
        }
    }
    seq += 1;
    let t = Micros(at(D1).0 + 12 * 3_600_000_000);
    rows.push(row(RowSpec {
        point: "t.rssi",
        class: RetentionClass::Diagnostic,
        seq,
        ingested_at: t,
        observed_at: t,
        quality: Quality::Live,
        ..RowSpec::default()
    }));
    b.store()
        .commit(batch(1, epoch, rows, vec![]))
        .await
        .expect("commit three days");
}

/// The points whose log heads `load_state` finds among `t.flow` (measurement) and `t.rssi`
/// (diagnostic).
async fn log_head_points<B: Backend>(b: &B) -> Vec<String> {
    let points = [
        ("t.flow".to_string(), RetentionClass::Measurement),
        ("t.rssi".to_string(), RetentionClass::Diagnostic),
    ];
    let restored = b.store().load_state(&points).await.expect("load state");
    restored
        .log_heads
        .into_iter()
        .map(|h| h.state.point_id.to_string())
        .collect()
}

pub(super) async fn retention_drops_whole_raw_days_with_an_event_each<B: Backend>(b: &B) {
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    b.store().store_registry(&registry()).await.expect("registry");
    commit_three_days(b, epoch).await;
    b.store()
        .refresh_rollups(epoch, at(D1), at(D4))
        .await
        .expect("refresh");
    let day1_before = b
        .store()
        .load_rollups(RollupGrain::Minute, at(D1), at(D2), None)
        .await
        .expect("rollups");
    assert_eq!(
        day1_before.len(),
        3,
        "two t.flow minutes and one t.rssi minute on D1"
    );

    // Both points have a log head before the drop (read here so a store that keeps its heads
    // between reads must forget them when a drop takes rows).
    assert_eq!(log_head_points(b).await, ["t.flow", "t.rssi"]);

    // Measurement and diagnostic keep from D2; state and the rollups keep everything.
    let cut = cutoffs(D2, FAR_PAST, D2, FAR_PAST, FAR_PAST);
    let expired = b.store().expired_partitions(cut, 100).await.expect("list");
    let day = |table, from: &str| Partition {
        table,
        from: at(from),
        to: Micros(at(from).0 + DAY_US),
    };
    assert_eq!(
        expired,
        vec![
            day(RetainedTable::Raw(RetentionClass::Measurement), D1),
            day(RetainedTable::Raw(RetentionClass::Diagnostic), D1),
        ],
        "exactly the whole days before each class's cut-off, oldest first"
    );

    // A deposed epoch drops nothing.
    let stale = b.store().drop_expired(epoch + 1, cut, 10, "test", at(D4)).await;
    assert!(matches!(stale, Err(StoreError::Fenced { .. })), "{stale:?}");
    assert_eq!(
        b.store().expired_partitions(cut, 100).await.expect("list"),
        expired
    );

    // One per run at most, `more` while some wait.
    let first = b
        .store()
        .drop_expired(epoch, cut, 1, "test", at(D4))
        .await
        .expect("drop");
    assert_eq!(first.dropped.len(), 1);
    assert!(first.more);
    assert_eq!(first.dropped[0].partition, expired[0]);
    let second = b
        .store()
        .drop_expired(epoch, cut, 1, "test", at(D4))
        .await
        .expect("drop");
    assert_eq!(second.dropped.len(), 1);
    assert!(!second.more);
    let third = b
        .store()
        .drop_expired(epoch, cut, 1, "test", at(D4))
        .await
        .expect("drop");
    assert!(third.dropped.is_empty() && !third.more, "{third:?}");

    // The rows went with their days, and only they.
    let counts = b.counts().await;
    assert_eq!(counts.get(RetentionClass::Measurement), 4, "D2 and D3 stay");
    assert_eq!(counts.get(RetentionClass::Diagnostic), 0);
    // A restart's log heads read the rows left: `t.rssi`'s only row went with its day.
    assert_eq!(
        log_head_points(b).await,
        ["t.flow"],
        "no log head from a dropped day's rows"
    );

    // One epoch-stamped event per dropped partition.
    let events = b.store().load_control_events(0, 100).await.expect("events");
    let drops: Vec<_> = events.iter().filter(|e| e.kind == "retention_drop").collect();
    assert_eq!(drops.len(), 2);
    assert_eq!(drops[0].seq, first.dropped[0].seq);
    assert_eq!(drops[1].seq, second.dropped[0].seq);
    for (event, class) in drops.iter().zip(["measurement", "diagnostic"]) {
        assert_eq!(event.core_epoch, epoch);
        assert_eq!(event.point_id, None);
        assert_eq!(event.principal, "test");
        assert_eq!(event.occurred_at, at(D4));
        let payload: serde_json::Value = serde_json::from_str(&event.payload).expect("payload JSON");
        assert_eq!(payload["table"], "raw");
        assert_eq!(payload["class"], class);
        assert_eq!(payload["day"], "2026-01-15");
        assert_eq!(payload["to"], "2026-01-16");
    }
    let marks = b.store().retention_marks().await.expect("marks");
    assert_eq!(marks, [Some(at(D2)), None, Some(at(D2)), None, None]);

    // A refresh over the dropped day recomputes nothing there: D1's rollups stay as they were
    // (their raw rows are gone), D2 on is recomputed as usual.
    b.store()
        .refresh_rollups(epoch, at(D1), at(D4))
        .await
        .expect("refresh again");
    let day1_after = b
        .store()
        .load_rollups(RollupGrain::Minute, at(D1), at(D2), None)
        .await
        .expect("rollups");
    assert_eq!(
        day1_after, day1_before,
        "a refresh never wipes rollups whose raw rows are gone"
    );
    let hours = b
        .store()
        .load_rollups(RollupGrain::Hour, at(D1), at(D4), Some("t.flow"))
        .await
        .expect("rollups");
    assert_eq!(hours.len(), 6, "D1's two hours kept, D2 and D3's recomputed");

    // A dropped day never takes rows again.
    let late = row(RowSpec {
        point: "t.flow",
        seq: 99,
        ingested_at: Micros(at(D1).0 + 1),
        observed_at: Micros(at(D1).0 + 1),
        ..RowSpec::default()
    });
    let refused = b.store().commit(batch(2, epoch, vec![late], vec![])).await;
    assert!(refused.is_err(), "a row for a dropped day must fail, not land");
    b.release(lease).await;
}

pub(super) async fn retention_drops_rollup_days_and_months<B: Backend>(b: &B) {
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    b.store().store_registry(&registry()).await.expect("registry");
    commit_three_days(b, epoch).await;
    b.store()
        .refresh_rollups(epoch, at(D1), at(D4))
        .await
        .expect("refresh");

    // rollup_1m keeps from D2; rollup_1h from February (so January, a whole month, goes).
    let cut = cutoffs(FAR_PAST, FAR_PAST, FAR_PAST, D2, "2026-02-01T00:00:00Z");
    let expired = b.store().expired_partitions(cut, 100).await.expect("list");
    assert_eq!(
        expired,
        vec![
            Partition {
                table: RetainedTable::Rollup(RollupGrain::Hour),
                from: at("2026-01-01T00:00:00Z"),
                to: at("2026-02-01T00:00:00Z"),
            },
            Partition {
                table: RetainedTable::Rollup(RollupGrain::Minute),
                from: at(D1),
                to: at(D2),
            },
        ]
    );
    let run = b
        .store()
        .drop_expired(epoch, cut, 10, "test", at(D4))
        .await
        .expect("drop");
    assert_eq!(run.dropped.len(), 2);
    let minutes = b
        .store()
        .load_rollups(RollupGrain::Minute, at(D1), at(D4), None)
        .await
        .expect("rollups");
    assert!(minutes.iter().all(|r| r.bucket >= at(D2)), "{minutes:?}");
    assert_eq!(minutes.len(), 4, "D2 and D3's minutes stay");
    let hours = b
        .store()
        .load_rollups(RollupGrain::Hour, at(D1), at(D4), None)
        .await
        .expect("rollups");
    assert!(hours.is_empty(), "January's hours went with their month");
    assert_eq!(b.counts().await.total(), 7, "raw rows are not touched");
    // A refresh does not bring the dropped buckets back.
    b.store()
        .refresh_rollups(epoch, at(D1), at(D4))
        .await
        .expect("refresh again");
    assert!(
        b.store()
            .load_rollups(RollupGrain::Hour, at(D1), at(D4), None)
            .await
            .expect("rollups")
            .is_empty()
    );
    assert!(
        b.store()
            .load_rollups(RollupGrain::Minute, at(D1), at(D2), None)
            .await
            .expect("rollups")
            .is_empty()
    );
    let payloads: Vec<serde_json::Value> = b
        .store()
        .load_control_events(0, 100)
        .await
        .expect("events")
        .iter()
        .map(|e| serde_json::from_str(&e.payload).expect("payload"))
        .collect();
    assert_eq!(payloads[0]["table"], "rollup_1h");
    assert_eq!(payloads[0]["class"], serde_json::Value::Null);
    assert_eq!(payloads[0]["day"], "2026-01-01");
    assert_eq!(payloads[1]["table"], "rollup_1m");
    b.release(lease).await;
}

//! Class changes and history in the Store port's conformance suite (issue 9 items 4 and 6;
//! ingest spec exit criterion "Class routing"): the same bodies against the memory model and
//! PostgreSQL.
//!
//! One point per class lands in its own table (and the `observation` view, where there is one,
//! counts their sum); a point whose class changes is moved whole, in one fenced step, to its new
//! table, its rollups recomputed under the new class, with a `class_moved` event: none of its
//! rows stays behind in the old table.

use sentinel_core::{CanonicalValue, Micros, Quality, RetentionClass};
use sentinel_ports::{Lease, RollupGrain, Store, StoreError};

use super::{Backend, RowSpec, at, batch, row, snapshot};

const T0: &str = "2026-01-15T10:00:00Z";

fn registry(moved_class: &str, version: &str) -> sentinel_core::RegistrySnapshot {
    let moving = format!(r#"{{"agg_safe":true,"id":"c.moving","retention":"{moved_class}"}}"#);
    snapshot(
        &format!("sha-{version}"),
        &format!("content-{version}"),
        &[
            (
                "c.d",
                "h-d",
                r#"{"agg_safe":false,"id":"c.d","retention":"diagnostic"}"#,
            ),
            (
                "c.m",
                "h-m",
                r#"{"agg_safe":true,"id":"c.m","retention":"measurement"}"#,
            ),
            ("c.moving", &format!("h-moving-{moved_class}"), &moving),
            (
                "c.s",
                "h-s",
                r#"{"agg_safe":false,"id":"c.s","retention":"state"}"#,
            ),
        ],
    )
}

pub(super) async fn a_class_change_moves_the_whole_history_in_one_step<B: Backend>(b: &B) {
    use RetentionClass::{Diagnostic, Measurement, State};
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    b.store()
        .store_registry(&registry("measurement", "v1"))
        .await
        .expect("registry v1");
    let mut rows = Vec::new();
    let points = [
        ("c.m", Measurement),
        ("c.s", State),
        ("c.d", Diagnostic),
        ("c.moving", Measurement),
    ];
    for (i, (point, class)) in points.iter().enumerate() {
        for k in 0..3u64 {
            let seq = i as u64 * 10 + k + 1;
            let t = Micros(at(T0).0 + seq as i64 * 20_000_000);
            rows.push(row(RowSpec {
                point,
                class: *class,
                seq,
                ingested_at: t,
                observed_at: t,
                value: Some(CanonicalValue::Num(seq as f64)),
                quality: if k == 2 { Quality::Bad } else { Quality::Live },
                ..RowSpec::default()
            }));
        }
    }
    b.store()
        .commit(batch(1, epoch, rows, vec![]))
        .await
        .expect("commit");
    // Class routing: each point in its own class table, the view the sum of the three.
    let counts = b.counts().await;
    assert_eq!(
        (counts.get(Measurement), counts.get(State), counts.get(Diagnostic)),
        (6, 3, 3)
    );
    if let Some(view) = b.view_count().await {
        assert_eq!(view, counts.total());
    }
    let far = (at("2026-01-01T00:00:00Z"), at("2026-02-01T00:00:00Z"));
    for (point, class) in points {
        for other in RetentionClass::ALL {
            let n = b
                .store()
                .load_history(point, other, far.0, far.1, 100)
                .await
                .expect("history")
                .len();
            assert_eq!(n, if other == class { 3 } else { 0 }, "{point} in {other:?}");
        }
    }
    let history = b
        .store()
        .load_history("c.moving", Measurement, far.0, far.1, 100)
        .await
        .expect("history");
    assert!(history.windows(2).all(|w| w[0].observed_at <= w[1].observed_at));
    assert_eq!(history[2].quality, Quality::Bad);
    assert_eq!(history[2].reason.as_deref(), Some("device_offline"));
    assert_eq!(history[0].value, Some(CanonicalValue::Num(31.0)));
    b.store()
        .refresh_rollups(epoch, far.0, far.1)
        .await
        .expect("refresh");

    // Version 2 moves c.moving to diagnostic. A deposed epoch moves nothing.
    b.store()
        .store_registry(&registry("diagnostic", "v2"))
        .await
        .expect("registry v2");
    let at_move = at("2026-01-20T00:00:00Z");
    let stale = b
        .store()
        .move_point_class(epoch + 1, "c.moving", Diagnostic, "operator:test", at_move)
        .await;
    assert!(matches!(stale, Err(StoreError::Fenced { .. })), "{stale:?}");
    assert_eq!(b.counts().await.get(Measurement), 6);

    let moved = b
        .store()
        .move_point_class(epoch, "c.moving", Diagnostic, "operator:test", at_move)
        .await
        .expect("move");
    assert_eq!(moved.rows, 3);
    assert_eq!(
        moved.observed,
        Some((
            Micros(at(T0).0 + 31 * 20_000_000),
            Micros(at(T0).0 + 33 * 20_000_000)
        ))
    );
    let counts = b.counts().await;
    assert_eq!(
        (counts.get(Measurement), counts.get(State), counts.get(Diagnostic)),
        (3, 3, 6),
        "all of the point's rows moved, none stayed"
    );
    assert!(
        b.store()
            .load_history("c.moving", Measurement, far.0, far.1, 100)
            .await
            .expect("history")
            .is_empty()
    );
    let after = b
        .store()
        .load_history("c.moving", Diagnostic, far.0, far.1, 100)
        .await
        .expect("history");
    assert_eq!(after, history, "the rows moved unchanged");
    for grain in RollupGrain::ALL {
        let rollups = b
            .store()
            .load_rollups(grain, far.0, far.1, Some("c.moving"))
            .await
            .expect("rollups");
        assert!(!rollups.is_empty());
        assert!(
            rollups.iter().all(|r| r.class == Diagnostic),
            "{grain:?} recomputed under the new class: {rollups:?}"
        );
        assert_eq!(rollups.iter().map(|r| r.count).sum::<u64>(), 3);
    }
    let events = b.store().load_control_events(0, 100).await.expect("events");
    let event = events
        .iter()
        .find(|e| e.kind == "class_moved")
        .expect("a class_moved event");
    assert_eq!(Some(event.seq), moved.seq);
    assert_eq!(event.point_id.as_deref(), Some("c.moving"));
    assert_eq!(event.core_epoch, epoch);
    assert_eq!(event.principal, "operator:test");
    let payload: serde_json::Value = serde_json::from_str(&event.payload).expect("payload");
    assert_eq!(payload["to"], "diagnostic");
    assert_eq!(payload["rows"], 3);
    assert_eq!(payload["from"]["measurement"], 3);

    // Idempotent: nothing left to move writes nothing.
    let again = b
        .store()
        .move_point_class(epoch, "c.moving", Diagnostic, "operator:test", at_move)
        .await
        .expect("move again");
    assert_eq!((again.rows, again.observed, again.seq), (0, None, None));
    assert_eq!(
        b.store().load_control_events(0, 100).await.expect("events").len(),
        events.len()
    );
    b.release(lease).await;
}

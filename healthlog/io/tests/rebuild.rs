//! A store written by schema 1 (the points half, which ranked colliding points by their key
//! counts) is rebuilt from its archive to follow the completeness rule by sets: migration 2
//! drops the objects and re-queues every archived delivery, and the next fold refolds the
//! journal in its order. The result equals a fresh store folded from the same bodies.

mod common;

use common::{Env, HOUR_10_US, T0, body};
use healthlog::archive::Archive;
use healthlog::fold;
use healthlog::store::sqlite::support;
use healthlog::store::{Store, StoreOptions};
use healthlog_core::object::{self, StoredPoint};

#[tokio::test]
async fn a_schema_1_store_is_rebuilt_by_the_rule_by_sets() {
    // The pair where the two rules differ: key counts let `richer` win; by sets they are
    // equally complete and the canonical order lets `real` win.
    let richer = format!(r#"{{"date":"{T0}","qty":90,"z1":null,"z2":0}}"#);
    let real = format!(r#"{{"date":"{T0}","qty":72.5}}"#);
    let bodies = [
        body(&[("heart_rate", "count/min", &[&richer])]),
        body(&[("heart_rate", "count/min", &[&real])]),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("old.db");
    let archive = Archive::open(&dir.path().join("archive")).expect("archive");
    support::create_schema_1_store(&path).await.expect("schema 1");
    for (i, b) in bodies.iter().enumerate() {
        let sha = archive.put(b.as_bytes()).expect("archives");
        support::execute(
            &path,
            &format!(
                "INSERT INTO delivery (id, received_at_us, layer, body_sha256, body_bytes, parse_status, points) \
                 VALUES ({}, 1, 'minute', '{sha}', {}, 'parsed', 1)",
                i + 1,
                b.len()
            ),
            &[],
        )
        .await
        .expect("journal row");
    }
    // The object as schema 1's rule left it: the key-richer point, no alternates.
    let at = HOUR_10_US + 300_000_000;
    let old_payload = object::encode(&[StoredPoint {
        start_us: at,
        end_us: at,
        raw: richer.as_str().into(),
        alternates: vec![],
    }])
    .expect("encodes");
    support::execute(
        &path,
        &format!(
            "INSERT INTO bucket (metric, layer, hour_us, units, first_us, last_us, point_count, hash, sealed, \
             delivery_id, payload) VALUES ('heart_rate', 'minute', {HOUR_10_US}, 'count/min', {at}, {at}, 1, x'00', 0, 1, ?1)"
        ),
        &[&old_payload],
    )
    .await
    .expect("object row");

    let (store, report) = Store::open_migrating(&path, StoreOptions::default())
        .await
        .expect("migrates");
    assert_eq!((report.before, report.after), (1, 2));
    assert_eq!(
        store.object_count().await.expect("count"),
        0,
        "the projection is dropped"
    );
    let pending = store
        .journal(Some(healthlog_core::status::ParseStatus::Pending))
        .await
        .expect("journal");
    assert_eq!(pending.len(), 2, "every archived delivery is pending again");
    let env = Env::new().await;
    let (summary, _) = fold::fold_pending(&store, &archive, &env.options, &indicatif::ProgressBar::hidden())
        .await
        .expect("refolds");
    assert_eq!(summary.parsed, 2);
    let rows = store.all_objects().await.expect("objects");
    let points = object::decode(&rows[0].payload, rows[0].hour_us).expect("decodes");
    assert_eq!(&*points[0].raw, real.as_str(), "the rule by sets decides");
    assert_eq!(points[0].alternates, vec![richer.clone().into_boxed_str()]);

    // The same bodies folded into a fresh store give the same fingerprint.
    for b in &bodies {
        env.deliver("minute", b).await;
    }
    assert_eq!(
        store.fingerprint().await.expect("fingerprint").0,
        env.fingerprint().await
    );
}

//! One test per Scenario of the points half of healthlog-storage-spec.txt, named after it,
//! asserting its WHEN/THEN against a real SQLite file and a real archive. Each test's doc
//! comment quotes the scenario's title.

mod common;

use common::{Env, HOUR_10_US, T0, body, body_with, capture_logs, counters};
use healthlog::fold::{self, DeliveryResult};
use healthlog::store::sqlite::{CATALOG_SQL, COMMON_HOURS_SQL, support};
use healthlog::store::{Store, StoreError, StoreOptions};
use healthlog_core::hae::Coverage;
use healthlog_core::object::{self, StoredPoint};
use healthlog_core::points::Candidate;
use healthlog_core::status::ParseStatus;

const HR: &str = "heart_rate";

async fn status_of(env: &Env, id: i64) -> (String, Option<Vec<String>>) {
    let rows = env.store.deliveries(None).await.expect("rows");
    let row = rows.into_iter().find(|r| r.id == id).expect("row");
    (row.status, row.uncovered)
}

// ------------------------------------------------------------ Идентичность точки по координатам

/// «Повторная доставка той же точки ничего не меняет»
#[tokio::test]
async fn repeat_delivery_of_the_same_point_changes_nothing() {
    let env = Env::new().await;
    let p = format!(r#"{{"date":"{T0}","qty":72.5,"source":"Watch"}}"#);
    env.deliver("minute", &body(&[(HR, "count/min", &[&p])])).await;
    let (fp, objects) = (
        env.fingerprint().await,
        env.store.all_objects().await.expect("objects"),
    );
    let again = env.deliver("minute", &body(&[(HR, "count/min", &[&p])])).await;
    assert_eq!(counters(&again).objects_written, 0);
    assert_eq!(env.fingerprint().await, fp);
    assert_eq!(
        env.store.all_objects().await.expect("objects"),
        objects,
        "not a byte of the store changed"
    );
}

/// «Смена источника не создаёт вторую точку»
#[tokio::test]
async fn source_change_does_not_create_a_second_point() {
    let env = Env::new().await;
    let a = format!(r#"{{"date":"{T0}","qty":72.5,"source":"Apple Watch Ultra 3|iPad (Anton)"}}"#);
    let b = format!(r#"{{"date":"{T0}","qty":72.5,"source":"Apple Watch Ultra 3"}}"#);
    env.deliver("minute", &body(&[(HR, "count/min", &[&a])])).await;
    env.deliver("minute", &body(&[(HR, "count/min", &[&b])])).await;
    assert_eq!(env.points(HR, "minute").await.len(), 1);
}

/// «Записи с одной меткой и разными интервалами не схлопываются»
#[tokio::test]
async fn records_with_one_date_and_different_intervals_are_not_collapsed() {
    let env = Env::new().await;
    let d = "2026-01-05 01:00:00 +0000";
    let points = [
        format!(
            r#"{{"date":"{d}","start":"{d}","end":"2026-01-05 01:40:00 +0000","qty":0.66,"value":"Core"}}"#
        ),
        format!(
            r#"{{"date":"{d}","start":"2026-01-05 01:40:00 +0000","end":"2026-01-05 02:10:00 +0000","qty":0.5,"value":"Deep"}}"#
        ),
        format!(
            r#"{{"date":"{d}","start":"2026-01-05 02:10:00 +0000","end":"2026-01-05 02:30:00 +0000","qty":0.33,"value":"REM"}}"#
        ),
    ];
    let refs: Vec<&str> = points.iter().map(String::as_str).collect();
    let r = env
        .deliver("minute", &body(&[("sleep_analysis", "hr", &refs)]))
        .await;
    assert_eq!(counters(&r).coordinates, 3);
    assert_eq!(env.points("sleep_analysis", "minute").await.len(), 3);
}

/// «Повтор записи в следующей доставке не задваивает»
#[tokio::test]
async fn a_record_repeated_in_the_next_delivery_is_not_doubled() {
    let env = Env::new().await;
    let p = r#"{"date":"2026-01-05 01:00:00 +0000","start":"2026-01-05 01:00:00 +0000","end":"2026-01-05 01:40:00 +0000","qty":0.66}"#;
    let reordered = r#"{"qty":0.66,"end":"2026-01-05 01:40:00 +0000","start":"2026-01-05 01:00:00 +0000","date":"2026-01-05 01:00:00 +0000"}"#;
    env.deliver("minute", &body(&[("sleep_analysis", "hr", &[p])]))
        .await;
    env.deliver("minute", &body(&[("sleep_analysis", "hr", &[reordered])]))
        .await;
    assert_eq!(env.points("sleep_analysis", "minute").await.len(), 1);
}

/// «Точка-измерение адресуется вырожденным интервалом»
#[tokio::test]
async fn a_measurement_is_addressed_by_a_degenerate_interval() {
    let env = Env::new().await;
    let measurement = format!(r#"{{"date":"{T0}","qty":5}}"#);
    let interval = format!(r#"{{"date":"{T0}","end":"2026-01-05 10:06:00 +0000","qty":6}}"#);
    env.deliver(
        "minute",
        &body(&[("step_count", "count", &[&measurement, &interval])]),
    )
    .await;
    let points = env.points("step_count", "minute").await;
    let start = HOUR_10_US + 5 * 60_000_000;
    // Same key shape (start, end) for both; the measurement's end equals its start.
    assert_eq!(
        points.iter().map(|(s, e, _)| (*s, *e)).collect::<Vec<_>>(),
        vec![(start, start), (start, start + 60_000_000)]
    );
}

// ------------------------------------------------------------ Разрешение столкновений по полноте

/// «Бедная точка не стирает поля богатой»
#[tokio::test]
async fn a_poor_point_does_not_erase_the_fields_of_a_rich_one() {
    let env = Env::new().await;
    let rich = format!(r#"{{"date":"{T0}","Avg":70.5,"Min":60,"Max":80,"context":"resting"}}"#);
    let poor = format!(r#"{{"date":"{T0}","Avg":70.5,"Min":60,"Max":80}}"#);
    env.deliver("minute", &body(&[(HR, "count/min", &[&rich])])).await;
    env.deliver("minute", &body(&[(HR, "count/min", &[&poor])])).await;
    assert_eq!(env.points(HR, "minute").await[0].2, rich);
    // A pair where the canonical order alone would keep the poor point (`"Avg"` sorts after
    // `"Avg Min"`): completeness, not the order, keeps the rich one, in both arrival orders.
    let rich = format!(r#"{{"date":"{T0}","Avg":70.5,"Avg Min":60}}"#);
    let poor = format!(r#"{{"date":"{T0}","Avg Min":60}}"#);
    for order in [[&rich, &poor], [&poor, &rich]] {
        let env = Env::new().await;
        for p in order {
            env.deliver("minute", &body(&[(HR, "count/min", &[p])])).await;
        }
        assert_eq!(env.points(HR, "minute").await[0].2, rich);
    }
}

/// «Поля без содержания полноты не добавляют»
#[tokio::test]
async fn fields_without_content_add_no_completeness() {
    let env = Env::new().await;
    let hollow = format!(r#"{{"date":"{T0}","qty":0,"Min":0.0,"Max":{{ }},"series":[],"context":-0}}"#);
    let real = format!(r#"{{"date":"{T0}","qty":3}}"#);
    env.deliver("minute", &body(&[(HR, "count/min", &[&hollow])]))
        .await;
    env.deliver("minute", &body(&[(HR, "count/min", &[&real])])).await;
    assert_eq!(env.points(HR, "minute").await[0].2, real);
}

/// «При равном содержании поля не теряются»
///
/// Read by its title and the requirement's second rank (HEALTHLOG.md "Completeness is by
/// sets"): with equal content — the same non-empty keys with the same values — the point with
/// the strict superset of all keys keeps its empty Min and Max, in both arrival orders. The
/// scenario's WHEN line gives the arriving point "another qty"; with differing values the pair
/// is equally complete and the canonical order decides (tested by
/// `equally_complete_points_with_different_values` and the counter-example below), so that
/// line contradicts the title and the requirement, and this test uses an equal qty.
#[tokio::test]
async fn with_equal_content_no_field_is_lost() {
    let rich = format!(r#"{{"date":"{T0}","qty":10,"Min":0,"Max":0}}"#);
    let plain = format!(r#"{{"date":"{T0}","qty":10.0}}"#);
    for (stored, arriving) in [(&rich, &plain), (&plain, &rich)] {
        let env = Env::new().await;
        env.deliver("minute", &body(&[(HR, "count/min", &[stored])]))
            .await;
        env.deliver("minute", &body(&[(HR, "count/min", &[arriving])]))
            .await;
        let kept = &env.points(HR, "minute").await[0].2;
        assert_eq!(kept, &rich, "Min and Max stay");
    }
}

/// The spec's counter-example through the store: `{date, qty:0.001, p1:null, p2:null}` and
/// `{date, qty:72.5}` are equally complete (equal non-empty sets, different values), so the
/// number of keys does not decide: the canonical order does, in both orders, and the stored
/// bytes are the same either way, with the other candidate kept beside the winner. A second
/// pair, whose key-richer point sorts after, shows the richer one losing.
#[tokio::test]
async fn the_counter_example_resolves_as_equally_complete() {
    let hollow = format!(r#"{{"date":"{T0}","qty":0.001,"p1":null,"p2":null}}"#);
    let real = format!(r#"{{"date":"{T0}","qty":72.5}}"#);
    let richer_later = format!(r#"{{"date":"{T0}","qty":90,"z1":null,"z2":0}}"#);
    for (pair, winner) in [([&hollow, &real], &hollow), ([&richer_later, &real], &real)] {
        let mut stored = Vec::new();
        for order in [[pair[0], pair[1]], [pair[1], pair[0]]] {
            let env = Env::new().await;
            for p in order {
                env.deliver("minute", &body(&[(HR, "count/min", &[p])])).await;
            }
            let rows = env.store.all_objects().await.expect("objects");
            let points = object::decode(&rows[0].payload, rows[0].hour_us).expect("decodes");
            assert_eq!(&*points[0].raw, winner.as_str(), "the canonical order decides");
            assert_eq!(
                points[0].alternates.len(),
                1,
                "the other candidate is kept beside it"
            );
            stored.push(rows[0].payload.clone());
        }
        assert_eq!(
            stored[0], stored[1],
            "the stored bytes do not depend on the order"
        );
    }
}

/// «Одинаково полные точки с разными значениями»
#[tokio::test]
async fn equally_complete_points_with_different_values() {
    let a = format!(r#"{{"date":"{T0}","qty":71.25}}"#);
    let b = format!(r#"{{"date":"{T0}","qty":64.5}}"#);
    let mut seen = Vec::new();
    for order in [[&a, &b], [&b, &a]] {
        let env = Env::new().await;
        for p in order {
            env.deliver("minute", &body(&[(HR, "count/min", &[p])])).await;
        }
        seen.push((env.fingerprint().await, env.points(HR, "minute").await));
    }
    assert_eq!(
        seen[0], seen[1],
        "the outcome does not depend on the replay order"
    );
}

/// «Несравнимые множества считаются, а не сливаются»
#[tokio::test]
async fn incomparable_sets_are_counted_not_merged() {
    let a = format!(r#"{{"date":"{T0}","qty":7.777,"a":4.444}}"#);
    let b = format!(r#"{{"date":"{T0}","qty":7.777,"b":5.555}}"#);
    let mut kept = Vec::new();
    for order in [[&a, &b], [&b, &a]] {
        let env = Env::new().await;
        env.deliver("minute", &body(&[(HR, "count/min", &[order[0]])]))
            .await;
        let (logs, guard) = capture_logs();
        let r = env
            .deliver("minute", &body(&[(HR, "count/min", &[order[1]])]))
            .await;
        drop(guard);
        assert_eq!(counters(&r).incomparable, 1);
        assert_eq!(
            counters(&r).collisions,
            1,
            "an incomparable pair is also a collision"
        );
        // The object's coordinates go into the delivery's lists, not only into a WARN line.
        let coordinates = vec![(HR.to_string(), "minute".to_string(), HOUR_10_US)];
        let DeliveryResult::Folded {
            collision_objects,
            incomparable_objects,
            ..
        } = &r
        else {
            panic!("{r:?}")
        };
        assert_eq!(
            (collision_objects, incomparable_objects),
            (&coordinates, &coordinates)
        );
        let row = env
            .store
            .deliveries(None)
            .await
            .expect("rows")
            .into_iter()
            .find(|d| d.id == r.id())
            .expect("row");
        assert_eq!(
            (row.collision_objects, row.incomparable_objects),
            (Some(coordinates.clone()), Some(coordinates))
        );
        let points = env.points(HR, "minute").await;
        assert_eq!(points.len(), 1);
        assert!(
            !(points[0].2.contains("\"a\"") && points[0].2.contains("\"b\"")),
            "not merged"
        );
        let warns = logs.lines_at("WARN");
        let w = warns
            .iter()
            .find(|l| l.contains("incomparable key sets"))
            .expect("a WARN");
        assert!(
            w.contains("metric=\"heart_rate\"")
                && w.contains("layer=\"minute\"")
                && w.contains("hour=\"2026-01-05T10:00:00Z\""),
            "{w}"
        );
        assert!(
            !logs.text().contains("7.777")
                && !logs.text().contains("4.444")
                && !logs.text().contains("5.555")
        );
        kept.push(points[0].2.clone());
    }
    assert_eq!(kept[0], kept[1], "chosen deterministically");
}

/// «Содержимое, которое не разбирается в объект»
///
/// A body's points must be objects to have coordinates at all, so non-object content can only
/// be met at a coordinate already stored; the rule is exercised on a stored object holding it.
#[tokio::test]
async fn content_that_does_not_parse_as_an_object() {
    let start = HOUR_10_US + 300_000_000;
    for junk in ["[1,2,3]", "\"text\"", "42"] {
        let stored = vec![StoredPoint {
            start_us: start,
            end_us: start,
            raw: junk.into(),
            alternates: vec![],
        }];
        let fields = Candidate::from_raw(start, start, &format!(r#"{{"date":"{T0}","qty":3}}"#));
        let merged = object::merge(&stored, &[&fields]).expect("merges");
        assert_eq!(
            &*merged.points[0].raw, &*fields.raw,
            "the point with fields stays"
        );
        assert_eq!(merged.incomparable, 0, "the incomparable counter does not grow");
    }
}

/// «Столкновение с различием содержимого оставляет след»
#[tokio::test]
async fn a_collision_with_different_content_leaves_a_trace() {
    let env = Env::new().await;
    env.deliver(
        "minute",
        &body(&[(HR, "count/min", &[&format!(r#"{{"date":"{T0}","qty":81.125}}"#)])]),
    )
    .await;
    let (logs, guard) = capture_logs();
    let r = env
        .deliver(
            "minute",
            &body(&[(HR, "count/min", &[&format!(r#"{{"date":"{T0}","qty":93.875}}"#)])]),
        )
        .await;
    drop(guard);
    assert_eq!(counters(&r).collisions, 1);
    let warns = logs.lines_at("WARN");
    assert_eq!(warns.len(), 1, "{warns:?}");
    assert!(
        warns[0].contains("metric=\"heart_rate\"")
            && warns[0].contains("layer=\"minute\"")
            && warns[0].contains("hour=\"2026-01-05T10:00:00Z\"")
    );
    assert!(!logs.text().contains("81.125") && !logs.text().contains("93.875"));
}

/// «Дребезг сериализации столкновением не считается»
#[tokio::test]
async fn serialisation_jitter_is_not_a_collision() {
    let env = Env::new().await;
    env.deliver(
        "minute",
        &body(&[(
            HR,
            "count/min",
            &[&format!(r#"{{"date":"{T0}","qty":72.534,"Min":60}}"#)],
        )]),
    )
    .await;
    let (logs, guard) = capture_logs();
    let r = env
        .deliver(
            "minute",
            &body(&[(
                HR,
                "count/min",
                &[&format!(
                    r#"{{ "Min" : 60.0, "qty":72.53400000000002,"date":"{T0}"}}"#
                )],
            )]),
        )
        .await;
    drop(guard);
    assert_eq!(counters(&r).collisions, 0);
    assert_eq!(counters(&r).objects_written, 0);
    assert!(logs.lines_at("WARN").is_empty());
}

// ------------------------------------------------------------ Хранение часовыми объектами

/// «Отказ посреди доставки не оставляет части объектов»
#[tokio::test]
async fn a_failure_midway_through_a_delivery_leaves_no_part_of_its_objects() {
    let mut env = Env::new().await;
    let points: Vec<String> = (0..3)
        .map(|h| format!(r#"{{"date":"2026-01-05 1{h}:05:00 +0000","qty":{}}}"#, h + 1))
        .collect();
    let refs: Vec<&str> = points.iter().map(String::as_str).collect();
    env.options.fail_after_objects = Some(2);
    let r = env
        .deliver("minute", &body(&[("step_count", "count", &refs)]))
        .await;
    assert!(matches!(r, DeliveryResult::LeftPending { .. }), "{r:?}");
    assert_eq!(
        env.store.object_count().await.expect("count"),
        0,
        "no object of this delivery is written"
    );
    assert_eq!(status_of(&env, r.id()).await.0, "pending");
    env.options.fail_after_objects = None;
    let done = env.fold_result(r.id()).await;
    assert_eq!(counters(&done).objects_written, 3);
}

/// «Смена единиц не переподписывает сохранённые точки»
#[tokio::test]
async fn a_change_of_units_does_not_relabel_stored_points() {
    let env = Env::new().await;
    env.deliver(
        "minute",
        &body(&[(
            "weight_body_mass",
            "kg",
            &[&format!(r#"{{"date":"{T0}","qty":72.4}}"#)],
        )]),
    )
    .await;
    let (logs, guard) = capture_logs();
    let at = "2026-01-05 10:30:00 +0000";
    let r = env
        .deliver(
            "minute",
            &body(&[(
                "weight_body_mass",
                "lb",
                &[&format!(r#"{{"date":"{at}","qty":159.6}}"#)],
            )]),
        )
        .await;
    drop(guard);
    assert_eq!(counters(&r).unit_mismatches, 1);
    let rows = env.store.all_objects().await.expect("objects");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].units, "kg");
    assert!(
        logs.lines_at("WARN")
            .iter()
            .any(|l| l.contains("units differ") && l.contains("weight_body_mass"))
    );
}

/// «Точки за один час ложатся в один объект»
#[tokio::test]
async fn points_of_one_hour_go_into_one_object() {
    let env = Env::new().await;
    let points = [
        r#"{"date":"2026-01-05 10:00:00 +0000","qty":1}"#,
        r#"{"date":"2026-01-05 11:30:00 +0100","qty":2}"#,
        r#"{"date":"2026-01-05 06:59:59 -0400","qty":3}"#,
    ];
    env.deliver("minute", &body(&[("step_count", "count", &points)]))
        .await;
    let rows = env.store.all_objects().await.expect("objects");
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].hour_us, rows[0].point_count), (HOUR_10_US, 3));
}

/// «Дозапись в существующий час»
#[tokio::test]
async fn appending_to_an_existing_hour() {
    let env = Env::new().await;
    let first = r#"{"date":"2026-01-05 10:05:00 +0000","qty":1}"#;
    let second = r#"{"date":"2026-01-05 10:35:00 +0000","qty":2}"#;
    env.deliver("minute", &body(&[("step_count", "count", &[first])]))
        .await;
    let r = env
        .deliver("minute", &body(&[("step_count", "count", &[second])]))
        .await;
    assert_eq!(counters(&r).objects_written, 1);
    let rows = env.store.all_objects().await.expect("objects");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].point_count, 2);
    assert_eq!(
        (rows[0].first_us, rows[0].last_us),
        (HOUR_10_US + 300_000_000, HOUR_10_US + 2_100_000_000)
    );
    let raws: Vec<String> = env
        .points("step_count", "minute")
        .await
        .into_iter()
        .map(|p| p.2)
        .collect();
    assert_eq!(
        raws,
        vec![first.to_string(), second.to_string()],
        "the stored point stays"
    );
    assert_eq!(
        rows[0].delivery_id, 1,
        "the object keeps the delivery that created it"
    );
}

// ------------------------------------------------------------ Хеш как детектор изменений

/// «Повторная присылка того же часа не пишет в базу»
#[tokio::test]
async fn resending_the_same_hour_does_not_write() {
    let env = Env::new().await;
    let points = [
        r#"{"date":"2026-01-05 10:05:00 +0000","qty":1.5}"#,
        r#"{"date":"2026-01-05 10:06:00 +0000","qty":2.5}"#,
    ];
    env.deliver("minute", &body(&[("active_energy", "kcal", &points)]))
        .await;
    let before = env.store.round_trips();
    let r = env
        .deliver("minute", &body(&[("active_energy", "kcal", &points)]))
        .await;
    let c = counters(&r);
    assert_eq!((c.objects_written, c.objects_unchanged), (0, 1));
    // journal insert, pending list, the read before the lock, begin, the stamps under the
    // lock, outcome, commit: no object statement.
    assert_eq!(env.store.round_trips() - before, 7, "no write statement was sent");
}

// ------------------------------------------------------------ Признак запечатанного часа

/// «Изменение запечатанного часа»
#[tokio::test]
async fn a_change_to_a_sealed_hour() {
    let env = Env::new().await;
    env.deliver(
        "minute",
        &body(&[(
            "step_count",
            "count",
            &[r#"{"date":"2026-01-05 10:05:00 +0000","qty":1}"#],
        )]),
    )
    .await;
    assert!(
        env.store
            .set_sealed("step_count", "minute", HOUR_10_US, true)
            .await
            .expect("seals")
    );
    let (logs, guard) = capture_logs();
    let r = env
        .deliver(
            "minute",
            &body(&[(
                "step_count",
                "count",
                &[r#"{"date":"2026-01-05 10:55:00 +0000","qty":9}"#],
            )]),
        )
        .await;
    drop(guard);
    assert_eq!(counters(&r).sealed_changes, 1);
    assert!(
        logs.lines_at("WARN")
            .iter()
            .any(|l| l.contains("sealed hour changed"))
    );
    assert_eq!(
        env.points("step_count", "minute").await.len(),
        2,
        "the data is saved all the same"
    );
    assert!(
        env.store.all_objects().await.expect("objects")[0].sealed,
        "and the hour stays sealed"
    );
}

// ------------------------------------------------------------ Значения точек не попадают в логи

/// «Разбор доставки логируется без значений»
#[tokio::test]
async fn parsing_a_delivery_is_logged_without_values() {
    let env = Env::new().await;
    let (logs, guard) = capture_logs();
    let p = format!(
        r#"{{"date":"{T0}","Avg":67.891,"Min":61,"Max":74,"source":"Apple Watch Ultra 3|iPad (Anton)"}}"#
    );
    let r = env.deliver("minute", &body(&[(HR, "count/min", &[&p])])).await;
    drop(guard);
    let info = logs.lines_at("INFO");
    let line = info
        .iter()
        .find(|l| l.contains("delivery folded"))
        .expect("an INFO record");
    for field in [
        "delivery_id=1",
        "metrics=1",
        "points=1",
        "objects_written=1",
        "coordinates=1",
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
    assert_eq!(r.id(), 1);
    for secret in ["67.891", "Apple Watch", "Anton", "iPad"] {
        assert!(!logs.text().contains(secret), "{secret} leaked");
    }
}

/// «Непокрытые секции названы именами ключей»
#[tokio::test]
async fn uncovered_sections_are_named_by_their_keys() {
    let env = Env::new().await;
    let (logs, guard) = capture_logs();
    let extra = r#","visionRx":[{"id":"W1","route":[{"lat":48.137154,"lon":11.576124}]}]"#;
    env.deliver(
        "minute",
        &body_with(
            &[("step_count", "count", &[&format!(r#"{{"date":"{T0}","qty":4}}"#)])],
            extra,
        ),
    )
    .await;
    drop(guard);
    let line = logs
        .lines_at("INFO")
        .into_iter()
        .find(|l| l.contains("delivery folded"))
        .expect("INFO record");
    assert!(
        line.contains("uncovered=[\"visionRx\"]"),
        "names as an attribute: {line}"
    );
    assert!(
        logs.lines_at("WARN").is_empty(),
        "partiality alone does not raise the level"
    );
    for secret in ["48.137154", "11.576124", "W1", "route"] {
        assert!(!logs.text().contains(secret), "{secret} leaked");
    }
}

/// «Границы списка сработали»
#[tokio::test]
async fn list_limits_tripped() {
    let env = Env::new().await;
    let extra: String = (0..40).map(|i| format!(r#","section{i:02}":[]"#)).collect();
    let (logs, guard) = capture_logs();
    env.deliver(
        "minute",
        &body_with(
            &[("step_count", "count", &[&format!(r#"{{"date":"{T0}","qty":4}}"#)])],
            &extra,
        ),
    )
    .await;
    drop(guard);
    let warn = logs
        .lines_at("WARN")
        .into_iter()
        .find(|l| l.contains("over its limits"))
        .expect("a WARN");
    assert!(warn.contains("uncovered_dropped=8"), "{warn}");
}

// ------------------------------------------------------------ Учёт частично разобранной доставки

/// «Доставка с непокрытой секцией отмечается частичной»
#[tokio::test]
async fn a_delivery_with_an_uncovered_section_is_marked_partial() {
    let env = Env::new().await;
    let r = env
        .deliver(
            "minute",
            &body_with(
                &[("step_count", "count", &[&format!(r#"{{"date":"{T0}","qty":4}}"#)])],
                r#","visionRx":[{"x":1}]"#,
            ),
        )
        .await;
    assert_eq!(
        status_of(&env, r.id()).await,
        ("partial".to_string(), Some(vec!["visionRx".to_string()]))
    );
    assert_eq!(
        env.points("step_count", "minute").await.len(),
        1,
        "covered points are stored as usual"
    );
}

/// «Доставка без непокрытых секций остаётся parsed»
#[tokio::test]
async fn a_delivery_without_uncovered_sections_stays_parsed() {
    let env = Env::new().await;
    let r = env
        .deliver(
            "minute",
            &body(&[("step_count", "count", &[&format!(r#"{{"date":"{T0}","qty":4}}"#)])]),
        )
        .await;
    assert_eq!(
        status_of(&env, r.id()).await,
        ("parsed".to_string(), Some(vec![]))
    );
}

/// «Отказ разбора сильнее частичности»
#[tokio::test]
async fn a_parse_failure_is_stronger_than_partiality() {
    let env = Env::new().await;
    let good = format!(r#"{{"date":"{T0}","qty":4}}"#);
    let bad = r#"{"date":"the fifth of January","qty":5}"#;
    let r = env
        .deliver(
            "minute",
            &body_with(
                &[
                    ("step_count", "count", &[&good]),
                    ("active_energy", "kcal", &[bad]),
                ],
                r#","visionRx":[]"#,
            ),
        )
        .await;
    assert!(matches!(r, DeliveryResult::Failed { .. }));
    assert_eq!(
        status_of(&env, r.id()).await,
        ("failed".to_string(), Some(vec!["visionRx".to_string()]))
    );
    assert_eq!(
        env.store.object_count().await.expect("count"),
        0,
        "no points of a failed delivery"
    );
}

/// «Занятая база доставку из очереди не выводит»
#[tokio::test]
async fn a_busy_database_does_not_take_the_delivery_out_of_the_queue() {
    let env = Env::with_options(StoreOptions { busy_timeout_ms: 20 }).await;
    let other = Store::open_migrating(env.store.path(), StoreOptions::default())
        .await
        .expect("second handle")
        .0;
    let body = body(&[("step_count", "count", &[&format!(r#"{{"date":"{T0}","qty":4}}"#)])]);
    let j = healthlog::journal::ingest_body(&env.store, &env.archive, "minute", body.as_bytes(), 1)
        .await
        .expect("journals");
    let holder = other.begin_fold(None).await.expect("holds the write lock");
    let r = env.fold_result(j.id).await;
    assert!(matches!(r, DeliveryResult::LeftPending { .. }), "{r:?}");
    assert_eq!(status_of(&env, r.id()).await.0, "pending");
    holder.rollback().await.expect("releases the write lock");
    let done = env.fold_result(r.id()).await;
    assert_eq!(done.status(), "parsed");
}

async fn pending_entry(env: &Env, id: i64) -> healthlog::store::JournalEntry {
    env.store
        .journal(Some(ParseStatus::Pending))
        .await
        .expect("journal")
        .into_iter()
        .find(|e| e.id == id)
        .expect("pending")
}

/// The write lock is held only for the write (issue 23 item 6, for points): a fold merges
/// outside the lock, and when another fold changed the same hour in between, it merges again
/// under the lock, so neither delivery's points are lost.
#[tokio::test]
async fn a_hour_changed_between_the_merge_and_the_lock_is_merged_again() {
    let env = Env::new().await;
    let point = |minute: u32, qty: u32| {
        body(&[(
            "step_count",
            "count",
            &[&format!(
                r#"{{"date":"2026-01-05 10:{minute:02}:00 +0000","qty":{qty}}}"#
            )],
        )])
    };
    env.deliver("minute", &point(1, 1)).await;
    let first = point(2, 2);
    let a = healthlog::journal::ingest_body(&env.store, &env.archive, "minute", first.as_bytes(), 1)
        .await
        .expect("journals");
    let (merged, resume) = (
        std::sync::Arc::new(tokio::sync::Notify::new()),
        std::sync::Arc::new(tokio::sync::Notify::new()),
    );
    let mut paused = env.options.clone();
    paused.pause_before_lock = Some((merged.clone(), resume.clone()));
    let entry = pending_entry(&env, a.id).await;
    let store = env.store.clone();
    let archive = healthlog::archive::Archive::open(env.archive.root()).expect("archive");
    let folding = tokio::spawn(async move {
        healthlog::fold::fold_one(&store, &archive, &entry, &paused)
            .await
            .expect("folds")
    });
    merged.notified().await;
    // Another delivery writes the same hour while the first holds its merge, unlocked.
    let second = point(3, 3);
    let b = healthlog::journal::ingest_body(&env.store, &env.archive, "minute", second.as_bytes(), 1)
        .await
        .expect("journals");
    let entry = pending_entry(&env, b.id).await;
    let r = healthlog::fold::fold_one(&env.store, &env.archive, &entry, &env.options)
        .await
        .expect("folds");
    assert_eq!(r.status(), "parsed");
    assert_eq!(env.store.remerges(), 0, "nothing changed under the second fold");
    resume.notify_one();
    assert_eq!(folding.await.expect("joins").status(), "parsed");
    assert_eq!(
        env.store.remerges(),
        1,
        "the first fold merged again under the lock"
    );
    let minutes: Vec<i64> = env
        .points("step_count", "minute")
        .await
        .iter()
        .map(|p| (p.0 - HOUR_10_US) / 60_000_000)
        .collect();
    assert_eq!(minutes, vec![1, 2, 3], "no delivery's point is lost");
}

/// An object holds at most `POINTS_PER_OBJECT_MAX` points: a delivery that would push an
/// hour past it fails with that reason, through the store, and the stored object is untouched.
#[tokio::test]
async fn a_delivery_that_would_overfill_an_object_fails_and_leaves_it_as_it_was() {
    use healthlog_core::limits::POINTS_PER_OBJECT_MAX;
    let env = Env::new().await;
    // One start second, many ends: distinct coordinates, all in the 10:00 object.
    let points = |from: usize, to: usize| -> Vec<String> {
        (from..to)
            .map(|k| {
                let end_s = 10 * 3600 + k;
                format!(
                    r#"{{"start":"2026-01-05 10:00:00 +0000","end":"2026-01-{:02} {:02}:{:02}:{:02} +0000","qty":1}}"#,
                    5 + end_s / 86_400,
                    end_s % 86_400 / 3600,
                    end_s % 3600 / 60,
                    end_s % 60
                )
            })
            .collect()
    };
    let half = POINTS_PER_OBJECT_MAX / 2 + 1;
    let first = points(0, half);
    let refs: Vec<&str> = first.iter().map(String::as_str).collect();
    let r = env
        .deliver("minute", &body(&[("sleep_phase", "min", &refs)]))
        .await;
    assert_eq!(r.status(), "parsed");
    let before = env.fingerprint().await;
    let second = points(half, 2 * half);
    let refs: Vec<&str> = second.iter().map(String::as_str).collect();
    let r = env
        .deliver("minute", &body(&[("sleep_phase", "min", &refs)]))
        .await;
    let DeliveryResult::Failed { error, .. } = &r else {
        panic!("an overfilled object must fail the delivery: {r:?}");
    };
    assert!(
        error.contains(&format!("more than {POINTS_PER_OBJECT_MAX} points")),
        "{error}"
    );
    assert_eq!(env.fingerprint().await, before, "the stored object is as it was");
}

/// «Пересвёртка после того, как секция стала покрытой»
#[tokio::test]
async fn refolding_after_the_section_became_covered() {
    let mut env = Env::new().await;
    env.options.coverage = Coverage::of(&[]); // a parser that does not read `metrics` yet
    let r = env
        .deliver(
            "minute",
            &body(&[("step_count", "count", &[&format!(r#"{{"date":"{T0}","qty":4}}"#)])]),
        )
        .await;
    assert_eq!(
        status_of(&env, r.id()).await,
        ("partial".to_string(), Some(vec!["metrics".to_string()]))
    );
    env.options.coverage = Coverage::current();
    assert_eq!(
        env.store
            .requeue_partial_naming("metrics")
            .await
            .expect("requeues"),
        1
    );
    let again = env.fold_result(r.id()).await;
    assert_eq!(again.status(), "parsed");
    assert_eq!(
        status_of(&env, r.id()).await,
        ("parsed".to_string(), Some(vec![]))
    );
}

// ------------------------------------------------------------ Открытие базы отказывает при схеме из будущего

/// «Старый бинарь не открывает базу из будущего»
#[tokio::test]
async fn an_old_binary_does_not_open_a_database_from_the_future() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("future.db");
    support::stamp_schema_version(&path, Some(99))
        .await
        .expect("stamps");
    let err = Store::open_migrating(&path, StoreOptions::default())
        .await
        .expect_err("refused");
    assert!(
        matches!(
            err,
            StoreError::SchemaFromFuture {
                found: 99,
                supported: 2
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("99") && text.contains('2'), "{text}");
    let (version, tables) = support::inspect(&path).await.expect("inspects");
    assert_eq!(version, 99);
    assert_eq!(
        tables.len(),
        1,
        "only the migration bookkeeping table: no migration was applied ({tables:?})"
    );
}

/// «Новая база открывается и мигрирует»
#[tokio::test]
async fn a_new_database_opens_and_migrates() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, stamp) in [("fresh.db", false), ("empty-journal.db", true)] {
        let path = dir.path().join(name);
        if stamp {
            support::stamp_schema_version(&path, None)
                .await
                .expect("empty migrations table");
        }
        let (store, report) = Store::open_migrating(&path, StoreOptions::default())
            .await
            .expect("opens");
        assert_eq!(
            (report.before, report.after),
            (0, Store::supported_schema_version())
        );
        store.close().await;
        let (version, tables) = support::inspect(&path).await.expect("inspects");
        assert_eq!(version, Store::supported_schema_version());
        assert!(tables.contains(&"bucket".to_string()) && tables.contains(&"delivery".to_string()));
    }
}

/// «Открытие только на чтение остаётся строгим»
#[tokio::test]
async fn a_read_only_open_stays_strict() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("old.db");
    support::stamp_schema_version(&path, None)
        .await
        .expect("version 0");
    let err = Store::open_read_only(&path, StoreOptions::default())
        .await
        .expect_err("refused");
    assert!(
        matches!(
            err,
            StoreError::SchemaMismatch {
                found: 0,
                supported: 2
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains('0') && err.to_string().contains('2'));
}

// ------------------------------------------------------------ Перечисление разрезов не читает содержимое объектов

async fn long_history(env: &Env, days: i64) {
    // Objects for many months in two layers, written with the fold's own path.
    for chunk in 0..(days / 30) {
        let mut minute = Vec::new();
        let mut hour = Vec::new();
        for d in chunk * 30..(chunk + 1) * 30 {
            for h in [3, 9, 15, 21] {
                let at = healthlog_core::time::format_hae(
                    HOUR_10_US + d * 86_400_000_000 + (h - 10) * 3_600_000_000,
                    0,
                );
                minute.push(format!(r#"{{"date":"{at}","qty":{}}}"#, d + h));
                if h != 21 {
                    hour.push(format!(r#"{{"date":"{at}","qty":{}}}"#, 10 * (d + h)));
                }
            }
        }
        let m: Vec<&str> = minute.iter().map(String::as_str).collect();
        let h: Vec<&str> = hour.iter().map(String::as_str).collect();
        env.deliver("minute", &body(&[("step_count", "count", &m)])).await;
        env.deliver("hour", &body(&[("step_count", "count", &h)])).await;
    }
}

/// «Разрезы метрики за длинную историю»
#[tokio::test]
async fn slices_of_a_metric_over_a_long_history() {
    let env = Env::new().await;
    long_history(&env, 180).await;
    let plan = env
        .store
        .explain(CATALOG_SQL, &["step_count"])
        .await
        .expect("plan");
    assert!(
        plan.iter()
            .any(|l| l.contains("USING COVERING INDEX bucket_catalog")),
        "{plan:?}"
    );
    assert!(
        !plan
            .iter()
            .any(|l| l.starts_with("SCAN bucket") && !l.contains("COVERING INDEX")),
        "{plan:?}"
    );
    let catalog = env.store.catalog("step_count").await.expect("catalog");
    assert_eq!(
        catalog,
        env.store.catalog_full_scan("step_count").await.expect("scan")
    );
    assert_eq!(
        catalog
            .iter()
            .map(|c| (c.layer.as_str(), c.objects))
            .collect::<Vec<_>>(),
        vec![("hour", 540), ("minute", 720)]
    );
}

/// «Общие часы двух слоёв»
#[tokio::test]
async fn common_hours_of_two_layers() {
    let env = Env::new().await;
    long_history(&env, 60).await;
    let plan = env
        .store
        .explain(COMMON_HOURS_SQL, &["step_count", "minute", "hour", "5"])
        .await
        .expect("plan");
    assert_eq!(
        plan.iter()
            .filter(|l| l.contains("USING COVERING INDEX bucket_catalog"))
            .count(),
        2,
        "{plan:?}"
    );
    assert!(
        !plan.iter().any(|l| l.contains("TEMP B-TREE")),
        "rows come in order, so LIMIT stops the walk: {plan:?}"
    );
    let hours = env
        .store
        .common_hours("step_count", "minute", "hour", 5)
        .await
        .expect("hours");
    assert_eq!(hours.len(), 5);
    assert!(hours.windows(2).all(|w| w[0] > w[1]), "freshest first");
    let last_day = HOUR_10_US + 59 * 86_400_000_000;
    assert_eq!(
        hours[0],
        last_day + 5 * 3_600_000_000,
        "15:00 of the last day (21:00 has no hour-layer object)"
    );
}

// ------------------------------------------------------------ Объекты перечисленных часов читаются пакетом

/// «Окно из многих часов»
#[tokio::test]
async fn a_window_of_many_hours() {
    let env = Env::new().await;
    let hours: Vec<i64> = (0..48).map(|h| HOUR_10_US + h * 3_600_000_000).collect();
    for layer in ["minute", "hour"] {
        let points: Vec<String> = hours
            .iter()
            .map(|h| {
                format!(
                    r#"{{"date":"{}","qty":3}}"#,
                    healthlog_core::time::format_hae(h + 60_000_000, 0)
                )
            })
            .collect();
        let refs: Vec<&str> = points.iter().map(String::as_str).collect();
        env.deliver(layer, &body(&[(HR, "count/min", &refs)])).await;
    }
    for n in [1usize, 12, 48] {
        let before = env.store.round_trips();
        let rows = env
            .store
            .read_hours(HR, &["minute", "hour"], &hours[..n])
            .await
            .expect("reads");
        assert_eq!(rows.len(), 2 * n);
        assert_eq!(env.store.round_trips() - before, 1, "one statement for {n} hours");
    }
    let plan = env
        .store
        .explain(
            "SELECT payload FROM bucket WHERE metric = ?1 AND layer IN (SELECT value FROM json_each(?2)) \
             AND hour_us IN (SELECT value FROM json_each(?3))",
            &[HR, r#"["minute","hour"]"#, "[1]"],
        )
        .await
        .expect("plan");
    assert!(
        plan.iter().any(|l| l.contains("PRIMARY KEY")),
        "a keyed search, not a scan: {plan:?}"
    );
}

#[tokio::test]
async fn fold_run_reports_every_status() {
    let env = Env::new().await;
    let ok = healthlog::journal::ingest_body(&env.store, &env.archive, "minute", body(&[]).as_bytes(), 1)
        .await
        .expect("ok");
    let bad = healthlog::journal::ingest_body(&env.store, &env.archive, "minute", b"{", 1)
        .await
        .expect("bad");
    let (summary, _) = fold::fold_pending(
        &env.store,
        &env.archive,
        &env.options,
        &indicatif::ProgressBar::hidden(),
    )
    .await
    .expect("folds");
    assert_eq!((summary.parsed, summary.failed), (1, 1));
    let failed = env
        .store
        .journal(Some(ParseStatus::Failed))
        .await
        .expect("journal");
    assert_eq!(failed.iter().map(|e| e.id).collect::<Vec<_>>(), vec![bad.id]);
    assert_ne!(ok.id, bad.id);
}

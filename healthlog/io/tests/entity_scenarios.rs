//! One test per Scenario of the second half of healthlog-storage-spec.txt (entities, the
//! fingerprint over every section, skipped entities, the entity log scenario), named after it,
//! asserting its WHEN/THEN against a real SQLite file and a real archive. Each test's doc
//! comment quotes the scenario's title. The in-body cases run every order of the versions.

mod common;

use common::{Env, T0, body_with, capture_logs, counters};
use healthlog::fold::{self, DeliveryResult};
use healthlog::journal;
use healthlog::store::sqlite::support;
use healthlog::store::{EntityRow, Store, StoreOptions};
use healthlog_core::entities::canonical_forms_computed;
use healthlog_core::hae::Coverage;

/// `{"data":{"workouts":[ITEMS]}}`.
fn workouts(items: &[&str]) -> String {
    format!(r#"{{"data":{{"workouts":[{}]}}}}"#, items.join(","))
}

/// A workout with id `W1`, the fields given (JSON members), dated T0.
fn w1(fields: &str) -> String {
    format!(r#"{{"id":"W1","name":"Outdoor Walk","start":"{T0}"{fields}}}"#)
}

const ROUTE3: &str = r#","route":[{"latitude":48.137154,"longitude":11.576124},{"latitude":48.1372,"longitude":11.5762},{"latitude":48.1373,"longitude":11.5763}]"#;

async fn journal_only(env: &Env, body: &str) -> i64 {
    journal::ingest_body(&env.store, &env.archive, "minute", body.as_bytes(), 1)
        .await
        .expect("journals")
        .id
}

async fn fold_order(env: &Env, ids: &[i64]) -> Vec<DeliveryResult> {
    fold::fold_in_order(&env.store, &env.archive, ids, &env.options)
        .await
        .expect("folds")
}

async fn entity(env: &Env, section: &str, id: &str) -> Option<EntityRow> {
    env.store
        .all_entities()
        .await
        .expect("entities")
        .into_iter()
        .find(|e| e.section == section && e.id == id)
}

async fn content(env: &Env) -> String {
    String::from_utf8(entity(env, "workouts", "W1").await.expect("stored").content).expect("utf-8")
}

/// Delivers `versions` of W1 in one body, in every order, each into a fresh store: every order
/// counts `differing` differing versions and stores the same bytes, which are returned.
async fn the_same_bytes_for_every_order(versions: &[&String], differing: u64) -> String {
    let mut stored = std::collections::BTreeSet::new();
    for order in permutations(versions) {
        let env = Env::new().await;
        let r = env
            .deliver(
                "minute",
                &workouts(&order.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
            )
            .await;
        assert_eq!(counters(&r).versions_differing, differing);
        stored.insert(content(&env).await);
    }
    assert_eq!(stored.len(), 1, "the same bytes for every order");
    stored.into_iter().next().expect("one")
}

/// Every permutation of `items` (the in-body cases run them all).
fn permutations<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut p in permutations(&rest) {
            p.insert(0, first.clone());
            out.push(p);
        }
    }
    out
}

/// Stores `first`, then delivers `second` (a later journal position); returns the second's result.
async fn stored_then(env: &Env, first: &str, second: &str) -> DeliveryResult {
    env.deliver("minute", &workouts(&[first])).await;
    env.deliver("minute", &workouts(&[second])).await
}

// ------------------------------------------------------------ Хранение сущностей с собственным идентификатором

/// «Тренировка хранится одной строкой с маршрутом»
#[tokio::test]
async fn a_workout_is_stored_as_one_row_with_its_route() {
    let env = Env::new().await;
    let w = w1(&format!(
        r#","duration":1800,"heartRateData":[{{"date":"{T0}","Min":80,"Avg":95.5,"Max":120,"units":"bpm"}}]{ROUTE3}"#
    ));
    env.deliver("minute", &workouts(&[&w])).await;
    let rows = env.store.all_entities().await.expect("entities");
    assert_eq!(rows.len(), 1, "one row");
    assert_eq!(
        (rows[0].section.as_str(), rows[0].id.as_str()),
        ("workouts", "W1")
    );
    assert_eq!(
        rows[0].content,
        w.as_bytes(),
        "route and series verbatim in its content"
    );
}

/// «Ряд пульса тренировки не попадает в метрику»
#[tokio::test]
async fn a_workout_heart_rate_series_does_not_go_into_the_metric() {
    let env = Env::new().await;
    let w = w1(&format!(r#","heartRateData":[{{"date":"{T0}","Avg":95.5}}]"#));
    env.deliver("minute", &workouts(&[&w])).await;
    assert_eq!(
        env.store.object_count().await.expect("count"),
        0,
        "no heart_rate objects"
    );
    assert!(entity(&env, "workouts", "W1").await.is_some());
}

/// «Записи разных родов с одинаковым id не сталкиваются»
#[tokio::test]
async fn records_of_different_kinds_with_one_id_do_not_collide() {
    let env = Env::new().await;
    let body = format!(
        r#"{{"data":{{"stateOfMind":[{{"id":"X1","start":"{T0}","valence":0.4}}],"medications":[{{"id":"X1","start":"{T0}","displayText":"d"}}]}}}}"#
    );
    env.deliver("minute", &body).await;
    assert!(entity(&env, "stateOfMind", "X1").await.is_some());
    assert!(entity(&env, "medications", "X1").await.is_some());
}

/// «Повторная присылка той же тренировки не пишет в базу»
#[tokio::test]
async fn resending_the_same_workout_does_not_write() {
    let env = Env::new().await;
    let w = w1(ROUTE3);
    let earlier = journal_only(&env, &workouts(&[&w])).await;
    let later = journal_only(&env, &workouts(&[&w])).await;
    fold_order(&env, &[later]).await;
    let before = entity(&env, "workouts", "W1").await;
    let r = &fold_order(&env, &[earlier]).await[0];
    let c = counters(r);
    assert_eq!(
        (c.entities_written, c.provenance_updates, c.entities_unchanged),
        (0, 0, 1)
    );
    assert_eq!(entity(&env, "workouts", "W1").await, before, "not a byte changed");
}

/// «Отказ посреди доставки не оставляет части сущностей»
#[tokio::test]
async fn a_failure_midway_through_a_delivery_leaves_no_part_of_its_entities() {
    let mut env = Env::new().await;
    let w2 = w1("").replace("W1", "W2");
    env.options.fail_after_objects = Some(1);
    let r = env.deliver("minute", &workouts(&[&w1(""), &w2])).await;
    assert!(matches!(r, DeliveryResult::LeftPending { .. }), "{r:?}");
    assert!(
        env.store.all_entities().await.expect("entities").is_empty(),
        "no entity written"
    );
    env.options.fail_after_objects = None;
    assert_eq!(counters(&env.fold_result(r.id()).await).entities_written, 2);
}

/// «Каноническая форма сущности считается один раз»
///
/// A second connection holds the write lock; the fold's `BEGIN IMMEDIATE` finds the database
/// busy and retries until the holder lets go. The canonical forms counted on this thread are
/// one per arriving version, retries included.
#[tokio::test]
async fn the_canonical_form_of_an_entity_is_computed_once() {
    let env = Env::with_options(StoreOptions { busy_timeout_ms: 30 }).await;
    let other = Store::open_migrating(env.store.path(), StoreOptions::default())
        .await
        .expect("second handle")
        .0;
    let w2 = w1(ROUTE3).replace("W1", "W2");
    let id = journal_only(&env, &workouts(&[&w1(ROUTE3), &w2, &w1(ROUTE3)])).await;
    let holder = other.begin_fold(None).await.expect("holds the write lock");
    let release = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(70)).await;
        holder.rollback().await.expect("releases");
    });
    let before = canonical_forms_computed();
    let retries_before = env.store.begin_retries();
    let r = env.fold_result(id).await;
    release.await.expect("released");
    assert_eq!(r.status(), "parsed", "{r:?}");
    assert!(
        env.store.begin_retries() > retries_before,
        "the fold did retry while busy"
    );
    assert_eq!(
        canonical_forms_computed() - before,
        3,
        "once per arriving version"
    );
    assert_eq!(counters(&r).entities_written, 2);
}

// ------------------------------------------------------------ Замена версии сущности не теряет содержания

/// «Доехавший маршрут замещает тренировку без маршрута»
#[tokio::test]
async fn an_arrived_route_replaces_the_workout_without_one() {
    let env = Env::new().await;
    let with_route = w1(&format!(r#","kcal":{{"qty":210,"units":"kcal"}}{ROUTE3}"#));
    let r = stored_then(&env, &w1(r#","kcal":{"qty":200,"units":"kcal"}"#), &with_route).await;
    assert_eq!(counters(&r).entities_written, 1);
    assert_eq!(content(&env).await, with_route);
}

/// «Досчитанные значения при том же наборе полей побеждают»
#[tokio::test]
async fn recounted_values_with_the_same_fields_win() {
    let env = Env::new().await;
    let recounted =
        w1(r#","totalEnergy":{"qty":310,"units":"kcal"},"basalEnergy":{"qty":60,"units":"kcal"}"#);
    stored_then(
        &env,
        &w1(r#","totalEnergy":{"qty":250,"units":"kcal"},"basalEnergy":{"qty":50,"units":"kcal"}"#),
        &recounted,
    )
    .await;
    assert_eq!(content(&env).await, recounted);
}

/// «Версия из более ранней доставки не откатывает витрину»
#[tokio::test]
async fn a_version_from_an_earlier_delivery_does_not_roll_the_vitrine_back() {
    let early = w1(r#","totalEnergy":{"qty":250,"units":"kcal"}"#);
    let late = w1(r#","totalEnergy":{"qty":310,"units":"kcal"}"#);
    let mut seen = Vec::new();
    for reversed in [true, false] {
        let env = Env::new().await;
        let a = journal_only(&env, &workouts(&[&early])).await;
        let b = journal_only(&env, &workouts(&[&late])).await;
        fold_order(&env, &if reversed { [b, a] } else { [a, b] }).await;
        assert_eq!(content(&env).await, late, "reversed={reversed}");
        seen.push(env.fingerprint().await);
    }
    assert_eq!(seen[0], seen[1], "the reverse fold order gives the same outcome");
}

/// Asserts the stored version stayed and the retention was counted.
async fn assert_retained(env: &Env, r: &DeliveryResult, stored: &str) {
    assert_eq!(content(env).await, stored, "the stored version stays");
    assert_eq!(counters(r).versions_retained, 1, "counted");
    assert_eq!(counters(r).entities_written, 0);
}

/// «Обеднённая версия сохранённую не затирает»
#[tokio::test]
async fn a_poorer_version_does_not_overwrite_the_stored_one() {
    let env = Env::new().await;
    let stored = w1(&format!(r#","kcal":{{"qty":200,"units":"kcal"}}{ROUTE3}"#));
    let poorer = w1(r#","kcal":{"qty":215,"units":"kcal"}"#);
    env.deliver("minute", &workouts(&[&stored])).await;
    let (logs, guard) = capture_logs();
    let r = env.deliver("minute", &workouts(&[&poorer])).await;
    drop(guard);
    assert_retained(&env, &r, &stored).await;
    let warn = logs
        .lines_at("WARN")
        .into_iter()
        .find(|l| l.contains("the stored version stays"))
        .expect("a WARN");
    assert!(
        warn.contains("entity_id=\"W1\"") && warn.contains("section=\"workouts\""),
        "{warn}"
    );
}

/// «Усечённый маршрут сохранённый не затирает»
#[tokio::test]
async fn a_truncated_route_does_not_overwrite_the_stored_one() {
    let env = Env::new().await;
    let stored = w1(ROUTE3);
    let truncated = w1(r#","route":[{"latitude":48.137154,"longitude":11.576124}]"#);
    let r = stored_then(&env, &stored, &truncated).await;
    assert_retained(&env, &r, &stored).await;
}

/// «Маршрут из пустых элементов сохранённый не затирает»
#[tokio::test]
async fn a_route_of_empty_elements_does_not_overwrite_the_stored_one() {
    let env = Env::new().await;
    let stored = w1(ROUTE3);
    let hollow = w1(r#","route":[null,{},null]"#);
    let r = stored_then(&env, &stored, &hollow).await;
    assert_retained(&env, &r, &stored).await;
    assert!(
        content(&env).await.contains("48.137154"),
        "the route's coordinates stay"
    );
}

/// «Скелет из скаляров сохранённую тренировку не затирает»
#[tokio::test]
async fn a_skeleton_of_scalars_does_not_overwrite_the_stored_workout() {
    let env = Env::new().await;
    let stored = w1(&format!(r#","kcal":{{"qty":200,"units":"kcal"}}{ROUTE3}"#));
    let skeleton = w1(r#","kcal":1,"route":[null,null,null]"#);
    let r = stored_then(&env, &stored, &skeleton).await;
    assert_retained(&env, &r, &stored).await;
    // Objects made numbers alone (no array to shorten) are caught by the shape condition.
    let env = Env::new().await;
    let stored = w1(r#","kcal":{"qty":200,"units":"kcal"}"#);
    let r = stored_then(&env, &stored, &w1(r#","kcal":1"#)).await;
    assert_retained(&env, &r, &stored).await;
}

/// «Ключ с пустым значением не исчезает по жребию»
#[tokio::test]
async fn a_key_with_an_empty_value_does_not_vanish_by_lot() {
    let env = Env::new().await;
    let stored = w1(r#","kcal":{"qty":200,"units":"kcal"},"metadata":{}"#);
    let without = w1(r#","kcal":{"qty":200,"units":"kcal"}"#);
    let r = stored_then(&env, &stored, &without).await;
    assert_retained(&env, &r, &stored).await;
}

/// «Пустой ключ не запирает законный досчёт»
#[tokio::test]
async fn an_empty_key_does_not_lock_out_a_legitimate_recount() {
    let env = Env::new().await;
    let stored = w1(r#","kcal":{"qty":200,"units":"kcal"},"metadata":{}"#);
    let recount = w1(&format!(r#","kcal":{{"qty":205,"units":"kcal"}}{ROUTE3}"#));
    let r = stored_then(&env, &stored, &recount).await;
    assert_eq!(
        content(&env).await,
        recount,
        "the arriving version replaces the stored one"
    );
    assert_eq!(counters(&r).versions_retained, 0);
}

/// «Две версии одной сущности в одном теле»
#[tokio::test]
async fn two_versions_of_one_entity_in_one_body() {
    let a = w1(r#","kcal":{"qty":200,"units":"kcal"}"#);
    let b = w1(r#","kcal":{"qty":230,"units":"kcal"}"#);
    // Outcome and counter do not depend on the order.
    the_same_bytes_for_every_order(&[&a, &b], 1).await;
}

/// «Три версии одной сущности в одном теле»
#[tokio::test]
async fn three_versions_of_one_entity_in_one_body() {
    let covered = w1(r#","kcal":{"qty":200,"units":"kcal"}"#);
    let covering = w1(&format!(r#","kcal":{{"qty":200,"units":"kcal"}}{ROUTE3}"#));
    let incomparable = w1(r#","steps":[{"qty":12}]"#);
    let mut winners = std::collections::BTreeSet::new();
    for order in permutations(&[&covered, &covering, &incomparable]) {
        let env = Env::new().await;
        env.deliver(
            "minute",
            &workouts(&order.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
        )
        .await;
        winners.insert(content(&env).await);
    }
    assert_eq!(
        winners.len(),
        1,
        "the same winner for all six orders: {winners:?}"
    );
    assert_ne!(
        winners.first(),
        Some(&covered),
        "the strictly covered version never wins"
    );
}

/// «Две версии разного содержания при равной длине массивов»
#[tokio::test]
async fn two_versions_of_different_content_with_equal_array_lengths() {
    let env = Env::new().await;
    let a = w1(r#","route":[{"latitude":1.5},{"latitude":2.5}]"#);
    let b = w1(r#","route":[{"latitude":1.5},{"latitude":2.75}]"#);
    let r = env.deliver("minute", &workouts(&[&a, &b])).await;
    assert_eq!(counters(&r).versions_differing, 1);
    // Every order counts the fact once and stores the same one of the two, byte for byte.
    let kept = the_same_bytes_for_every_order(&[&a, &b], 1).await;
    assert!(
        kept == a || kept == b,
        "one of the two versions, as it arrived: {kept}"
    );
}

/// «Разные байты при совпавшей канонической форме событием не считаются»
#[tokio::test]
async fn different_bytes_with_the_same_canonical_form_are_not_an_event() {
    let a = format!(r#"{{"id":"W1","start":"{T0}","kcal":200,"route":[{{"latitude":1.5}}]}}"#);
    let b = format!(r#"{{ "route":[{{"latitude":1.50}}], "kcal":2e2, "start":"{T0}", "id":"W1" }}"#);
    the_same_bytes_for_every_order(&[&a, &b], 0).await;
}

/// «Повторная присылка обновляет провенанс»
#[tokio::test]
async fn a_resend_raises_the_provenance() {
    let env = Env::new().await;
    let w = w1(ROUTE3);
    let first = env.deliver("minute", &workouts(&[&w])).await;
    let before = entity(&env, "workouts", "W1").await.expect("stored");
    let again = env.deliver("minute", &workouts(&[&w])).await;
    let after = entity(&env, "workouts", "W1").await.expect("stored");
    assert_eq!(
        counters(&again).entities_written,
        0,
        "the content is not rewritten"
    );
    assert_eq!(counters(&again).provenance_updates, 1);
    assert_eq!(
        (after.content, after.changed_at_us),
        (before.content, before.changed_at_us)
    );
    assert_eq!((before.delivery_id, after.delivery_id), (first.id(), again.id()));
}

/// «Отложенная доставка не возвращает витрину к прежнему содержимому»
#[tokio::test]
async fn a_delayed_delivery_does_not_return_the_vitrine_to_earlier_content() {
    let a = w1(r#","totalEnergy":{"qty":250,"units":"kcal"}"#);
    let b = w1(r#","totalEnergy":{"qty":310,"units":"kcal"}"#);
    let mut seen = Vec::new();
    for b_last in [false, true] {
        let env = Env::new().await;
        let ids = [
            journal_only(&env, &workouts(&[&a])).await,
            journal_only(&env, &workouts(&[&b])).await,
            journal_only(&env, &workouts(&[&a])).await,
        ];
        let order = if b_last { [ids[0], ids[2], ids[1]] } else { ids };
        fold_order(&env, &order).await;
        seen.push((content(&env).await, env.fingerprint().await));
    }
    assert_eq!(
        seen[0], seen[1],
        "the same content and fingerprint as the fold in journal order"
    );
    assert_eq!(seen[0].0, a);
}

/// «Несравнимые наборы полей не объединяются»
#[tokio::test]
async fn incomparable_field_sets_are_not_merged() {
    let env = Env::new().await;
    let stored = w1(r#","kcal":{"qty":200,"units":"kcal"}"#);
    let other = w1(r#","steps":{"qty":5000,"units":"count"}"#);
    let r = stored_then(&env, &stored, &other).await;
    assert_retained(&env, &r, &stored).await;
    assert!(!content(&env).await.contains("steps"), "not merged");
}

/// «Повторная свёртка того же журнала состояния не меняет»
#[tokio::test]
async fn refolding_the_same_journal_changes_no_state() {
    let env = Env::new().await;
    for w in [w1(""), w1(ROUTE3), w1(r#","route":[null]"#)] {
        env.deliver("minute", &workouts(&[&w])).await;
    }
    let before = env.store.all_entities().await.expect("entities");
    env.store.mark_all_pending().await.expect("requeues");
    fold::fold_pending(
        &env.store,
        &env.archive,
        &env.options,
        &indicatif::ProgressBar::hidden(),
    )
    .await
    .expect("refolds");
    assert_eq!(env.store.all_entities().await.expect("entities"), before);
}

// ------------------------------------------------------------ Отпечаток витрины покрывает все её сущности

/// «Расхождение тренировок видно в отпечатке»
#[tokio::test]
async fn a_difference_in_workouts_shows_in_the_fingerprint() {
    let points = format!(r#"{{"name":"step_count","units":"count","data":[{{"date":"{T0}","qty":4}}]}}"#);
    let mut fps = Vec::new();
    for kcal in [200, 201] {
        let env = Env::new().await;
        let w = w1(&format!(r#","kcal":{kcal}"#));
        env.deliver(
            "minute",
            &format!(r#"{{"data":{{"metrics":[{points}],"workouts":[{w}]}}}}"#),
        )
        .await;
        fps.push((
            env.store.all_objects().await.expect("objects"),
            env.fingerprint().await,
        ));
    }
    assert_eq!(fps[0].0, fps[1].0, "the same hourly objects");
    assert_ne!(fps[0].1, fps[1].1, "the fingerprints differ");
}

/// «Отпечаток одинаков при одинаковом содержимом»
#[tokio::test]
async fn the_fingerprint_is_the_same_for_the_same_content() {
    let env = Env::new().await;
    let records = format!(r#","stateOfMind":[{{"id":"S1","start":"{T0}","valence":0.2}}]"#);
    for w in [w1(""), w1(ROUTE3)] {
        env.deliver(
            "minute",
            &body_with(
                &[("step_count", "count", &[&format!(r#"{{"date":"{T0}","qty":4}}"#)])],
                &format!(",\"workouts\":[{w}]{records}"),
            ),
        )
        .await;
    }
    let rebuilt = env.sibling("rebuilt.db").await;
    fold::rebuild_into(
        &env.store,
        &rebuilt,
        &env.archive,
        &env.options,
        None,
        &indicatif::ProgressBar::hidden(),
    )
    .await
    .expect("rebuilds");
    let (fp, rows) = rebuilt.fingerprint().await.expect("fingerprint");
    assert_eq!(fp, env.fingerprint().await);
    assert_eq!(rows, 3, "an object, a workout and a record");
}

/// «Запись во время снятия отпечатка не смешивает разделы»
///
/// Each delivery writes an hourly object and a workout together. Fingerprints taken while a
/// second store handle folds them must each be the fingerprint of one committed state (one of
/// those a reference store passes through), never a mix of "objects after" and "workouts before".
#[tokio::test]
async fn a_write_during_the_fingerprint_does_not_mix_sections() {
    let bodies: Vec<String> = (0..12)
        .map(|i| {
            let w = w1(&format!(r#","kcal":{i}"#));
            format!(
                r#"{{"data":{{"metrics":[{{"name":"step_count","units":"count","data":[{{"date":"{T0}","qty":{}}}]}}],"workouts":[{w}]}}}}"#,
                i + 1
            )
        })
        .collect();
    let reference = Env::new().await;
    let mut states = std::collections::BTreeSet::from([reference.fingerprint().await]);
    for b in &bodies {
        reference.deliver("minute", b).await;
        states.insert(reference.fingerprint().await);
    }
    let env = Env::new().await;
    for b in &bodies {
        journal_only(&env, b).await;
    }
    let writer = Store::open_migrating(env.store.path(), StoreOptions::default())
        .await
        .expect("second handle")
        .0;
    let (archive, options) = (env.archive.clone(), env.options.clone());
    let folding = tokio::spawn(async move {
        fold::fold_pending(&writer, &archive, &options, &indicatif::ProgressBar::hidden())
            .await
            .expect("folds")
    });
    let mut taken = 0;
    while !folding.is_finished() || taken == 0 {
        let fp = env.fingerprint().await;
        assert!(states.contains(&fp), "a fingerprint of no committed state: {fp}");
        taken += 1;
        tokio::task::yield_now().await;
    }
    folding.await.expect("folded");
    assert!(states.contains(&env.fingerprint().await));
    assert!(taken > 1, "fingerprints were taken while the writer folded");
}

// ------------------------------------------------------------ Пропущенные сущности видны в учётной записи доставки

async fn skipped_of(env: &Env, id: i64) -> Option<u64> {
    env.store
        .deliveries(None)
        .await
        .expect("rows")
        .into_iter()
        .find(|r| r.id == id)
        .expect("row")
        .skipped_entities
}

/// «Пропущенная сущность видна в учёте доставки»
#[tokio::test]
async fn a_skipped_entity_shows_in_the_delivery_record() {
    let env = Env::new().await;
    // HAE's export version 1 sends workouts without an id: it cannot be keyed.
    let v1 = format!(r#"{{"name":"Walk","start":"{T0}","route":[{{"lat":48.1,"lon":11.5}}]}}"#);
    let w2 = w1("").replace("W1", "W2");
    let (logs, guard) = capture_logs();
    let r = env.deliver("minute", &workouts(&[&w1(""), &v1, &w2])).await;
    drop(guard);
    assert_eq!(skipped_of(&env, r.id()).await, Some(1));
    assert_eq!(r.status(), "parsed", "skipping does not change the status");
    assert!(entity(&env, "workouts", "W1").await.is_some() && entity(&env, "workouts", "W2").await.is_some());
    let warn = logs
        .lines_at("WARN")
        .into_iter()
        .find(|l| l.contains("entity skipped"))
        .expect("a WARN");
    assert!(warn.contains("index=1") && !warn.contains("48.1"), "{warn}");
}

/// «Пересвёртка без пропусков обнуляет счётчик»
#[tokio::test]
async fn a_refold_without_skips_resets_the_counter() {
    let mut env = Env::new().await;
    let long_id = w1("").replace("W1", "W-with-a-long-id");
    env.options.coverage = Coverage::current().with_entity_id_bytes_max(4); // an older, stricter parser
    let r = env.deliver("minute", &workouts(&[&long_id])).await;
    assert_eq!(skipped_of(&env, r.id()).await, Some(1));
    env.options.coverage = Coverage::current();
    env.store.mark_all_pending().await.expect("requeues");
    env.fold_result(r.id()).await;
    assert_eq!(skipped_of(&env, r.id()).await, Some(0), "replaced by zero");
}

/// The count is written on the failure path too when the parse finished counting (spec: "в
/// обоих исходах свёртки"): a fold that fails after the parse — here on a stored object that
/// no longer decodes — records its measured skips; a parse that failed records none.
#[tokio::test]
async fn a_fold_failing_after_the_parse_records_its_measured_skips() {
    let env = Env::new().await;
    let point = format!(r#"{{"name":"step_count","units":"count","data":[{{"date":"{T0}","qty":4}}]}}"#);
    env.deliver("minute", &format!(r#"{{"data":{{"metrics":[{point}]}}}}"#))
        .await;
    support::execute(env.store.path(), "UPDATE bucket SET payload = x'00'", &[])
        .await
        .expect("corrupts the stored object");
    let v1 = format!(r#"{{"name":"Walk","start":"{T0}"}}"#);
    let r = env
        .deliver(
            "minute",
            &format!(r#"{{"data":{{"metrics":[{point}],"workouts":[{v1}]}}}}"#),
        )
        .await;
    assert!(matches!(r, DeliveryResult::Failed { .. }), "{r:?}");
    assert_eq!(skipped_of(&env, r.id()).await, Some(1), "measured, so written");
}

/// «Доставка, свёрнутая до появления счётчика, отличима от нулевой»
#[tokio::test]
async fn a_delivery_folded_before_the_counter_existed_differs_from_zero() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("old.db");
    support::create_schema_1_store(&path).await.expect("schema 1");
    support::execute(
        &path,
        "INSERT INTO delivery (received_at_us, layer, body_sha256, body_bytes, parse_status, points) \
         VALUES (1, 'minute', 'ab', 10, 'parsed', 3)",
        &[],
    )
    .await
    .expect("a row folded by the points half");
    let (store, report) = Store::open_migrating(&path, StoreOptions::default())
        .await
        .expect("migrates");
    assert_eq!((report.before, report.after), (1, 2));
    let rows = store.deliveries(None).await.expect("rows");
    assert_eq!(rows[0].skipped_entities, None, "absent, not zero");
    // A delivery folded now, with nothing skipped, records a measured zero.
    let env = Env::new().await;
    let r = env.deliver("minute", &workouts(&[&w1("")])).await;
    assert_eq!(skipped_of(&env, r.id()).await, Some(0));
    // And a body the parse failed on measured nothing either.
    let bad = env.deliver("minute", "{\"data\":").await;
    assert_eq!(skipped_of(&env, bad.id()).await, None);
}

// ------------------------------------------------------------ Значения точек не попадают в логи (entity path)

/// «Удержанная обеднённая версия логируется координатами»
#[tokio::test]
async fn a_retained_poorer_version_is_logged_by_coordinates() {
    let env = Env::new().await;
    let stored = w1(&format!(
        r#","labels":["Content"],"kcal":{{"qty":200,"units":"kcal"}}{ROUTE3}"#
    ));
    env.deliver("minute", &workouts(&[&stored])).await;
    let (logs, guard) = capture_logs();
    env.deliver(
        "minute",
        &workouts(&[&w1(r#","labels":["Content"],"kcal":{"qty":201,"units":"kcal"}"#)]),
    )
    .await;
    drop(guard);
    let warn = logs
        .lines_at("WARN")
        .into_iter()
        .find(|l| l.contains("the stored version stays"))
        .expect("a WARN");
    assert!(
        warn.contains("W1") && warn.contains("workouts"),
        "id and section: {warn}"
    );
    for secret in [
        "48.137154",
        "11.576124",
        "route",
        "latitude",
        "Content",
        "201",
        "Outdoor Walk",
    ] {
        assert!(!logs.text().contains(secret), "{secret} leaked: {}", logs.text());
    }
}

/// «Разбор доставки логируется без значений», on the entity path: the INFO record carries the
/// entity counters and the delivery id, not a byte of any entity.
#[tokio::test]
async fn parsing_a_delivery_with_entities_is_logged_without_values() {
    let env = Env::new().await;
    let (logs, guard) = capture_logs();
    let body = format!(
        r#"{{"data":{{"workouts":[{}],"stateOfMind":[{{"id":"S1","start":"{T0}","labels":["Anxious"],"associations":["Family"],"valence":-0.61}}]}}}}"#,
        w1(ROUTE3)
    );
    env.deliver("minute", &body).await;
    drop(guard);
    let line = logs
        .lines_at("INFO")
        .into_iter()
        .find(|l| l.contains("delivery folded"))
        .expect("INFO");
    assert!(
        line.contains("entities=2") && line.contains("entities_written=2") && line.contains("delivery_id=1"),
        "{line}"
    );
    for secret in ["Anxious", "Family", "-0.61", "48.137154", "Outdoor Walk"] {
        assert!(!logs.text().contains(secret), "{secret} leaked");
    }
}

// ------------------------------------------------------------ The spec's measured cases

/// Three contents growing as HAE re-counts a workout (spec: "одна тренировка приехала 26 раз в
/// трёх различных содержимых"): stepCadence and stepCount arrive with a changed activeEnergy
/// series, then totalEnergy and basalEnergy are recounted with the same fields.
fn three_contents() -> [String; 3] {
    let energy = |q: f64| {
        format!(
            r#","activeEnergy":[{{"date":"{T0}","qty":{q},"units":"kcal"}},{{"date":"{T0}","qty":{q},"units":"kcal"}}]"#
        )
    };
    [
        w1(&format!(
            r#","totalEnergy":{{"qty":250,"units":"kcal"}},"basalEnergy":{{"qty":50,"units":"kcal"}}{}"#,
            energy(1.5)
        )),
        w1(&format!(
            r#","totalEnergy":{{"qty":250,"units":"kcal"}},"basalEnergy":{{"qty":50,"units":"kcal"}},"stepCadence":{{"qty":110,"units":"spm"}},"stepCount":[{{"date":"{T0}","qty":90}}]{}"#,
            energy(1.75)
        )),
        w1(&format!(
            r#","totalEnergy":{{"qty":312,"units":"kcal"}},"basalEnergy":{{"qty":61,"units":"kcal"}},"stepCadence":{{"qty":110,"units":"spm"}},"stepCount":[{{"date":"{T0}","qty":90}}]{}"#,
            energy(1.75)
        )),
    ]
}

async fn resend(copies: &[usize]) -> (Env, healthlog_core::fold::Counters) {
    let contents = three_contents();
    let env = Env::new().await;
    let mut total = healthlog_core::fold::Counters::default();
    for &c in copies {
        let r = env.deliver("minute", &workouts(&[&contents[c]])).await;
        let k = counters(&r);
        total.entities_written += k.entities_written;
        total.provenance_updates += k.provenance_updates;
        total.versions_retained += k.versions_retained;
    }
    assert_eq!(content(&env).await, contents[2], "ends at the last content");
    (env, total)
}

/// One workout re-sent 26 times in 3 contents ends at the last content with 3 content writes.
#[tokio::test]
async fn one_workout_resent_26_times_in_3_contents_writes_3_times() {
    // 4 copies of the first content, 8 of the second, 14 of the third.
    let copies: Vec<usize> = (0..26)
        .map(|i| {
            if i < 4 {
                0
            } else if i < 12 {
                1
            } else {
                2
            }
        })
        .collect();
    let (_, total) = resend(&copies).await;
    assert_eq!(total.entities_written, 3);
}

/// 44 copies in 3 contents give 3 content writes and 41 provenance-only updates.
#[tokio::test]
async fn forty_four_copies_in_3_contents_give_3_writes_and_41_provenance_updates() {
    let copies: Vec<usize> = (0..44)
        .map(|i| {
            if i < 10 {
                0
            } else if i < 25 {
                1
            } else {
                2
            }
        })
        .collect();
    let (_, total) = resend(&copies).await;
    assert_eq!(
        (
            total.entities_written,
            total.provenance_updates,
            total.versions_retained
        ),
        (3, 41, 0)
    );
}

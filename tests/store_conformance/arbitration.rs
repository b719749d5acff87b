//! `point_desired` and its control events on both stores (issue 21 item 2): a claim's event and
//! the row it produces commit together, fenced on the epoch, and read back as written.

use sentinel_core::arbitration::{Band, Claim, Desired, DesiredRow};
use sentinel_core::registry::{CommandValue, PointIdx};
use sentinel_core::{ControlDetail, ControlEvent, Micros};
use sentinel_ports::{Lease, Store, StoreError};

use super::{Backend, at};

fn claim_event(point: &str, epoch: u32, at: Micros, holder: &str, value: CommandValue) -> ControlEvent {
    ControlEvent {
        occurred_at: at,
        point: Some(PointIdx(0)),
        point_id: point.into(),
        principal: holder.into(),
        core_epoch: epoch,
        registry_version: 1,
        detail: ControlDetail::ClaimSet {
            command_id: "c-1".into(),
            holder: holder.into(),
            band: Band::Operator,
            priority: 2,
            value,
            until: Some(at.add_ms(3_600_000)),
            provenance: None,
        },
    }
}

fn issued(point: &str, epoch: u32, at: Micros, value: &CommandValue) -> ControlEvent {
    ControlEvent {
        occurred_at: at,
        point: Some(PointIdx(0)),
        point_id: point.into(),
        principal: "ana".into(),
        core_epoch: epoch,
        registry_version: 1,
        detail: ControlDetail::CommandIssued {
            command_id: "c-1".into(),
            value: value.to_json(),
            first_issued_at: None,
        },
    }
}

fn row(point: &str, value: Option<CommandValue>, winner: Option<Claim>, since: Micros) -> DesiredRow {
    DesiredRow {
        point_id: point.into(),
        desired: Desired { value, winner, since },
        claims: Vec::new(),
    }
}

/// Each write's events get their seqs and every row its epoch and the write's last seq; a
/// later write replaces a point's row; a fenced write writes neither its events nor its rows;
/// a write naming one point twice, or stamped with another epoch, is refused whole; every kind
/// of value and a released winner read back as written.
pub async fn point_desired_is_written_with_its_claim_fenced_and_read_back<B: Backend>(b: &B) {
    let t = at("2026-12-01T10:00:00Z");
    let old = b.store().acquire().await.expect("acquire");
    let epoch = old.epoch();
    assert!(b.store().load_point_desired().await.expect("load").is_empty());

    let ana = Claim {
        holder: "ana".into(),
        band: Band::Operator,
        priority: 2,
        value: CommandValue::Number(21.5),
        since: t,
        until: Some(t.add_ms(3_600_000)),
    };
    let seqs = b
        .store()
        .write_arbitration(
            epoch,
            vec![
                claim_event(
                    "ahu1.supply_temp_setpoint",
                    epoch,
                    t,
                    "ana",
                    CommandValue::Number(21.5),
                ),
                issued("ahu1.supply_temp_setpoint", epoch, t, &CommandValue::Number(21.5)),
            ],
            vec![row(
                "ahu1.supply_temp_setpoint",
                Some(CommandValue::Number(21.5)),
                Some(ana.clone()),
                t,
            )],
        )
        .await
        .expect("write");
    assert_eq!(seqs.len(), 2);
    let mode = Claim {
        holder: "rule:night".into(),
        band: Band::Automation,
        priority: 0,
        value: CommandValue::Member("heat".into()),
        since: t.add_ms(1),
        until: None,
    };
    let second = b
        .store()
        .write_arbitration(
            epoch,
            vec![claim_event(
                "ahu1.mode",
                epoch,
                t.add_ms(1),
                "rule:night",
                CommandValue::Member("heat".into()),
            )],
            vec![
                row(
                    "ahu1.mode",
                    Some(CommandValue::Member("heat".into())),
                    Some(mode.clone()),
                    t.add_ms(1),
                ),
                row(
                    "ahu1.occupied",
                    Some(CommandValue::Bool(false)),
                    None,
                    t.add_ms(1),
                ),
            ],
        )
        .await
        .expect("write");

    let stored = b.store().load_point_desired().await.expect("load");
    let summary: Vec<(&str, u32, i64)> = stored
        .iter()
        .map(|s| (&*s.row.point_id, s.core_epoch, s.control_seq))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("ahu1.mode", epoch, second[0]),
            ("ahu1.occupied", epoch, second[0]),
            ("ahu1.supply_temp_setpoint", epoch, seqs[1]),
        ],
        "by point id, each with its write's last event"
    );
    assert_eq!(stored[0].row.desired.winner, Some(mode));
    assert_eq!(stored[1].row.desired.value, Some(CommandValue::Bool(false)));
    assert_eq!(stored[1].row.desired.winner, None, "released: no winner");
    assert_eq!(stored[2].row.desired.winner, Some(ana));
    assert_eq!(stored[2].row.desired.since, t);

    // A release that changes the winner replaces the row.
    let released = b
        .store()
        .write_arbitration(
            epoch,
            vec![claim_event(
                "ahu1.supply_temp_setpoint",
                epoch,
                t.add_ms(2),
                "ana",
                CommandValue::Number(21.5),
            )],
            vec![row(
                "ahu1.supply_temp_setpoint",
                Some(CommandValue::Number(18.0)),
                None,
                t.add_ms(2),
            )],
        )
        .await
        .expect("write");
    let stored = b.store().load_point_desired().await.expect("load");
    assert_eq!(stored.len(), 3, "one row per point");
    assert_eq!(
        (
            stored[2].row.desired.value.clone(),
            stored[2].row.desired.winner.clone(),
            stored[2].control_seq
        ),
        (Some(CommandValue::Number(18.0)), None, released[0])
    );

    // Refused whole: one point twice, or an event stamped with another epoch.
    let events_before = b.store().load_control_events(0, 100).await.expect("load").len();
    assert!(
        b.store()
            .write_arbitration(
                epoch,
                vec![claim_event(
                    "ahu1.mode",
                    epoch,
                    t,
                    "x",
                    CommandValue::Member("off".into())
                )],
                vec![
                    row("ahu1.mode", Some(CommandValue::Member("off".into())), None, t),
                    row("ahu1.mode", Some(CommandValue::Member("cool".into())), None, t),
                ],
            )
            .await
            .is_err()
    );
    assert!(
        b.store()
            .write_arbitration(
                epoch,
                vec![claim_event(
                    "ahu1.mode",
                    epoch + 1,
                    t,
                    "x",
                    CommandValue::Member("off".into())
                )],
                vec![row(
                    "ahu1.mode",
                    Some(CommandValue::Member("off".into())),
                    None,
                    t
                )],
            )
            .await
            .is_err()
    );

    // Fenced: a deposed epoch writes neither the event nor the row.
    b.release(old).await;
    let new = b.store().acquire().await.expect("acquire");
    match b
        .store()
        .write_arbitration(
            epoch,
            vec![claim_event(
                "ahu1.mode",
                epoch,
                t.add_ms(3),
                "x",
                CommandValue::Member("off".into()),
            )],
            vec![row(
                "ahu1.mode",
                Some(CommandValue::Member("off".into())),
                None,
                t.add_ms(3),
            )],
        )
        .await
    {
        Err(StoreError::Fenced {
            epoch: fenced,
            current,
            ..
        }) => assert_eq!((fenced, current), (epoch, new.epoch())),
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert_eq!(
        b.store().load_control_events(0, 100).await.expect("load").len(),
        events_before,
        "no event from a refused or fenced write"
    );
    let stored = b.store().load_point_desired().await.expect("load");
    assert_eq!(
        stored[0].row.desired.value,
        Some(CommandValue::Member("heat".into())),
        "no row from a refused or fenced write"
    );

    // The new epoch writes, and its rows say so.
    b.store()
        .write_arbitration(
            new.epoch(),
            vec![],
            vec![row(
                "ahu1.mode",
                Some(CommandValue::Member("cool".into())),
                None,
                t.add_ms(4),
            )],
        )
        .await
        .expect("a write of rows alone");
    let stored = b.store().load_point_desired().await.expect("load");
    assert_eq!(
        (stored[0].core_epoch, stored[0].control_seq),
        (new.epoch(), released[0]),
        "rows alone record the newest event"
    );
}

fn command(point: &str, epoch: u32, at: Micros, id: &str, value: &CommandValue) -> ControlEvent {
    ControlEvent {
        detail: ControlDetail::CommandIssued {
            command_id: id.into(),
            value: value.to_json(),
            first_issued_at: None,
        },
        ..issued(point, epoch, at, value)
    }
}

fn answer(point: &str, epoch: u32, at: Micros, id: &str) -> ControlEvent {
    ControlEvent {
        principal: "driver-plant-a".into(),
        detail: ControlDetail::CommandResult {
            command_id: id.into(),
            outcome: sentinel_core::wire::CommandOutcome::Applied,
            reason: None,
        },
        ..issued(point, epoch, at, &CommandValue::Bool(true))
    }
}

/// The command ids `load_unanswered_commands` returns, with their points.
async fn unanswered<B: Backend>(b: &B) -> Vec<(String, String)> {
    b.store()
        .load_unanswered_commands()
        .await
        .expect("load")
        .into_iter()
        .map(|e| {
            assert_eq!(e.kind, "command_issued");
            let payload: serde_json::Value = serde_json::from_str(&e.payload).expect("JSON");
            (
                e.point_id.expect("a point"),
                payload["command_id"].as_str().expect("an id").to_owned(),
            )
        })
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(p, c)| ((*p).to_owned(), (*c).to_owned()))
        .collect()
}

/// The outbox at restart (issue 21 item 3): per `point_desired` row, its point's newest
/// `command_issued`, unless a `command_result` for that command follows it. An answer to an
/// older command, or naming another, does not answer the newest; a command of a point without a
/// row is not the outbox's.
pub async fn unanswered_commands_are_each_points_newest_without_a_result<B: Backend>(b: &B) {
    let t = at("2026-12-01T10:00:00Z");
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    assert!(unanswered(b).await.is_empty());
    let on = CommandValue::Member("heat".into());
    let write = |point: &'static str, id: &'static str, ms: i64| {
        let value = on.clone();
        async move {
            b.store()
                .write_arbitration(
                    epoch,
                    vec![
                        claim_event(point, epoch, t.add_ms(ms), "ana", value.clone()),
                        command(point, epoch, t.add_ms(ms), id, &value),
                    ],
                    vec![row(point, Some(value), None, t.add_ms(ms))],
                )
                .await
                .expect("arbitration write");
        }
    };
    let record = |events: Vec<ControlEvent>| async move {
        b.store()
            .write_control_events(epoch, events)
            .await
            .expect("control write");
    };
    write("ahu1.mode", "c-1", 0).await;
    write("ahu2.mode", "c-2", 1).await;
    // A command with no point_desired row is not the outbox's.
    record(vec![command("ahu3.mode", epoch, t.add_ms(2), "c-x", &on)]).await;
    assert_eq!(
        unanswered(b).await,
        pairs(&[("ahu1.mode", "c-1"), ("ahu2.mode", "c-2")])
    );

    record(vec![answer("ahu1.mode", epoch, t.add_ms(3), "c-1")]).await;
    assert_eq!(unanswered(b).await, pairs(&[("ahu2.mode", "c-2")]));

    // A newer command on ahu1: the earlier answer does not answer it.
    write("ahu1.mode", "c-3", 4).await;
    // An answer naming another command, or on another point, answers nothing here.
    record(vec![
        answer("ahu2.mode", epoch, t.add_ms(5), "c-9"),
        answer("ahu3.mode", epoch, t.add_ms(5), "c-2"),
    ])
    .await;
    assert_eq!(
        unanswered(b).await,
        pairs(&[("ahu1.mode", "c-3"), ("ahu2.mode", "c-2")])
    );

    // ahu2's newest command answered: its older unanswered one is not re-sent.
    write("ahu2.mode", "c-4", 6).await;
    record(vec![answer("ahu2.mode", epoch, t.add_ms(7), "c-4")]).await;
    assert_eq!(unanswered(b).await, pairs(&[("ahu1.mode", "c-3")]));
}

/// The recorded epoch is the newest acquisition's, whoever asks (issue 21 item 4: a core
/// checks a driver's `stale_epoch` answer against it).
pub async fn the_recorded_epoch_is_the_newest_acquisitions<B: Backend>(b: &B) {
    let first = b.store().acquire().await.expect("acquire");
    let first_epoch = first.epoch();
    assert_eq!(b.store().recorded_epoch().await.expect("read"), first_epoch);
    b.release(first).await;
    let second = b.store().acquire().await.expect("acquire again");
    assert!(second.epoch() > first_epoch);
    assert_eq!(
        b.store().recorded_epoch().await.expect("read"),
        second.epoch(),
        "the newer acquisition's"
    );
}

/// Issue 25 item 3: raising the recorded epoch past a driver's is fenced on the caller's epoch,
/// never lowers it, refuses a floor the store cannot record, and makes the next acquisition
/// take an epoch above the floor; once raised, the raiser's own writes are fenced.
pub async fn the_epoch_is_raised_fenced_past_a_drivers<B: Backend>(b: &B) {
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    assert_eq!(
        b.store().raise_epoch(epoch, epoch).await.expect("a floor equal"),
        epoch,
        "a floor not above the recorded epoch changes nothing"
    );
    match b.store().raise_epoch(epoch + 1, epoch + 9).await {
        Err(StoreError::Fenced {
            epoch: e, current, ..
        }) => assert_eq!((e, current), (epoch + 1, epoch)),
        other => panic!("a raise from an epoch not recorded is fenced, got {other:?}"),
    }
    let too_high = b
        .store()
        .raise_epoch(epoch, sentinel_ports::EPOCH_MAX + 1)
        .await
        .expect_err("a floor above the integer column");
    assert_eq!(
        too_high.to_string(),
        format!(
            "store: epoch floor {} is above the highest epoch a store records ({})",
            sentinel_ports::EPOCH_MAX + 1,
            sentinel_ports::EPOCH_MAX
        )
    );
    assert_eq!(
        b.store().recorded_epoch().await.expect("read"),
        epoch,
        "refusals change nothing"
    );
    assert_eq!(
        b.store().raise_epoch(epoch, epoch + 5).await.expect("raise"),
        epoch + 5
    );
    assert_eq!(b.store().recorded_epoch().await.expect("read"), epoch + 5);
    let event = issued(
        "ahu1.mode",
        epoch,
        at("2026-12-01T10:00:00Z"),
        &CommandValue::Number(1.0),
    );
    match b.store().write_control_events(epoch, vec![event]).await {
        Err(StoreError::Fenced { current, .. }) => assert_eq!(current, epoch + 5),
        other => panic!("the raiser's own writes are fenced once raised, got {other:?}"),
    }
    b.release(lease).await;
    let next = b.store().acquire().await.expect("acquire again");
    assert_eq!(next.epoch(), epoch + 6, "the next acquisition is above the floor");
    b.release(next).await;
}

/// Restart's snapshot of open claims (issue 21 item 6): each `point_desired` row carries the
/// point's open claims as the arbitration wrote them, every field read back as written (a
/// claim without an `until`, every value kind, priorities), and a later write replaces them.
pub async fn open_claims_round_trip_with_point_desired<B: Backend>(b: &B) {
    let t = at("2026-12-01T10:00:00Z");
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let claim = |holder: &str, band: Band, priority: u8, value: CommandValue, until: Option<Micros>| Claim {
        holder: holder.into(),
        band,
        priority,
        value,
        since: t.add_ms(i64::from(priority)),
        until,
    };
    let ana = claim(
        "ana",
        Band::Operator,
        0,
        CommandValue::Number(21.5),
        Some(t.add_ms(3_600_000)),
    );
    let rule = claim(
        "rule:frost",
        Band::Safety,
        7,
        CommandValue::Member("heat".into()),
        None,
    );
    let lock = claim("rule:door", Band::Interlock, 255, CommandValue::Bool(false), None);
    let mut first = row(
        "ahu1.mode",
        Some(CommandValue::Number(21.5)),
        Some(ana.clone()),
        t,
    );
    first.claims = vec![ana.clone(), lock.clone(), rule.clone()];
    let mut other = row("boiler1.setpoint", None, None, t);
    other.claims = Vec::new();
    b.store()
        .write_arbitration(
            epoch,
            vec![claim_event(
                "ahu1.mode",
                epoch,
                t,
                "ana",
                CommandValue::Number(21.5),
            )],
            vec![first.clone(), other.clone()],
        )
        .await
        .expect("arbitration write");
    let rows: Vec<DesiredRow> = b
        .store()
        .load_point_desired()
        .await
        .expect("load")
        .into_iter()
        .map(|s| s.row)
        .collect();
    assert_eq!(rows, [first.clone(), other]);

    // Ana's claim released: the row's claims are the rest.
    let mut second = row(
        "ahu1.mode",
        Some(CommandValue::Bool(false)),
        Some(lock.clone()),
        t.add_ms(5),
    );
    second.claims = vec![lock, rule];
    b.store()
        .write_arbitration(
            epoch,
            vec![claim_event(
                "ahu1.mode",
                epoch,
                t.add_ms(5),
                "ana",
                CommandValue::Number(0.0),
            )],
            vec![second.clone()],
        )
        .await
        .expect("arbitration write");
    let rows = b.store().load_point_desired().await.expect("load");
    assert_eq!(rows[0].row, second);
}

fn result(
    point: &str,
    epoch: u32,
    at: Micros,
    id: &str,
    outcome: sentinel_core::wire::CommandOutcome,
) -> ControlEvent {
    ControlEvent {
        detail: ControlDetail::CommandResult {
            command_id: id.into(),
            outcome,
            reason: (outcome == sentinel_core::wire::CommandOutcome::Rejected).then_some("device_error"),
        },
        ..answer(point, epoch, at, id)
    }
}

fn verdict(point: &str, epoch: u32, at: Micros, id: &str, verified: bool) -> ControlEvent {
    let detail = if verified {
        ControlDetail::CommandVerified {
            command_id: id.into(),
            result_seq: 1,
            evidence_at: at,
        }
    } else {
        ControlDetail::CommandDiverged {
            command_id: id.into(),
            result_seq: 1,
            deadline: at,
        }
    };
    ControlEvent {
        principal: "core:verification".into(),
        detail,
        ..answer(point, epoch, at, id)
    }
}

/// Restart's open verifications (issue 21 items 5 and 6): per `point_desired` row, its newest
/// command when an `applied` result for it follows and no verdict for it follows that: with the
/// command's value, the issue time (a re-send's first issue), and the result's seq and time. A rejected command, a
/// command answered for another id, one with a verdict, one superseded by a newer command and
/// one of a point without a row are not open.
pub async fn open_verifications_are_each_points_newest_applied_command_without_a_verdict<B: Backend>(b: &B) {
    use sentinel_core::wire::CommandOutcome::{Applied, Rejected};
    let t = at("2026-12-01T10:00:00Z");
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let store = b.store();
    assert!(store.load_open_verifications().await.expect("load").is_empty());
    let on = CommandValue::Number(21.0);
    let write = |point: &'static str, id: &'static str, ms: i64| {
        let value = on.clone();
        async move {
            store
                .write_arbitration(
                    epoch,
                    vec![
                        claim_event(point, epoch, t.add_ms(ms), "ana", value.clone()),
                        command(point, epoch, t.add_ms(ms), id, &value),
                    ],
                    vec![row(point, Some(value), None, t.add_ms(ms))],
                )
                .await
                .expect("arbitration write");
        }
    };
    let record = |events: Vec<ControlEvent>| async move {
        store
            .write_control_events(epoch, events)
            .await
            .expect("control write")
    };
    // a: applied, open. b: rejected. c: applied then verified. d: applied, then superseded by
    // a newer command not yet answered. e: answered for another id. f: no point_desired row.
    for (point, id, ms) in [
        ("a.sp", "c-a", 0),
        ("b.sp", "c-b", 1),
        ("c.sp", "c-c", 2),
        ("d.sp", "c-d", 3),
        ("e.sp", "c-e", 4),
    ] {
        write(point, id, ms).await;
    }
    record(vec![command("f.sp", epoch, t.add_ms(5), "c-f", &on)]).await;
    let seqs = record(vec![
        result("a.sp", epoch, t.add_ms(10), "c-a", Applied),
        result("b.sp", epoch, t.add_ms(11), "c-b", Rejected),
        result("c.sp", epoch, t.add_ms(12), "c-c", Applied),
        result("d.sp", epoch, t.add_ms(13), "c-d", Applied),
        result("e.sp", epoch, t.add_ms(14), "c-x", Applied),
        result("f.sp", epoch, t.add_ms(15), "c-f", Applied),
    ])
    .await;
    record(vec![verdict("c.sp", epoch, t.add_ms(20), "c-c", true)]).await;
    write("d.sp", "c-d2", 21).await;
    // g: issued, re-sent by a later core's outbox (carrying its first issue), then applied:
    // its verification counts from the first issue.
    write("g.sp", "c-g", 6).await;
    let resent = ControlEvent {
        detail: ControlDetail::CommandIssued {
            command_id: "c-g".into(),
            value: on.to_json(),
            first_issued_at: Some(t.add_ms(6)),
        },
        ..command("g.sp", epoch, t.add_ms(40), "c-g", &on)
    };
    record(vec![resent]).await;
    let g = record(vec![result("g.sp", epoch, t.add_ms(41), "c-g", Applied)]).await;
    let open = store.load_open_verifications().await.expect("load");
    assert_eq!(
        open,
        [
            sentinel_core::OpenVerification {
                point_id: "a.sp".into(),
                command_id: "c-a".into(),
                value: serde_json::json!(21.0),
                issued_at: t,
                result_seq: seqs[0],
                applied_at: t.add_ms(10),
            },
            sentinel_core::OpenVerification {
                point_id: "g.sp".into(),
                command_id: "c-g".into(),
                value: serde_json::json!(21.0),
                issued_at: t.add_ms(6),
                result_seq: g[0],
                applied_at: t.add_ms(41),
            }
        ]
    );
    // A verdict for another command of the point closes nothing; a diverged one closes it.
    record(vec![verdict("a.sp", epoch, t.add_ms(30), "c-zz", false)]).await;
    assert_eq!(store.load_open_verifications().await.expect("load").len(), 2);
    record(vec![verdict("a.sp", epoch, t.add_ms(31), "c-a", false)]).await;
    assert_eq!(store.load_open_verifications().await.expect("load").len(), 1);
}

/// Restart step 4's heads (issue 21 item 6): each named point's newest control-event seq, in
/// the order asked, none for a point without events.
pub async fn control_heads_are_each_points_newest_event<B: Backend>(b: &B) {
    let t = at("2026-12-01T10:00:00Z");
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let on = CommandValue::Number(1.0);
    let seqs = b
        .store()
        .write_control_events(
            epoch,
            vec![
                command("p", epoch, t, "1", &on),
                command("q", epoch, t, "2", &on),
                command("p", epoch, t, "3", &on),
                command("r", epoch, t, "4", &on),
            ],
        )
        .await
        .expect("write");
    let heads = b
        .store()
        .load_control_heads(vec!["r".into(), "none".into(), "p".into(), "q".into()])
        .await
        .expect("heads");
    assert_eq!(
        heads,
        [
            ("r".to_owned(), seqs[3]),
            ("p".to_owned(), seqs[2]),
            ("q".to_owned(), seqs[1])
        ]
    );
}

//! The assignments part: the valve (issue 21 item 7; core runtime spec, "Backpressure": "poll
//! intervals are pushed over the bus and applied without restarting").
//!
//! Owns: each driver instance's assignment as this core's registry has it (its points, each
//! with its `poll_interval_s`, [`crate::wire::DriverAssignment`]), the `assignment` control
//! event recording it, the message's publication once that event is committed, and the
//! driver's acknowledgement.
//!
//! - **At startup** ([`Assignments::start`], after the `core_started` announcements) every
//!   instance with at least one declared poll interval gets its assignment: an `assignment`
//!   event (cause `start`) per instance, in one control write. An instance with none keeps its
//!   driver's own defaults and gets nothing, so a registry without poll intervals behaves as
//!   before the valve.
//! - **On a registry version applied live** ([`Assignments::reload`], which the router calls
//!   once it swapped the registry: `registry/reload.rs` decides what is live) every instance
//!   whose assignment changed gets a new one (cause `reload`, with what changed).
//! - **Publication** follows the commit, like a command's: on `ControlCommitted`, the
//!   assignment goes on `cmd.<host>.<driver_instance>` with the reply subject
//!   `_INBOX_sentinel-core.asg.<epoch>.<seq>` ([`crate::wire::assignment_reply_subject`]). An
//!   event for a version the core no longer runs (a newer one was applied while it was at the
//!   store) sends nothing; the newer one's event does.
//! - **A hello** from an instance that speaks contract 3 gets its current assignment again (a
//!   restarted driver lost it); an instance whose hello speaks an older contract gets none
//!   (it cannot apply one), and its assignment is recorded all the same.
//! - **Acknowledgements** are kept per instance: the seq last acknowledged `applied`, and the
//!   last refusal's reason. A refusal is counted, not retried: the next hello re-sends.
//!
//! Bounded by the registry: one slot per `(host, driver_instance)` outside the core's own
//! host, each with at most `registry::check::INSTANCE_POINTS_MAX` points (admission), and at
//! most [`crate::control::ASSIGNMENT_CHANGES_MAX`] changes listed per event.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::context::{Ctx, Out};
use crate::control::{ASSIGNMENT_CHANGES_MAX, ControlDetail, ControlEvent, PRINCIPAL_ASSIGNMENTS};
use crate::effect::Effect;
use crate::registry::Registry;
use crate::registry::reload::LiveChange;
use crate::wire::{
    AssignedPoint, AssignmentAck, CommandOutcome, DRIVER_CONTRACT_ASSIGNMENTS, DriverAssignment, DriverHello,
    ToDriver, assignment_reply_subject, cmd_subject,
};

/// Why an assignment was recorded (`cause` in the event's payload).
pub const CAUSE_START: &str = "start";
pub const CAUSE_RELOAD: &str = "reload";

/// One driver instance's assignment as this core sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct AssignmentView {
    pub host: Arc<str>,
    pub driver_instance: Arc<str>,
    /// The points and their poll intervals, sorted by point id.
    pub points: Vec<AssignedPoint>,
    /// The seq of the committed `assignment` event of the current assignment (`None`: none
    /// recorded yet under the registry version the core runs).
    pub recorded_seq: Option<i64>,
    /// The seq the driver last acknowledged `applied` (`None`: none yet).
    pub acked_seq: Option<i64>,
    /// The reason of the driver's last refusal, if its last answer was one.
    pub refused: Option<String>,
    /// Whether the instance's hello said it speaks a contract that applies assignments
    /// (`None`: no hello yet).
    pub applies: Option<bool>,
}

#[derive(Debug, Default)]
pub(crate) struct Assignments {
    /// In `(host, driver_instance)` order.
    slots: Vec<AssignmentView>,
    by_name: BTreeMap<(Arc<str>, Arc<str>), usize>,
}

impl Assignments {
    /// One slot per `(host, driver_instance)` of `registry` outside `skip_host` (the core's
    /// own points, which no driver polls).
    pub fn new(registry: &Registry, skip_host: &str) -> Assignments {
        let mut slots: BTreeMap<(Arc<str>, Arc<str>), Vec<AssignedPoint>> = BTreeMap::new();
        for (_, p) in registry.points() {
            if &*p.host == skip_host {
                continue;
            }
            slots
                .entry((p.host.clone(), registry.instance_name(p.instance).clone()))
                .or_default()
                .push(AssignedPoint {
                    point_id: p.id.to_string(),
                    poll_interval_s: p.descriptor.manifest.poll_interval_s,
                });
        }
        let mut assignments = Assignments::default();
        for (i, ((host, driver_instance), points)) in slots.into_iter().enumerate() {
            debug_assert!(points.windows(2).all(|w| w[0].point_id < w[1].point_id));
            assignments
                .by_name
                .insert((host.clone(), driver_instance.clone()), i);
            assignments.slots.push(AssignmentView {
                host,
                driver_instance,
                points,
                recorded_seq: None,
                acked_seq: None,
                refused: None,
                applies: None,
            });
        }
        assignments
    }

    pub fn views(&self) -> &[AssignmentView] {
        &self.slots
    }

    fn slot(&self, host: &str, driver_instance: &str) -> Option<usize> {
        self.by_name
            .get(&(Arc::from(host), Arc::from(driver_instance)))
            .copied()
    }

    /// Startup: records the assignment of every instance with a declared poll interval (one
    /// control write); each goes out once its event commits.
    pub fn start(&mut self, ctx: &Ctx, out: &mut Out) {
        let events: Vec<ControlEvent> = self
            .slots
            .iter()
            .filter(|s| s.points.iter().any(|p| p.poll_interval_s.is_some()))
            .map(|s| event(s, CAUSE_START, Vec::new(), ctx))
            .collect();
        if !events.is_empty() {
            out.push(Effect::Control {
                epoch: ctx.epoch,
                events,
            });
        }
    }

    /// A registry version applied live (the router already swapped `ctx.registry` to it):
    /// the assignments are rebuilt from it, and each instance whose assignment changed gets
    /// an `assignment` event listing `changes` that touch it. The instances are the same
    /// (`reload::compare` refuses anything else).
    pub fn reload(&mut self, changes: &[LiveChange], ctx: &Ctx, out: &mut Out) {
        let rebuilt = Assignments::new(&ctx.registry, crate::registry::SELF_HOST);
        debug_assert_eq!(
            rebuilt.slots.len(),
            self.slots.len(),
            "reload keeps the instances"
        );
        let mut events = Vec::new();
        for (slot, new) in self.slots.iter_mut().zip(rebuilt.slots) {
            debug_assert_eq!(
                (&slot.host, &slot.driver_instance),
                (&new.host, &new.driver_instance)
            );
            if slot.points == new.points {
                continue;
            }
            slot.points = new.points;
            slot.recorded_seq = None;
            let touching: Vec<serde_json::Value> = changes
                .iter()
                .filter(|c| touches(c, slot))
                .map(change_json)
                .collect();
            events.push(event(slot, CAUSE_RELOAD, touching, ctx));
        }
        if !events.is_empty() {
            out.push(Effect::Control {
                epoch: ctx.epoch,
                events,
            });
        }
    }

    /// An `assignment` event committed with `seq`: the assignment goes out, if the event is
    /// of the registry version the core runs.
    pub fn committed(&mut self, event: &ControlEvent, seq: i64, ctx: &Ctx, out: &mut Out) {
        let ControlDetail::Assignment {
            host,
            driver_instance,
            ..
        } = &event.detail
        else {
            return;
        };
        let Some(slot) = self.slot(host, driver_instance) else {
            return;
        };
        if event.registry_version != ctx.registry.version {
            return;
        }
        self.slots[slot].recorded_seq = Some(seq);
        if self.slots[slot].applies != Some(false) {
            send(&self.slots[slot], seq, ctx, out);
        }
    }

    /// A hello: an instance that applies assignments gets its recorded one again.
    pub fn hello(&mut self, host: &str, hello: &DriverHello, ctx: &Ctx, out: &mut Out) {
        let Some(slot) = self.slot(host, &hello.driver_instance) else {
            return;
        };
        let applies = hello.contract >= DRIVER_CONTRACT_ASSIGNMENTS;
        let slot = &mut self.slots[slot];
        slot.applies = Some(applies);
        if let (true, Some(seq)) = (applies, slot.recorded_seq) {
            send(slot, seq, ctx, out);
        }
    }

    /// A driver's acknowledgement on `_INBOX_sentinel-core.asg.<epoch>.<seq>`. Returns
    /// whether it was one of this core's current assignments.
    pub fn acked(&mut self, epoch: u32, seq: i64, ack: &AssignmentAck, ctx: &Ctx) -> bool {
        if epoch != ctx.epoch {
            return false;
        }
        let Some(slot) = self.slots.iter_mut().find(|s| s.recorded_seq == Some(seq)) else {
            return false;
        };
        match ack.outcome {
            CommandOutcome::Applied | CommandOutcome::Accepted => {
                slot.acked_seq = Some(seq);
                slot.refused = None;
            }
            CommandOutcome::Rejected => {
                slot.refused = Some(crate::wire::rejection_reason(ack.reason.as_deref()).to_owned());
            }
        }
        true
    }
}

fn event(
    slot: &AssignmentView,
    cause: &'static str,
    changes: Vec<serde_json::Value>,
    ctx: &Ctx,
) -> ControlEvent {
    let omitted = changes.len().saturating_sub(ASSIGNMENT_CHANGES_MAX);
    let mut changes = changes;
    changes.truncate(ASSIGNMENT_CHANGES_MAX);
    ControlEvent {
        occurred_at: ctx.now,
        point: None,
        point_id: Arc::from(""),
        principal: Arc::from(PRINCIPAL_ASSIGNMENTS),
        core_epoch: ctx.epoch,
        registry_version: ctx.registry.version,
        detail: ControlDetail::Assignment {
            host: slot.host.clone(),
            driver_instance: slot.driver_instance.clone(),
            cause,
            points: slot.points.len(),
            changes,
            changes_omitted: omitted,
        },
    }
}

fn send(slot: &AssignmentView, seq: i64, ctx: &Ctx, out: &mut Out) {
    let message = ToDriver::Assignment(DriverAssignment {
        v: 1,
        core_epoch: ctx.epoch,
        registry_version: ctx.registry.version,
        points: slot.points.clone(),
        core_start: ctx.core_start,
    });
    out.push(Effect::SendAssignment {
        subject: cmd_subject(&slot.host, &slot.driver_instance),
        reply_to: assignment_reply_subject(ctx.epoch, seq),
        payload: message.to_bytes(),
    });
}

/// Whether `change` concerns `slot`'s instance: a poll interval of one of its points, or a
/// point moved to or from it.
fn touches(change: &LiveChange, slot: &AssignmentView) -> bool {
    match change {
        LiveChange::PollInterval { point, .. } => slot
            .points
            .binary_search_by(|p| p.point_id.as_str().cmp(point))
            .is_ok(),
        LiveChange::Assignment { from, to, .. } => {
            **from == *slot.driver_instance || **to == *slot.driver_instance
        }
    }
}

fn change_json(change: &LiveChange) -> serde_json::Value {
    match change {
        LiveChange::PollInterval { point, from, to } => {
            serde_json::json!({ "point_id": &**point, "poll_interval_s": [from, to] })
        }
        LiveChange::Assignment { point, from, to } => {
            serde_json::json!({ "point_id": &**point, "driver_instance": [&**from, &**to] })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ControlKind;
    use crate::parts::context::testing::{EPOCH, HOST, INSTANCE, ctx, drain};
    use crate::registry::{Descriptor, Kind, RetentionClass};

    /// The fixture's registry with `plant.temp` polled every `temp_s` (if set), at `version`.
    fn with_poll(version: i32, temp_s: Option<f64>) -> Ctx {
        let mut ctx = ctx();
        let descriptors: Vec<Descriptor> = ctx
            .registry
            .points()
            .map(|(_, p)| {
                let mut d = p.descriptor.clone();
                if d.id == "plant.temp" {
                    d.manifest.poll_interval_s = temp_s;
                }
                d
            })
            .collect();
        ctx.registry =
            Arc::new(Registry::compile(version, "sha".into(), "hash".into(), descriptors).unwrap());
        ctx
    }

    fn sent(effects: &[Effect]) -> Vec<(String, String, DriverAssignment)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::SendAssignment {
                    subject,
                    reply_to,
                    payload,
                } => match serde_json::from_slice(payload) {
                    Ok(ToDriver::Assignment(a)) => Some((subject.clone(), reply_to.clone(), a)),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    fn events(effects: &[Effect]) -> Vec<ControlEvent> {
        effects
            .iter()
            .flat_map(|e| match e {
                Effect::Control { events, .. } => events.clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    fn hello(contract: u32) -> DriverHello {
        DriverHello {
            v: 1,
            driver_instance: INSTANCE.into(),
            source_epoch: 1,
            highest_epoch_seen: EPOCH,
            contract,
            core_start: None,
        }
    }

    #[test]
    fn a_registry_without_poll_intervals_assigns_nothing_at_start() {
        let ctx = with_poll(3, None);
        let mut part = Assignments::new(&ctx.registry, crate::registry::SELF_HOST);
        let mut out = Out::default();
        part.start(&ctx, &mut out);
        assert_eq!(drain(&mut out), vec![]);
        // One slot: the fixture's driver instance; the core's own points are nobody's.
        assert_eq!(part.views().len(), 1);
        assert_eq!(&*part.views()[0].driver_instance, INSTANCE);
    }

    #[test]
    fn the_start_assignment_is_recorded_then_sent_then_acknowledged() {
        let ctx = with_poll(3, Some(10.0));
        let mut part = Assignments::new(&ctx.registry, crate::registry::SELF_HOST);
        let mut out = Out::default();
        part.start(&ctx, &mut out);
        let effects = drain(&mut out);
        // Recorded first, nothing sent before the commit.
        assert!(sent(&effects).is_empty());
        let recorded = events(&effects);
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].kind(), ControlKind::Assignment);
        assert_eq!(recorded[0].subject_key().as_deref(), Some("plant-a.modbus-1"));
        assert_eq!(recorded[0].point_column(), None);
        assert_eq!(
            recorded[0].payload_json(),
            r#"{"cause":"start","changes":[],"changes_omitted":0,"points":2}"#
        );
        part.committed(&recorded[0], 41, &ctx, &mut out);
        let sends = sent(&drain(&mut out));
        assert_eq!(sends.len(), 1);
        let (subject, reply_to, assignment) = &sends[0];
        assert_eq!(subject, &cmd_subject(HOST, INSTANCE));
        assert_eq!(reply_to, "_INBOX_sentinel-core.asg.5.41");
        assert_eq!(assignment.core_epoch, EPOCH);
        assert_eq!(assignment.registry_version, 3);
        assert_eq!(
            assignment.points,
            vec![
                AssignedPoint {
                    point_id: "plant.flow".into(),
                    poll_interval_s: None
                },
                AssignedPoint {
                    point_id: "plant.temp".into(),
                    poll_interval_s: Some(10.0)
                },
            ]
        );
        let ack = |outcome, reason: Option<&str>| AssignmentAck {
            registry_version: 3,
            outcome,
            reason: reason.map(str::to_owned),
            highest_epoch_seen: EPOCH,
        };
        // Another epoch's or another seq's acknowledgement is not this one's.
        assert!(!part.acked(EPOCH + 1, 41, &ack(CommandOutcome::Applied, None), &ctx));
        assert!(!part.acked(EPOCH, 40, &ack(CommandOutcome::Applied, None), &ctx));
        assert_eq!(part.views()[0].acked_seq, None);
        assert!(part.acked(
            EPOCH,
            41,
            &ack(CommandOutcome::Rejected, Some("stale_epoch")),
            &ctx
        ));
        assert_eq!(part.views()[0].refused.as_deref(), Some("stale_epoch"));
        assert!(part.acked(EPOCH, 41, &ack(CommandOutcome::Applied, None), &ctx));
        assert_eq!(part.views()[0].acked_seq, Some(41));
        assert_eq!(part.views()[0].refused, None);
    }

    #[test]
    fn a_hello_gets_the_recorded_assignment_again_unless_its_contract_cannot_apply_it() {
        let ctx = with_poll(3, Some(10.0));
        let mut part = Assignments::new(&ctx.registry, crate::registry::SELF_HOST);
        let mut out = Out::default();
        // Nothing recorded yet: a hello sends nothing.
        part.hello(HOST, &hello(3), &ctx, &mut out);
        assert_eq!(drain(&mut out), vec![]);
        part.start(&ctx, &mut out);
        let recorded = events(&drain(&mut out));
        part.committed(&recorded[0], 7, &ctx, &mut out);
        assert_eq!(sent(&drain(&mut out)).len(), 1);
        part.hello(HOST, &hello(3), &ctx, &mut out);
        assert_eq!(
            sent(&drain(&mut out)).len(),
            1,
            "a restarted driver hears it again"
        );
        part.hello(HOST, &hello(2), &ctx, &mut out);
        assert_eq!(drain(&mut out), vec![], "a contract-2 driver cannot apply one");
        assert_eq!(part.views()[0].applies, Some(false));
    }

    #[test]
    fn a_live_reload_records_only_the_instances_whose_assignment_changed() {
        let old = with_poll(3, Some(10.0));
        let mut part = Assignments::new(&old.registry, crate::registry::SELF_HOST);
        let mut out = Out::default();
        part.start(&old, &mut out);
        let recorded = events(&drain(&mut out));
        part.committed(&recorded[0], 7, &old, &mut out);
        drain(&mut out);
        // The same intervals under a new version: nothing to push.
        let same = with_poll(4, Some(10.0));
        part.reload(&[], &same, &mut out);
        assert_eq!(drain(&mut out), vec![]);
        let new = with_poll(5, Some(20.0));
        let change = LiveChange::PollInterval {
            point: "plant.temp".into(),
            from: Some(10.0),
            to: Some(20.0),
        };
        part.reload(std::slice::from_ref(&change), &new, &mut out);
        let recorded = events(&drain(&mut out));
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].registry_version, 5);
        assert_eq!(
            recorded[0].payload_json(),
            r#"{"cause":"reload","changes":[{"point_id":"plant.temp","poll_interval_s":[10.0,20.0]}],"changes_omitted":0,"points":2}"#
        );
        assert_eq!(part.views()[0].recorded_seq, None);
        // An event of an older version committing late sends nothing.
        let mut stale = recorded[0].clone();
        stale.registry_version = 4;
        part.committed(&stale, 8, &new, &mut out);
        assert_eq!(drain(&mut out), vec![]);
        part.committed(&recorded[0], 9, &new, &mut out);
        let sends = sent(&drain(&mut out));
        assert_eq!(sends.len(), 1);
        assert_eq!(sends[0].2.registry_version, 5);
        assert_eq!(sends[0].2.points[1].poll_interval_s, Some(20.0));
    }

    #[test]
    fn the_core_own_points_get_no_slot() {
        let d = Descriptor::new("x", Kind::Number, RetentionClass::Measurement, "sentinel", "core");
        let registry = Registry::compile(1, String::new(), String::new(), vec![d]).unwrap();
        assert!(
            Assignments::new(&registry, crate::registry::SELF_HOST)
                .views()
                .is_empty()
        );
    }
}

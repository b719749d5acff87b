//! The commands part: a command request becomes a fenced `command_issued` control event, and
//! the command goes to its driver only once that event is committed (core runtime spec,
//! "Fencing the bus"; DESIGN.md §2; issue 21 item 1, writable points). A core the fence
//! refuses (deposed, or cut off from the store) never sends one.
//!
//! Owns: request admission. A request must name a point of the registry the core runs, that
//! point must be writable (its descriptor's `writable` section), and the value must be one
//! the point can take (`Descriptor::command_refusal`: kind, range, codebook, unit — the check
//! admission runs on a `relinquish_default` too). A refused request is written as a
//! `command_refused` control event with its one-line reason, and nothing is sent; one that
//! cannot be put on the record at all (no command id or principal, or strings past their
//! bounds) and any request to a draining core are only counted. It holds no state yet; claims,
//! arbitration and verification come next (issue 21 item 2).
//!
//! Takes `CommandRequested` and its own `command_issued` events in `ControlCommitted`.
//!
//! Emits `Control` (`command_issued` or `command_refused`), then, once a `command_issued`
//! commits, `Publish` of the command on `cmd.<host>.<driver_instance>`, stamped with the core's
//! epoch.

use crate::control::{
    COMMAND_ID_BYTES_MAX, COMMAND_VALUE_BYTES_MAX, CommandRequest, ControlDetail, ControlEvent,
    PRINCIPAL_BYTES_MAX,
};
use crate::effect::Effect;
use crate::registry::check::POINT_ID_BYTES_MAX;
use crate::registry::{CommandValue, PointIdx};
use crate::wire::{CommandEnvelope, ToDriver, cmd_subject};

use super::context::{Ctx, Out};

#[derive(Debug, Default)]
pub(crate) struct Commands {}

/// A request the core will not carry out: on the record with its point (when the registry
/// knows it) and why.
struct Refusal {
    point: Option<PointIdx>,
    reason: String,
}

impl Commands {
    /// A request: admitted and written as `command_issued`, or refused and written as
    /// `command_refused` (see the module docs for what is only counted).
    pub fn on_request(&mut self, request: CommandRequest, running: bool, ctx: &Ctx, out: &mut Out) {
        let recordable = !request.command_id.is_empty()
            && request.command_id.len() <= COMMAND_ID_BYTES_MAX
            && !request.principal.is_empty()
            && request.principal.len() <= PRINCIPAL_BYTES_MAX
            && request.point_id.len() <= POINT_ID_BYTES_MAX;
        if !running || !recordable {
            out.metrics.commands_refused += 1;
            return;
        }
        let detail = match admit(&request, ctx) {
            Ok(point) => Ok((
                point,
                ControlDetail::CommandIssued {
                    command_id: request.command_id,
                    value: request.value,
                },
            )),
            Err(refusal) => {
                out.metrics.commands_refused += 1;
                let value = if recorded_value(&request.value) {
                    request.value
                } else {
                    serde_json::Value::Null
                };
                Err((
                    refusal.point,
                    ControlDetail::CommandRefused {
                        command_id: request.command_id,
                        value,
                        reason: refusal.reason,
                    },
                ))
            }
        };
        let (point, point_id, detail) = match detail {
            Ok((point, detail)) => (Some(point), ctx.registry.point(point).id.clone(), detail),
            Err((Some(point), detail)) => (Some(point), ctx.registry.point(point).id.clone(), detail),
            Err((None, detail)) => (None, request.point_id.as_str().into(), detail),
        };
        out.metrics.control_events += 1;
        out.push(Effect::Control {
            epoch: ctx.epoch,
            events: vec![ControlEvent {
                occurred_at: ctx.now,
                point,
                point_id,
                principal: request.principal.as_str().into(),
                core_epoch: ctx.epoch,
                registry_version: ctx.registry.version,
                detail,
            }],
        });
    }

    /// The command's `command_issued` event is committed: publish it to the point's driver,
    /// stamped with this core's epoch.
    pub fn on_issued(
        &mut self,
        event: &ControlEvent,
        command_id: &str,
        value: &serde_json::Value,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        // `admit` issues commands only for points of the registry.
        let Some(idx) = event.point else {
            return;
        };
        let point = ctx.registry.point(idx);
        let message = ToDriver::Command(CommandEnvelope {
            v: 1,
            command_id: command_id.to_owned(),
            core_epoch: ctx.epoch,
            point_id: point.id.to_string(),
            value: value.clone(),
            principal: event.principal.to_string(),
        });
        out.metrics.commands_issued += 1;
        out.push(Effect::Publish {
            subject: cmd_subject(&point.host, &point.descriptor.assignment.driver_instance),
            payload: message.to_bytes(),
        });
    }
}

/// The point a request may command, or why not: a point of this registry, writable, and a
/// value it can take.
fn admit(request: &CommandRequest, ctx: &Ctx) -> Result<PointIdx, Refusal> {
    let Some(idx) = ctx.registry.resolve(&request.point_id) else {
        return Err(Refusal {
            point: None,
            reason: format!(
                "point {:?} is not in registry version {}",
                request.point_id, ctx.registry.version
            ),
        });
    };
    let refuse = |reason: String| Refusal {
        point: Some(idx),
        reason,
    };
    let descriptor = &ctx.registry.point(idx).descriptor;
    if descriptor.writable.is_none() {
        return Err(refuse(format!("point {:?} is not writable", request.point_id)));
    }
    if !recorded_value(&request.value) {
        return Err(refuse(format!(
            "the value is not a number, bool or string of at most {COMMAND_VALUE_BYTES_MAX} bytes"
        )));
    }
    let value = CommandValue::from_json(&request.value).ok_or_else(|| {
        refuse(format!(
            "the value is not a number, bool or string of at most {COMMAND_VALUE_BYTES_MAX} bytes"
        ))
    })?;
    match descriptor.command_refusal(&value, request.unit.as_deref()) {
        Some(reason) => Err(refuse(reason)),
        None => Ok(idx),
    }
}

/// Whether a request's value is a JSON scalar small enough to keep on the record.
fn recorded_value(value: &serde_json::Value) -> bool {
    let scalar = value.is_number() || value.is_boolean() || value.is_string();
    scalar && value.to_string().len() <= COMMAND_VALUE_BYTES_MAX
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ControlReport;
    use crate::parts::context::testing::{ctx, drain};
    use crate::registry::Writable;

    fn request(point_id: &str, principal: &str, value: serde_json::Value) -> CommandRequest {
        CommandRequest {
            command_id: "c-1".into(),
            point_id: point_id.into(),
            value,
            unit: None,
            principal: principal.into(),
        }
    }

    /// The fixture's context with `plant.temp` writable.
    fn writable_ctx() -> Ctx {
        let mut ctx = ctx();
        let mut descriptors: Vec<_> = ctx.registry.points().map(|(_, p)| p.descriptor.clone()).collect();
        for d in &mut descriptors {
            if d.id == "plant.temp" {
                d.writable = Some(Writable {
                    relinquish_default: None,
                    verify_s: 60,
                    tolerance: 0.5,
                    min_on_s: None,
                    min_off_s: None,
                });
            }
        }
        ctx.registry = std::sync::Arc::new(
            crate::registry::Registry::compile(3, "sha".into(), "hash".into(), descriptors)
                .expect("fixture compiles"),
        );
        ctx
    }

    #[test]
    fn a_valid_request_is_written_first_and_sent_only_once_committed() {
        let ctx = writable_ctx();
        let mut out = Out::default();
        let mut commands = Commands::default();
        commands.on_request(
            request("plant.temp", "operator:ana", serde_json::json!(21.5)),
            true,
            &ctx,
            &mut out,
        );
        let effects = drain(&mut out);
        let [Effect::Control { epoch, events }] = &effects[..] else {
            panic!("one control write: {effects:?}");
        };
        assert_eq!(*epoch, ctx.epoch);
        let report = ControlReport {
            events: events.clone(),
            seqs: vec![1],
        };
        let ControlDetail::CommandIssued { command_id, value } = &report.events[0].detail else {
            panic!("a command_issued event");
        };
        commands.on_issued(&report.events[0], command_id, value, &ctx, &mut out);
        let effects = drain(&mut out);
        let [Effect::Publish { subject, payload }] = &effects[..] else {
            panic!("one publish: {effects:?}");
        };
        assert_eq!(subject, "cmd.plant-a.modbus-1");
        let ToDriver::Command(sent) = serde_json::from_slice(payload).expect("a driver message") else {
            panic!("a command");
        };
        assert_eq!(
            (sent.core_epoch, sent.principal.as_str()),
            (ctx.epoch, "operator:ana")
        );
        assert_eq!((out.metrics.control_events, out.metrics.commands_issued), (1, 1));
    }

    /// Each refusal is on the record with its reason (and its point when the registry has
    /// it), and nothing is sent.
    #[test]
    fn refusals_are_written_with_their_reason_and_send_nothing() {
        let ctx = writable_ctx();
        let mut commands = Commands::default();
        let cases = [
            (
                request("plant.nope", "operator:ana", serde_json::json!(1)),
                None,
                "point \"plant.nope\" is not in registry version 3",
            ),
            (
                request("plant.flow", "operator:ana", serde_json::json!(1)),
                Some("plant.flow"),
                "point \"plant.flow\" is not writable",
            ),
            (
                request("plant.temp", "operator:ana", serde_json::json!({"a": 1})),
                Some("plant.temp"),
                "the value is not a number, bool or string of at most 256 bytes",
            ),
            (
                request("plant.temp", "operator:ana", serde_json::json!(true)),
                Some("plant.temp"),
                "the value is not a number",
            ),
        ];
        for (request, point, reason) in cases {
            let mut out = Out::default();
            let asked = request.value.clone();
            commands.on_request(request, true, &ctx, &mut out);
            let effects = drain(&mut out);
            let [Effect::Control { events, .. }] = &effects[..] else {
                panic!("one control write: {effects:?}");
            };
            let event = &events[0];
            assert_eq!(
                event
                    .point
                    .map(|p| ctx.registry.point(p).id.to_string())
                    .as_deref(),
                point
            );
            let ControlDetail::CommandRefused {
                command_id,
                value,
                reason: written,
            } = &event.detail
            else {
                panic!("a command_refused event: {event:?}");
            };
            assert_eq!((command_id.as_str(), written.as_str()), ("c-1", reason));
            let expected_value = if asked.is_object() {
                serde_json::Value::Null
            } else {
                asked
            };
            assert_eq!(value, &expected_value, "a non-scalar value is not kept");
            assert_eq!(event.kind().as_str(), "command_refused");
            assert_eq!(
                (out.metrics.commands_refused, out.metrics.commands_issued),
                (1, 0)
            );
        }
    }

    #[test]
    fn requests_that_cannot_be_recorded_and_a_draining_core_are_only_counted() {
        let ctx = writable_ctx();
        let mut out = Out::default();
        let mut commands = Commands::default();
        let mut long_id = request("plant.temp", "operator:ana", serde_json::json!(1));
        long_id.command_id = "c".repeat(COMMAND_ID_BYTES_MAX + 1);
        for (request, running) in [
            (request("plant.temp", "", serde_json::json!(1)), true),
            (long_id, true),
            (
                request(&"p".repeat(129), "operator:ana", serde_json::json!(1)),
                true,
            ),
            (request("plant.temp", "operator:ana", serde_json::json!(1)), false),
        ] {
            commands.on_request(request, running, &ctx, &mut out);
        }
        assert!(drain(&mut out).is_empty());
        assert_eq!(out.metrics.commands_refused, 4);
    }
}

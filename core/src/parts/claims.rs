//! The claims part: every writable point's claims and its desired value, through the one
//! resolver ([`crate::arbitration`]; issue 21 item 2; core runtime spec, "Single writer is a
//! requirement": the arbitration resolver is the only writer of `point_desired`).
//!
//! Owns: one [`PointArbiter`] per writable point of the registry (its relinquish default from
//! the `writable` section), the desired values restored at startup, the claims' lapse times,
//! and the ids of the commands a lapse issues. Every change — a claim set or replaced, released,
//! or lapsed — is one `Effect::Arbitrate`: the claim's control event, the `command_issued`
//! event when the winning value changed (exactly one command per change of value; none for a
//! new winner with the same value, none for a hold), and the `point_desired` row, written in
//! one transaction fenced on the epoch. The command is published only once that commits
//! (the commands part, from `ControlCommitted`). Changes apply here as they are emitted: the
//! runtime writes control events one at a time in order and a failed write stops the core, so
//! what this part holds is what the log will hold.
//!
//! Minimum on/off (issue 21 items 1 and 2; `arbitration.rs`, "Minimum on/off"): each arbiter
//! knows its point's `min_on_s`/`min_off_s`. A change held back is still written (its claim
//! event and the unchanged `point_desired` row); when the hold ends, `Tick` resolves the point
//! again and, if the value moves, writes one `command_issued` (id `hold-<epoch>-<n>`, on behalf
//! of the winning claim's holder) with the new row. The deadline is computed from the
//! persisted row's value and `since`, so it needs no timer of its own to survive a restart.
//!
//! Sites (core runtime spec, "Geographic split"; issue 22 item 6): an `interlock` claim on a
//! point whose host stands at a partitionable site is refused here, from any holder, with one
//! line naming the point, the host and the site: this is the one gate every claim passes.
//!
//! Takes the commands part's admitted requests (claims and releases, from the router), `Tick`
//! (lapses and the ends of holds), and the restored `point_desired` rows at startup. Emits
//! `Arbitrate`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::arbitration::{Band, Change, Claim, Desired, DesiredRow, MinHold, PointArbiter};
use crate::control::{
    ClaimProvenance, ControlDetail, ControlEvent, PRINCIPAL_ARBITRATION, RELEASED_BY_HOLDER, RELEASED_EXPIRED,
};
use crate::effect::Effect;
use crate::registry::{PointIdx, Registry};
use crate::time::Micros;

use super::context::{Ctx, Out};

#[derive(Debug, Default)]
pub(crate) struct Claims {
    points: BTreeMap<PointIdx, PointArbiter>,
    /// Lapses issue commands too; their ids are `lapse-<epoch>-<n>`.
    lapses: u64,
    /// So do the ends of minimum on/off holds: `hold-<epoch>-<n>`.
    holds_ended: u64,
}

/// A writable point's arbiter, nothing claimed, its desired value as restored.
fn arbiter(writable: &crate::registry::Writable, restored: Option<Desired>) -> PointArbiter {
    PointArbiter::new(writable.relinquish_default.clone(), restored).with_min_hold(MinHold {
        min_on_s: writable.min_on_s,
        min_off_s: writable.min_off_s,
    })
}

/// Who asks for a claim change, and under which request id.
pub(crate) struct Asker {
    pub principal: Arc<str>,
    pub command_id: String,
    /// Why a rule asks (issue 22 item 7), recorded on its `claim_set`; `None` for others.
    pub provenance: Option<Box<ClaimProvenance>>,
}

impl Claims {
    /// One arbiter per writable point, nothing claimed, nothing desired yet.
    pub fn new(registry: &Registry) -> Claims {
        let points = registry
            .points()
            .filter_map(|(idx, point)| {
                let writable = point.descriptor.writable.as_ref()?;
                Some((idx, arbiter(writable, None)))
            })
            .collect();
        Claims {
            points,
            lapses: 0,
            holds_ended: 0,
        }
    }

    /// Restart: the desired values and the open claims as last written (each row is the
    /// snapshot its arbitration wrote with the claim's control event, so nothing after it in
    /// the log changes them). Rows for points that are no longer writable in this registry are
    /// skipped. A claim whose `until` passed while the core was down lapses at the next
    /// [`Self::expire`] (restart step 6). Returns how many points were restored.
    pub fn restore(&mut self, registry: &Registry, rows: impl IntoIterator<Item = DesiredRow>) -> usize {
        let mut restored = 0;
        for row in rows {
            let Some(idx) = registry.resolve(&row.point_id) else {
                continue;
            };
            let Some(writable) = registry.point(idx).descriptor.writable.as_ref() else {
                continue;
            };
            self.points.insert(
                idx,
                PointArbiter::restored(writable.relinquish_default.clone(), row.desired, row.claims)
                    .with_min_hold(MinHold {
                        min_on_s: writable.min_on_s,
                        min_off_s: writable.min_off_s,
                    }),
            );
            restored += 1;
        }
        restored
    }

    pub fn desired(&self, point: PointIdx) -> Option<&Desired> {
        self.points.get(&point).map(PointArbiter::desired)
    }

    /// The point's claims, winner first is not promised: in holder order.
    pub fn claims(&self, point: PointIdx) -> impl Iterator<Item = &Claim> {
        self.points.get(&point).into_iter().flat_map(PointArbiter::claims)
    }

    /// Sets `claim` on `point` (a writable point: the commands part admitted it). `Err` with
    /// the reason when the point cannot take another holder.
    pub fn set(
        &mut self,
        point: PointIdx,
        claim: Claim,
        asker: Asker,
        ctx: &Ctx,
        out: &mut Out,
    ) -> Result<(), String> {
        let Some(arbiter) = self.points.get_mut(&point) else {
            return Err(format!(
                "point {:?} is not writable",
                &*ctx.registry.point(point).id
            ));
        };
        // Core runtime spec, "Geographic split": protection at a site that can be cut off from
        // the core must hold at the site, never through a round trip to the core.
        let descriptor = &ctx.registry.point(point).descriptor;
        if claim.band == Band::Interlock
            && let Some(site) = descriptor.partitionable_site()
        {
            return Err(format!(
                "an interlock claim on point {:?} is refused: its host {:?} is at partitionable site {site:?}, \
                 where an interlock must hold locally, not through the core",
                descriptor.id, descriptor.assignment.host
            ));
        }
        let event = ControlDetail::ClaimSet {
            command_id: asker.command_id.clone(),
            holder: claim.holder.clone(),
            band: claim.band,
            priority: claim.priority,
            value: claim.value.clone(),
            until: claim.until,
            provenance: asker.provenance.clone(),
        };
        plant(arbiter, ctx);
        let change = arbiter.set(claim)?;
        let open = arbiter.claims().cloned().collect();
        emit(point, Some(event), change, open, &asker, ctx, out);
        Ok(())
    }

    /// Releases `holder`'s claim on `point`. `Err` with the reason when it holds none.
    pub fn release(
        &mut self,
        point: PointIdx,
        holder: &str,
        asker: Asker,
        ctx: &Ctx,
        out: &mut Out,
    ) -> Result<(), String> {
        let (change, open) = self
            .points
            .get_mut(&point)
            .and_then(|arbiter| {
                plant(arbiter, ctx);
                let change = arbiter.release(holder, ctx.now)?;
                Some((change, arbiter.claims().cloned().collect()))
            })
            .ok_or_else(|| {
                format!(
                    "{holder:?} holds no claim on point {:?}",
                    &*ctx.registry.point(point).id
                )
            })?;
        let event = ControlDetail::ClaimReleased {
            command_id: asker.command_id.clone(),
            holder: holder.into(),
            why: RELEASED_BY_HOLDER,
        };
        emit(point, Some(event), change, open, &asker, ctx, out);
        Ok(())
    }

    /// How many claims lapse by themselves (have an `until`).
    pub fn expiries_armed(&self) -> usize {
        self.points
            .values()
            .map(|a| a.claims().filter(|c| c.until.is_some()).count())
            .sum()
    }

    /// The earliest lapse of any claim, or end of a hold that keeps a change back.
    pub fn next_deadline(&self) -> Option<Micros> {
        self.points
            .values()
            .flat_map(|arbiter| [arbiter.next_expiry(), arbiter.hold_deadline()])
            .flatten()
            .min()
    }

    /// Releases every claim whose `until` has passed, in point and holder order; then each
    /// point whose hold ended with a change kept back is resolved again.
    pub fn expire(&mut self, ctx: &Ctx, out: &mut Out) {
        if self.next_deadline().is_none_or(|at| at > ctx.now) {
            return;
        }
        for (&point, arbiter) in &mut self.points {
            plant(arbiter, ctx);
            for (holder, change, open) in arbiter.expire(ctx.now) {
                self.lapses += 1;
                let asker = Asker {
                    principal: PRINCIPAL_ARBITRATION.into(),
                    command_id: format!("lapse-{}-{}", ctx.epoch, self.lapses),
                    provenance: None,
                };
                let event = ControlDetail::ClaimReleased {
                    command_id: asker.command_id.clone(),
                    holder,
                    why: RELEASED_EXPIRED,
                };
                emit(point, Some(event), change, open, &asker, ctx, out);
            }
        }
        for (&point, arbiter) in &mut self.points {
            let Some(change) = arbiter.settle(ctx.now) else {
                continue;
            };
            self.holds_ended += 1;
            let asker = Asker {
                principal: PRINCIPAL_ARBITRATION.into(),
                command_id: format!("hold-{}-{}", ctx.epoch, self.holds_ended),
                provenance: None,
            };
            let open = arbiter.claims().cloned().collect();
            emit(point, None, change, open, &asker, ctx, out);
        }
    }
}

/// Planted bug only: switches `PlantedBug::ResolverIgnoresBand` on the arbiter as the core's
/// context says (never, without the `planted-bugs` feature: then this does nothing).
fn plant(arbiter: &mut PointArbiter, ctx: &Ctx) {
    #[cfg(feature = "planted-bugs")]
    arbiter.plant_ignores_band(ctx.planted(crate::planted::PlantedBug::ResolverIgnoresBand));
    let _ = (arbiter, ctx);
}

/// One change on the record: the claim's event (none for the end of a hold), the command when
/// the value moved, and the `point_desired` row, in one write.
fn emit(
    point: PointIdx,
    claim_event: Option<ControlDetail>,
    change: Change,
    claims: Vec<Claim>,
    asker: &Asker,
    ctx: &Ctx,
    out: &mut Out,
) {
    if let Some(claim_event) = &claim_event {
        out.metrics.count_claim(claim_event);
    }
    let point_id = ctx.registry.point(point).id.clone();
    let event = |principal: Arc<str>, detail: ControlDetail| ControlEvent {
        occurred_at: ctx.now,
        point: Some(point),
        point_id: point_id.clone(),
        principal,
        core_epoch: ctx.epoch,
        registry_version: ctx.registry.version,
        detail,
    };
    let mut events: Vec<ControlEvent> = claim_event
        .into_iter()
        .map(|detail| event(asker.principal.clone(), detail))
        .collect();
    if let Some(value) = &change.command {
        // The command speaks for the claim that won; with none left, for whoever released.
        let principal = change
            .desired
            .winner
            .as_ref()
            .map_or_else(|| asker.principal.clone(), |w| w.holder.clone());
        events.push(event(
            principal,
            ControlDetail::CommandIssued {
                command_id: asker.command_id.clone(),
                value: value.to_json(),
                first_issued_at: None,
            },
        ));
    }
    out.metrics.control_events += events.len() as u64;
    out.push(Effect::Arbitrate {
        epoch: ctx.epoch,
        events,
        desired: vec![DesiredRow {
            point_id,
            desired: change.desired,
            claims,
        }],
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arbitration::Band;
    use crate::parts::context::testing::{T0, ctx, drain};
    use crate::registry::{CommandValue, Writable};

    /// The fixture's context with `plant.temp` writable, relinquished to 20.
    fn writable_ctx() -> Ctx {
        crate::parts::context::testing::writable_ctx(Writable {
            relinquish_default: Some(CommandValue::Number(20.0)),
            verify_s: 60,
            tolerance: 0.5,
            min_on_s: None,
            min_off_s: None,
        })
    }

    fn claim(holder: &str, band: Band, value: f64, since: Micros, until: Option<Micros>) -> Claim {
        Claim {
            holder: holder.into(),
            band,
            priority: 0,
            value: CommandValue::Number(value),
            since,
            until,
        }
    }

    fn asker(id: &str, principal: &str) -> Asker {
        Asker {
            principal: principal.into(),
            command_id: id.into(),
            provenance: None,
        }
    }

    /// (kinds of the events, the desired value) of the one `Arbitrate` effect.
    fn written(out: &mut Out) -> (Vec<&'static str>, Option<CommandValue>) {
        let effects = drain(out);
        let [Effect::Arbitrate { events, desired, .. }] = &effects[..] else {
            panic!("one arbitration write: {effects:?}");
        };
        (
            events.iter().map(|e| e.kind().as_str()).collect(),
            desired[0].desired.value.clone(),
        )
    }

    /// `writable_ctx` with `plant.temp`'s host placed at `site`.
    fn ctx_at_site(site: crate::registry::Site) -> Ctx {
        let mut ctx = writable_ctx();
        let descriptors: Vec<_> = ctx
            .registry
            .points()
            .map(|(_, p)| {
                let mut d = p.descriptor.clone();
                if d.id == "plant.temp" {
                    d.assignment.site = Some(site.clone());
                }
                d
            })
            .collect();
        ctx.registry =
            Arc::new(Registry::compile(3, "sha".into(), "hash".into(), descriptors).expect("compiles"));
        ctx
    }

    #[test]
    fn an_interlock_claim_at_a_partitionable_site_is_refused_from_any_holder() {
        let ctx = ctx_at_site(crate::registry::Site {
            name: "barn".into(),
            partitionable: true,
        });
        let temp = ctx.registry.resolve("plant.temp").expect("fixture");
        let host = ctx.registry.point(temp).descriptor.assignment.host.clone();
        let mut claims = Claims::new(&ctx.registry);
        let mut out = Out::default();
        for holder in ["rule:frost", "ana", "sentinel"] {
            let refused = claims
                .set(
                    temp,
                    claim(holder, Band::Interlock, 5.0, T0, None),
                    asker("i-1", holder),
                    &ctx,
                    &mut out,
                )
                .expect_err("refused");
            assert_eq!(
                refused,
                format!(
                    "an interlock claim on point \"plant.temp\" is refused: its host {host:?} is at \
                     partitionable site \"barn\", where an interlock must hold locally, not through the core"
                )
            );
        }
        assert!(drain(&mut out).is_empty(), "a refused claim writes nothing here");
        // The other bands are not protection: they stand at any site.
        claims
            .set(
                temp,
                claim("rule:frost", Band::Safety, 5.0, T0, None),
                asker("s-1", "rule:frost"),
                &ctx,
                &mut out,
            )
            .expect("a safety claim is not refused");
        assert_eq!(written(&mut out).1, Some(CommandValue::Number(5.0)));
    }

    #[test]
    fn an_interlock_claim_at_a_site_that_cannot_be_cut_off_stands() {
        let ctx = ctx_at_site(crate::registry::Site {
            name: "plant-room".into(),
            partitionable: false,
        });
        let temp = ctx.registry.resolve("plant.temp").expect("fixture");
        let mut claims = Claims::new(&ctx.registry);
        let mut out = Out::default();
        claims
            .set(
                temp,
                claim("rule:frost", Band::Interlock, 5.0, T0, None),
                asker("i-1", "rule:frost"),
                &ctx,
                &mut out,
            )
            .expect("an interlock at a site that cannot be cut off");
        assert_eq!(written(&mut out).1, Some(CommandValue::Number(5.0)));
    }

    #[test]
    fn an_operator_claim_overrides_automation_and_its_release_restores_it() {
        let mut ctx = writable_ctx();
        let temp = ctx.registry.resolve("plant.temp").expect("fixture");
        let mut claims = Claims::new(&ctx.registry);
        let mut out = Out::default();
        claims
            .set(
                temp,
                claim("rule:a", Band::Automation, 18.0, T0, None),
                asker("a-1", "rule:a"),
                &ctx,
                &mut out,
            )
            .expect("set");
        assert_eq!(
            written(&mut out),
            (
                vec!["claim_set", "command_issued"],
                Some(CommandValue::Number(18.0))
            )
        );
        ctx.now = T0.add_ms(1_000);
        claims
            .set(
                temp,
                claim("ana", Band::Operator, 21.0, ctx.now, Some(T0.add_ms(3_600_000))),
                asker("op-1", "ana"),
                &ctx,
                &mut out,
            )
            .expect("set");
        assert_eq!(
            written(&mut out),
            (
                vec!["claim_set", "command_issued"],
                Some(CommandValue::Number(21.0))
            )
        );
        // A second operator asks for the same value: a new winner, no command.
        claims
            .set(
                temp,
                claim("bob", Band::Operator, 21.0, ctx.now.add_ms(1), None),
                asker("op-2", "bob"),
                &ctx,
                &mut out,
            )
            .expect("set");
        assert_eq!(
            written(&mut out),
            (vec!["claim_set"], Some(CommandValue::Number(21.0)))
        );
        claims
            .release(temp, "bob", asker("op-3", "bob"), &ctx, &mut out)
            .expect("bob holds one");
        assert_eq!(
            written(&mut out),
            (vec!["claim_released"], Some(CommandValue::Number(21.0)))
        );
        assert_eq!(
            claims.release(temp, "bob", asker("op-4", "bob"), &ctx, &mut out),
            Err("\"bob\" holds no claim on point \"plant.temp\"".to_owned())
        );
        assert!(
            drain(&mut out).is_empty(),
            "a refused release writes nothing here"
        );

        // Ana's claim lapses after its hour: back to the rule's value, one command.
        assert_eq!(claims.next_deadline(), Some(T0.add_ms(3_600_000)));
        ctx.now = T0.add_ms(3_600_000);
        claims.expire(&ctx, &mut out);
        let effects = drain(&mut out);
        let [Effect::Arbitrate { events, desired, .. }] = &effects[..] else {
            panic!("one lapse: {effects:?}");
        };
        assert!(
            matches!(&events[0].detail, ControlDetail::ClaimReleased { why: "expired", holder, .. } if &**holder == "ana")
        );
        assert_eq!(&*events[0].principal, PRINCIPAL_ARBITRATION);
        assert!(
            matches!(&events[1].detail, ControlDetail::CommandIssued { command_id, .. } if command_id == "lapse-5-1")
        );
        assert_eq!(
            &*events[1].principal, "rule:a",
            "the command speaks for the winner"
        );
        assert_eq!(desired[0].desired.value, Some(CommandValue::Number(18.0)));

        // The rule lets go too: the relinquish default.
        claims
            .release(temp, "rule:a", asker("a-2", "rule:a"), &ctx, &mut out)
            .expect("held");
        assert_eq!(
            written(&mut out),
            (
                vec!["claim_released", "command_issued"],
                Some(CommandValue::Number(20.0))
            )
        );
    }

    /// Restart (issue 21 item 6): the open claims come back with the desired value, so a
    /// newer override's release returns to the restored claim, not the relinquish default, and
    /// a restored claim still lapses at its `until`. Every row written carries the point's
    /// open claims after the change: the snapshot the next restart restores.
    #[test]
    fn restored_claims_keep_winning_and_lapse_at_their_until() {
        let mut ctx = writable_ctx();
        let temp = ctx.registry.resolve("plant.temp").expect("fixture");
        let ana = claim("ana", Band::Operator, 21.0, T0, Some(T0.add_ms(10_000)));
        let rule = claim("rule:a", Band::Automation, 18.0, T0, None);
        let mut claims = Claims::new(&ctx.registry);
        claims.restore(
            &ctx.registry,
            [DesiredRow {
                point_id: "plant.temp".into(),
                desired: Desired {
                    value: Some(CommandValue::Number(21.0)),
                    winner: Some(ana.clone()),
                    since: T0,
                },
                claims: vec![ana.clone(), rule.clone()],
            }],
        );
        assert_eq!(claims.claims(temp).count(), 2);
        assert_eq!(claims.next_deadline(), Some(T0.add_ms(10_000)));
        let mut out = Out::default();
        ctx.now = T0.add_ms(1_000);
        claims
            .set(
                temp,
                claim("bob", Band::Operator, 25.0, ctx.now, None),
                asker("op-1", "bob"),
                &ctx,
                &mut out,
            )
            .expect("set");
        let effects = drain(&mut out);
        let [Effect::Arbitrate { desired, .. }] = &effects[..] else {
            panic!("one arbitration write: {effects:?}");
        };
        let holders: Vec<&str> = desired[0].claims.iter().map(|c| &*c.holder).collect();
        assert_eq!(
            holders,
            ["ana", "bob", "rule:a"],
            "the row carries every open claim"
        );
        claims
            .release(temp, "bob", asker("op-2", "bob"), &ctx, &mut out)
            .expect("held");
        assert_eq!(
            written(&mut out),
            (
                vec!["claim_released", "command_issued"],
                Some(CommandValue::Number(21.0))
            ),
            "back to ana's restored claim"
        );
        ctx.now = T0.add_ms(10_000);
        claims.expire(&ctx, &mut out);
        let effects = drain(&mut out);
        let [Effect::Arbitrate { events, desired, .. }] = &effects[..] else {
            panic!("one lapse: {effects:?}");
        };
        assert!(
            matches!(&events[0].detail, ControlDetail::ClaimReleased { why: "expired", holder, .. } if &**holder == "ana")
        );
        assert_eq!(desired[0].desired.value, Some(CommandValue::Number(18.0)));
        assert_eq!(desired[0].claims, [rule]);
    }

    #[test]
    fn a_restored_desired_value_is_not_commanded_again() {
        let ctx = writable_ctx();
        let temp = ctx.registry.resolve("plant.temp").expect("fixture");
        let mut claims = Claims::new(&ctx.registry);
        let restored = claims.restore(
            &ctx.registry,
            [
                DesiredRow {
                    point_id: "plant.temp".into(),
                    desired: Desired {
                        value: Some(CommandValue::Number(21.0)),
                        winner: None,
                        since: T0,
                    },
                    claims: Vec::new(),
                },
                DesiredRow {
                    point_id: "plant.flow".into(),
                    desired: Desired {
                        value: Some(CommandValue::Number(1.0)),
                        winner: None,
                        since: T0,
                    },
                    claims: Vec::new(),
                },
            ],
        );
        assert_eq!(restored, 1, "plant.flow is not writable");
        let mut out = Out::default();
        claims
            .set(
                temp,
                claim("ana", Band::Operator, 21.0, T0, None),
                asker("op-1", "ana"),
                &ctx,
                &mut out,
            )
            .expect("set");
        assert_eq!(
            written(&mut out),
            (vec!["claim_set"], Some(CommandValue::Number(21.0)))
        );
    }

    #[test]
    fn a_held_change_is_written_then_commanded_once_when_the_hold_ends() {
        let mut ctx = ctx();
        let descriptors: Vec<_> = ctx
            .registry
            .points()
            .map(|(_, p)| {
                let mut d = p.descriptor.clone();
                if d.id == "plant.flow" {
                    d.kind = crate::registry::Kind::Bool;
                    d.writable = Some(Writable {
                        relinquish_default: Some(CommandValue::Bool(false)),
                        verify_s: 60,
                        tolerance: 0.0,
                        min_on_s: Some(600),
                        min_off_s: None,
                    });
                }
                d
            })
            .collect();
        ctx.registry =
            Arc::new(Registry::compile(3, "sha".into(), "hash".into(), descriptors).expect("compiles"));
        let pump = ctx.registry.resolve("plant.flow").expect("fixture");
        let mut claims = Claims::new(&ctx.registry);
        let mut out = Out::default();
        let switch = |holder: &str, band, on: bool, since: Micros| Claim {
            holder: holder.into(),
            band,
            priority: 0,
            value: CommandValue::Bool(on),
            since,
            until: None,
        };
        claims
            .set(
                pump,
                switch("rule:a", Band::Automation, true, T0),
                asker("a-1", "rule:a"),
                &ctx,
                &mut out,
            )
            .expect("set");
        assert_eq!(
            written(&mut out),
            (
                vec!["claim_set", "command_issued"],
                Some(CommandValue::Bool(true))
            )
        );
        ctx.now = T0.add_ms(60_000);
        claims
            .set(
                pump,
                switch("ana", Band::Operator, false, ctx.now),
                asker("op-1", "ana"),
                &ctx,
                &mut out,
            )
            .expect("set");
        assert_eq!(
            written(&mut out),
            (vec!["claim_set"], Some(CommandValue::Bool(true))),
            "the claim is on the record, the value holds"
        );
        assert_eq!(claims.next_deadline(), Some(T0.add_ms(600_000)));
        ctx.now = T0.add_ms(599_999);
        claims.expire(&ctx, &mut out);
        assert!(drain(&mut out).is_empty(), "the hold has not ended");
        ctx.now = T0.add_ms(600_000);
        claims.expire(&ctx, &mut out);
        let effects = drain(&mut out);
        let [Effect::Arbitrate { events, desired, .. }] = &effects[..] else {
            panic!("one write at the hold's end: {effects:?}");
        };
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(
            matches!(&events[0].detail, ControlDetail::CommandIssued { command_id, value, .. } if command_id == "hold-5-1" && *value == serde_json::json!(false))
        );
        assert_eq!(&*events[0].principal, "ana", "on behalf of the winning claim");
        assert_eq!(
            (desired[0].desired.value.clone(), desired[0].desired.since),
            (Some(CommandValue::Bool(false)), T0.add_ms(600_000))
        );
        assert_eq!(claims.next_deadline(), None);
        claims.expire(&ctx, &mut out);
        assert!(drain(&mut out).is_empty(), "exactly one command");
    }
}

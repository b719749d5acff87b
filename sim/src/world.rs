//! The state one run shares between its turmoil hosts and its controller: the bus and store
//! models, the simulated clock, the one generator, the links between each core and the
//! models, crash requests, the trace and the invariant checker.
//!
//! turmoil only simulates `turmoil::net`, not the sockets inside async-nats or sqlx, so the
//! faults go in at our ports (DESIGN.md §6): a core's [`crate::adapters`] consult [`Links`]
//! before every call, and a cut store link drops the core's model session and its lock, as
//! PostgreSQL does when a connection dies. All hosts run on the run's one thread, so one
//! `Mutex` around [`Inner`] is never contended; it is never held across an `.await`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sentinel_core::wire::{DriverHello, ToDriver};
use sentinel_core::{Core, Micros};
use sentinel_models::MemoryBus;
use sentinel_models::MemoryStore;
use sentinel_ports::Inbound;
use sentinel_ports::clock::Clock;

use crate::checker::Checker;
use crate::rng::SimRng;
use crate::settings::{PORT_FIRE_P, Settings, Site};
use crate::trace::Trace;

/// Which core host: 0 is `core-a`, 1 is `core-b`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CoreId(pub u8);

impl CoreId {
    /// Not a core: the operator's commands, as the writer of their maintenance
    /// ([`crate::adapters::SimStore::operator`]). The controller never crashes it or cuts its
    /// links.
    pub const OPERATOR: CoreId = CoreId(u8::MAX);

    pub fn host(self) -> &'static str {
        match self.0 {
            u8::MAX => "operator",
            0 => "core-a",
            _ => "core-b",
        }
    }
}

/// Invariant 9's bound on one simulated instant: clock reads inside hosts at the same
/// simulated microsecond. Every port call, trace line and runtime wake-up reads the clock, so
/// a host that never lets simulated time advance (a livelock) crosses it within a fraction of
/// a wall-clock second; the busiest legitimate instant of a run stays far below it (`peak` in
/// `--verbose` output).
pub const EVENTS_PER_INSTANT_MAX: u64 = 200_000;

/// The unwind payload that ends a livelocked host: the simulated clock refuses to be read
/// again at an instant past [`EVENTS_PER_INSTANT_MAX`], so the task spinning there ends (tokio
/// and turmoil treat it as a failed task) and the controller reports invariant 9.
#[derive(Debug)]
pub struct Livelock;

/// Simulated time. Inside a host it is that host's turmoil clock (which advances within a
/// step); outside, the controller's last reading. Counts the reads inside hosts per instant
/// (invariant 9). Start identities come from the run's seed and how many were taken before,
/// off the run's random stream (drawing them from it would move every later draw).
pub struct SimClock {
    seed: u64,
    start_tokens: AtomicU64,
    controller_now_us: AtomicI64,
    instant_us: AtomicI64,
    events_at_instant: AtomicU64,
    events_peak: AtomicU64,
    /// The instant at which a host crossed [`EVENTS_PER_INSTANT_MAX`] (`i64::MIN`: never).
    livelocked_at_us: AtomicI64,
}

impl SimClock {
    pub fn new(start: Micros, seed: u64) -> SimClock {
        SimClock {
            seed,
            start_tokens: AtomicU64::new(0),
            controller_now_us: AtomicI64::new(start.0),
            instant_us: AtomicI64::new(i64::MIN),
            events_at_instant: AtomicU64::new(0),
            events_peak: AtomicU64::new(0),
            livelocked_at_us: AtomicI64::new(i64::MIN),
        }
    }

    pub fn set_controller_now(&self, now: Micros) {
        self.controller_now_us.store(now.0, Ordering::Relaxed);
    }

    /// The instant at which a host livelocked, if one did.
    pub fn livelocked_at(&self) -> Option<Micros> {
        let at = self.livelocked_at_us.load(Ordering::Relaxed);
        (at != i64::MIN).then_some(Micros(at))
    }

    /// The most events any one simulated instant has held so far.
    pub fn events_peak(&self) -> u64 {
        self.events_peak
            .load(Ordering::Relaxed)
            .max(self.events_at_instant.load(Ordering::Relaxed))
    }

    /// One event inside a host at `now`. Past the bound, unwinds the caller (see [`Livelock`]).
    /// On every clock read, so kept to loads and stores: one run is one thread, and these
    /// atomics are only shared by `Arc`, never contended.
    fn count_event(&self, now: Micros) {
        let events = if self.instant_us.load(Ordering::Relaxed) == now.0 {
            let events = self.events_at_instant.load(Ordering::Relaxed) + 1;
            self.events_at_instant.store(events, Ordering::Relaxed);
            events
        } else {
            let finished = self.events_at_instant.load(Ordering::Relaxed);
            if finished > self.events_peak.load(Ordering::Relaxed) {
                self.events_peak.store(finished, Ordering::Relaxed);
            }
            self.instant_us.store(now.0, Ordering::Relaxed);
            self.events_at_instant.store(1, Ordering::Relaxed);
            1
        };
        if events > EVENTS_PER_INSTANT_MAX {
            if self.livelocked_at_us.load(Ordering::Relaxed) == i64::MIN {
                self.livelocked_at_us.store(now.0, Ordering::Relaxed);
            }
            // Not `panic!`: no panic hook, no message; the controller reports it.
            std::panic::resume_unwind(Box::new(Livelock));
        }
    }
}

impl SimClock {
    /// [`Clock::now`], and whether it was read inside a host (and so counted).
    pub fn read(&self) -> ClockReading {
        match turmoil::since_epoch() {
            Some(since) => {
                let now = Micros(since.as_micros() as i64);
                self.count_event(now);
                ClockReading {
                    at: now,
                    in_host: true,
                }
            }
            None => ClockReading {
                at: Micros(self.controller_now_us.load(Ordering::Relaxed)),
                in_host: false,
            },
        }
    }

    /// A second read right after `first`, with no `.await` between them (so the simulated
    /// time cannot have moved): the same instant, counted as [`Clock::now`] counts a read,
    /// without asking turmoil again (a turmoil read is a host lookup by hashed address and a
    /// tokio clock read, about 600 instructions).
    pub fn again(&self, first: ClockReading) -> Micros {
        if first.in_host {
            self.count_event(first.at);
        }
        first.at
    }
}

/// One read of the simulated clock ([`SimClock::read`]).
#[derive(Clone, Copy, Debug)]
pub struct ClockReading {
    pub at: Micros,
    in_host: bool,
}

impl Clock for SimClock {
    fn now(&self) -> Micros {
        self.read().at
    }

    /// The seed and the count of identities taken so far, through SplitMix64's finaliser:
    /// the same run gives every core start the same identity, two starts never share one.
    fn start_token(&self) -> u64 {
        let n = self.start_tokens.fetch_add(1, Ordering::Relaxed) + 1;
        let mut z = self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        sentinel_core::wire::core_start_from_bits(z ^ (z >> 31))
    }
}

/// Whether a core can reach the store and the bus, and how long the bus holds its messages
/// to drivers before delivering them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Links {
    pub store_cut: bool,
    pub bus_cut: bool,
    pub driver_delay_ms: u64,
}

/// One start of a core process on a core host, from launch to exit or crash.
#[derive(Debug)]
pub struct Incarnation {
    pub core: CoreId,
    pub number: u32,
    /// The model session that took the lock and the epoch it got, once it has.
    pub session: Mutex<Option<(u64, u32)>>,
}

impl Incarnation {
    pub fn session(&self) -> Option<u64> {
        self.lease().map(|(session, _)| session)
    }

    /// The epoch this incarnation's lock acquisition got, once it has one.
    pub fn epoch(&self) -> Option<u32> {
        self.lease().map(|(_, epoch)| epoch)
    }

    fn lease(&self) -> Option<(u64, u32)> {
        *self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The checker's name for it.
    pub fn id(&self) -> crate::checker::IncarnationId {
        (self.core.0, self.number)
    }
}

pub struct Inner {
    pub rng: SimRng,
    /// Who asks for which claim ([`crate::operator::draw_claim`]): a generator of its own.
    pub claims_rng: SimRng,
    /// The `operator_compact` site's draws (`operator::compaction`).
    pub compact_rng: SimRng,
    /// Which readings a driver flags `bad` or `unavailable` while they carry a value
    /// ([`crate::drivers::ASSERTED_STREAM`]): a generator of its own.
    pub asserted_rng: SimRng,
    pub trace: Trace,
    pub checker: Checker,
    pub links: BTreeMap<CoreId, Links>,
    /// The current incarnation of each core host.
    pub incarnations: BTreeMap<CoreId, Arc<Incarnation>>,
    /// Faults fire only in the safety phase.
    pub faults_on: bool,
    /// A stream leader election runs until this instant (the `stream_leader_change` site);
    /// `None` while the stream has a leader.
    pub leader_change_until: Option<Micros>,
    /// A database failover in progress or pending ([`crate::failover`]).
    pub failover: crate::failover::state::FailoverState,
    /// Hosts whose process must die at the end of this step.
    pub crash_requests: Vec<CoreId>,
    /// Distinct observations the drivers have published so far.
    pub published: u64,
    /// Of those: how many the stream took (first acceptance, not a duplicate), how many a
    /// driver's full local queue dropped (counted, as its `queue_drops` reading says), and how
    /// many each driver host still queues. Invariant 2 at the drain: `published` is the sum.
    pub driver_landed: u64,
    pub driver_dropped: u64,
    pub driver_queued: BTreeMap<String, usize>,
    pub traffic_done: bool,
    pub step: u64,
    /// Each running core's inbound subscription (`Bus::inbound`): the operator's requests and
    /// the drivers' hellos reach it here.
    pub inbound_senders: BTreeMap<CoreId, tokio::sync::mpsc::Sender<Inbound>>,
    /// Each driver instance's epoch guard, by command subject.
    pub driver_guards: BTreeMap<String, sentinel_driver::EpochGuard>,
    /// Each driver instance's source epoch, by command subject, once it has restarted (1
    /// before that).
    pub driver_source_epochs: BTreeMap<String, u32>,
    /// A bug planted in every driver's epoch guard (feature `planted-bugs`).
    pub driver_plant: Option<sentinel_core::PlantedBug>,
}

impl Inner {
    /// The epoch guard of the driver instance of command subject `subject`.
    fn driver_guard(&mut self, subject: &str) -> &mut sentinel_driver::EpochGuard {
        let plant = self.driver_plant;
        self.driver_guards.entry(subject.to_owned()).or_insert_with(|| {
            #[allow(unused_mut)]
            let mut guard = sentinel_driver::EpochGuard::default();
            #[cfg(feature = "planted-bugs")]
            if let Some(bug) = plant {
                guard.plant(bug);
            }
            let _ = plant; // used only with the planted-bugs feature
            guard
        })
    }
}

pub struct World {
    pub settings: Settings,
    pub bus: MemoryBus,
    pub store: MemoryStore,
    pub clock: Arc<SimClock>,
    inner: Mutex<Inner>,
}

impl World {
    pub fn new(
        settings: Settings,
        bus: MemoryBus,
        store: MemoryStore,
        clock: Arc<SimClock>,
        inner: Inner,
    ) -> World {
        World {
            settings,
            bus,
            store,
            clock,
            inner: Mutex::new(inner),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        // Hosts never panic while holding it (a panic ends the run), so poisoning is moot.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn now(&self) -> Micros {
        self.clock.now()
    }

    /// Whether the stream is between leaders (the `stream_leader_change` site).
    pub fn leader_changing(&self) -> bool {
        self.leader_changing_read().0
    }

    /// [`Self::leader_changing`], with the clock reading it made (for [`SimClock::again`]).
    pub fn leader_changing_read(&self) -> (bool, ClockReading) {
        let reading = self.clock.read();
        let changing = self
            .lock()
            .leader_change_until
            .is_some_and(|until| reading.at < until);
        (changing, reading)
    }

    /// Appends a trace line at the current simulated time.
    pub fn trace(&self, what: std::fmt::Arguments<'_>) {
        let now = self.now();
        self.lock().trace.event(now, what);
    }

    pub fn links(&self, core: CoreId) -> Links {
        self.lock().links.get(&core).copied().unwrap_or_default()
    }

    /// Whether an active port site fires at this opportunity (never once faults are healed).
    pub fn fires(&self, site: Site) -> bool {
        if !self.settings.is_active(site) {
            return false;
        }
        let mut inner = self.lock();
        inner.faults_on && inner.rng.chance(PORT_FIRE_P)
    }

    /// A uniform draw from the run's generator.
    pub fn between(&self, lo: u64, hi: u64) -> u64 {
        self.lock().rng.between(lo, hi)
    }

    /// Starts a new incarnation of `core`'s process.
    pub fn new_incarnation(&self, core: CoreId) -> Arc<Incarnation> {
        let mut inner = self.lock();
        let number = inner.incarnations.get(&core).map_or(1, |i| i.number + 1);
        let incarnation = Arc::new(Incarnation {
            core,
            number,
            session: Mutex::new(None),
        });
        inner.incarnations.insert(core, incarnation.clone());
        incarnation
    }

    /// Whether `incarnation` is still its host's live process (a crash request makes it a
    /// zombie whose every port call hangs until the controller kills the host).
    pub fn is_dying(&self, incarnation: &Incarnation) -> bool {
        self.lock().crash_requests.contains(&incarnation.core)
    }

    /// Asks the controller to kill `core`'s process at the end of this step.
    pub fn request_crash(&self, core: CoreId, why: Site) {
        let now = self.now();
        let mut inner = self.lock();
        if !inner.crash_requests.contains(&core) {
            inner.crash_requests.push(core);
            inner
                .trace
                .event(now, format_args!("fault {} {}", why.name(), core.host()));
        }
    }

    /// A message reached a driver instance over the bus on its command subject: a command,
    /// which the instance's epoch guard admits or refuses (the checker sees what was applied,
    /// invariant 6), or a core's epoch announcement, which raises the guard's floor and is
    /// answered with a hello (restart step 7). A command is answered on `reply_to` (contract
    /// 2): `applied`, or `rejected` with the guard's reason.
    pub fn deliver_to_driver(&self, subject: &str, reply_to: Option<&str>, payload: &[u8]) {
        let now = self.now();
        let current_epoch = self.store.current_epoch();
        let mut inner = self.lock();
        let Ok(message) = serde_json::from_slice::<ToDriver>(payload) else {
            inner
                .checker
                .fail(6, now, format!("an undecodable message to a driver on {subject}"));
            return;
        };
        let command = match message {
            ToDriver::Command(command) => command,
            ToDriver::CoreStarted(started) => {
                inner
                    .checker
                    .on_announcement(subject, started.core_epoch, started.core_start);
                let current = inner
                    .driver_guard(subject)
                    .observe(started.core_epoch, started.core_start);
                inner.trace.event(
                    now,
                    format_args!(
                        "driver {subject} hears core epoch {} ({})",
                        started.core_epoch,
                        if current { "current" } else { "stale" }
                    ),
                );
                say_hello(&mut inner, subject, now);
                return;
            }
            // The simulator's registries declare no poll interval, so no core sends one; a
            // simulated driver has no poll loop to apply it to (issue 21 item 7).
            ToDriver::Assignment(assignment) => {
                inner.trace.event(
                    now,
                    format_args!(
                        "driver {subject} ignores an assignment of epoch {}",
                        assignment.core_epoch
                    ),
                );
                return;
            }
        };
        let mut reply = inner.driver_guard(subject).check(&command);
        let applied = reply.outcome == sentinel_core::wire::CommandOutcome::Accepted;
        if applied {
            reply.outcome = sentinel_core::wire::CommandOutcome::Applied;
        }
        if let Some((epoch, seq)) = reply_to.and_then(sentinel_core::wire::parse_command_reply_subject) {
            answer(&mut inner, Inbound::CommandReply { epoch, seq, reply });
        }
        if applied {
            inner
                .checker
                .on_command_applied(subject, &command, current_epoch, now);
        } else {
            inner.checker.commands_refused += 1;
        }
        inner.trace.event(
            now,
            format_args!(
                "driver {subject} {} command {} of epoch {}",
                if applied { "applies" } else { "refuses" },
                command.command_id,
                command.core_epoch
            ),
        );
    }

    /// A driver instance restarted with a new source epoch: it says hello to the cores.
    pub fn driver_restarted(&self, host: &str, driver_instance: &str, source_epoch: u32) {
        let subject = sentinel_core::wire::cmd_subject(host, driver_instance);
        let now = self.now();
        let mut inner = self.lock();
        inner.driver_source_epochs.insert(subject.clone(), source_epoch);
        say_hello(&mut inner, &subject, now);
    }

    /// Kills the lock session `session` (as PostgreSQL does when its connection dies) and
    /// tells the checker which incarnation lost its lock (invariant 15). Returns whether the
    /// session held the lock.
    pub fn kill_lock_session(&self, session: u64) -> bool {
        let held = self.store.kill_session_id(session);
        if !held {
            return false;
        }
        let now = self.now();
        let mut inner = self.lock();
        let owner = inner
            .incarnations
            .values()
            .find(|i| i.session() == Some(session))
            .map(|i| i.id());
        if let Some(owner) = owner {
            inner.checker.on_lock_lost(owner, now);
        }
        true
    }

    /// Kills the lock holder's session, if a session holds the lock.
    pub fn kill_lock_holder(&self) -> bool {
        self.store
            .lock_holder()
            .is_some_and(|session| self.kill_lock_session(session))
    }

    /// `incarnation` is about to `what` (invariant 15).
    pub fn core_action(&self, incarnation: &Incarnation, what: &str) {
        let now = self.now();
        self.lock().checker.on_core_action(incarnation.id(), what, now);
    }

    /// Invariant 5 from the runtime's observer: a core that is the current writer and has no
    /// batch at the store must project exactly the fold of the log. A core of a primary lost
    /// with its last commits projects a log that is gone: not judged ([`crate::failover`]).
    pub fn observe(&self, incarnation: &Incarnation, core: &Core) {
        if !self.judged(incarnation) {
            return;
        }
        // Invariant 23's count: the suppression each core reports at every wake-up.
        if core.has_exited() {
            return;
        }
        let reading = self.clock.read();
        self.lock()
            .checker
            .rules
            .on_suppression(core.epoch(), core.staleness_suppressed(), reading.at);
        if core.in_flight_batches() > 0 || core.epoch() != self.store.current_epoch() {
            return;
        }
        // The second clock read of this wake-up, in the same synchronous stretch.
        let now = self.clock.again(reading);
        self.lock().checker.check_projection(core, now);
    }
}

/// The instance of command subject `cmd.<host>.<instance>` says hello on
/// `drv.<host>.<instance>`: every core reachable on the bus hears it (one cut off from the bus
/// does not; one whose subscription is full drops it, as a plain subject does).
/// A driver's answer to a command goes to every core whose bus link is up (like a hello);
/// only the core of the epoch it names takes it.
fn answer(inner: &mut Inner, reply: Inbound) {
    for (core, tx) in &inner.inbound_senders {
        if !inner.links.get(core).is_some_and(|links| links.bus_cut) {
            let _ = tx.try_send(reply.clone());
        }
    }
}

fn say_hello(inner: &mut Inner, cmd_subject: &str, now: Micros) {
    let Some((host, instance)) = sentinel_core::wire::parse_cmd_subject(cmd_subject) else {
        return;
    };
    let hello = Inbound::DriverHello {
        host: host.to_owned(),
        hello: DriverHello {
            v: 1,
            driver_instance: instance.to_owned(),
            source_epoch: inner.driver_source_epochs.get(cmd_subject).copied().unwrap_or(1),
            highest_epoch_seen: inner
                .driver_guards
                .get(cmd_subject)
                .map_or(0, |guard| guard.highest_seen()),
            contract: sentinel_core::wire::DRIVER_CONTRACT,
            core_start: inner
                .driver_guards
                .get(cmd_subject)
                .and_then(|guard| guard.core_start()),
        },
    };
    let mut heard_by = 0;
    for (core, tx) in &inner.inbound_senders {
        if !inner.links.get(core).is_some_and(|links| links.bus_cut) && tx.try_send(hello.clone()).is_ok() {
            heard_by += 1;
        }
    }
    inner.trace.event(
        now,
        format_args!("driver {cmd_subject} hello, heard by {heard_by} cores"),
    );
}

/// Runs a future that cannot wait (the memory store's operations never do) to completion.
pub(crate) fn now_or_never<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => unreachable!("a memory store operation waited"),
    }
}

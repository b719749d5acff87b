//! The driver's local disk queue (core runtime spec, "Buffer sizing", "Where the loss goes
//! when it has to go somewhere"): the second buffer, engaged only when the observation stream
//! is full and rejecting. Bounded by bytes and by age; what the bounds drop is counted, and the
//! count is published as the driver's `queue_drops` self-point, so the one place the path
//! loses data announces itself. Beside it the publisher reports the queue's depth (messages
//! waiting, the `queue_depth` self-point) and its publish failures (observations the stream did
//! not take when they were published, the `publish_failures` self-point), so a host that is
//! queueing shows before it drops (issue 26 item 4: the core sums them per host).
//!
//! Owns: the on-disk format and its recovery, the bounds, and [`QueuedPublisher`], which puts
//! a publish on the queue when the stream is full and drains the queue, oldest first, before
//! any new publish goes to the stream (so a device's readings keep their order).
//!
//! Format: an append-only log file, `queue.<generation>.log`, of records `[len u32][crc u32]
//! [queued_at i64][subject len u16][subject][msg id len u16][msg id][payload]` (little
//! endian), and a `head` file naming the generation and the byte offset of the oldest live
//! record, replaced atomically (write, then rename). A torn record at the tail (a crash
//! mid-append) is cut off on open. When more than half a large log is consumed, the live part
//! is written to the next generation's log, the head is switched to it, and the old log is
//! deleted: a crash at any point leaves a head that names a complete log.
//!
//! A site cut off from the bus (issue 25 item 2; core runtime spec, "Geographic split"): a
//! publish the bus could not take — the connection is down, or the stream never acknowledged
//! it after every retry ([`BusError::is_unreachable`]) — is queued too, and so is everything
//! published after it until the link is back: [`QueuedPublisher`] then stops trying the stream
//! for [`QueuedPublisher::relink_probe_interval_ms`] at a time (each try can take the
//! publisher's whole retry span) and queues straight to disk; on the first try that goes
//! through, the queue replays oldest first, every message with its own message id, before
//! anything new. A publish whose ack was lost may already be in the stream; its replay comes
//! later than the stream's duplicate window can catch, gets a new `ingested_at`, and is
//! recognised by the store instead: a commit refuses a late row whose three-column key is
//! already stored ([`sentinel_ports::LATE_DUPLICATE_AFTER_MS`]). Messages the stream accepted
//! are never queued; a refusal (permissions) or any other error is returned, not queued.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use sentinel_core::Micros;

use crate::{BusError, ObservationSink, PublishAck};

const HEAD_FILE: &str = "head";
/// Compaction is considered once this many consumed bytes sit before the head.
const COMPACT_AFTER_BYTES: u64 = 1 << 20;

fn log_name(generation: u64) -> String {
    format!("queue.{generation}.log")
}
/// A record larger than this is refused (an envelope is bounded far below it).
pub const RECORD_BYTES_MAX: usize = 1 << 20;

#[derive(Clone, Debug)]
pub struct DiskQueueConfig {
    pub dir: PathBuf,
    /// Bytes of queued records kept; beyond it the oldest are dropped.
    pub bytes_max: u64,
    /// Records older than this are dropped.
    pub age_max_ms: u64,
}

impl DiskQueueConfig {
    /// The default bounds `sentinel registry plan` sizes each driver host's queue against
    /// ([`sentinel_core::registry::plan::DISK_QUEUE_BYTES_MAX_DEFAULT`], a day's age): set
    /// larger ones on a host whose plan line says so.
    pub fn with_default_bounds(dir: PathBuf) -> DiskQueueConfig {
        use sentinel_core::registry::plan::{DISK_QUEUE_AGE_MAX_S_DEFAULT, DISK_QUEUE_BYTES_MAX_DEFAULT};
        DiskQueueConfig {
            dir,
            bytes_max: DISK_QUEUE_BYTES_MAX_DEFAULT,
            age_max_ms: DISK_QUEUE_AGE_MAX_S_DEFAULT * 1000,
        }
    }
}

/// One queued observation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedMessage {
    pub queued_at: Micros,
    pub subject: String,
    pub msg_id: String,
    pub payload: Bytes,
}

#[derive(Copy, Clone, Debug)]
struct Entry {
    offset: u64,
    len: u64,
    queued_at: Micros,
}

pub struct DiskQueue {
    config: DiskQueueConfig,
    generation: u64,
    file: File,
    /// Live records, oldest first.
    entries: VecDeque<Entry>,
    /// Bytes of live records.
    bytes: u64,
    /// Where the next record is appended.
    end: u64,
    dropped_total: u64,
}

fn crc32(bytes: &[u8]) -> u32 {
    // CRC-32 (IEEE), bitwise: records are small and this is not on a hot path.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn encode(message: &QueuedMessage) -> io::Result<Vec<u8>> {
    let subject = message.subject.as_bytes();
    let msg_id = message.msg_id.as_bytes();
    let too_long = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} too long for the queue"),
        )
    };
    let subject_len = u16::try_from(subject.len()).map_err(|_| too_long("subject"))?;
    let msg_id_len = u16::try_from(msg_id.len()).map_err(|_| too_long("msg id"))?;
    let mut body = Vec::with_capacity(8 + 4 + subject.len() + msg_id.len() + message.payload.len());
    body.extend_from_slice(&message.queued_at.0.to_le_bytes());
    body.extend_from_slice(&subject_len.to_le_bytes());
    body.extend_from_slice(subject);
    body.extend_from_slice(&msg_id_len.to_le_bytes());
    body.extend_from_slice(msg_id);
    body.extend_from_slice(&message.payload);
    if body.len() + 8 > RECORD_BYTES_MAX {
        return Err(too_long("record"));
    }
    let mut record = Vec::with_capacity(8 + body.len());
    record.extend_from_slice(&((body.len() as u32).to_le_bytes()));
    record.extend_from_slice(&crc32(&body).to_le_bytes());
    record.extend_from_slice(&body);
    Ok(record)
}

fn decode(body: &[u8]) -> Option<QueuedMessage> {
    let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
        let slice = body.get(*at..*at + n)?;
        *at += n;
        Some(slice)
    };
    let mut at = 0;
    let queued_at = i64::from_le_bytes(take(&mut at, 8)?.try_into().ok()?);
    let subject_len = u16::from_le_bytes(take(&mut at, 2)?.try_into().ok()?) as usize;
    let subject = std::str::from_utf8(take(&mut at, subject_len)?).ok()?.to_owned();
    let msg_id_len = u16::from_le_bytes(take(&mut at, 2)?.try_into().ok()?) as usize;
    let msg_id = std::str::from_utf8(take(&mut at, msg_id_len)?).ok()?.to_owned();
    Some(QueuedMessage {
        queued_at: Micros(queued_at),
        subject,
        msg_id,
        payload: Bytes::copy_from_slice(&body[at..]),
    })
}

impl DiskQueue {
    /// Opens (or creates) the queue in `config.dir`, recovering what a previous run left.
    pub fn open(config: DiskQueueConfig) -> io::Result<DiskQueue> {
        fs::create_dir_all(&config.dir)?;
        // No head file is a new queue. An unreadable or garbled one is refused: starting
        // over would leave the live records behind in a later generation's log.
        let head_path = config.dir.join(HEAD_FILE);
        let (generation, head) = match fs::read_to_string(&head_path) {
            Ok(text) => parse_head(&text).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} is not '<generation> <offset>'", head_path.display()),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => (0, 0),
            Err(e) => return Err(e),
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(config.dir.join(log_name(generation)))?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)?;
        let mut entries = VecDeque::new();
        let mut bytes = 0;
        let mut at = usize::try_from(head).unwrap_or(usize::MAX).min(data.len());
        // Scan from the head; stop at the first torn or corrupt record and cut the file there.
        while at + 8 <= data.len() {
            let len =
                u32::from_le_bytes(data[at..at + 4].try_into().expect("invariant: a 4-byte slice")) as usize;
            let crc = u32::from_le_bytes(
                data[at + 4..at + 8]
                    .try_into()
                    .expect("invariant: a 4-byte slice"),
            );
            if len > RECORD_BYTES_MAX {
                break;
            }
            let Some(body) = data.get(at + 8..at + 8 + len) else {
                break;
            };
            if crc32(body) != crc {
                break;
            }
            let Some(message) = decode(body) else { break };
            let record_len = (8 + len) as u64;
            entries.push_back(Entry {
                offset: at as u64,
                len: record_len,
                queued_at: message.queued_at,
            });
            bytes += record_len;
            at += 8 + len;
        }
        let end = at as u64;
        if end < data.len() as u64 {
            file.set_len(end)?;
        }
        Ok(DiskQueue {
            config,
            generation,
            file,
            entries,
            bytes,
            end,
            dropped_total: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of queued records on disk.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Records the bounds dropped since this queue was opened (the `queue_drops` self-point).
    pub fn dropped_total(&self) -> u64 {
        self.dropped_total
    }

    /// Appends a message, then applies the bounds (which may drop the oldest, never this one
    /// unless it alone exceeds `bytes_max`).
    pub fn push(&mut self, message: &QueuedMessage, now: Micros) -> io::Result<()> {
        let record = encode(message)?;
        self.file.seek(SeekFrom::Start(self.end))?;
        self.file.write_all(&record)?;
        self.file.sync_data()?;
        let len = record.len() as u64;
        self.entries.push_back(Entry {
            offset: self.end,
            len,
            queued_at: message.queued_at,
        });
        self.end += len;
        self.bytes += len;
        self.enforce_bounds(now)
    }

    /// The oldest message, read back from disk.
    pub fn front(&mut self) -> io::Result<Option<QueuedMessage>> {
        let Some(entry) = self.entries.front().copied() else {
            return Ok(None);
        };
        let mut record = vec![0u8; entry.len as usize];
        self.file.seek(SeekFrom::Start(entry.offset))?;
        self.file.read_exact(&mut record)?;
        decode(&record[8..])
            .map(Some)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "corrupt queue record"))
    }

    /// Removes the oldest message (it was published).
    pub fn pop_front(&mut self) -> io::Result<()> {
        if let Some(entry) = self.entries.pop_front() {
            self.bytes -= entry.len;
            self.persist_head()?;
        }
        Ok(())
    }

    /// Drops records past the age bound and, oldest first, beyond the byte bound.
    pub fn enforce_bounds(&mut self, now: Micros) -> io::Result<()> {
        let age_max_us = i64::try_from(self.config.age_max_ms)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000);
        let mut dropped = 0;
        while let Some(entry) = self.entries.front() {
            let too_old = now.saturating_sub(entry.queued_at) > age_max_us;
            if !too_old && self.bytes <= self.config.bytes_max {
                break;
            }
            self.bytes -= entry.len;
            self.entries.pop_front();
            dropped += 1;
        }
        if dropped > 0 {
            self.dropped_total += dropped;
            tracing::warn!(
                dropped,
                total = self.dropped_total,
                "driver queue bound dropped observations"
            );
            self.persist_head()?;
        }
        Ok(())
    }

    /// Records how far the queue is consumed; moves to a compacted log when worthwhile.
    fn persist_head(&mut self) -> io::Result<()> {
        let head = self.entries.front().map_or(self.end, |e| e.offset);
        if head >= COMPACT_AFTER_BYTES && head > self.end / 2 {
            return self.compact(head);
        }
        write_head(&self.config.dir, self.generation, head)
    }

    /// Writes the live records to the next generation's log and switches the head to it.
    fn compact(&mut self, head: u64) -> io::Result<()> {
        let mut live = Vec::with_capacity((self.end - head) as usize);
        self.file.seek(SeekFrom::Start(head))?;
        (&mut self.file).take(self.end - head).read_to_end(&mut live)?;
        let next = self.generation + 1;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.config.dir.join(log_name(next)))?;
        file.write_all(&live)?;
        file.sync_data()?;
        write_head(&self.config.dir, next, 0)?;
        // The rename must be durable before the old log goes: sync the folder.
        File::open(&self.config.dir)?.sync_all()?;
        let old = self.config.dir.join(log_name(self.generation));
        if let Err(e) = fs::remove_file(&old) {
            // Only space is lost: the head no longer names it.
            tracing::warn!(error = %e, path = %old.display(), "removing a compacted queue log failed");
        }
        self.generation = next;
        self.file = file;
        for entry in &mut self.entries {
            entry.offset -= head;
        }
        self.end -= head;
        Ok(())
    }
}

/// `(generation, offset)` from the head file's text.
fn parse_head(text: &str) -> Option<(u64, u64)> {
    let (generation, head) = text.trim().split_once(' ')?;
    Some((generation.parse().ok()?, head.parse().ok()?))
}

/// Replaces the head file atomically: written beside it, synced, renamed over it. (A rename
/// lost to a crash leaves the previous head: records popped since come back, and the stream's
/// duplicate window or the unique index drops them.)
fn write_head(dir: &Path, generation: u64, offset: u64) -> io::Result<()> {
    let tmp = dir.join(format!("{HEAD_FILE}.tmp"));
    let mut file = File::create(&tmp)?;
    file.write_all(format!("{generation} {offset}").as_bytes())?;
    file.sync_data()?;
    fs::rename(&tmp, dir.join(HEAD_FILE))
}

/// The points a driver instance reports its queue's drop count, its queue's depth and its
/// publish failures on (the wire contract's names).
pub use sentinel_core::wire::{publish_failures_point, queue_depth_point, queue_drops_point};

/// What [`QueuedPublisher::publish`] did with an observation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Published {
    /// The stream accepted it (or dropped it as a duplicate of an accepted one).
    Stream(PublishAck),
    /// The stream is full, or older messages are still queued ahead of it: it is on disk.
    Queued,
}

/// How long [`QueuedPublisher`] queues without trying the stream after the bus was found
/// unreachable: one try can take the publisher's whole retry span (37 s by default), which a
/// driver polling every few seconds must not pay on every reading.
pub const RELINK_PROBE_INTERVAL_MS: u64 = 5_000;

/// A publisher with the disk queue behind it.
pub struct QueuedPublisher<S: ObservationSink> {
    sink: S,
    queue: DiskQueue,
    /// Until when the stream is not tried: the bus was unreachable at the last try.
    unreachable_until: Option<Micros>,
    relink_probe_interval_ms: u64,
    /// Times the bus was found unreachable since this publisher was made.
    unreachable_total: u64,
    /// Observations [`QueuedPublisher::publish`] could not hand to the stream since this
    /// publisher was made: queued (the stream was full, or refused the older ones still
    /// queued ahead) or failed with an error.
    publish_failures: u64,
}

impl<S: ObservationSink> QueuedPublisher<S> {
    pub fn new(sink: S, queue: DiskQueue) -> QueuedPublisher<S> {
        QueuedPublisher {
            sink,
            queue,
            unreachable_until: None,
            relink_probe_interval_ms: RELINK_PROBE_INTERVAL_MS,
            unreachable_total: 0,
            publish_failures: 0,
        }
    }

    /// Sets how long the stream is left untried after it was found unreachable (default
    /// [`RELINK_PROBE_INTERVAL_MS`]).
    pub fn set_relink_probe_interval_ms(&mut self, interval_ms: u64) {
        self.relink_probe_interval_ms = interval_ms;
    }

    pub fn relink_probe_interval_ms(&self) -> u64 {
        self.relink_probe_interval_ms
    }

    /// Whether the stream is being left untried at `now` (the bus was unreachable).
    pub fn is_cut_off(&self, now: Micros) -> bool {
        self.unreachable_until.is_some_and(|until| now < until)
    }

    /// Times the bus was found unreachable since this publisher was made.
    pub fn unreachable_total(&self) -> u64 {
        self.unreachable_total
    }

    /// The bus could not take a publish tried at `now`, `tried` ago: leave it untried for the
    /// probe interval from when the try ended (a try can take the publisher's whole retry span).
    fn cut_off(&mut self, now: Micros, tried: tokio::time::Instant, error: &BusError) {
        self.unreachable_total = self.unreachable_total.saturating_add(1);
        let interval_ms = i64::try_from(self.relink_probe_interval_ms).unwrap_or(i64::MAX);
        let tried_ms = i64::try_from(tried.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.unreachable_until = Some(now.add_ms(tried_ms.saturating_add(interval_ms)));
        tracing::warn!(
            %error,
            queued = self.queue.len(),
            probe_in_ms = self.relink_probe_interval_ms,
            "the bus is unreachable; queueing to disk"
        );
    }

    pub fn queue(&self) -> &DiskQueue {
        &self.queue
    }

    /// Observations not handed to the stream when published, since this publisher was made
    /// (the `publish_failures` self-point). Drain retries of queued messages are not counted
    /// again.
    pub fn publish_failures(&self) -> u64 {
        self.publish_failures
    }

    /// Publishes one observation: drains the queue first (order is kept), then the stream;
    /// a full stream queues it. Anything but [`Published::Stream`] counts as a publish
    /// failure.
    pub async fn publish(
        &mut self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
        now: Micros,
    ) -> Result<Published, BusError> {
        let published = self.publish_uncounted(subject, msg_id, payload, now).await;
        if !matches!(published, Ok(Published::Stream(_))) {
            self.publish_failures = self.publish_failures.saturating_add(1);
        }
        published
    }

    async fn publish_uncounted(
        &mut self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
        now: Micros,
    ) -> Result<Published, BusError> {
        self.drain(now).await?;
        if self.queue.is_empty() && !self.is_cut_off(now) {
            let tried = tokio::time::Instant::now();
            match self
                .sink
                .publish_observation(subject, msg_id, payload.clone())
                .await
            {
                Ok(ack) => return Ok(Published::Stream(ack)),
                Err(BusError::StreamFull) => {}
                // It may have been stored (a lost ack): queued with its message id all the
                // same; a late copy is recognised by the store.
                Err(error) if error.is_unreachable() => self.cut_off(now, tried, &error),
                Err(other) => return Err(other),
            }
        }
        let message = QueuedMessage {
            queued_at: now,
            subject: subject.to_owned(),
            msg_id: msg_id.to_owned(),
            payload,
        };
        self.queue.push(&message, now).map_err(queue_error)?;
        Ok(Published::Queued)
    }

    /// Publishes the queue's drop count as the driver instance's `queue_drops` self-point,
    /// through the queue like any observation (so it is itself kept when the stream is full).
    /// `source_seq` comes from the instance's own sequence.
    pub async fn publish_drop_count(
        &mut self,
        host: &str,
        driver_instance: &str,
        source_epoch: u32,
        source_seq: u64,
        now: Micros,
    ) -> Result<Published, BusError> {
        let count = self.queue.dropped_total();
        self.publish_count(
            queue_drops_point(host, driver_instance),
            count,
            (host, driver_instance, source_epoch, source_seq),
            now,
        )
        .await
    }

    /// Publishes the queue's depth (messages waiting in it now) as the driver instance's
    /// `queue_depth` self-point, through the queue like [`Self::publish_drop_count`].
    pub async fn publish_queue_depth(
        &mut self,
        host: &str,
        driver_instance: &str,
        source_epoch: u32,
        source_seq: u64,
        now: Micros,
    ) -> Result<Published, BusError> {
        let count = self.queue.len() as u64;
        self.publish_count(
            queue_depth_point(host, driver_instance),
            count,
            (host, driver_instance, source_epoch, source_seq),
            now,
        )
        .await
    }

    /// Publishes [`Self::publish_failures`] as the driver instance's `publish_failures`
    /// self-point, through the queue like [`Self::publish_drop_count`] (the figure sent is the
    /// count before this publish).
    pub async fn publish_failure_count(
        &mut self,
        host: &str,
        driver_instance: &str,
        source_epoch: u32,
        source_seq: u64,
        now: Micros,
    ) -> Result<Published, BusError> {
        let count = self.publish_failures;
        self.publish_count(
            publish_failures_point(host, driver_instance),
            count,
            (host, driver_instance, source_epoch, source_seq),
            now,
        )
        .await
    }

    /// One count as the self-point `point` of `(host, driver_instance)`, keyed
    /// `(source_epoch, source_seq)`.
    async fn publish_count(
        &mut self,
        point: String,
        count: u64,
        (host, driver_instance, source_epoch, source_seq): (&str, &str, u32, u64),
        now: Micros,
    ) -> Result<Published, BusError> {
        let envelope = sentinel_core::wire::EnvelopeOut::new(
            &point,
            driver_instance,
            source_epoch,
            source_seq,
            now,
            serde_json::json!(count),
        );
        let subject = sentinel_core::wire::obs_subject(host, driver_instance);
        self.publish(
            &subject,
            &envelope.msg_id(),
            Bytes::from(envelope.to_bytes()),
            now,
        )
        .await
    }

    /// Publishes queued messages, oldest first, until the queue is empty, the stream is full
    /// again or the bus is unreachable (then it is left untried for the probe interval; not
    /// tried at all while it is). Returns how many reached the stream.
    pub async fn drain(&mut self, now: Micros) -> Result<u64, BusError> {
        self.queue.enforce_bounds(now).map_err(queue_error)?;
        if self.is_cut_off(now) {
            return Ok(0);
        }
        let mut sent = 0;
        while let Some(message) = self.queue.front().map_err(queue_error)? {
            let tried = tokio::time::Instant::now();
            match self
                .sink
                .publish_observation(&message.subject, &message.msg_id, message.payload)
                .await
            {
                Ok(_) => {
                    self.queue.pop_front().map_err(queue_error)?;
                    self.unreachable_until = None;
                    sent += 1;
                }
                Err(BusError::StreamFull) => break,
                Err(error) if error.is_unreachable() => {
                    self.cut_off(now, tried, &error);
                    break;
                }
                Err(other) => return Err(other),
            }
        }
        if sent > 0 {
            tracing::info!(sent, queued = self.queue.len(), "replayed queued observations");
        }
        Ok(sent)
    }
}

fn queue_error(error: io::Error) -> BusError {
    BusError::Other(format!("driver disk queue: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Micros = Micros(1_796_000_000_000_000);

    fn message(i: u64, at: Micros) -> QueuedMessage {
        QueuedMessage {
            queued_at: at,
            subject: "obs.plant-a.modbus-1".into(),
            msg_id: format!("modbus-1:1:{i}"),
            payload: Bytes::from(format!("{{\"n\":{i}}}")),
        }
    }

    fn config(dir: &Path) -> DiskQueueConfig {
        DiskQueueConfig {
            dir: dir.to_owned(),
            bytes_max: 64 << 20,
            age_max_ms: 3_600_000,
        }
    }

    /// A sink the test cuts off and reconnects: while down every publish is unacknowledged.
    #[derive(Default)]
    struct Link {
        down: std::sync::atomic::AtomicBool,
        refuse: std::sync::atomic::AtomicBool,
        tries: std::sync::atomic::AtomicU64,
        stored: std::sync::Mutex<Vec<String>>,
    }

    impl ObservationSink for &Link {
        async fn publish_observation(
            &self,
            subject: &str,
            msg_id: &str,
            _payload: Bytes,
        ) -> Result<PublishAck, BusError> {
            use std::sync::atomic::Ordering::SeqCst;
            self.tries.fetch_add(1, SeqCst);
            if self.refuse.load(SeqCst) {
                return Err(BusError::PermissionDenied {
                    operation: "publish",
                    subject: subject.to_owned(),
                });
            }
            if self.down.load(SeqCst) {
                return Err(BusError::Unacknowledged(format!(
                    "publish on {subject} not acknowledged"
                )));
            }
            let mut stored = self.stored.lock().expect("lock");
            stored.push(msg_id.to_owned());
            Ok(PublishAck {
                seq: stored.len() as u64,
                duplicate: false,
            })
        }
    }

    /// Issue 25 item 2: a lost link queues what the bus could not take and everything after
    /// it, tries the stream only once per probe interval, and replays in order when it is back.
    #[tokio::test]
    async fn a_cut_off_link_queues_then_replays_in_order() {
        use std::sync::atomic::Ordering::SeqCst;
        let dir = temp_dir("cut-off");
        let link = Link::default();
        let mut publisher = QueuedPublisher::new(&link, DiskQueue::open(config(&dir)).expect("open"));
        let subject = "obs.plant-a.modbus-1";
        let publish = |i: u64| (format!("modbus-1:1:{i}"), Bytes::from(format!("{{\"n\":{i}}}")));
        let (id, payload) = publish(1);
        assert!(matches!(
            publisher.publish(subject, &id, payload, T0).await,
            Ok(Published::Stream(_))
        ));

        link.down.store(true, SeqCst);
        let (id, payload) = publish(2);
        assert_eq!(
            publisher
                .publish(subject, &id, payload, T0)
                .await
                .expect("queued"),
            Published::Queued
        );
        assert!(publisher.is_cut_off(T0));
        let tries = link.tries.load(SeqCst);
        // Inside the probe interval the stream is not tried at all.
        let (id, payload) = publish(3);
        assert_eq!(
            publisher
                .publish(subject, &id, payload, T0.add_ms(1_000))
                .await
                .expect("queued"),
            Published::Queued
        );
        assert_eq!(link.tries.load(SeqCst), tries, "not tried while cut off");
        // After it, one try (the oldest queued), which fails: still queued, cut off again.
        let after_probe = T0.add_ms(RELINK_PROBE_INTERVAL_MS as i64);
        let (id, payload) = publish(4);
        assert_eq!(
            publisher
                .publish(subject, &id, payload, after_probe)
                .await
                .expect("queued"),
            Published::Queued
        );
        assert_eq!(link.tries.load(SeqCst), tries + 1, "one probe");
        assert_eq!(publisher.queue().len(), 3);
        assert_eq!(publisher.unreachable_total(), 2);

        // The link is back: the queue replays oldest first, then the new one goes through.
        link.down.store(false, SeqCst);
        let (id, payload) = publish(5);
        assert!(matches!(
            publisher
                .publish(
                    subject,
                    &id,
                    payload,
                    after_probe.add_ms(RELINK_PROBE_INTERVAL_MS as i64)
                )
                .await,
            Ok(Published::Stream(_))
        ));
        assert!(publisher.queue().is_empty());
        assert_eq!(
            *link.stored.lock().expect("lock"),
            [
                "modbus-1:1:1",
                "modbus-1:1:2",
                "modbus-1:1:3",
                "modbus-1:1:4",
                "modbus-1:1:5"
            ]
        );
        assert_eq!(publisher.publish_failures(), 3);

        // A refusal is no lost link: returned, not queued.
        link.refuse.store(true, SeqCst);
        let (id, payload) = publish(6);
        let refused = publisher
            .publish(subject, &id, payload, after_probe.add_ms(20_000))
            .await
            .expect_err("refused");
        assert_eq!(
            refused.to_string(),
            "the bus refused to let this principal publish on obs.plant-a.modbus-1: not permitted"
        );
        assert!(publisher.queue().is_empty());
        let _ = fs::remove_dir_all(&dir);
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sentinel-queue-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_garbled_head_is_refused_rather_than_started_over() {
        let dir = temp_dir("garbled");
        {
            let mut q = DiskQueue::open(config(&dir)).expect("open");
            q.push(&message(1, T0), T0).expect("push");
        }
        fs::write(dir.join(HEAD_FILE), "not a head").expect("garble");
        let error = DiskQueue::open(config(&dir)).err().expect("refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn survives_a_restart_in_order_and_cuts_a_torn_tail() {
        let dir = temp_dir("restart");
        {
            let mut q = DiskQueue::open(config(&dir)).expect("open");
            for i in 1..=5 {
                q.push(&message(i, T0), T0).expect("push");
            }
            q.pop_front().expect("pop");
        }
        // A crash mid-append leaves half a record.
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.join(log_name(0)))
            .expect("log");
        file.write_all(&[200, 0, 0, 0, 1, 2]).expect("torn");
        drop(file);
        let mut q = DiskQueue::open(config(&dir)).expect("reopen");
        assert_eq!(q.len(), 4);
        let ids: Vec<String> = std::iter::from_fn(|| {
            let m = q.front().expect("read")?;
            q.pop_front().expect("pop");
            Some(m.msg_id)
        })
        .collect();
        assert_eq!(
            ids,
            ["modbus-1:1:2", "modbus-1:1:3", "modbus-1:1:4", "modbus-1:1:5"]
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn bounds_drop_the_oldest_and_count_it() {
        let dir = temp_dir("bounds");
        let record_len = encode(&message(1, T0)).expect("encode").len() as u64;
        let mut q = DiskQueue::open(DiskQueueConfig {
            bytes_max: 3 * record_len,
            ..config(&dir)
        })
        .expect("open");
        for i in 1..=5 {
            q.push(&message(i, T0.add_ms(i as i64)), T0).expect("push");
        }
        assert_eq!((q.len(), q.dropped_total()), (3, 2), "size bound");
        assert_eq!(q.front().expect("read").expect("front").msg_id, "modbus-1:1:3");
        // Queued at T0+3 ms and later; at T0+1 h+4 ms only the first is more than an hour old.
        q.enforce_bounds(T0.add_ms(3_600_000 + 4)).expect("age");
        assert_eq!((q.len(), q.dropped_total()), (2, 3), "age bound");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn compaction_keeps_the_live_records() {
        let dir = temp_dir("compact");
        let mut q = DiskQueue::open(config(&dir)).expect("open");
        let big = |i: u64| QueuedMessage {
            payload: Bytes::from(vec![b'x'; 64 * 1024]),
            ..message(i, T0)
        };
        for i in 0..40 {
            q.push(&big(i), T0).expect("push");
        }
        for _ in 0..30 {
            q.pop_front().expect("pop");
        }
        assert!(!dir.join(log_name(0)).exists(), "the consumed log is gone");
        assert!(
            fs::metadata(dir.join(log_name(1))).expect("log").len() < 20 * 64 * 1024,
            "compacted"
        );
        drop(q);
        let mut q = DiskQueue::open(config(&dir)).expect("reopen");
        assert_eq!(q.len(), 10);
        assert_eq!(q.front().expect("read").expect("front").msg_id, "modbus-1:1:30");
        let _ = fs::remove_dir_all(&dir);
    }
}

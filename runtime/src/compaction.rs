//! The running core's compaction of one closed day, performed (issue 24 item 1; core runtime
//! spec, "compression from day seven"): `Effect::CompactDay` in, `Input::DayCompacted` (or
//! `CompactionFenced`) out.
//!
//! Owns: reading the stream's oldest message for the request — a missing or inconsistent
//! answer compacts nothing — and telling the store's answers apart: done, fenced (the core
//! stops), the stream may still redeliver a message of the day (normal, quiet: logged at DEBUG,
//! retried a run later), anything else (a warning, retried). Nothing logged names a value.
//! The store owns the compacted form and the refusals (`Store::compact_day`). A request for a
//! day's minute rollups alone (`CompactionTarget::MinuteRollups`) reads no lag (no stream
//! rule) and calls `Store::compact_rollup_day`.

use sentinel_core::compaction::{CompactionDayRequest, CompactionOutcome, CompactionTarget};
use sentinel_core::{Input, Micros, RetentionClass};
use sentinel_ports::{Bus, CompactionRequest, Lag, RollupCompactionRequest, Store, StoreError, day_name};
use tracing::{debug, error, info, warn};

use crate::telemetry::{StoreOp, Telemetry};

// The core's schedule and the store hold the same bound on a day's age.
const _: () =
    assert!(sentinel_core::compaction::COMPACT_AFTER_DAYS_MAX == sentinel_ports::COMPACT_AFTER_DAYS_MAX);

/// Who the running core's compactions are recorded as.
pub const PRINCIPAL: &str = "core:compaction";

/// The `ingested_at` of the oldest message the stream holds, from a lag reading taken at `now`
/// (`None`: the stream is empty). The bus reports the age in whole milliseconds, so this is a
/// millisecond early: a refusal is never missed. A stream that holds messages but names no
/// oldest is an error, never "empty".
pub fn stream_oldest(lag: &Lag, now: Micros) -> Result<Option<Micros>, String> {
    if lag.stream_messages == 0 {
        return Ok(None);
    }
    let Some(age_ms) = lag.oldest_unacked_age_ms else {
        return Err(format!(
            "the stream holds {} message(s) but reports no oldest",
            lag.stream_messages
        ));
    };
    let age_us = i64::try_from(age_ms.saturating_add(1))
        .unwrap_or(i64::MAX / 2)
        .saturating_mul(1_000);
    let oldest = Micros(now.0.saturating_sub(age_us));
    debug_assert!(oldest < now);
    Ok(Some(oldest))
}

/// Compacts the request's day: for a class's rows, reads the stream's oldest message, then
/// `Store::compact_day`; for the minute rollups, `Store::compact_rollup_day`.
pub async fn compact_day<B: Bus, S: Store>(
    bus: &B,
    store: &S,
    request: CompactionDayRequest,
    telemetry: Option<&Telemetry>,
) -> Input {
    match request.target {
        CompactionTarget::Rows(class) => compact_rows(bus, store, class, request, telemetry).await,
        CompactionTarget::MinuteRollups => compact_rollups(store, request, telemetry).await,
    }
}

/// A day's minute rollups alone.
async fn compact_rollups<S: Store>(
    store: &S,
    request: CompactionDayRequest,
    telemetry: Option<&Telemetry>,
) -> Input {
    let day = day_name(request.day);
    let asked = RollupCompactionRequest {
        day: request.day,
        now: request.at,
        compact_after_days: request.after_days,
        principal: PRINCIPAL,
    };
    match store.compact_rollup_day(request.epoch, asked).await {
        Ok(done) => {
            if done.buckets > 0 {
                info!(
                    day,
                    buckets = done.buckets,
                    chunks = done.chunks,
                    bytes_before = done.bytes_before,
                    bytes_after = done.bytes_after,
                    epoch = request.epoch,
                    "compacted a closed day's minute rollups"
                );
            }
            Input::DayCompacted(CompactionOutcome::Done { rows: done.buckets })
        }
        Err(fenced @ StoreError::Fenced { .. }) => {
            error!(refusal = %fenced, "rollup compaction fenced");
            if let Some(t) = telemetry {
                t.store_error(StoreOp::Compaction, Some(&fenced));
            }
            Input::CompactionFenced
        }
        Err(e) => {
            if let Some(t) = telemetry {
                t.store_error(StoreOp::Compaction, Some(&e));
            }
            warn!(error = %e, day, "rollup compaction failed; retrying later");
            Input::DayCompacted(CompactionOutcome::Failed)
        }
    }
}

/// A class's rows of the day (and the day's minute rollups with them).
async fn compact_rows<B: Bus, S: Store>(
    bus: &B,
    store: &S,
    retention_class: RetentionClass,
    request: CompactionDayRequest,
    telemetry: Option<&Telemetry>,
) -> Input {
    let day = day_name(request.day);
    let class = retention_class.as_str();
    let oldest = match bus
        .lag()
        .await
        .map_err(|e| e.to_string())
        .and_then(|lag| stream_oldest(&lag, request.at))
    {
        Ok(oldest) => oldest,
        Err(why) => {
            warn!(error = %why, class, day, "compaction: the stream's oldest message could not be read; nothing compacted, retrying later");
            return Input::DayCompacted(CompactionOutcome::Failed);
        }
    };
    let asked = CompactionRequest {
        class: retention_class,
        day: request.day,
        now: request.at,
        compact_after_days: request.after_days,
        stream_oldest: oldest,
        principal: PRINCIPAL,
    };
    match store.compact_day(request.epoch, asked).await {
        Ok(done) => {
            if done.rows > 0 {
                info!(
                    class,
                    day,
                    rows = done.rows,
                    chunks = done.chunks,
                    bytes_before = done.bytes_before,
                    bytes_after = done.bytes_after,
                    epoch = request.epoch,
                    "compacted a closed day"
                );
            }
            Input::DayCompacted(CompactionOutcome::Done { rows: done.rows })
        }
        Err(fenced @ StoreError::Fenced { .. }) => {
            error!(refusal = %fenced, "compaction fenced");
            if let Some(t) = telemetry {
                t.store_error(StoreOp::Compaction, Some(&fenced));
            }
            Input::CompactionFenced
        }
        Err(StoreError::StreamHoldsDay { .. }) => {
            debug!(
                class,
                day, "compaction waits: the stream may still redeliver a message of the day"
            );
            Input::DayCompacted(CompactionOutcome::StreamHolds)
        }
        Err(e) => {
            if let Some(t) = telemetry {
                t.store_error(StoreOp::Compaction, Some(&e));
            }
            warn!(error = %e, class, day, "compaction failed; retrying later");
            Input::DayCompacted(CompactionOutcome::Failed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_stream_holds_no_day_and_one_without_an_oldest_is_an_error() {
        let now = Micros(1_800_000_000_000_000);
        assert_eq!(stream_oldest(&Lag::default(), now), Ok(None));
        let held = Lag {
            stream_messages: 3,
            oldest_unacked_age_ms: Some(2_000),
            ..Lag::default()
        };
        assert_eq!(stream_oldest(&held, now), Ok(Some(Micros(now.0 - 2_001_000))));
        let silent = Lag {
            stream_messages: 3,
            ..Lag::default()
        };
        assert_eq!(
            stream_oldest(&silent, now),
            Err("the stream holds 3 message(s) but reports no oldest".into())
        );
    }
}

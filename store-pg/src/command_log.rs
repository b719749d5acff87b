//! The operator's read-only views of the command plane (issue 21 item 10): `sentinel desired`
//! (each writable point's `point_desired` row, its open claims, the latest observation and the
//! last verification) and `sentinel why` (the control events a command id names, and the claim
//! behind a command the core issued on its own: a lapse or the end of a minimum on/off hold).
//! Reads only, served by migration 0011's partial indexes; not `Store` operations, because no
//! core reads them (like `inspect.rs`'s counts for `sentinel status`).

use sentinel_ports::{StoreError, StoredControlEvent};
use sqlx::Row;

use crate::{PgStore, db_error};

/// Most control events `why` returns for one command id (a command re-sent every five minutes
/// for a week stays well under it).
pub const WHY_EVENTS_MAX: i64 = 5_000;

/// Most writable points `desired` reports (a registry holds at most 65,536 points).
pub const DESIRED_POINTS_MAX: i64 = 65_536;

/// Each writable point's view as one JSON object: `point_id`, `desired` (the value), `since`,
/// `core_epoch`, `control_seq`, `winner` (holder, band, priority, since, until; `null` when no
/// claim wins), `claims` (every open claim: its `claim_set` payload with its `seq`, `set_at` and
/// `principal`; open means its holder's latest claim event on the point is a `claim_set` whose
/// `until` is in the future or absent), `observed` (the newest committed observation: value,
/// quality, observed_at; `null` when none) and `verification` (the newest `command_verified` or
/// `command_diverged` event, its kind, seq, occurred_at and payload; `null` when none).
const DESIRED_SQL: &str = "\
SELECT jsonb_build_object(
  'point_id', d.point_id,
  'desired', d.value,
  'since', d.since,
  'core_epoch', d.core_epoch,
  'control_seq', d.control_seq,
  'winner', CASE WHEN d.winner_holder IS NULL THEN NULL ELSE jsonb_build_object(
      'holder', d.winner_holder, 'band', d.winner_band, 'priority', d.winner_priority,
      'since', d.winner_since, 'until', d.winner_until) END,
  'claims', COALESCE((
      SELECT jsonb_agg(c.payload || jsonb_build_object('seq', c.seq, 'set_at', c.occurred_at,
                                                       'principal', c.principal) ORDER BY c.seq)
      FROM (SELECT DISTINCT ON (e.payload->>'holder') e.*
            FROM control_event e
            WHERE e.point_id = d.point_id AND e.kind IN ('claim_set', 'claim_released')
            ORDER BY e.payload->>'holder', e.seq DESC) c
      WHERE c.kind = 'claim_set'
        AND (c.payload->>'until' IS NULL OR (c.payload->>'until')::timestamptz > now())), '[]'::jsonb),
  'observed', (
      SELECT jsonb_build_object(
          'value', COALESCE(to_jsonb(o.value_num), to_jsonb(o.value_bool), to_jsonb(o.value_text)),
          'quality', o.quality, 'observed_at', o.observed_at)
      FROM observation o WHERE o.point_id = d.point_id
      ORDER BY o.observed_at DESC, o.ingested_at DESC LIMIT 1),
  'verification', (
      SELECT jsonb_build_object('kind', v.kind, 'seq', v.seq, 'occurred_at', v.occurred_at,
                                'payload', v.payload)
      FROM control_event v
      WHERE v.point_id = d.point_id AND v.kind IN ('command_verified', 'command_diverged')
      ORDER BY v.seq DESC LIMIT 1)
)::text AS view
FROM point_desired d
WHERE $1::text IS NULL OR d.point_id = $1
ORDER BY d.point_id
LIMIT $2";

impl PgStore {
    /// `sentinel desired [POINT]`: one JSON object per writable point with a `point_desired`
    /// row (see [`DESIRED_SQL`]'s fields), or only `point`'s.
    pub async fn desired_view(&self, point: Option<&str>) -> Result<Vec<serde_json::Value>, StoreError> {
        let rows = sqlx::query(DESIRED_SQL)
            .bind(point)
            .bind(DESIRED_POINTS_MAX)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading point_desired and its claims"))?;
        rows.iter()
            .map(|row| {
                let text: String = row.try_get("view").map_err(db_error("reading a desired view"))?;
                serde_json::from_str(&text)
                    .map_err(|e| StoreError::Other(format!("a desired view is not JSON: {e}")))
            })
            .collect()
    }

    /// `sentinel why COMMAND_ID`: every control event whose payload names `command_id`, in log
    /// order (at most [`WHY_EVENTS_MAX`]).
    pub async fn events_of_command(&self, command_id: &str) -> Result<Vec<StoredControlEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, occurred_at, kind, point_id, principal, core_epoch, payload::text AS payload, \
             registry_version FROM control_event \
             WHERE payload ? 'command_id' AND payload->>'command_id' = $1 ORDER BY seq LIMIT $2",
        )
        .bind(command_id)
        .bind(WHY_EVENTS_MAX)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error("reading a command's control events"))?;
        rows.iter().map(crate::control::stored_control_event).collect()
    }

    /// The claim behind a command the core issued on its own (a lapse, the end of a hold):
    /// `holder`'s latest `claim_set` on `point_id` before `before_seq`.
    pub async fn claim_before(
        &self,
        point_id: &str,
        holder: &str,
        before_seq: i64,
    ) -> Result<Option<StoredControlEvent>, StoreError> {
        let row = sqlx::query(
            "SELECT seq, occurred_at, kind, point_id, principal, core_epoch, payload::text AS payload, \
             registry_version FROM control_event \
             WHERE kind IN ('claim_set', 'claim_released') AND point_id = $1 \
               AND payload->>'holder' = $2 AND seq < $3 AND kind = 'claim_set' \
             ORDER BY seq DESC LIMIT 1",
        )
        .bind(point_id)
        .bind(holder)
        .bind(before_seq)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error("reading the claim behind a command"))?;
        row.as_ref().map(crate::control::stored_control_event).transpose()
    }
}

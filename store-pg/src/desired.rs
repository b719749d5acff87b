//! `point_desired` (migration 0008; issue 21 item 2): the resolver's rows, each upserted in the
//! same fenced transaction as the control events of the claim change that produced it, and
//! read back at restart.

use sentinel_core::ControlEvent;
use sentinel_core::Micros;
use sentinel_core::arbitration::{Band, Claim, Desired, DesiredRow};
use sentinel_core::registry::CommandValue;
use sentinel_ports::{StoreError, StoredDesired};
use sqlx::Row;

use crate::control::insert_control_events;
use crate::{PgStore, db_error, epoch_to_db, fence, from_odt, to_odt};

const UPSERT_DESIRED: &str = "\
INSERT INTO point_desired (point_id, value, winner_holder, winner_band, winner_priority, \
  winner_since, winner_until, since, core_epoch, control_seq, claims) \
SELECT p, v::jsonb, h, b, pr, ws, wu, s, $9, $10, c::jsonb \
FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::smallint[], $6::timestamptz[], \
            $7::timestamptz[], $8::timestamptz[], $11::text[]) AS t(p, v, h, b, pr, ws, wu, s, c) \
ON CONFLICT (point_id) DO UPDATE SET value = EXCLUDED.value, claims = EXCLUDED.claims, \
  winner_holder = EXCLUDED.winner_holder, \
  winner_band = EXCLUDED.winner_band, winner_priority = EXCLUDED.winner_priority, \
  winner_since = EXCLUDED.winner_since, winner_until = EXCLUDED.winner_until, \
  since = EXCLUDED.since, core_epoch = EXCLUDED.core_epoch, control_seq = EXCLUDED.control_seq";

/// A value as its JSON text (a bare number, bool or string).
fn value_text(value: &CommandValue) -> String {
    value.to_json().to_string()
}

/// A point's open claims as the `claims` column holds them (migration 0010): times in UTC µs.
fn claims_text(claims: &[Claim]) -> String {
    serde_json::Value::Array(
        claims
            .iter()
            .map(|c| {
                serde_json::json!({
                    "holder": &*c.holder,
                    "band": c.band.as_str(),
                    "priority": c.priority,
                    "value": c.value.to_json(),
                    "since_us": c.since.0,
                    "until_us": c.until.map(|u| u.0),
                })
            })
            .collect(),
    )
    .to_string()
}

/// The `claims` column read back; an entry that does not parse is an error naming the point.
fn claims_from_text(point_id: &str, text: &str) -> Result<Vec<Claim>, StoreError> {
    let bad = |what: &str| StoreError::Other(format!("point_desired of {point_id:?}: a claim {what}"));
    let entries: Vec<serde_json::Value> =
        serde_json::from_str(text).map_err(|_| bad("list that does not parse"))?;
    entries
        .iter()
        .map(|c| {
            Ok(Claim {
                holder: c["holder"]
                    .as_str()
                    .ok_or_else(|| bad("without a holder"))?
                    .into(),
                band: c["band"]
                    .as_str()
                    .and_then(Band::parse)
                    .ok_or_else(|| bad("with an unknown band"))?,
                priority: c["priority"]
                    .as_u64()
                    .and_then(|p| u8::try_from(p).ok())
                    .ok_or_else(|| bad("without a priority"))?,
                value: CommandValue::from_json(&c["value"]).ok_or_else(|| bad("without a value"))?,
                since: Micros(c["since_us"].as_i64().ok_or_else(|| bad("without since_us"))?),
                until: c["until_us"].as_i64().map(Micros),
            })
        })
        .collect()
}

impl PgStore {
    pub(crate) async fn write_arbitration_inner(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
        desired: Vec<DesiredRow>,
    ) -> Result<Vec<i64>, StoreError> {
        sentinel_ports::check_arbitration_write(epoch, &events, &desired)?;
        let epoch_db = epoch_to_db(epoch)?;
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("beginning the arbitration transaction"))?;
        fence(&mut tx, epoch, self.core_start()).await?;
        let seqs =
            insert_control_events(&mut tx, epoch, &events, "inserting a claim's control events").await?;
        if !desired.is_empty() {
            let control_seq: i64 = match seqs.last() {
                Some(&seq) => seq,
                None => sqlx::query_scalar("SELECT coalesce(max(seq), 0) FROM control_event")
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db_error("reading the newest control event"))?,
            };
            let n = desired.len();
            let mut point_ids = Vec::with_capacity(n);
            let mut values = Vec::with_capacity(n);
            let mut holders = Vec::with_capacity(n);
            let mut bands = Vec::with_capacity(n);
            let mut priorities = Vec::with_capacity(n);
            let mut winner_since = Vec::with_capacity(n);
            let mut winner_until = Vec::with_capacity(n);
            let mut since = Vec::with_capacity(n);
            let mut claims = Vec::with_capacity(n);
            for row in &desired {
                claims.push(claims_text(&row.claims));
                let d = &row.desired;
                point_ids.push(&*row.point_id);
                values.push(d.value.as_ref().map(value_text));
                holders.push(d.winner.as_ref().map(|w| w.holder.to_string()));
                bands.push(d.winner.as_ref().map(|w| w.band.as_str()));
                priorities.push(d.winner.as_ref().map(|w| i16::from(w.priority)));
                winner_since.push(d.winner.as_ref().map(|w| to_odt(w.since)).transpose()?);
                winner_until.push(d.winner.as_ref().and_then(|w| w.until).map(to_odt).transpose()?);
                since.push(to_odt(d.since)?);
            }
            sqlx::query(UPSERT_DESIRED)
                .bind(point_ids)
                .bind(values)
                .bind(holders)
                .bind(bands)
                .bind(priorities)
                .bind(winner_since)
                .bind(winner_until)
                .bind(since)
                .bind(epoch_db)
                .bind(control_seq)
                .bind(claims)
                .execute(&mut *tx)
                .await
                .map_err(db_error("upserting point_desired"))?;
        }
        tx.commit()
            .await
            .map_err(db_error("committing the arbitration transaction"))?;
        tracing::debug!(
            events = seqs.len(),
            rows = desired.len(),
            epoch,
            "arbitration committed"
        );
        Ok(seqs)
    }

    pub(crate) async fn load_point_desired_inner(&self) -> Result<Vec<StoredDesired>, StoreError> {
        let limit = i64::try_from(sentinel_ports::POINT_DESIRED_LOAD_MAX).unwrap_or(i64::MAX);
        let rows = sqlx::query(
            "SELECT point_id, value::text AS value, winner_holder, winner_band, winner_priority, \
             winner_since, winner_until, since, core_epoch, control_seq, claims::text AS claims \
             FROM point_desired ORDER BY point_id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error("loading point_desired"))?;
        rows.iter()
            .map(|row| {
                let get = |what: &'static str| db_error(what);
                let point_id: String = row.try_get("point_id").map_err(get("reading point_id"))?;
                let value: Option<String> = row.try_get("value").map_err(get("reading value"))?;
                let value = value
                    .map(|text| {
                        serde_json::from_str::<CommandValue>(&text).map_err(|e| {
                            StoreError::Other(format!(
                                "point_desired of {point_id:?}: the value does not parse: {e}"
                            ))
                        })
                    })
                    .transpose()?;
                let holder: Option<String> = row
                    .try_get("winner_holder")
                    .map_err(get("reading winner_holder"))?;
                let winner = match holder {
                    None => None,
                    Some(holder) => {
                        let band: String = row.try_get("winner_band").map_err(get("reading winner_band"))?;
                        let band = Band::parse(&band).ok_or_else(|| {
                            StoreError::Other(format!("point_desired of {point_id:?}: unknown band {band:?}"))
                        })?;
                        let priority: i16 = row
                            .try_get("winner_priority")
                            .map_err(get("reading winner_priority"))?;
                        let since =
                            from_odt(row.try_get("winner_since").map_err(get("reading winner_since"))?);
                        let until: Option<time::OffsetDateTime> =
                            row.try_get("winner_until").map_err(get("reading winner_until"))?;
                        let value = value.clone().ok_or_else(|| {
                            StoreError::Other(format!(
                                "point_desired of {point_id:?}: a winner without a value"
                            ))
                        })?;
                        Some(Claim {
                            holder: holder.into(),
                            band,
                            priority: u8::try_from(priority).unwrap_or(u8::MAX),
                            value,
                            since,
                            until: until.map(from_odt),
                        })
                    }
                };
                let claims: String = row.try_get("claims").map_err(get("reading claims"))?;
                let claims = claims_from_text(&point_id, &claims)?;
                Ok(StoredDesired {
                    row: DesiredRow {
                        claims,
                        point_id: point_id.as_str().into(),
                        desired: Desired {
                            value,
                            winner,
                            since: from_odt(row.try_get("since").map_err(get("reading since"))?),
                        },
                    },
                    core_epoch: row
                        .try_get::<i32, _>("core_epoch")
                        .map_err(get("reading core_epoch"))?
                        .max(0) as u32,
                    control_seq: row.try_get("control_seq").map_err(get("reading control_seq"))?,
                })
            })
            .collect()
    }
}

//! The integer keys of points and driver instances (migration 0014; issue 24 item 1): the
//! bounded cache of `point_key` and `instance_key` the commit binds its rows' keys from, so
//! the commit statement carries integers and resolves nothing.
//!
//! A key names its id for good (never updated, deleted or reused), so a cached entry is never
//! stale and nothing invalidates it. A miss reads the mapping for all of a batch's missing ids
//! at once; an id with no key yet (a caller that stored no registry: a registry load assigns
//! every key its version needs) gets one by an insert of its own, committed before the batch's
//! statement. That insert is not fenced: it writes no observation, and a key assigned by a
//! deposed writer is a name that stays right.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use sentinel_core::ObsRow;
use sentinel_ports::StoreError;

use crate::{PgStore, db_error};

/// Entries kept per mapping; past it the map is emptied and refilled from the next misses
/// (a registry names far fewer ids; a batch holds at most `commit_rows_max`, 65,536 by default).
pub const KEYS_CACHED_MAX: usize = 262_144;

/// The keys a handle has seen, shared by its clones.
#[derive(Debug, Default)]
pub(crate) struct KeyCache {
    points: FxHashMap<Arc<str>, i32>,
    instances: FxHashMap<Arc<str>, i32>,
}

impl KeyCache {
    fn insert(map: &mut FxHashMap<Arc<str>, i32>, id: &str, key: i32) {
        if map.len() >= KEYS_CACHED_MAX && !map.contains_key(id) {
            map.clear();
        }
        map.insert(Arc::from(id), key);
    }
}

const READ_KEYS: &str = "SELECT 0::smallint, point_id, key FROM point_key WHERE point_id = ANY($1::text[]) \
     UNION ALL SELECT 1::smallint, driver_instance, key FROM instance_key \
     WHERE driver_instance = ANY($2::text[])";

/// Keys for ids that have none; `NOT EXISTS` first, so an identity value is drawn only for an
/// id really new. Its own statement, so the read after it sees every key (ours, or another
/// session's that this insert waited for).
const ASSIGN_KEYS: &str = "WITH p AS (INSERT INTO point_key (point_id) \
       SELECT DISTINCT x FROM unnest($1::text[]) x \
       WHERE NOT EXISTS (SELECT 1 FROM point_key k WHERE k.point_id = x) ON CONFLICT DO NOTHING) \
     INSERT INTO instance_key (driver_instance) SELECT DISTINCT x FROM unnest($2::text[]) x \
     WHERE NOT EXISTS (SELECT 1 FROM instance_key k WHERE k.driver_instance = x) ON CONFLICT DO NOTHING";

impl PgStore {
    /// Each row's point key and instance key, in row order.
    pub(crate) async fn row_keys(&self, rows: &[ObsRow]) -> Result<(Vec<i32>, Vec<i32>), StoreError> {
        if let Some(keys) = self.cached_keys(rows) {
            return Ok(keys);
        }
        let (points, instances) = self.missing_ids(rows);
        self.load_keys(&points, &instances).await?;
        if let Some(keys) = self.cached_keys(rows) {
            return Ok(keys);
        }
        let (points, instances) = self.missing_ids(rows);
        sqlx::query(ASSIGN_KEYS)
            .bind(&points)
            .bind(&instances)
            .execute(&self.pool)
            .await
            .map_err(db_error("assigning point and instance keys"))?;
        tracing::debug!(
            points = points.len(),
            instances = instances.len(),
            "assigned keys at commit (no registry version named these ids)"
        );
        self.load_keys(&points, &instances).await?;
        self.cached_keys(rows).ok_or_else(|| {
            StoreError::Other("a point or driver instance of the batch has no key after assigning one".into())
        })
    }

    /// Every row's keys from the cache, or `None` at the first miss.
    fn cached_keys(&self, rows: &[ObsRow]) -> Option<(Vec<i32>, Vec<i32>)> {
        let cache = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let mut points = Vec::with_capacity(rows.len());
        let mut instances = Vec::with_capacity(rows.len());
        for row in rows {
            points.push(*cache.points.get(&*row.point_id)?);
            instances.push(*cache.instances.get(&*row.key.driver_instance)?);
        }
        Some((points, instances))
    }

    /// The batch's ids the cache does not hold, each once.
    fn missing_ids(&self, rows: &[ObsRow]) -> (Vec<String>, Vec<String>) {
        let cache = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let mut points: Vec<String> = Vec::new();
        let mut instances: Vec<String> = Vec::new();
        for row in rows {
            if !cache.points.contains_key(&*row.point_id) {
                points.push(row.point_id.to_string());
            }
            if !cache.instances.contains_key(&*row.key.driver_instance) {
                instances.push(row.key.driver_instance.to_string());
            }
        }
        points.sort_unstable();
        points.dedup();
        instances.sort_unstable();
        instances.dedup();
        (points, instances)
    }

    /// Reads the keys of these ids into the cache (those that have one).
    async fn load_keys(&self, points: &[String], instances: &[String]) -> Result<(), StoreError> {
        let found: Vec<(i16, String, i32)> = sqlx::query_as(READ_KEYS)
            .bind(points)
            .bind(instances)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading point and instance keys"))?;
        let mut cache = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let cache = &mut *cache;
        for (kind, id, key) in found {
            let map = if kind == 0 {
                &mut cache.points
            } else {
                &mut cache.instances
            };
            KeyCache::insert(map, &id, key);
        }
        Ok(())
    }
}

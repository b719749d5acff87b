//! Registry storage (ingest spec, "The registry is versioned data"; DESIGN.md §4): one blob per
//! new descriptor hash, one `point_descriptor` row per point per version, a version only for new
//! content, the integer keys of its points and driver instances (migration 0014); and reading a
//! version back.

use sentinel_core::RegistrySnapshot;

use sentinel_ports::{RegistryLoad, StoreError, StoredRegistry};

use crate::{PgStore, db_error};

/// A key for each of the version's points that has none, in the ids' byte order.
const ASSIGN_POINT_KEYS: &str = "INSERT INTO point_key (point_id) \
     SELECT p FROM unnest($1::text[]) AS u(p) \
     WHERE NOT EXISTS (SELECT 1 FROM point_key k WHERE k.point_id = u.p) \
     ORDER BY p COLLATE \"C\" ON CONFLICT DO NOTHING";

/// A key for each driver instance the version's assignments name that has none.
const ASSIGN_INSTANCE_KEYS: &str = "INSERT INTO instance_key (driver_instance) \
     SELECT di FROM (SELECT DISTINCT b.descriptor -> 'assignment' ->> 'driver_instance' AS di \
       FROM point_descriptor pd JOIN descriptor_blob b ON b.hash = pd.hash WHERE pd.version = $1) u \
     WHERE di IS NOT NULL AND NOT EXISTS (SELECT 1 FROM instance_key k WHERE k.driver_instance = u.di) \
     ORDER BY di COLLATE \"C\" ON CONFLICT DO NOTHING";

impl PgStore {
    pub(crate) async fn store_registry_inner(
        &self,
        snapshot: &RegistrySnapshot,
    ) -> Result<RegistryLoad, StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("beginning the registry transaction"))?;
        // Serialises loads so two cannot both decide to create version max+1.
        sqlx::query("LOCK TABLE registry_version IN EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await
            .map_err(db_error("locking registry_version"))?;
        let newest: Option<(i32, String)> = sqlx::query_as(
            "SELECT version, content_hash FROM registry_version ORDER BY version DESC LIMIT 1",
        )
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error("reading the newest registry version"))?;
        if let Some((version, content_hash)) = &newest
            && *content_hash == snapshot.content_hash
        {
            tx.rollback()
                .await
                .map_err(db_error("ending the registry transaction"))?;
            return Ok(RegistryLoad {
                version: *version,
                created: false,
            });
        }
        let version = newest.map_or(1, |(v, _)| v + 1);
        let mut hashes = Vec::with_capacity(snapshot.entries.len());
        let mut canon = Vec::with_capacity(snapshot.entries.len());
        let mut ids = Vec::with_capacity(snapshot.entries.len());
        for entry in &snapshot.entries {
            hashes.push(entry.hash.as_str());
            canon.push(entry.canonical_json.as_str());
            ids.push(entry.point_id.as_str());
        }
        sqlx::query(
            "INSERT INTO descriptor_blob (hash, descriptor, canonical) \
             SELECT h, c::jsonb, c FROM UNNEST($1::text[], $2::text[]) AS u(h, c) \
             ON CONFLICT (hash) DO NOTHING",
        )
        .bind(&hashes)
        .bind(&canon)
        .execute(&mut *tx)
        .await
        .map_err(db_error("storing descriptor blobs"))?;
        sqlx::query(
            "INSERT INTO registry_version (version, loaded_at, git_sha, content_hash) VALUES ($1, now(), $2, $3)",
        )
        .bind(version)
        .bind(snapshot.git_sha.as_str())
        .bind(snapshot.content_hash.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error("storing the registry version"))?;
        sqlx::query(
            "INSERT INTO point_descriptor (version, point_id, hash) \
             SELECT $1, p, h FROM UNNEST($2::text[], $3::text[]) AS u(p, h)",
        )
        .bind(version)
        .bind(&ids)
        .bind(&hashes)
        .execute(&mut *tx)
        .await
        .map_err(db_error("storing point descriptors"))?;
        // Keys for the raw rows (migration 0014): every point of the version and every driver
        // instance its assignments name get one if they have none; a key is never reused, so
        // a point removed and added back finds its old one.
        sqlx::query(ASSIGN_POINT_KEYS)
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(db_error("assigning point keys"))?;
        sqlx::query(ASSIGN_INSTANCE_KEYS)
            .bind(version)
            .execute(&mut *tx)
            .await
            .map_err(db_error("assigning driver instance keys"))?;
        tx.commit()
            .await
            .map_err(db_error("committing the registry version"))?;
        tracing::info!(version, points = ids.len(), "stored registry version");
        Ok(RegistryLoad {
            version,
            created: true,
        })
    }

    pub(crate) async fn load_registry_inner(
        &self,
        version: Option<i32>,
    ) -> Result<Option<StoredRegistry>, StoreError> {
        let head: Option<(i32, String, String)> = match version {
            Some(v) => {
                sqlx::query_as(
                    "SELECT version, git_sha, content_hash FROM registry_version WHERE version = $1",
                )
                .bind(v)
                .fetch_optional(&self.pool)
                .await
            }
            None => sqlx::query_as(
                "SELECT version, git_sha, content_hash FROM registry_version ORDER BY version DESC LIMIT 1",
            )
            .fetch_optional(&self.pool)
            .await,
        }
        .map_err(db_error("reading the registry version"))?;
        let Some((version, git_sha, content_hash)) = head else {
            return Ok(None);
        };
        let mut descriptors: Vec<(String, String)> = sqlx::query_as(
            "SELECT pd.point_id, b.canonical FROM point_descriptor pd \
             JOIN descriptor_blob b ON b.hash = pd.hash WHERE pd.version = $1",
        )
        .bind(version)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error("reading point descriptors"))?;
        descriptors.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(Some(StoredRegistry {
            version,
            git_sha,
            content_hash,
            descriptors,
        }))
    }
}

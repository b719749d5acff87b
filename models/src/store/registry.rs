//! The model's registry storage: one version per new content, descriptors by hash (ingest spec,
//! "The registry is versioned data").

use super::{
    BTreeSet, MemoryStore, RegistryLoad, RegistrySnapshot, RegistryVersionRow, StoreError, StoredRegistry,
    lock,
};

impl MemoryStore {
    pub(super) async fn store_registry_inner(
        &self,
        snapshot: &RegistrySnapshot,
    ) -> Result<RegistryLoad, StoreError> {
        let loaded_at = self.clock.now();
        let mut model = lock(&self.model);
        if let Some(newest) = model.registry_versions.last()
            && newest.content_hash == snapshot.content_hash
        {
            return Ok(RegistryLoad {
                version: newest.version,
                created: false,
            });
        }
        // Same failure as the point_descriptor primary key, before anything is written.
        let mut seen = BTreeSet::new();
        for entry in &snapshot.entries {
            if !seen.insert(entry.point_id.as_str()) {
                return Err(StoreError::Other(format!(
                    "registry snapshot names point {:?} twice",
                    entry.point_id
                )));
            }
        }
        for entry in &snapshot.entries {
            model
                .blobs
                .entry(entry.hash.clone())
                .or_insert_with(|| entry.canonical_json.clone());
        }
        let version = model.registry_versions.last().map_or(1, |v| v.version + 1);
        let mut descriptors: Vec<(String, String)> = snapshot
            .entries
            .iter()
            .map(|e| (e.point_id.clone(), e.hash.clone()))
            .collect();
        descriptors.sort();
        let rollup_info = std::sync::Arc::new(super::rollup::rollup_info(
            snapshot
                .entries
                .iter()
                .map(|e| (e.point_id.as_str(), e.canonical_json.as_str())),
        ));
        model.registry_versions.push(RegistryVersionRow {
            version,
            git_sha: snapshot.git_sha.clone(),
            content_hash: snapshot.content_hash.clone(),
            descriptors,
            rollup_info,
            loaded_at,
        });
        Ok(RegistryLoad {
            version,
            created: true,
        })
    }

    pub(super) async fn load_registry_inner(
        &self,
        version: Option<i32>,
    ) -> Result<Option<StoredRegistry>, StoreError> {
        let model = lock(&self.model);
        let row = match version {
            None => model.registry_versions.last(),
            Some(v) => model.registry_versions.iter().find(|r| r.version == v),
        };
        let Some(row) = row else { return Ok(None) };
        let descriptors = row
            .descriptors
            .iter()
            .map(|(point_id, hash)| {
                let canonical = model
                    .blobs
                    .get(hash)
                    .expect("invariant: every point_descriptor hash has a descriptor_blob (foreign key)");
                (point_id.clone(), canonical.clone())
            })
            .collect();
        Ok(Some(StoredRegistry {
            version: row.version,
            git_sha: row.git_sha.clone(),
            content_hash: row.content_hash.clone(),
            descriptors,
        }))
    }
}

//! The database roles' grants (migrations/0003_roles.sql): `sentinel db grants`.

use sentinel_ports::StoreError;

use crate::{PgStore, db_error};

impl PgStore {
    /// Grants the core's writer role and the dashboards' reader role exactly what they use
    /// (`migrations/0003_roles.sql`, `sentinel_apply_grants`). Run as the schema owner; both
    /// roles must exist.
    pub async fn apply_grants(&self, writer: &str, reader: &str) -> Result<(), StoreError> {
        self.require_current_schema().await?;
        sqlx::query("SELECT sentinel_apply_grants($1, $2)")
            .bind(writer)
            .bind(reader)
            .execute(&self.pool)
            .await
            .map_err(db_error("applying the role grants"))?;
        sqlx::query("SELECT sentinel_apply_reprocess_grants($1)")
            .bind(writer)
            .execute(&self.pool)
            .await
            .map_err(db_error("applying the reprocess grant"))?;
        sqlx::query("SELECT sentinel_apply_command_grants($1, $2)")
            .bind(writer)
            .bind(reader)
            .execute(&self.pool)
            .await
            .map_err(db_error("applying the command plane's grants"))?;
        Ok(())
    }
}

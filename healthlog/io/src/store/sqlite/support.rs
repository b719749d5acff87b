//! Test and benchmark support, kept here because it names sqlx. Not used by the binary.

use super::*;

/// Creates sqlx's bookkeeping table (if missing) in the database at `path` and, with
/// `Some(version)`, records that version as applied: a database "from the future" or
/// "from the past" without building one.
pub async fn stamp_schema_version(path: &Path, version: Option<i64>) -> Result<(), StoreError> {
    let connect = SqliteConnectOptions::new().filename(path).create_if_missing(true);
    let mut conn = SqliteConnection::connect_with(&connect)
        .await
        .map_err(db("opening to stamp"))?;
    conn.ensure_migrations_table(MIGRATIONS_TABLE)
        .await
        .map_err(|source| StoreError::Migrate {
            context: "creating the migrations table",
            source,
        })?;
    if let Some(v) = version {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {MIGRATIONS_TABLE} (version, description, success, checksum, execution_time) \
             VALUES (?1, 'stamped by a test', 1, x'00', 0)"
        )))
        .bind(v)
        .execute(&mut conn)
        .await
        .map_err(db("stamping a schema version"))?;
    }
    conn.close().await.map_err(db("closing after stamping"))
}

/// Creates a store at schema 1 (the points half), as a binary of issue 10 left it: only the
/// first migration, applied by sqlx with its real checksum, so a later migrating open
/// applies schema 2 on top.
pub async fn create_schema_1_store(path: &Path) -> Result<(), StoreError> {
    let first: Vec<sqlx::migrate::Migration> = MIGRATOR.iter().filter(|m| m.version == 1).cloned().collect();
    let migrator = Migrator {
        migrations: std::borrow::Cow::Owned(first),
        ..Migrator::DEFAULT
    };
    let connect = connect_options(path, StoreOptions::default()).create_if_missing(true);
    let mut conn = SqliteConnection::connect_with(&connect)
        .await
        .map_err(db("opening to create schema 1"))?;
    migrator
        .run(&mut conn)
        .await
        .map_err(|source| StoreError::Migrate {
            context: "applying schema 1",
            source,
        })?;
    conn.close().await.map_err(db("closing after schema 1"))
}

/// Runs one statement on the database at `path` (tests that build a schema-1 store's rows).
pub async fn execute(path: &Path, sql: &str, binds: &[&[u8]]) -> Result<u64, StoreError> {
    let connect = connect_options(path, StoreOptions::default());
    let mut conn = SqliteConnection::connect_with(&connect)
        .await
        .map_err(db("opening to execute"))?;
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
    for b in binds {
        q = q.bind(*b);
    }
    let done = q.execute(&mut conn).await.map_err(db("executing"))?;
    conn.close().await.map_err(db("closing after executing"))?;
    Ok(done.rows_affected())
}

/// The applied version and the user tables of the database at `path`.
pub async fn inspect(path: &Path) -> Result<(i64, Vec<String>), StoreError> {
    let connect = SqliteConnectOptions::new().filename(path).read_only(true);
    let mut conn = SqliteConnection::connect_with(&connect)
        .await
        .map_err(db("opening to inspect"))?;
    let version = applied_version(&mut conn).await?;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .map_err(db("listing tables"))?;
    conn.close().await.map_err(db("closing after inspecting"))?;
    Ok((version, tables))
}

/// Inserts objects with one plain `INSERT` each in one transaction: the benchmark's baseline
/// for the fold's write path, and the way to build a year of objects quickly.
pub async fn insert_objects_plain(store: &Store, rows: &[ObjectRow]) -> Result<(), StoreError> {
    let mut tx = store.pool.begin().await.map_err(db("beginning a plain insert"))?;
    for r in rows {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO bucket ({OBJECT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
        )))
        .bind(&r.metric)
        .bind(&r.layer)
        .bind(r.hour_us)
        .bind(&r.units)
        .bind(r.first_us)
        .bind(r.last_us)
        .bind(r.point_count)
        .bind(&r.hash)
        .bind(r.sealed)
        .bind(r.delivery_id)
        .bind(&r.payload)
        .execute(&mut *tx)
        .await
        .map_err(db("inserting an object"))?;
    }
    tx.commit().await.map_err(db("committing a plain insert"))
}

//! Creating a private PostgreSQL database per test (DESIGN.md §7: no test depends on another's
//! leftovers).
//!
//! Owns: [`TestDb`], a uniquely named database on the local server (127.0.0.1:5432, trust auth,
//! user `postgres`) or on the server named by `SENTINEL_TEST_PG_URL` (an admin URL, e.g.
//! `postgres://postgres@host:5432/postgres`). The database is dropped (WITH FORCE) when the
//! `TestDb` is dropped, also when the test panics.

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use sentinel_ports::clock::{Clock, SystemClock};
use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// Environment variable naming an admin URL for the test server.
pub const ADMIN_URL_ENV: &str = "SENTINEL_TEST_PG_URL";
const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

static NEXT_DB: AtomicU64 = AtomicU64::new(0);

/// A fresh, empty database (not migrated).
#[derive(Debug)]
pub struct TestDb {
    /// Connect here to use the database (as the admin: the schema owner).
    pub url: String,
    pub name: String,
    admin_url: String,
    /// The login roles made by [`TestDb::create_roles`], dropped with the database.
    roles: Vec<String>,
}

/// A writer and a reader role for one test database (ARCHITECTURE.md, "Security model"), not
/// yet granted anything.
#[derive(Clone, Debug)]
pub struct TestRoles {
    pub writer: String,
    pub reader: String,
    /// The database as each role.
    pub writer_url: String,
    pub reader_url: String,
}

/// The admin URL with its database path replaced by `database` (query parameters kept).
fn with_database(admin_url: &str, database: &str) -> anyhow::Result<String> {
    let scheme_end = admin_url.find("://").context("the admin URL has no scheme")? + 3;
    let (head, query) = match admin_url.find('?') {
        Some(q) => admin_url.split_at(q),
        None => (admin_url, ""),
    };
    let authority_end = head[scheme_end..]
        .find('/')
        .map_or(head.len(), |i| scheme_end + i);
    Ok(format!("{}/{}{}", &head[..authority_end], database, query))
}

impl TestDb {
    /// Applies the project's migrations up to and including `version` only, as a binary of
    /// that schema version ran them (for tests that upgrade a populated database): the older
    /// files are copied to a folder of their own and run from there.
    pub async fn migrate_up_to(&self, pool: &sqlx::PgPool, version: u32) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
        let dir = std::env::temp_dir().join(format!("{}_migrations_{version}", self.name));
        std::fs::create_dir_all(&dir).expect("a folder for the old migrations");
        for entry in std::fs::read_dir(&root).expect("the migrations") {
            let path = entry.expect("an entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            let number: u32 = name.get(..4).and_then(|v| v.parse().ok()).unwrap_or(u32::MAX);
            if number <= version {
                std::fs::copy(&path, dir.join(&name)).expect("copy a migration");
            }
        }
        sqlx::migrate::Migrator::new(dir.as_path())
            .await
            .expect("the old migrations")
            .run(pool)
            .await
            .unwrap_or_else(|e| panic!("migrate to version {version}: {e}"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    pub fn admin_url() -> String {
        std::env::var(ADMIN_URL_ENV).unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned())
    }

    /// Creates `sentinel_test_<pid>_<clock µs>_<n>`.
    pub async fn create() -> anyhow::Result<TestDb> {
        let admin_url = Self::admin_url();
        let name = format!(
            "sentinel_test_{}_{}_{}",
            std::process::id(),
            SystemClock.now().0,
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin = PgConnection::connect(&admin_url)
            .await
            .with_context(|| format!("connecting to the admin database (set {ADMIN_URL_ENV} to override)"))?;
        // The name is ours and only [a-z0-9_], so formatting it into DDL is safe.
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .with_context(|| format!("creating database {name}"))?;
        let _ = admin.close().await;
        let url = with_database(&admin_url, &name)?;
        Ok(TestDb {
            url,
            name,
            admin_url,
            roles: Vec::new(),
        })
    }

    /// Creates two login roles named after the database (roles are cluster-wide, so the names
    /// are unique per test), each allowed to connect to it only. Their privileges inside the
    /// database are `sentinel db grants`'s job.
    pub async fn create_roles(&mut self) -> anyhow::Result<TestRoles> {
        let writer = format!("{}_w", self.name);
        let reader = format!("{}_r", self.name);
        let mut admin = PgConnection::connect(&self.admin_url).await?;
        for role in [&writer, &reader] {
            // Names derived from ours: only [a-z0-9_].
            sqlx::query(AssertSqlSafe(format!("CREATE ROLE {role} LOGIN")))
                .execute(&mut admin)
                .await
                .with_context(|| format!("creating role {role}"))?;
            self.roles.push(role.clone());
        }
        let _ = admin.close().await;
        let as_role = |role: &str| -> anyhow::Result<String> {
            let url = with_database(&self.admin_url, &self.name)?;
            let at = url.find("://").context("no scheme")? + 3;
            let host_at = url[at..].find('@').map_or(at, |i| at + i + 1);
            Ok(format!("{}{role}@{}", &url[..at], &url[host_at..]))
        };
        Ok(TestRoles {
            writer_url: as_role(&writer)?,
            reader_url: as_role(&reader)?,
            writer,
            reader,
        })
    }

    async fn drop_database(admin_url: &str, name: &str, roles: &[String]) -> anyhow::Result<()> {
        let mut admin = PgConnection::connect(admin_url).await?;
        sqlx::query(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await?;
        // Their privileges went with the database, so nothing else holds them.
        for role in roles {
            sqlx::query(AssertSqlSafe(format!("DROP ROLE IF EXISTS {role}")))
                .execute(&mut admin)
                .await?;
        }
        let _ = admin.close().await;
        Ok(())
    }
}

impl Drop for TestDb {
    /// Drops the database on a thread of its own: `Drop` cannot await, and the test's runtime
    /// may be the one being dropped. `WITH (FORCE)` ends sessions the test left open.
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let roles = std::mem::take(&mut self.roles);
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            match runtime {
                Ok(runtime) => {
                    if let Err(e) = runtime.block_on(TestDb::drop_database(&admin_url, &name, &roles)) {
                        eprintln!("could not drop test database {name}: {e:#}");
                    }
                }
                Err(e) => eprintln!("could not drop test database {name}: {e}"),
            }
        });
        let _ = dropper.join();
    }
}

/// Runs `sql` (one or more statements) on `pool`, panicking with the statement on error: the
/// upgrade tests' setup and checks.
pub async fn exec(pool: &sqlx::PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The one text value `sql` selects on `pool` (empty for NULL), panicking with the statement
/// on error.
pub async fn text(pool: &sqlx::PgPool, sql: &str) -> String {
    sqlx::query_scalar::<_, Option<String>>(AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or_default()
}

/// `rows` rows of `points` points (16 driver instances), one every 2 ms, into `class` on
/// 2026-01-15, in ingest order: the row shape of BENCHMARKS.md "Integer ids", with the keys
/// assigned here (`applied` left NULL, as that fill has it). The index-size and upgrade tests'
/// fill.
pub async fn fill_ingest_order(pool: &sqlx::PgPool, class: &str, rows: i64, points: i64) {
    exec(
        pool,
        &format!(
            "INSERT INTO point_key (point_id) SELECT '{class}.p' || p FROM generate_series(0, {points} - 1) p \
               ON CONFLICT DO NOTHING; \
             INSERT INTO instance_key (driver_instance) SELECT 'drv' || i FROM generate_series(0, 15) i \
               ON CONFLICT DO NOTHING; \
             INSERT INTO observation_{class} (ingested_at, point_key, observed_at, value_num, native_num, \
               unit_native, quality, changed, registry_version, instance_key, source_epoch, source_seq) \
             SELECT t + interval '150 milliseconds', pk.key, t, 20 + (n % 97) * 0.25, 68 + (n % 97) * 0.45, \
               'degF', CASE WHEN n % 20 = 0 THEN 'stale'::quality ELSE 'live'::quality END, n % 3 = 0, 1, \
               ik.key, 1, n \
             FROM (SELECT n, n % {points} AS p, TIMESTAMPTZ '2026-01-15' + n * interval '2 milliseconds' AS t \
                   FROM generate_series(0, {rows} - 1) n) s \
             JOIN point_key pk ON pk.point_id = '{class}.p' || s.p \
             JOIN instance_key ik ON ik.driver_instance = 'drv' || (s.p % 16) \
             ORDER BY n"
        ),
    )
    .await;
}

/// A fresh database at the latest migration, `rows` rows of `points` points filled in ingest
/// order into measurement's 2026-01-15 partition ([`fill_ingest_order`]), then VACUUM ANALYZE:
/// `index`'s bytes per row (the index-size tests of 0018 and 0020).
pub async fn index_bytes_per_row_of_fill(index: &str, rows: i64, points: i64) -> f64 {
    let db = TestDb::create().await.expect("test database");
    let store = sentinel_store_pg::PgStore::connect(&db.url, sentinel_store_pg::PgStoreConfig::default())
        .await
        .expect("connect the store");
    store.migrate().await.expect("migrate");
    let pool = sqlx::PgPool::connect(&db.url)
        .await
        .expect("connect as the owner");
    exec(&pool, "SELECT sentinel_ensure_partitions('2026-01-15', 1)").await;
    fill_ingest_order(&pool, "measurement", rows, points).await;
    exec(&pool, "VACUUM ANALYZE observation_measurement").await;
    let (count, bytes): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM observation_measurement_p20260115), pg_relation_size($1::regclass)",
    )
    .bind(index)
    .fetch_one(&pool)
    .await
    .unwrap_or_else(|e| panic!("the size of {index}: {e}"));
    assert_eq!(count, rows);
    bytes as f64 / count as f64
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn replaces_the_database_path() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "x").expect("valid"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/db?sslmode=disable", "x").expect("valid"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h:5432", "x").expect("valid"),
            "postgres://h:5432/x"
        );
    }
}

//! Issue 26, item 3: the Grafana dashboard `ops/grafana/dashboards/sentinel.json` and its
//! provisioning files.
//!
//! - The dashboard type-checks against Grafana's published dashboard schema (the `Dashboard`
//!   type of npm's `@grafana/schema`, `scripts/check-grafana-dashboard`), and a malformed copy
//!   (`gridPos: "x"`) does not; every panel reads one of the two provisioned data sources.
//! - After a real core (as the writer role, against a private nats-server and PostgreSQL) took
//!   a known traffic mix with every bad-input kind, and rollups were refreshed over it: every
//!   SQL panel query and the `point` variable's query, with Grafana's macros expanded as its
//!   PostgreSQL data source does, runs as the read-only role and returns rows; every PromQL
//!   expression returns data from the real Prometheus scraping that core.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use sentinel_core::Micros;
use sentinel_ports::{Lease, Store};
use sentinel_tests::bin::workspace_root;
use sentinel_tests::harness::{Env, now, pg, terminate, wait_drained};
use sentinel_tests::prometheus::{PrometheusServer, ScrapedCore, publish_operator_traffic};
use sentinel_tests::traffic;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

const DASHBOARD: &str = "ops/grafana/dashboards/sentinel.json";
const DATASOURCES: &str = "ops/grafana/provisioning/datasources/sentinel.yml";
const PG_UID: &str = "sentinel-pg";
const PROM_UID: &str = "sentinel-prom";
const ACK_WAIT_MS: u64 = 30_000;
const MESSAGES: usize = 1_000;
/// How long a PromQL expression may take to return data (Prometheus scrapes every second).
const SCRAPED_WITHIN_S: u64 = 90;

fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(workspace_root().join(DASHBOARD)).expect("the dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every panel, those inside rows included (rows themselves have no targets).
fn panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            out.extend(panel["panels"].as_array().into_iter().flatten());
        } else {
            out.push(panel);
        }
    }
    out
}

/// `(panel title, query)` for every PostgreSQL target (`rawSql`) and every Prometheus target
/// (`expr`). Panics on a target of any other data source, or one with neither.
type Queries = Vec<(String, String)>;
fn queries(dashboard: &serde_json::Value) -> (Queries, Queries) {
    let (mut sql, mut promql) = (Vec::new(), Vec::new());
    for panel in panels(dashboard) {
        let title = panel["title"].as_str().expect("a titled panel").to_owned();
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            match target["datasource"]["uid"].as_str() {
                Some(PG_UID) => sql.push((
                    title.clone(),
                    target["rawSql"].as_str().expect("a raw SQL target").to_owned(),
                )),
                Some(PROM_UID) => promql.push((
                    title.clone(),
                    target["expr"].as_str().expect("a PromQL target").to_owned(),
                )),
                other => panic!("{title}: a target of data source {other:?}"),
            }
        }
    }
    (sql, promql)
}

/// The range, interval and variables a dashboard is viewed with.
struct View {
    from: OffsetDateTime,
    to: OffsetDateTime,
    /// `$__interval` (and `$__rate_interval`), in seconds.
    interval_s: u64,
    variables: BTreeMap<String, String>,
}

/// The comma-separated arguments of a macro call, trimmed.
fn arguments(text: &str) -> Vec<&str> {
    text.split(',').map(str::trim).collect()
}

/// Replaces every `name(args)` in `text` by `expand(args)`.
fn expand_calls(text: &str, name: &str, expand: impl Fn(&[&str]) -> String) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(&format!("{name}(")) {
        out.push_str(&rest[..at]);
        let open = at + name.len() + 1;
        let close = open
            + rest[open..]
                .find(')')
                .unwrap_or_else(|| panic!("unclosed {name}( in {text}"));
        out.push_str(&expand(&arguments(&rest[open..close])));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// `1m`, `'5m'`, `30s`, `1h`, `1d` in seconds.
fn interval_seconds(text: &str) -> u64 {
    let text = text.trim_matches('\'');
    let (number, unit) = text.split_at(text.len() - 1);
    let number: u64 = number.parse().unwrap_or_else(|_| panic!("an interval: {text}"));
    number
        * match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            _ => panic!("an interval: {text}"),
        }
}

impl View {
    fn instant(at: OffsetDateTime) -> String {
        format!("'{}'", at.format(&Rfc3339).expect("RFC 3339"))
    }

    /// Dashboard variables (`$name`, `${name}`) and the interval macros, as Grafana replaces
    /// them before any data source sees the query.
    fn interpolate(&self, query: &str) -> String {
        let interval = format!("{}s", self.interval_s);
        let mut text = query
            .replace("$__rate_interval", &interval)
            .replace("$__interval_ms", &(self.interval_s * 1000).to_string())
            .replace("$__interval", &interval);
        for (name, value) in &self.variables {
            text = text
                .replace(&format!("${{{name}}}"), value)
                .replace(&format!("${name}"), value);
        }
        text
    }

    /// [`View::interpolate`], then the PostgreSQL data source's macros as Grafana expands
    /// them (`pkg/tsdb/grafana-postgresql-datasource/macros.go`).
    fn sql(&self, query: &str) -> String {
        let text = self.interpolate(query);
        let (from, to) = (Self::instant(self.from), Self::instant(self.to));
        let text = expand_calls(&text, "$__timeFilter", |args| {
            format!("{} BETWEEN {from} AND {to}", args[0])
        });
        let text = expand_calls(&text, "$__timeGroupAlias", |args| {
            format!(
                "floor(extract(epoch from {})/{s})*{s} AS \"time\"",
                args[0],
                s = interval_seconds(args[1])
            )
        });
        let text = expand_calls(&text, "$__timeGroup", |args| {
            format!(
                "floor(extract(epoch from {})/{s})*{s}",
                args[0],
                s = interval_seconds(args[1])
            )
        });
        let text = expand_calls(&text, "$__timeFrom", |_| from.clone());
        let text = expand_calls(&text, "$__timeTo", |_| to.clone());
        assert!(!text.contains('$'), "a macro or variable left unexpanded: {text}");
        text
    }
}

#[test]
fn the_dashboard_type_checks_against_grafana_s_published_schema_and_a_malformed_one_does_not() {
    let check = |path: &std::path::Path| {
        let output = Command::new(workspace_root().join("scripts/check-grafana-dashboard"))
            .arg(path)
            .output()
            .expect("run scripts/check-grafana-dashboard (needs node and npm)");
        (
            output.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    };
    let (ok, out) = check(&workspace_root().join(DASHBOARD));
    assert!(
        ok,
        "the dashboard does not type-check as Grafana's Dashboard: {out}"
    );

    let mut malformed = dashboard();
    malformed["panels"][1]["gridPos"] = serde_json::json!("x");
    let path = std::env::temp_dir().join(format!(
        "sentinel-dashboard-malformed-{}.json",
        std::process::id()
    ));
    std::fs::write(&path, serde_json::to_string_pretty(&malformed).expect("JSON")).expect("write");
    let (ok, out) = check(&path);
    let _ = std::fs::remove_file(&path);
    assert!(!ok, "a panel with gridPos \"x\" passed the schema check");
    assert!(out.contains("GridPos"), "refused for another reason: {out}");

    // Every panel reads one of the provisioned data sources, by the uid provisioned.
    let provisioned = std::fs::read_to_string(workspace_root().join(DATASOURCES)).expect("datasources");
    for uid in [PG_UID, PROM_UID] {
        assert!(
            provisioned.contains(&format!("uid: {uid}\n")),
            "{uid} not provisioned"
        );
    }
    let (sql, promql) = queries(&dashboard());
    assert!(
        sql.len() >= 8 && promql.len() >= 10,
        "{} SQL, {} PromQL",
        sql.len(),
        promql.len()
    );
}

/// Polls every expression of `promql` until each returns a series with a number (not NaN), or
/// `SCRAPED_WITHIN_S` pass; returns those that never did.
async fn without_data(prometheus: &PrometheusServer, promql: &[(String, String)]) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(SCRAPED_WITHIN_S);
    let mut pending: Vec<&(String, String)> = promql.iter().collect();
    loop {
        let mut still = Vec::new();
        for query in pending {
            if !prometheus.query(&query.1).await.iter().any(|(_, v)| !v.is_nan()) {
                still.push(query);
            }
        }
        pending = still;
        if pending.is_empty() || tokio::time::Instant::now() >= deadline {
            return pending
                .iter()
                .map(|(title, expr)| format!("{title}: {expr}"))
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_query_returns_data_as_the_read_only_role_and_from_the_scraping_prometheus() {
    let dashboard = dashboard();
    let (sql_panels, promql_panels) = queries(&dashboard);
    let env = Env::start(ACK_WAIT_MS).await;
    let registry = traffic::sample_registry();
    let started = now();
    let scraped = ScrapedCore::start(&env, ACK_WAIT_MS, &["--self-points-interval-ms", "0"]).await;
    // Traffic arrives while Prometheus scrapes, as in production: a counter's first sample is
    // taken before its increase, so a rate over the traffic's minute is not 0 (nor NaN).
    let scraped_once = [(
        "first scrape".to_owned(),
        "sentinel_commit_latency_seconds_count".to_owned(),
    )];
    assert!(
        without_data(&scraped.prometheus, &scraped_once).await.is_empty(),
        "never scraped"
    );
    let mut mix = traffic::generate(&registry, MESSAGES, 1, now());
    publish_operator_traffic(&env, &registry, &mut mix, 7, 3).await;
    wait_drained(&env, &mix.expected).await;

    // PromQL, as the dashboard would evaluate it now, with a 2-minute `$__rate_interval`
    // (Grafana's for a day's view over a 15 s scrape).
    let view = View {
        from: OffsetDateTime::now_utc() - time::Duration::hours(24),
        to: OffsetDateTime::now_utc(),
        interval_s: 120,
        variables: BTreeMap::new(),
    };
    let mut promql = promql_panels
        .iter()
        .map(|(title, expr)| (title.clone(), view.interpolate(expr)))
        .collect::<Vec<_>>();
    // The core's first rollup step starts the watermark the coverage panel reads.
    promql.push((
        "(the rollup watermark's start)".to_owned(),
        "sentinel_rollup_watermark_timestamp_seconds > 0".to_owned(),
    ));
    let empty = without_data(&scraped.prometheus, &promql).await;
    assert!(
        empty.is_empty(),
        "PromQL panels without data: {empty:#?}\nPrometheus log: {}",
        scraped.prometheus.log()
    );
    terminate(scraped.core).await;

    // The minutes of the traffic are not closed yet, so the core left them to later steps:
    // refresh them as `sentinel rollup refresh` would (under the lock, fenced on its epoch).
    let refreshed_to = Micros(now().0 + 5 * 60 * 1_000_000);
    let lease = env.store.acquire().await.expect("the lock, the core gone");
    env.store
        .refresh_rollups(lease.epoch(), Micros(started.0 - 3_600 * 1_000_000), refreshed_to)
        .await
        .expect("refresh the rollups over the traffic");
    drop(lease);

    // SQL as the read-only role, over the last hour up to the refreshed end.
    let mut view = View {
        from: OffsetDateTime::from_unix_timestamp_nanos(i128::from(started.0 - 3_600 * 1_000_000) * 1_000)
            .expect("from"),
        to: OffsetDateTime::from_unix_timestamp_nanos(i128::from(refreshed_to.0) * 1_000).expect("to"),
        interval_s: 60,
        variables: BTreeMap::new(),
    };
    let mut reader = pg(&env.roles.reader_url).await;
    for variable in dashboard["templating"]["list"].as_array().expect("variables") {
        let name = variable["name"].as_str().expect("a named variable");
        assert_eq!(variable["datasource"]["uid"], PG_UID, "{name}");
        let query = view.sql(variable["query"].as_str().expect("a query variable"));
        let values: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(query.clone()))
            .fetch_all(&mut reader)
            .await
            .unwrap_or_else(|e| panic!("variable {name} as the reader: {e}\n{query}"));
        // Grafana selects the first option when nothing is chosen.
        let first = values
            .first()
            .unwrap_or_else(|| panic!("variable {name} has no options: {query}"));
        view.variables.insert(name.to_owned(), first.clone());
    }
    let mut failed = Vec::new();
    for (title, sql) in &sql_panels {
        let query = view.sql(sql);
        match sqlx::raw_sql(sqlx::AssertSqlSafe(query.clone()))
            .fetch_all(&mut reader)
            .await
        {
            Ok(rows) if !rows.is_empty() => {}
            Ok(_) => failed.push(format!("{title}: no rows\n{query}")),
            Err(e) => failed.push(format!("{title}: {e}\n{query}")),
        }
    }
    assert!(
        failed.is_empty(),
        "SQL panels failing as the read-only role: {failed:#?}"
    );
}

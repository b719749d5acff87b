//! The `healthlog` binary: the CLI over the store, the archive and the fold worker. The only
//! place that reads the system clock; anyhow lives here and nowhere else.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::Parser as _;
use healthlog::archive::Archive;
use healthlog::cli::{
    self, Cli, Command, EXIT_DELIVERY_NOT_FOLDED, EXIT_ERROR, EXIT_OK, EXIT_SCHEMA, EXIT_STALE,
};
use healthlog::fold::{self, DeliveryResult, FoldOptions, FoldSummary};
use healthlog::journal;
use healthlog::store::{Store, StoreError, StoreOptions};
use healthlog_core::sample;
use healthlog_core::status::ParseStatus;

/// `println!` that returns an error instead of panicking when stdout is gone (a closed pipe).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

#[allow(clippy::disallowed_methods)] // the binary's edge is where the clock is read
fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HEALTHLOG_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    // The receiver folds in the background beside its handlers: two worker threads; every
    // other command is one thread.
    let built = if matches!(cli.command, Command::Serve { .. }) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    };
    let runtime = match built {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::from(EXIT_OK)
        }
        Err(e) => {
            let schema = e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<StoreError>(),
                    Some(StoreError::SchemaFromFuture { .. } | StoreError::SchemaMismatch { .. })
                )
            });
            eprintln!("error: {e:#}");
            ExitCode::from(if schema { EXIT_SCHEMA } else { EXIT_ERROR })
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let options = StoreOptions {
        busy_timeout_ms: cli.busy_timeout_ms,
    };
    let fold_options = FoldOptions::new(Arc::new(now_us));
    match cli.command {
        Command::Migrate => {
            let (store, report) = Store::open_migrating(&cli.db, options).await?;
            store.close().await;
            if cli.json {
                say!("{}", serde_json::to_string(&report)?);
            } else {
                say!(
                    "schema version {} (was {}; this binary {})",
                    report.after,
                    report.before,
                    report.supported
                );
            }
            Ok(EXIT_OK)
        }
        Command::Ingest { layer, files } => {
            let (store, _) = Store::open_migrating(&cli.db, options).await?;
            let archive = Archive::open(&cli.archive)?;
            let mut journaled = Vec::with_capacity(files.len());
            for file in &files {
                let j = journal::ingest_file(&store, &archive, &layer, file, now_us())
                    .await
                    .with_context(|| format!("ingesting {}", file.display()))?;
                journaled.push((file.display().to_string(), j));
            }
            let bar = cli::progress(cli.json, "folding");
            let (summary, results) = fold::fold_pending(&store, &archive, &fold_options, &bar).await?;
            store.close().await;
            let mut refused_any = false;
            for (file, j) in &journaled {
                let result = results.iter().find(|r| r.id() == j.id);
                refused_any |= j.refused.is_some();
                if cli.json {
                    say!(
                        "{}",
                        serde_json::json!({ "file": file, "id": j.id, "refused": j.refused, "result": result })
                    );
                } else {
                    match (result, &j.refused) {
                        (_, Some(reason)) => say!("{file}: delivery {} failed: {reason}", j.id),
                        (Some(r), None) => say!("{file}: delivery {} {}", j.id, describe(r)),
                        (None, None) => say!(
                            "{file}: delivery {} journaled (folded earlier or by another run)",
                            j.id
                        ),
                    }
                }
            }
            Ok(exit_for(&summary, refused_any))
        }
        Command::Fold => {
            let (store, _) = Store::open_migrating(&cli.db, options).await?;
            let archive = Archive::open(&cli.archive)?;
            let bar = cli::progress(cli.json, "folding");
            let (summary, results) = fold::fold_pending(&store, &archive, &fold_options, &bar).await?;
            store.close().await;
            print_summary(cli.json, &summary, &results)?;
            Ok(exit_for(&summary, false))
        }
        Command::Deliveries { status } => {
            let status = match status {
                Some(s) => Some(
                    s.parse::<ParseStatus>()
                        .with_context(|| format!("--status {s:?}"))?,
                ),
                None => None,
            };
            let store = Store::open_read_only(&cli.db, options).await?;
            let rows = store.deliveries(status).await?;
            store.close().await;
            if cli.json {
                say!("{}", serde_json::to_string(&rows)?);
            } else {
                say!(
                    "{:>6}  {:<8}  {:<8}  {:>10}  {:>9}  {:>8}  uncovered / error",
                    "id",
                    "layer",
                    "status",
                    "points",
                    "written",
                    "collide"
                );
                for r in rows {
                    let c = r.counters.unwrap_or_default();
                    let note = r
                        .error
                        .clone()
                        .unwrap_or_else(|| r.uncovered.clone().unwrap_or_default().join(","));
                    say!(
                        "{:>6}  {:<8}  {:<8}  {:>10}  {:>9}  {:>8}  {note}",
                        r.id,
                        r.layer,
                        r.status,
                        c.points,
                        c.objects_written,
                        c.collisions
                    );
                }
            }
            Ok(EXIT_OK)
        }
        Command::Catalog { metric } => {
            let store = Store::open_read_only(&cli.db, options).await?;
            let rows = store.catalog(&metric).await?;
            store.close().await;
            if cli.json {
                say!("{}", serde_json::to_string(&rows)?);
            } else {
                if rows.is_empty() {
                    say!("no objects for metric {metric:?}");
                }
                for r in rows {
                    say!(
                        "{:<8}  {:>7} objects  {:>9} points  {} .. {}",
                        r.layer,
                        r.objects,
                        r.points,
                        healthlog_core::time::format_utc(r.first_us),
                        healthlog_core::time::format_utc(r.last_us)
                    );
                }
            }
            Ok(EXIT_OK)
        }
        Command::Fingerprint => {
            let store = Store::open_read_only(&cli.db, options).await?;
            let (fp, objects) = store.fingerprint().await?;
            store.close().await;
            if cli.json {
                say!("{}", serde_json::json!({ "fingerprint": fp, "rows": objects }));
            } else {
                say!("{fp}  ({objects} rows: hourly objects, workouts, records)");
            }
            Ok(EXIT_OK)
        }
        Command::Rebuild { into } => {
            if into == cli.db {
                bail!("--into must name a new store, not the one being rebuilt");
            }
            let source = Store::open_read_only(&cli.db, options).await?;
            let (dest, _) = Store::open_migrating(&into, options).await?;
            let archive = Archive::open(&cli.archive)?;
            let bar = cli::progress(cli.json, "rebuilding");
            let (summary, results) =
                fold::rebuild_into(&source, &dest, &archive, &fold_options, None, &bar).await?;
            let (fp, objects) = dest.fingerprint().await?;
            source.close().await;
            dest.close().await;
            print_summary(cli.json, &summary, &results)?;
            if cli.json {
                say!("{}", serde_json::json!({ "fingerprint": fp, "rows": objects }));
            } else {
                say!(
                    "rebuilt into {}: fingerprint {fp} ({objects} rows: hourly objects, workouts, records)",
                    into.display()
                );
            }
            Ok(exit_for(&summary, false))
        }
        Command::Serve {
            listen,
            token_file,
            tls_cert,
            tls_key,
            spool,
            no_fold,
        } => {
            let (store, _) = Store::open_migrating(&cli.db, options).await?;
            let archive = Archive::open(&cli.archive)?;
            let config = healthlog::serve::ServeConfig {
                listen,
                token_file,
                tls: tls_cert.zip(tls_key),
                spool_dir: spool.unwrap_or_else(|| cli.archive.join(".intake")),
                no_fold,
            };
            healthlog::serve::serve(store.clone(), archive, config, fold_options, |addr| {
                use std::io::Write as _;
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "listening on {addr}");
                let _ = out.flush();
            })
            .await?;
            store.close().await;
            Ok(EXIT_OK)
        }
        Command::Status { stale_after } => {
            let stale_after_s = healthlog::status::parse_duration_s(&stale_after)
                .map_err(|e| anyhow::anyhow!("--stale-after: {e}"))?;
            let store = Store::open_read_only(&cli.db, options).await?;
            let report = healthlog::status::report(&store, now_us(), stale_after_s).await?;
            store.close().await;
            if cli.json {
                say!("{}", serde_json::to_string(&report)?);
            } else {
                let text = healthlog::status::render(&report);
                say!("{}", text.trim_end());
            }
            Ok(if report.stale { EXIT_STALE } else { EXIT_OK })
        }
        Command::Sample { seed, days, out } => {
            if !(1..=sample::DAYS_MAX).contains(&days) {
                bail!("--days must be 1..={}", sample::DAYS_MAX);
            }
            let corpus = sample::generate(seed, days);
            for d in &corpus.deliveries {
                let path = out.join(&d.name);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                }
                std::fs::write(&path, &d.body).with_context(|| format!("writing {}", path.display()))?;
            }
            let oracle = out.join("oracle.json");
            std::fs::write(&oracle, serde_json::to_vec_pretty(&corpus.oracle)?)
                .with_context(|| format!("writing {}", oracle.display()))?;
            if cli.json {
                say!(
                    "{}",
                    serde_json::json!({ "deliveries": corpus.deliveries.len(), "coordinates": corpus.oracle.coordinates, "out": out })
                );
            } else {
                say!(
                    "{} deliveries, {} coordinates, {} points in {} (oracle: {})",
                    corpus.deliveries.len(),
                    corpus.oracle.coordinates,
                    corpus.total_points(),
                    out.display(),
                    oracle.display()
                );
            }
            Ok(EXIT_OK)
        }
    }
}

fn describe(r: &DeliveryResult) -> String {
    match r {
        DeliveryResult::Folded {
            status,
            uncovered,
            counters,
            ..
        } => {
            let mut text = format!(
                "{status}: {} metrics, {} points, {} coordinates, {} objects written, {} unchanged, {} collisions, {} incomparable, {} unit mismatches, {} sealed changes",
                counters.metrics,
                counters.points,
                counters.coordinates,
                counters.objects_written,
                counters.objects_unchanged,
                counters.collisions,
                counters.incomparable,
                counters.unit_mismatches,
                counters.sealed_changes
            );
            if counters.entities + counters.skipped_entities > 0 {
                text.push_str(&format!(
                    "; {} entities: {} written, {} unchanged ({} provenance only), {} versions retained, {} differing in the body, {} skipped",
                    counters.entities,
                    counters.entities_written,
                    counters.entities_unchanged,
                    counters.provenance_updates,
                    counters.versions_retained,
                    counters.versions_differing,
                    counters.skipped_entities
                ));
            }
            if !uncovered.is_empty() {
                text.push_str(&format!("; uncovered: {}", uncovered.join(", ")));
            }
            text
        }
        DeliveryResult::Failed { error, .. } => format!("failed: {error}"),
        DeliveryResult::LeftPending { reason, .. } => format!("left pending: {reason}"),
        DeliveryResult::Refused { .. } => "failed: refused at ingest".to_string(),
    }
}

fn print_summary(json: bool, summary: &FoldSummary, results: &[DeliveryResult]) -> anyhow::Result<()> {
    if json {
        say!(
            "{}",
            serde_json::json!({ "summary": summary, "deliveries": results })
        );
    } else {
        for r in results {
            say!("delivery {} {}", r.id(), describe(r));
        }
        say!(
            "{} deliveries: {} parsed, {} partial, {} failed, {} left pending; {} objects written",
            summary.deliveries,
            summary.parsed,
            summary.partial,
            summary.failed,
            summary.left_pending,
            summary.totals.objects_written
        );
    }
    Ok(())
}

fn exit_for(summary: &FoldSummary, refused: bool) -> u8 {
    if summary.failed > 0 || summary.left_pending > 0 || refused {
        EXIT_DELIVERY_NOT_FOLDED
    } else {
        EXIT_OK
    }
}

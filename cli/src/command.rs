//! `sentinel command set POINT VALUE [--for DURATION]` and `sentinel command release POINT`
//! (issue 21 item 10): an operator claim (or its release) asked of the running core over the
//! bus, on `sentinel.command.request.<principal>` as that principal (the core takes the
//! principal from the subject, and bus permissions confine each principal to its own), waiting
//! for the core's answer (`sentinel_core::control::RequestAnswer`), which comes once the claim's
//! control event is committed. Exit 0 when accepted; [`EXIT_REFUSED`] with the core's one-line
//! reason when refused; [`EXIT_NO_CORE`] when no core answered in time.

use std::process::ExitCode;

use anyhow::{Context, bail};
use sentinel_bus_nats::{RequestFailed, request_reply};
use sentinel_core::CommandRequest;
use sentinel_core::control::{ANSWER_ACCEPTED, CLAIM_FOR_S_MAX, RequestAnswer};
use sentinel_core::wire::{command_request_subject, is_principal_name};
use sentinel_driver::connect::BusConnection;

use crate::args::NatsArgs;

/// Exit code when the core refused the request (nothing changed; the refusal is on the record
/// as `command_refused`).
pub const EXIT_REFUSED: u8 = 12;
/// Exit code when no core answered within `--reply-timeout-ms`.
pub const EXIT_NO_CORE: u8 = 13;
/// Longest wait accepted for the core's answer.
pub const REPLY_TIMEOUT_MS_MAX: u64 = 600_000;

/// Who asks and where: shared by `set` and `release`.
#[derive(clap::Args, Clone)]
pub struct AskArgs {
    /// The operator principal asking (its own request subject; the claim is held in its name).
    #[arg(long, env = "SENTINEL_OPERATOR", default_value = "operator")]
    pub principal: String,
    #[command(flatten)]
    pub nats: NatsArgs,
    /// How long to wait for the core's answer.
    #[arg(long, default_value_t = 10_000)]
    pub reply_timeout_ms: u64,
    /// The answer as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// What is asked.
pub enum Ask {
    Set { value: String, for_s: Option<u64> },
    Release,
}

/// Parses a command-line value: `true`/`false`, a number, or otherwise a codebook member.
pub fn parse_value(text: &str) -> serde_json::Value {
    match text {
        "true" => serde_json::Value::Bool(true),
        "false" => serde_json::Value::Bool(false),
        _ => match text.parse::<f64>() {
            Ok(n) if n.is_finite() => serde_json::json!(n),
            _ => serde_json::Value::String(text.to_owned()),
        },
    }
}

/// Parses a duration: seconds (`90`), or a number with `s`, `m`, `h` or `d` (`15m`, `2h`).
pub fn parse_duration_s(text: &str) -> anyhow::Result<u64> {
    let bad = || {
        anyhow::anyhow!(
            "--for {text:?} is not a duration: a whole number of seconds, or one with s, m, h or d (90, 15m, 2h, 1d)"
        )
    };
    let (digits, unit_s) = match text.char_indices().last() {
        Some((i, 's')) => (&text[..i], 1),
        Some((i, 'm')) => (&text[..i], 60),
        Some((i, 'h')) => (&text[..i], 3_600),
        Some((i, 'd')) => (&text[..i], 86_400),
        _ => (text, 1),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let seconds = n.checked_mul(unit_s).ok_or_else(bad)?;
    if !(1..=CLAIM_FOR_S_MAX).contains(&seconds) {
        bail!("--for {text} must be between 1 s and {CLAIM_FOR_S_MAX} s (a week)");
    }
    Ok(seconds)
}

pub async fn run(point: &str, ask: Ask, args: &AskArgs) -> anyhow::Result<ExitCode> {
    if !is_principal_name(&args.principal) {
        bail!("--principal must be 1 to 64 ASCII letters, digits, '_' or '-' (a principal's subject token)");
    }
    if !(1..=REPLY_TIMEOUT_MS_MAX).contains(&args.reply_timeout_ms) {
        bail!("--reply-timeout-ms must be within 1..={REPLY_TIMEOUT_MS_MAX}");
    }
    let now_ms = time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
    let command_id = format!("cli-{}-{}-{now_ms}", args.principal, std::process::id());
    let (value, for_s, release) = match &ask {
        Ask::Set { value, for_s } => (parse_value(value), *for_s, false),
        Ask::Release => (serde_json::Value::Null, None, true),
    };
    let request = CommandRequest {
        command_id: command_id.clone(),
        point_id: point.to_owned(),
        value,
        unit: None,
        // The core takes the principal from the subject; the body's is not read.
        principal: String::new(),
        for_s,
        release,
        reply_to: None,
        band: None,
    };
    let payload = serde_json::to_vec(&request).context("encoding the command request")?;
    let credentials = args.nats.credentials()?;
    let connection = BusConnection::connect(&args.nats.nats_url, &args.principal, &credentials)
        .await
        .context("connecting to NATS to ask the running core")?;
    let answer = match request_reply(
        &connection,
        &command_request_subject(&args.principal),
        payload.into(),
        args.reply_timeout_ms,
    )
    .await
    {
        Ok(answer) => answer,
        Err(e) => {
            let why = match e {
                RequestFailed::NoResponders(_) => {
                    "nothing listens on the bus for it (no core runs, or it is not connected to this server)"
                        .to_owned()
                }
                RequestFailed::TimedOut(ms) => format!(
                    "no answer within {ms} ms (`sentinel why {command_id}` shows whether the core recorded it)"
                ),
                RequestFailed::Other(why) => why,
            };
            eprintln!("sentinel: the command request {command_id} was not answered: {why}");
            return Ok(ExitCode::from(EXIT_NO_CORE));
        }
    };
    let answer: RequestAnswer =
        serde_json::from_slice(&answer).context("the core's answer is not a command request answer")?;
    if args.json {
        println!("{}", serde_json::to_value(&answer).unwrap_or_default());
    }
    if answer.outcome == ANSWER_ACCEPTED {
        if !args.json {
            let what = match ask {
                Ask::Set { .. } => "claim set",
                Ask::Release => "claim released",
            };
            println!(
                "{what} on {point} as {} (command id {command_id}); `sentinel desired {point}` shows what wins",
                args.principal
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "sentinel: the core refused {command_id}: {}",
        answer.reason.as_deref().unwrap_or("no reason given")
    );
    Ok(ExitCode::from(EXIT_REFUSED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_durations_parse_and_bad_durations_are_named() {
        assert_eq!(parse_value("true"), serde_json::json!(true));
        assert_eq!(parse_value("21.5"), serde_json::json!(21.5));
        assert_eq!(parse_value("eco"), serde_json::json!("eco"));
        assert_eq!(
            parse_value("NaN"),
            serde_json::json!("NaN"),
            "not a finite number"
        );
        assert_eq!(parse_duration_s("90").expect("seconds"), 90);
        assert_eq!(parse_duration_s("15m").expect("minutes"), 900);
        assert_eq!(parse_duration_s("2h").expect("hours"), 7_200);
        assert_eq!(parse_duration_s("1d").expect("a day"), 86_400);
        assert_eq!(
            parse_duration_s("soon").expect_err("no number").to_string(),
            "--for \"soon\" is not a duration: a whole number of seconds, or one with s, m, h or d (90, 15m, 2h, 1d)"
        );
        assert_eq!(
            parse_duration_s("8d").expect_err("past a week").to_string(),
            "--for 8d must be between 1 s and 604800 s (a week)"
        );
        assert_eq!(
            parse_duration_s("0").expect_err("zero").to_string(),
            "--for 0 must be between 1 s and 604800 s (a week)"
        );
    }
}

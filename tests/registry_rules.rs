//! `sentinel registry check` and `sentinel registry plan` on a folder with rules (issue 22 items
//! 1, 6 and 9), as an operator runs them: the real binary, no servers (neither command needs
//! one).
//!
//! Owns what the rules fixture (`tests/fixtures/registry-rules`) promises at the command line:
//! it passes `registry check` (exit 0); `registry plan --json` lists its rules in dependency
//! order with the feedback loop; and the same folder with an interlock acting on a point at
//! the partitionable east wing is refused, exit 1, with the one-line refusal naming the rule,
//! the point and the site.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::harness::output_within;

const FIXTURE: &str = "tests/fixtures/registry-rules";

fn sentinel(args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = Command::new(sentinel_bin());
    command
        .current_dir(workspace_root())
        .args(args)
        .env("SENTINEL_LOG", "warn")
        .stdin(Stdio::null());
    let out = output_within(&mut command, Duration::from_secs(60));
    (
        out.status.code(),
        String::from_utf8(out.stdout).expect("UTF-8"),
        String::from_utf8(out.stderr).expect("UTF-8"),
    )
}

/// A copy of the fixture in a scratch folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn copy_of(dir: &Path) -> Scratch {
        let to = std::env::temp_dir().join(format!("sentinel-registry-rules-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&to);
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            std::fs::create_dir_all(to.join(&rel)).expect("mkdir");
            for entry in std::fs::read_dir(dir.join(&rel)).expect("readable") {
                let entry = entry.expect("entry");
                let child = rel.join(entry.file_name());
                if entry.file_type().expect("type").is_dir() {
                    stack.push(child);
                } else {
                    std::fs::copy(entry.path(), to.join(&child)).expect("copy");
                }
            }
        }
        Scratch(to)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn check_and_plan_take_the_rules_fixture_and_refuse_an_interlock_at_a_partitionable_site() {
    let (code, out, err) = sentinel(&["registry", "check", FIXTURE]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out.trim(),
        format!("{FIXTURE}: 105 points, all admission checks passed"),
        "the sample's 102 and one state point per rule"
    );

    let (code, out, err) = sentinel(&["registry", "plan", FIXTURE, "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let plan: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let rules: Vec<(String, String, Option<Vec<String>>)> = plan["rules_in_dependency_order"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|r| {
            (
                r["id"].as_str().expect("id").to_owned(),
                r["claims"].as_str().expect("claims").to_owned(),
                r.get("feedback_loop")
                    .map(|p| serde_json::from_value(p.clone()).expect("a path")),
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            (
                "ahu1.night_setback".into(),
                "ahu1.supply_temp_setpoint".into(),
                None
            ),
            ("boiler1.overheat_cutback".into(), "boiler1.setpoint".into(), None),
            (
                "boiler1.setpoint_floor".into(),
                "boiler1.setpoint".into(),
                Some(vec!["boiler1.setpoint".to_owned()])
            ),
        ]
    );

    let scratch = Scratch::copy_of(&workspace_root().join(FIXTURE));
    let rules = std::fs::read_to_string(scratch.0.join("rules.toml")).expect("rules.toml");
    std::fs::write(
        scratch.0.join("rules.toml"),
        format!(
            "{rules}\n[[rule]]\nid = \"ahu1.frost_interlock\"\ninputs = [\"ahu1.supply_air_temp\"]\n\
             when = \"ahu1.supply_air_temp < 5\"\n\
             claim = {{ point = \"boiler1.setpoint\", value = 80, band = \"interlock\" }}\n\
             otherwise = \"release\"\non_input_loss = \"release\"\n"
        ),
    )
    .expect("write");
    let dir = scratch.0.to_str().expect("UTF-8 path");
    let (code, out, err) = sentinel(&["registry", "check", dir]);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "rules.toml: rule \"ahu1.frost_interlock\": input \"ahu1.supply_air_temp\" of an interlock rule must \
             declare missing_data fail_closed or hold_last_valid; it declares none",
            "1 issue(s) in the registry",
        ],
        "the protection refusal comes first: the site is checked once the folder resolves"
    );
    let with_policy = std::fs::read_to_string(scratch.0.join("hosts/ahu-east.toml"))
        .expect("ahu-east.toml")
        .replacen(
            "id = \"ahu1.supply_air_temp\"\n",
            "id = \"ahu1.supply_air_temp\"\nmissing_data = { policy = \"fail_closed\" }\n",
            1,
        );
    std::fs::write(scratch.0.join("hosts/ahu-east.toml"), with_policy).expect("write");
    let (code, out, err) = sentinel(&["registry", "check", dir]);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "rules.toml: rule \"ahu1.frost_interlock\": an interlock-band rule reads point \"ahu1.supply_air_temp\" \
             at partitionable site \"east-wing\"; an interlock must hold at its site, not through the core: use \
             band \"safety\", or place the host at a site that is not partitionable",
            "1 issue(s) in the registry",
        ]
    );
}

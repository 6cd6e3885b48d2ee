//! The examples run end to end (RFC-0002:C-PLAYBOOK-SURFACE): each is copied to a tempdir and
//! run there through the real binary, as a user would run it from its directory.

use crate::support::BIN;
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        // A local run of the example leaves these behind; they are not part of it.
        if name == "workspace" || name == "state" {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

/// A copy of `examples/NAME`, whose `[repo]` (this repository, `../..`) is pointed at the
/// repository the tests run in.
fn example_on_this_repo(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&repo_root().join("examples").join(name), tmp.path());
    let manifest = tmp.path().join("crucible.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        "path = \"../..\"",
        &format!("path = {:?}", repo_root().to_string_lossy()),
    );
    std::fs::write(&manifest, text).unwrap();
    tmp
}

pub(crate) fn run_in(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(["plan", "run"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), format!("{stdout}{stderr}"))
}

fn git_log(ws: &Path) -> String {
    let out = Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(ws)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

// RFC-0002:C-PLAYBOOK-SURFACE: the litmus test runs on the command backend, valid, from its own
// directory with a relative manifest.
#[test]
fn playbook_example_runs_valid() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&repo_root().join("examples/playbook"), tmp.path());
    let (code, out) = run_in(tmp.path(), &["--max-cost", "1", "--max-time", "2m"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("verdict: valid"), "{out}");
    let ws = tmp.path().join("workspace");
    // `collect` changes nothing, so it passes without a commit.
    assert_eq!(
        git_log(&ws),
        "task summary\ntask assemble\ntask draft_fixed\ntask draft_changed\ntask draft_added\ncrucible: baseline workspace\n"
    );
    let changelog = std::fs::read_to_string(ws.join("CHANGELOG.md")).unwrap();
    // The product parameter reached the agent inside the external-input markers, as data.
    assert!(
        changelog.starts_with("# Changelog for crucible\n"),
        "{changelog}"
    );
    assert!(changelog.contains("## fixed\n\n- Epilogue tasks run after a failed main graph too"));
    let summary = std::fs::read_to_string(ws.join("SUMMARY.md")).unwrap();
    assert!(summary.contains("run ended: finished") && summary.contains("- length: pass"));
}

// A parameter changes what runs, and a failed grade makes the verdict invalid while the epilogue
// still reports (RFC-0002:C-PLAYBOOK-LANE).
#[test]
fn playbook_example_fails_its_grade_with_a_high_threshold() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&repo_root().join("examples/playbook"), tmp.path());
    let (code, out) = run_in(
        tmp.path(),
        &[
            "--max-cost",
            "1",
            "--max-time",
            "2m",
            "--param",
            "product=widgets",
            "--param",
            "min_words=500",
        ],
    );
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("verdict: invalid"), "{out}");
    let ws = tmp.path().join("workspace");
    let changelog = std::fs::read_to_string(ws.join("CHANGELOG.md")).unwrap();
    assert!(
        changelog.starts_with("# Changelog for widgets\n"),
        "{changelog}"
    );
    let summary = std::fs::read_to_string(ws.join("SUMMARY.md")).unwrap();
    assert!(
        summary.contains("run ended: error") && summary.contains("- length: fail"),
        "{summary}"
    );
}

// The audit example does real work on this repository: one isolated check per crate, and the
// report committed by the epilogue.
#[test]
fn audit_example_reports_on_every_crate() {
    let tmp = example_on_this_repo("repo-audit");
    let (code, out) = run_in(
        tmp.path(),
        &["--max-cost", "0", "--max-time", "5m", "--jobs", "2"],
    );
    assert_eq!(code, 0, "{out}");
    let ws = tmp.path().join("workspace");
    let audit = std::fs::read_to_string(ws.join("AUDIT.md")).unwrap();
    for c in [
        "crucible-agent",
        "crucible-cli",
        "crucible-controller",
        "crucible-dsl",
        "crucible-engine",
        "crucible-pack",
        "crucible-plan",
    ] {
        assert!(audit.contains(&format!("| {c} |")), "{audit}");
    }
    assert_eq!(git_log(&ws).lines().next(), Some("task report"));
}

// Issue 13, RFC-0002:C-RUN-HISTORY: the scheduled chore run twice in one local series, as cron
// would fire it: the second run's report compares with the first.
#[test]
fn repo_health_example_compares_with_its_last_run() {
    let tmp = example_on_this_repo("repo-health");
    let fire = || {
        let (code, out) = run_in(
            tmp.path(),
            &["--series", "nightly", "--max-cost", "0", "--max-time", "5m"],
        );
        assert_eq!(code, 0, "{out}");
        let health = std::fs::read_to_string(tmp.path().join("workspace/HEALTH.md")).unwrap();
        let current = std::fs::read_to_string(tmp.path().join("state/current")).unwrap();
        (health, current.trim().to_string())
    };
    let (first, first_run) = fire();
    assert!(first.contains("TODO trend: first run."), "{first}");
    assert!(!first.contains(&first_run), "{first}");
    let (second, _) = fire();
    assert!(second.contains(&format!("| {first_run} |")), "{second}");
    assert!(second.contains("TODO trend: steady."), "{second}");
}

// The audit example as a standing launch would run it (RFC-0002:C-ASKS, C-RUN-HISTORY): a crate
// with a finding gets an ask for another workflow, keyed by its findings, and the report
// compares with the earlier run its series supplied.
#[test]
fn audit_example_files_asks_and_reads_its_series() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let git = |args: &[&str], dir: &Path| {
        let ok = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    git(
        &["clone", "-q", &repo_root().to_string_lossy(), "repo"],
        tmp.path(),
    );
    let lib = repo.join("crates/crucible-pack/src/lib.rs");
    let mut text = std::fs::read_to_string(&lib).unwrap();
    text.push_str("\nfn _planted() {\n    todo!()\n}\n");
    std::fs::write(&lib, text).unwrap();
    git(&["commit", "-qam", "plant a placeholder"], &repo);

    let pack = tmp.path().join("pack");
    copy_dir(&repo_root().join("examples/repo-audit"), &pack);
    let manifest = pack.join("crucible.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        "path = \"../..\"",
        &format!("path = {:?}", repo.to_string_lossy()),
    );
    std::fs::write(&manifest, text).unwrap();
    let series = serde_json::json!({"version": 1, "records": [{
        "run": "earlier-run", "started_at": "2026-11-29T02:00:00Z", "ended_at": "2026-11-29T02:01:00Z",
        "outcome": "finished", "verdict": "valid", "revision": "tree1:abc",
        "link": "https://ctl.example/runs/earlier-run",
        "entry": {"task": "report", "status": "pass", "output": {"audited": 6, "findings": 0}}}]});
    let out = Command::new(BIN)
        .args([
            "plan",
            "run",
            "--max-cost",
            "0",
            "--max-time",
            "5m",
            "--jobs",
            "2",
        ])
        .env("CRUCIBLE_HISTORY", series.to_string())
        .current_dir(&pack)
        .output()
        .unwrap();
    // The planted placeholder fails a required audit: the verdict is invalid.
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let audit = std::fs::read_to_string(pack.join("workspace/AUDIT.md")).unwrap();
    assert!(audit.contains("| crucible-pack | fail |"), "{audit}");
    assert!(
        audit.contains("## Earlier runs") && audit.contains("0 finding(s) (earlier-run)"),
        "{audit}"
    );
    let current = std::fs::read_to_string(pack.join("state/current")).unwrap();
    let log = std::fs::read_to_string(
        pack.join("state/runs")
            .join(current.trim())
            .join("session.jsonl"),
    )
    .unwrap();
    let asks: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["kind"] == "asks_emitted")
        .collect();
    assert_eq!(asks.len(), 1, "{log}");
    assert_eq!(asks[0]["task"], "report");
    let ask = &asks[0]["asks"][0];
    assert!(
        ask["key"]
            .as_str()
            .unwrap()
            .starts_with("audit:crucible-pack:"),
        "{ask}"
    );
    assert_eq!(ask["workflow"], "fix-audit-findings");
    assert!(
        ask["params"]["findings"][0]
            .as_str()
            .unwrap()
            .contains("placeholder"),
        "{ask}"
    );
}

// Issue 10: the agents example runs on the real Claude CLI against the scripted endpoint (its
// prompts are written for a real model; the endpoint's default script makes the fix): the turn
// fixes the bug, answers with its summary, and the test grades it.
#[test]
fn agents_example_runs_on_the_scripted_endpoint() {
    let Some(cli) = crate::support::agent_cli("claude") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&repo_root().join("examples/agents"), tmp.path());
    let manifest = tmp.path().join("crucible.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        format!(
            "{text}\n[agent.cli]\nclaude = {:?}\n",
            cli.to_string_lossy()
        ),
    )
    .unwrap();
    let fixed = "def greet(name):\n    return \"Hello, \" + name + \"!\"\n";
    // An existing file is edited through the shell: Claude's Write tool wants it read first.
    let model = crate::model_double::ModelDouble::with_default(serde_json::json!({
        "write": {"PLAN_TASK_RESULT.json": "{\"summary\": \"added the comma and the bang\"}"},
        "bash": "printf 'def greet(name):\\n    return \"Hello, \" + name + \"!\"\\n' > src/greet.py"
    }));
    let binding = serde_json::json!({"version": 1, "bindings": [{"role": "agent", "protocol": "messages",
        "url": model.url(), "model": "claude-sonnet-4-5", "key_env": "SCRIPTED_KEY"}]});
    let out = Command::new(BIN)
        .args(["plan", "run", "--max-cost", "1", "--max-time", "10m"])
        .current_dir(tmp.path())
        .env("CRUCIBLE_INFERENCE", binding.to_string())
        .env("SCRIPTED_KEY", "sk-scripted")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("verdict: valid"), "{text}");
    let ws = tmp.path().join("workspace");
    assert_eq!(
        std::fs::read_to_string(ws.join("src/greet.py")).unwrap(),
        fixed
    );
    assert!(git_log(&ws).contains("task fix"), "{}", git_log(&ws));
}

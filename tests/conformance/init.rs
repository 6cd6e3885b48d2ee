//! Issue 19: `crucible init [DIR]` writes a starter pack (manifest, a graph with a command, an
//! agent task on the command backend and an epilogue) that `check` passes and `plan run` runs
//! valid at once; it refuses a directory that is not empty.

use crate::support::BIN;
use std::path::Path;
use std::process::Command;

fn crucible(cwd: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn rows(state: &Path) -> Vec<serde_json::Value> {
    let current = std::fs::read_to_string(state.join("current")).unwrap();
    let log = state
        .join("runs")
        .join(current.trim())
        .join("session.jsonl");
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["kind"] == "task_result")
        .collect()
}

// Written into a new directory, checked clean and run valid under the default sandbox: the
// command's result reaches the agent's workspace and the epilogue reports the agent's file.
#[test]
fn init_writes_a_pack_that_runs_valid() {
    let d = tempfile::tempdir().unwrap();
    let out = crucible(d.path(), &["init", "starter"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "crucible plan run --manifest starter/crucible.toml --max-cost 1 --max-time 5m"
        ),
        "{stdout}"
    );
    let pack = d.path().join("starter");
    for f in [
        "crucible.toml",
        "workflow.star",
        "prompts/summarize.md",
        "agent.sh",
        ".gitignore",
    ] {
        assert!(pack.join(f).is_file(), "{f}");
    }
    let check = crucible(&pack, &["check"]);
    assert!(check.status.success(), "{check:?}");
    let run = crucible(
        &pack,
        &["plan", "run", "--max-cost", "1", "--max-time", "5m"],
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert!(stdout.ends_with("verdict: valid\n"), "{stdout}");
    let rows = rows(&pack.join("state"));
    let names: Vec<&str> = rows.iter().map(|r| r["task"].as_str().unwrap()).collect();
    assert_eq!(names, ["count", "summarize", "report"]);
    assert!(rows.iter().all(|r| r["status"] == "pass"), "{rows:?}");
    assert_eq!(rows[1]["output"]["summary"], "3 words: alpha beta gamma");
    let logs = crucible(&pack, &["logs", "latest", "report"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("3 words: alpha beta gamma"),
        "{logs:?}"
    );
}

// `init` with no DIR writes into the current directory when it is empty.
#[test]
fn init_defaults_to_the_current_directory() {
    let d = tempfile::tempdir().unwrap();
    let out = crucible(d.path(), &["init"]);
    assert!(out.status.success(), "{out:?}");
    assert!(d.path().join("crucible.toml").is_file());
}

// A directory holding anything is refused (exit 1) and left as it was.
#[test]
fn init_refuses_a_directory_that_is_not_empty() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("crucible.toml"), "mine").unwrap();
    let out = crucible(d.path(), &["init", "."]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not empty"));
    let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
    assert_eq!(left.len(), 1);
    assert_eq!(
        std::fs::read_to_string(d.path().join("crucible.toml")).unwrap(),
        "mine"
    );
}

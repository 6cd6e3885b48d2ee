//! The branching example runs end to end (issue 5; RFC-0002:C-REVISE-LOOP, C-SETTLED-JOIN): it
//! maps over a discovered list, routes on a finding and revises a draft, on the command backend.

use crate::support::BIN;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn copy_dir(from: &Path, to: &Path) {
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

fn rows(dir: &Path) -> Vec<Value> {
    let current = std::fs::read_to_string(dir.join("state/current")).unwrap();
    let log = dir
        .join("state/runs")
        .join(current.trim())
        .join("session.jsonl");
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["kind"] == "task_result")
        .collect()
}

// Issue 5 "Done when": the example pack runs valid, with the instance, round and final rows.
#[test]
fn triage_example_maps_routes_and_revises() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/triage");
    copy_dir(&root, tmp.path());
    let out = Command::new(BIN)
        .args(["plan", "run", "--max-cost", "1", "--max-time", "2m"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("verdict: valid"), "{text}");
    let rows = rows(tmp.path());
    let status = |task: &str| -> String {
        let found: Vec<&Value> = rows.iter().filter(|r| r["task"] == task).collect();
        assert_eq!(found.len(), 1, "one row for {task}");
        found[0]["status"].as_str().unwrap().to_string()
    };
    for instance in ["inspect[api.txt]", "inspect[db.txt]", "inspect[login.txt]"] {
        assert_eq!(status(instance), "pass");
    }
    assert_eq!(status("inspect"), "pass");
    assert_eq!(status("gate"), "pass");
    assert_eq!(status("log"), "not_taken");
    assert_eq!(status("draft[round-1]"), "pass");
    assert_eq!(status("review[round-1]"), "fail");
    assert_eq!(status("draft[round-2]"), "pass");
    assert_eq!(status("review[round-2]"), "pass");
    assert_eq!(status("review"), "pass");
    let worst = rows.iter().find(|r| r["task"] == "worst").unwrap();
    assert_eq!(
        worst["output"]["high"],
        serde_json::json!(["api.txt", "db.txt"])
    );
    let fix = std::fs::read_to_string(tmp.path().join("workspace/FIX.md")).unwrap();
    assert!(fix.contains("api.txt") && fix.contains("db.txt"), "{fix}");
    let done = rows.iter().find(|r| r["task"] == "done").unwrap();
    assert_eq!(
        done["output"],
        serde_json::json!({"review": "pass", "log": "not_taken"})
    );
}

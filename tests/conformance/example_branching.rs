//! The branching example runs end to end (issue 5; RFC-0002:C-REVISE-LOOP, C-SETTLED-JOIN): it
//! maps over a discovered list, routes on a finding and revises a draft, on the command backend.

use crate::examples::{copy_dir, repo_root, run_in};
use serde_json::Value;
use std::path::Path;

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
    copy_dir(&repo_root().join("examples/triage"), tmp.path());
    let (code, text) = run_in(tmp.path(), &["--max-cost", "1", "--max-time", "2m"]);
    assert_eq!(code, 0, "{text}");
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

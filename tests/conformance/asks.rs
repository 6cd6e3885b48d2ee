//! Work emission (RFC-0002:C-ASKS): a passing attempt's `PLAN_ASKS.json` is recorded on the
//! session log before its row, never dispatched, and bounded per run.

use crate::support::{command, Pack};
use crate::task_files::committed_paths;
use serde_json::{json, Value};

fn emit(name: &str, asks: Value, extra: &str) -> String {
    command(
        name,
        &format!("echo '{asks}' > PLAN_ASKS.json; echo '{{}}'"),
        extra,
    )
}

fn ask(key: &str) -> Value {
    json!({"key": key, "workflow": "fix-issue", "params": {"issue": key}})
}

// Recorded on the log, just before the emitting task's row, exactly as emitted; never run by
// this engine (one run in the state directory) and never committed with the task's changes.
#[test]
fn asks_are_recorded_before_the_row_and_never_dispatched() {
    let p = Pack::playbook(&emit("scan", json!([ask("repo#1"), ask("repo#2")]), ""));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let log = p.log();
    let at = log
        .iter()
        .position(|l| l["kind"] == "asks_emitted")
        .expect("an asks_emitted line");
    assert_eq!(log[at]["task"], "scan");
    assert_eq!(log[at]["asks"], json!([ask("repo#1"), ask("repo#2")]));
    assert_eq!(log[at + 1]["kind"], "task_result");
    assert_eq!(log[at + 1]["task"], "scan");
    let runs = std::fs::read_dir(p.state().join("runs")).unwrap().count();
    assert_eq!(
        runs, 1,
        "an emitted ask is never dispatched by the run that emitted it"
    );
    assert!(!committed_paths(&p).contains("PLAN_ASKS.json"));
}

// The operator's bound: a task whose asks would pass it fails, naming the bound, and none of
// its asks are recorded; the bound is shown by check.
#[test]
fn the_bound_fails_the_emitting_task_whole() {
    let p = Pack::playbook(&format!(
        "{}{}",
        emit("first", json!([ask("a"), ask("b")]), "required = false"),
        emit(
            "second",
            json!([ask("c")]),
            "required = false\ndepends_on = [\"first\"]"
        ),
    ));
    let r = p
        .command(&p.run_args(&[]))
        .env("CRUCIBLE_MAX_ASKS", "2")
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("first")["status"], "pass");
    let second = p.row("second");
    assert_eq!(second["status"], "fail");
    assert!(
        second["note"].as_str().unwrap().contains("bound of 2"),
        "{second}"
    );
    let emitted: Vec<Value> = p
        .log()
        .into_iter()
        .filter(|l| l["kind"] == "asks_emitted")
        .collect();
    assert_eq!(emitted.len(), 1, "{emitted:?}");
    let check = p.check().env("CRUCIBLE_MAX_ASKS", "7").run();
    assert!(
        check.stdout.contains("asks: at most 7 per run"),
        "{}",
        check.stdout
    );
}

// Only a passing attempt emits; malformed asks are a measured failure naming the rule.
#[test]
fn failing_attempts_emit_nothing_and_malformed_asks_fail() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "broken",
            "echo '[{\"key\": \"k\", \"workflow\": \"w\", \"params\": {}}]' > PLAN_ASKS.json; exit 1",
            "required = false"
        ),
        emit("odd", json!([{"key": "k", "workflow": "w"}]), "required = false"),
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!p.log().iter().any(|l| l["kind"] == "asks_emitted"));
    let odd = p.row("odd");
    assert_eq!(odd["status"], "fail");
    assert!(
        odd["note"]
            .as_str()
            .unwrap()
            .contains("missing field `params`"),
        "{odd}"
    );
}

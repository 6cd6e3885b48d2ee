//! The history of a launch series (RFC-0002:C-RUN-HISTORY): the earlier runs the orchestrator
//! supplies in `CRUCIBLE_HISTORY`, as the reserved input `history` of a task declaring a depth.

use crate::fanout::star;
use crate::resume::cut_log;
use crate::support::{Pack, Ran};
use serde_json::{json, Value};

fn record(run: &str, day: u32) -> Value {
    json!({"run": run, "started_at": format!("2026-11-{day:02}T00:00:00Z"),
           "ended_at": format!("2026-11-{day:02}T01:00:00Z"), "outcome": "finished",
           "verdict": "valid", "revision": "tree1:abc", "link": format!("https://ctl.example/runs/{run}"),
           "entry": {"task": "scan", "status": "pass", "output": {"found": day}}})
}

/// Four earlier runs, handed over out of order.
fn series() -> String {
    json!({"version": 1, "records": [record("r3", 3), record("r1", 1), record("r4", 4), record("r2", 2)]})
        .to_string()
}

const READERS: &str = r#"near = command(name = "near", run = "python3 $PACK/save.py", history = 2)
far = command(name = "far", run = "python3 $PACK/save.py", history = 30)
none = command(name = "none", run = "python3 $PACK/save.py")
workflow(type = "playbook", tasks = [near, far, none], history_record = near)
"#;

fn run_in_series(p: &Pack, history: &str, extra: &[(&str, &str)]) -> Ran {
    let mut cmd = p.command(&p.run_args(&[])).env("CRUCIBLE_HISTORY", history);
    for (k, v) in extra {
        cmd = cmd.env(k, v);
    }
    cmd.run()
}

fn runs(history: &Value) -> Vec<&str> {
    history["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap())
        .collect()
}

// A run that belongs to no series gives every task that reads history an empty list and zero;
// the admitted plan carries the record task and each depth.
#[test]
fn a_run_in_no_series_reads_an_empty_history() {
    let p = star(READERS);
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        p.saved("near")["history"],
        json!({"records": [], "dropped": 0})
    );
    assert!(p.saved("none").get("history").is_none());
    let admitted = p
        .log()
        .into_iter()
        .find(|l| l["kind"] == "plan_admitted")
        .unwrap();
    assert_eq!(admitted["history_record"], "near");
    let depth = |name: &str| {
        admitted["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["history_depth"]
            .clone()
    };
    assert_eq!(
        (depth("near"), depth("far"), depth("none")),
        (json!(2), json!(30), json!(0))
    );
}

// Each task gets the most recent runs its depth allows, oldest first by end time, every record
// as the orchestrator supplied it.
#[test]
fn a_series_history_reaches_each_task_by_its_depth() {
    let p = star(READERS);
    let r = run_in_series(&p, &series(), &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let near = p.saved("near")["history"].clone();
    assert_eq!(runs(&near), ["r3", "r4"]);
    assert_eq!(near["dropped"], 0);
    assert_eq!(near["records"][1], record("r4", 4));
    assert_eq!(runs(&p.saved("far")["history"]), ["r1", "r2", "r3", "r4"]);
}

// The operator's bound on one task's history drops whole records from the oldest end and counts
// them; `check` shows the bound before any run.
#[test]
fn the_size_bound_drops_the_oldest_whole_records() {
    let p = star(READERS);
    let one = record("r1", 1).to_string().len();
    let bound = (2 * one + 60).to_string();
    let r = run_in_series(&p, &series(), &[("CRUCIBLE_HISTORY_MAX_BYTES", &bound)]);
    assert_eq!(r.code, 0, "{r:?}");
    let far = p.saved("far")["history"].clone();
    assert_eq!(runs(&far), ["r3", "r4"]);
    assert_eq!(far["dropped"], 2);
    let check = p.check().env("CRUCIBLE_HISTORY_MAX_BYTES", "8K").run();
    assert!(
        check
            .stdout
            .contains("history: at most 8192 bytes per task"),
        "{}",
        check.stdout
    );
}

// An earlier run's record may carry text an earlier agent wrote: it reaches a prompt only inside
// the external-input region.
#[test]
fn an_agent_reads_history_only_as_marked_external_input() {
    let p = star(
        r#"think = agent(name = "think", prompt = "Compare with the last run.", history = 1)
workflow([think])
"#,
    );
    let spy =
        r#"printf '%s' "$CRUCIBLE_PROMPT" > "$PACK/prompt"; echo '{}' > PLAN_TASK_RESULT.json"#;
    let r = p
        .command(&p.run_args(&["--agent-cmd", spy]))
        .env("CRUCIBLE_HISTORY", &series())
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let prompt = std::fs::read_to_string(p.probe().join("prompt")).unwrap();
    let open = prompt
        .find("CRUCIBLE-EXTERNAL-INPUT")
        .expect("a marked region");
    let at = prompt
        .find("https://ctl.example/runs/r4")
        .expect("the record");
    assert!(open < at, "{prompt}");
    assert!(
        !prompt.contains("runs/r3"),
        "depth 1 gives one record: {prompt}"
    );
}

// The document is decoded strictly and refused before any work.
#[test]
fn a_malformed_history_is_refused_before_any_work() {
    let p = star(READERS);
    let mut bad = record("r1", 1);
    bad["score"] = json!(3);
    let r = run_in_series(
        &p,
        &json!({"version": 1, "records": [bad]}).to_string(),
        &[],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("CRUCIBLE_HISTORY: unknown field `score`"),
        "{}",
        r.stderr
    );
    assert!(!p.path().join("state").exists());
}

// A resumed run gives each task the same history the interrupted run gave it, whatever the
// environment says at the resume.
#[test]
fn a_resumed_run_reads_the_history_it_started_with() {
    let p = star(READERS);
    assert_eq!(run_in_series(&p, &series(), &[]).code, 0);
    // A crash before `far` settled.
    cut_log(&p, |l| l["kind"] != "shutdown" && l["task"] != "far");
    // The pack must be as it was at the launch: the tasks' saved inputs go.
    std::fs::remove_dir_all(p.probe().join("out")).unwrap();
    let other = json!({"version": 1, "records": [record("x9", 9)]}).to_string();
    let r = p
        .command(&p.run_args(&["--resume"]))
        .env("CRUCIBLE_HISTORY", &other)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(runs(&p.saved("far")["history"]), ["r1", "r2", "r3", "r4"]);
}

//! A local launch series (RFC-0002:C-RUN-HISTORY, issue 13): `plan run --series NAME` makes the
//! engine the orchestrator of a series kept in its state directory, so a crontab line gives a
//! playbook its history with no controller.

use crate::support::{wait_for_file, Pack, Ran};
use serde_json::{json, Value};
use std::process::{Child, Stdio};

/// Saves what it was given, then passes, fails or hangs as `$PACK/mode` says.
const SCAN: &str = r#"import json, os, sys, time
pack = os.environ["PACK"]
mode, n = open(os.path.join(pack, "mode")).read().split()
inputs = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
os.makedirs(os.path.join(pack, "out"), exist_ok=True)
json.dump(inputs, open(os.path.join(pack, "out", n + ".json"), "w"))
if mode == "hang":
    open(os.path.join(pack, "started"), "w").close()
    time.sleep(120)
print(json.dumps({"n": int(n)}))
sys.exit(1 if mode == "fail" else 0)
"#;

fn chore() -> Pack {
    let p = Pack::playbook("file = \"workflow.star\"\n");
    p.file(
        "workflow.star",
        r#"scan = command(name = "scan", run = "python3 $PACK/scan.py", history = 30)
workflow(type = "playbook", tasks = [scan], history_record = scan)
"#,
    );
    p.file("scan.py", SCAN);
    p
}

fn set_mode(p: &Pack, mode: &str, n: usize) {
    std::fs::write(p.probe().join("mode"), format!("{mode} {n}")).unwrap();
    let _ = std::fs::remove_file(p.probe().join("started"));
}

/// Fires run `n` of `series` (or a run in no series), waiting for it to end.
fn fire(p: &Pack, series: Option<&str>, mode: &str, n: usize, extra: &[&str]) -> Ran {
    set_mode(p, mode, n);
    let mut args = extra.to_vec();
    if let Some(s) = series {
        args.extend(["--series", s]);
    }
    p.run(&args)
}

/// Fires run `n` of the series hanging, and returns it once its task has started.
fn fire_hanging(p: &Pack, n: usize) -> Child {
    set_mode(p, "hang", n);
    let child = p
        .command(&p.run_args(&["--series", "nightly"]))
        .0
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&p.probe().join("started"), 30);
    child
}

fn current(p: &Pack) -> String {
    std::fs::read_to_string(p.state().join("current"))
        .unwrap()
        .trim()
        .to_string()
}

/// The history task `n` was given.
fn given(p: &Pack, n: usize) -> Value {
    let text = std::fs::read_to_string(p.probe().join(format!("out/{n}.json"))).unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["history"].clone()
}

/// What the record of a run is known to hold, by how it was fired.
struct Expected {
    run: String,
    outcome: Value,
    verdict: Value,
    status: Value,
    output: Value,
}

fn expected(p: &Pack, mode: &str, n: usize) -> Expected {
    let (outcome, verdict, status, output) = match mode {
        "pass" => ("finished", "valid", json!("pass"), json!({"n": n})),
        "fail" => ("error", "invalid", json!("fail"), Value::Null),
        "stop" => ("stopped", "invalid", json!("fail"), Value::Null),
        "ceiling" => ("budget", "invalid", json!("fail"), Value::Null),
        // Its engine was killed: it never wrote a shutdown, and its task never settled.
        "killed" => {
            return Expected {
                run: current(p),
                outcome: Value::Null,
                verdict: Value::Null,
                status: Value::Null,
                output: Value::Null,
            }
        }
        other => unreachable!("{other}"),
    };
    Expected {
        run: current(p),
        outcome: json!(outcome),
        verdict: json!(verdict),
        status,
        output,
    }
}

/// A history record's fields (RFC-0002:C-RUN-HISTORY), exactly and in the order a JSON object
/// lists them: the local series and the controller's hand runs the same records.
pub(crate) const RECORD_FIELDS: [&str; 8] = [
    "ended_at",
    "entry",
    "link",
    "outcome",
    "revision",
    "run",
    "started_at",
    "verdict",
];

fn assert_records(history: &Value, want: &[Expected], p: &Pack) {
    let records = history["records"].as_array().unwrap();
    let ids: Vec<&str> = records.iter().map(|r| r["run"].as_str().unwrap()).collect();
    let want_ids: Vec<&str> = want.iter().map(|e| e.run.as_str()).collect();
    assert_eq!(ids, want_ids);
    let mut last_end = String::new();
    for (r, e) in records.iter().zip(want) {
        let keys: Vec<&str> = r.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, RECORD_FIELDS, "exactly the contract's fields");
        assert_eq!(
            (&r["outcome"], &r["verdict"]),
            (&e.outcome, &e.verdict),
            "{r}"
        );
        assert_eq!(
            r["entry"],
            json!({"task": "scan", "status": e.status, "output": e.output}),
            "{r}"
        );
        let dir = p.state().join("runs").join(&e.run);
        let run_json: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
        assert_eq!(r["revision"], run_json["pack"]);
        assert_eq!(r["started_at"], run_json["started_at"]);
        assert_eq!(r["link"], format!("file://{}", dir.display()));
        let end = r["ended_at"].as_str().unwrap().to_string();
        assert!(end >= last_end, "oldest first by end time: {history}");
        last_end = end;
    }
}

// RFC-0002:C-RUN-HISTORY through `--series`: a series fired 35 times with mixed outcomes
// (passed, failed, stopped, ceiling, an engine killed before any shutdown) gives run 36 exactly
// the 30 most recent terminal records, oldest first, with nulls where the killed run left none;
// runs outside the series never appear; the size bound drops whole records from the oldest end
// and says how many.
#[test]
fn run_36_of_a_local_series_gets_the_30_most_recent_terminal_runs() {
    let p = chore();
    let mut want = Vec::new();
    for n in 1..=35 {
        let mode = match n {
            31 => "ceiling",
            33 => "stop",
            34 => "killed",
            n if n % 4 == 0 => "fail",
            _ => "pass",
        };
        match mode {
            "stop" | "killed" => {
                let mut child = fire_hanging(&p, n);
                if mode == "stop" {
                    // SAFETY: signalling our own child process.
                    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
                } else {
                    child.kill().unwrap();
                }
                child.wait().unwrap();
            }
            "ceiling" => {
                set_mode(&p, "hang", n);
                let r = p.run(&["--series", "nightly", "--max-time", "1s"]);
                assert_eq!(r.code, 3, "{r:?}");
            }
            _ => {
                let r = fire(&p, Some("nightly"), mode, n, &[]);
                assert_eq!(r.code, if mode == "pass" { 0 } else { 3 }, "{r:?}");
            }
        }
        want.push(expected(&p, mode, n));
        if n == 20 {
            // Neither a run in no series nor one of another series is part of this one.
            assert_eq!(fire(&p, None, "pass", 100, &[]).code, 0);
            assert_eq!(fire(&p, Some("weekly"), "pass", 101, &[]).code, 0);
            assert_eq!(given(&p, 101)["records"], json!([]));
        }
    }
    // The first run of the series had no history; the second saw the first.
    assert_eq!(given(&p, 1), json!({"records": [], "dropped": 0}));
    assert_records(&given(&p, 2), &want[..1], &p);

    let r = fire(&p, Some("nightly"), "pass", 36, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let history = given(&p, 36);
    assert_eq!(history["dropped"], 0);
    assert_records(&history, &want[5..35], &p);
    want.push(expected(&p, "pass", 36));

    // A bound that holds a few records: whole records go from the oldest end, counted.
    let one = serde_json::to_vec(&history["records"][29]).unwrap().len();
    let bound = (4 * one + 40).to_string();
    set_mode(&p, "pass", 37);
    let r = p
        .command(&p.run_args(&["--series", "nightly"]))
        .env("CRUCIBLE_HISTORY_MAX_BYTES", &bound)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let bounded = given(&p, 37);
    let kept = bounded["records"].as_array().unwrap().len();
    assert!((1..30).contains(&kept), "{bounded}");
    assert_eq!(bounded["dropped"], 30 - kept);
    assert_records(&bounded, &want[37 - kept - 1..], &p);
}

// No overlap: a firing while a run of the state directory is still running is refused before
// any work, naming that run; and a resumed run of the series gets the very history it started
// with, not one recomputed at the resumption.
#[test]
fn a_local_series_never_overlaps_and_resumes_with_its_history() {
    let p = chore();
    assert_eq!(fire(&p, Some("nightly"), "pass", 1, &[]).code, 0);
    let first = expected(&p, "pass", 1);
    let mut hanging = fire_hanging(&p, 2);
    let running = current(&p);
    let r = fire(&p, Some("nightly"), "pass", 3, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&running), "names the running run: {r:?}");
    assert!(
        !p.probe().join("out/3.json").exists(),
        "the refused firing ran nothing"
    );

    hanging.kill().unwrap();
    hanging.wait().unwrap();
    set_mode(&p, "pass", 2);
    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(current(&p), running);
    assert_records(&given(&p, 2), std::slice::from_ref(&first), &p);

    // The next firing sees both, the resumed run as it finally ended.
    assert_eq!(fire(&p, Some("nightly"), "pass", 4, &[]).code, 0);
    let second = Expected {
        run: running,
        ..expected(&p, "pass", 2)
    };
    assert_records(&given(&p, 4), &[first, second], &p);
}

// `--series` takes a plain label, and is the only source of history it is given with.
#[test]
fn a_series_name_is_a_plain_label_and_the_only_history_source() {
    let p = chore();
    set_mode(&p, "pass", 1);
    let r = p.run(&["--series", "../up"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("is not a series name"), "{r:?}");
    let r = p
        .command(&p.run_args(&["--series", "nightly"]))
        .env("CRUCIBLE_HISTORY", r#"{"version": 1, "records": []}"#)
        .run();
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("give one"), "{r:?}");
    assert!(!p.state().join("runs").exists(), "nothing started");
}

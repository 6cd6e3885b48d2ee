//! RFC-0001 notes §4 as RFC-0002 refines it: the command/evaluate I/O contract, the reserved
//! output fields (C-SETTLED-JOIN) and typed emits (C-PLAYBOOK-LANE).

use crate::support::{command, Pack};
use serde_json::json;

// The command contract: CRUCIBLE_TASK, CRUCIBLE_INPUTS (same JSON as the file), the last
// non-empty stdout line as the output.
#[test]
fn command_environment_and_output_line() {
    let run = r#"test "$CRUCIBLE_INPUTS" = "$(cat "$CRUCIBLE_INPUTS_FILE")" || exit 9; echo noise; echo "{\"task\": \"$CRUCIBLE_TASK\"}"; echo; echo '  '"#;
    let p = Pack::playbook(&command("who", run, ""));
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(p.row("who")["output"], json!({"task": "who"}));
}

#[test]
fn missing_or_malformed_output_fails() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command("silent", "true", "required = false"),
        command("chatty", "echo hello", "required = false")
    ));
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(
        p.row("silent")["note"],
        "no output: expected a JSON result on the last stdout line"
    );
    // Issue 19: the note shows the offending line, quoted.
    assert_eq!(
        p.row("chatty")["note"],
        "last stdout line is not JSON: \"hello\""
    );
}

// RFC-0002:C-SETTLED-JOIN: "status": "fail" settles the task failed with its note, not retried;
// "skipped" settles it skipped.
#[test]
fn reserved_status_field() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "f",
            r#"echo '{"status": "fail", "note": "not today"}'"#,
            "required = false"
        ),
        command(
            "s",
            r#"echo '{"status": "skipped", "note": "nothing here"}'"#,
            "required = false"
        )
    ));
    assert_eq!(p.run(&[]).code, 0);
    let f = p.row("f");
    assert_eq!(
        (
            f["status"].as_str(),
            f["note"].as_str(),
            f["attempts"].as_u64()
        ),
        (Some("fail"), Some("not today"), Some(1))
    );
    assert_eq!(f["output"], json!({"status": "fail", "note": "not today"}));
    assert_eq!(p.row("s")["status"], "skipped");
}

// RFC-0002:C-PLAYBOOK-LANE: typed emits are checked on every passing attempt; a miss is a
// measured failure at the producer, not retried; link must be an http(s) URL.
#[test]
fn typed_emits_miss_fails_the_producer() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command(
            "pr",
            r#"echo '{"url": "git@host:x"}'"#,
            "required = false\nemits = { url = \"link\" }"
        ),
        command(
            "count",
            r#"echo '{"n": 3, "urls": ["https://example.com/a"]}'"#,
            "emits = { n = \"integer\", urls = \"links\" }"
        ),
        command(
            "after",
            r#"echo '{}'"#,
            "required = false\ndepends_on = [\"pr\"]"
        )
    ));
    assert_eq!(p.run(&[]).code, 0);
    let pr = p.row("pr");
    assert_eq!(pr["status"], "fail");
    assert_eq!(pr["attempts"], 1);
    assert_eq!(
        pr["note"],
        "declared output field `url` is not an http(s) URL"
    );
    assert_eq!(p.row("count")["status"], "pass");
    assert_eq!(p.row("after")["status"], "blocked");
}

// RFC-0001 notes §4 (evaluate): threshold and direction, `pass` narrows, the normalized `pass`
// is written back, the failure note names the threshold and log handles.
#[test]
fn evaluate_threshold_and_notes() {
    let eval = |name: &str, out: &str, extra: &str| {
        format!(
            "[[workflow.task]]\nname = \"{name}\"\nkind = \"evaluate\"\nrun = '''echo '{out}' '''\nrequired = false\n{extra}\n"
        )
    };
    let p = Pack::playbook(&format!(
        "{}{}{}",
        eval(
            "fast",
            r#"{"score": 0.2}"#,
            "threshold = 0.5\ndirection = \"lower\""
        ),
        eval(
            "slow",
            r#"{"score": 0.9, "logs": ["h1", "h2"]}"#,
            "threshold = 0.5\ndirection = \"lower\""
        ),
        eval("vetoed", r#"{"pass": false, "note": "flaky"}"#, "")
    ));
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(p.row("fast")["output"], json!({"score": 0.2, "pass": true}));
    let slow = p.row("slow");
    assert_eq!(slow["status"], "fail");
    assert_eq!(
        slow["note"],
        "evaluation slow did not pass threshold 0.5 logs: h1,h2"
    );
    assert_eq!(slow["output"]["pass"], false);
    assert_eq!(p.row("vetoed")["note"], "flaky");
}

// RFC-0001 notes §4: a spawn failure is a transport failure, retried twice, sandboxed or not.
#[test]
fn spawn_failure_is_transport_retried_twice() {
    for flags in [&[][..], &["--no-sandbox"][..]] {
        spawn_failure_is_transport(flags);
    }
}

fn spawn_failure_is_transport(flags: &[&str]) {
    let p = Pack::playbook(&command("t", "true", ""));
    let r = p
        .command(&p.run_args(flags))
        .env("PATH", "/nonexistent")
        .run();
    assert_eq!(r.code, 3, "{r:?}");
    let t = p.row("t");
    assert_eq!(
        (t["status"].as_str(), t["attempts"].as_u64()),
        (Some("transport"), Some(3))
    );
    assert!(t["transport"].is_string());
}

// RFC-0002:C-PLAYBOOK-LANE: the run is valid only when every required task passed, so a
// required task that declares itself skipped stops dispatch and invalidates the run.
#[test]
fn required_declared_skip_invalidates() {
    let p = Pack::playbook(&format!(
        "{}{}",
        command(
            "s",
            r#"echo '{"status": "skipped", "note": "no data"}'"#,
            ""
        ),
        command("next", r#"echo '{}'"#, "")
    ));
    let r = p.run(&["--jobs", "1"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(p.row("s")["status"], "skipped");
    let s = p.shutdown();
    assert_eq!(
        (s["outcome"].as_str(), s["verdict"].as_str()),
        (Some("error"), Some("invalid"))
    );
}

// RFC-0002:C-SETTLED-JOIN: "status": "pass" never widens a settlement: not over a nonzero exit,
// not over a threshold the score misses, not over `"pass": false`.
#[test]
fn status_pass_never_widens_a_failure() {
    let eval = |name: &str, out: &str, extra: &str| {
        format!(
            "[[workflow.task]]\nname = \"{name}\"\nkind = \"evaluate\"\nrun = '''echo '{out}' '''\nrequired = false\n{extra}\n"
        )
    };
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command(
            "exited",
            r#"echo '{"status": "pass"}'; exit 4"#,
            "required = false"
        ),
        eval(
            "missed",
            r#"{"score": 0.9, "status": "pass"}"#,
            "threshold = 0.5\ndirection = \"lower\""
        ),
        eval("vetoed", r#"{"pass": false, "status": "pass"}"#, "")
    ));
    assert_eq!(p.run(&[]).code, 0);
    for task in ["exited", "missed", "vetoed"] {
        assert_eq!(p.row(task)["status"], "fail", "{task}: {}", p.row(task));
    }
    assert!(p.row("exited")["note"]
        .as_str()
        .unwrap()
        .starts_with("exit 4"));
}

// RFC-0002:C-PLAYBOOK-PARAMS: command and evaluate tasks get the bound values under the reserved
// input "params", each with its declared type; defaults fill what the launch leaves out. An agent
// task never does: neither its prompt nor its environment holds a value its prompt did not mark.
#[test]
fn command_and_evaluate_tasks_get_params() {
    let p = crate::fanout::star(
        r#"params = {"topic": {"type": "string", "default": "slag"}, "n": {"type": "integer", "default": 3}, "tags": {"type": "list", "default": []}}
c = command(name = "c", run = "python3 $PACK/save.py")
e = evaluate(name = "e", run = "python3 $PACK/save.py")
a = agent(name = "a", prompt = "Say nothing.", depends_on = [c])
workflow([c, e, a])
"#,
    );
    let spy = r#"mkdir -p "$PACK/out"; { printf '%s' "$CRUCIBLE_PROMPT"; env; } > "$PACK/out/a.seen"; echo '{}' > PLAN_TASK_RESULT.json"#;
    let r = p.run(&[
        "--param",
        "topic=zebra-quartz",
        "--param",
        "tags=a,b",
        "--agent-cmd",
        spy,
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let expected = json!({"topic": "zebra-quartz", "n": 3, "tags": ["a", "b"]});
    for task in ["c", "e"] {
        let saved = p.saved(task);
        assert_eq!(saved["params"], expected, "{task}: {saved}");
    }
    let seen = std::fs::read_to_string(p.probe().join("out/a.seen")).unwrap();
    assert!(seen.contains("Say nothing."), "{seen}");
    assert!(
        !seen.contains("zebra-quartz") && !seen.contains("\"params\""),
        "{seen}"
    );
}

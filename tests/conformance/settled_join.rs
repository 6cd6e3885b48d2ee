//! RFC-0002:C-SETTLED-JOIN: what each join dispatches on and the exact inputs it receives.

use crate::support::{command, save_inputs_then, Pack};
use serde_json::json;

fn graph(join: &str) -> Pack {
    Pack::playbook(&format!(
        "{}{}{}{}",
        command("ok", r#"echo '{"v": 1}'"#, "required = false"),
        command(
            "broken",
            r#"echo '{"v": 2, "note": "bad input"}'; exit 3"#,
            "required = false"
        ),
        command(
            "gone",
            r#"echo '{}'"#,
            "required = false\ndepends_on = [\"broken\"]"
        ),
        command(
            "consumer",
            &save_inputs_then("{}"),
            &format!(
                "required = false\ndepends_on = [\"ok\", \"broken\", \"gone\"]\njoin = \"{join}\""
            )
        ),
    ))
}

// RFC-0002:C-SETTLED-JOIN: "settled" dispatches once every dependency is terminal and gets one
// {status, note, output, files} entry per dependency, whatever it settled as.
#[test]
fn settled_join_gets_an_entry_per_dependency() {
    let p = graph("settled");
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(
        p.saved("consumer"),
        json!({
            "ok": {"status": "pass", "note": null, "output": {"v": 1}, "files": false},
            "broken": {"status": "fail", "note": "exit 3: bad input", "output": {"v": 2, "note": "bad input"}, "files": false},
            "gone": {"status": "blocked", "note": "dependency did not pass", "output": null, "files": false},
            "params": {}
        })
    );
}

// RFC-0002:C-SETTLED-JOIN: "passed" runs on at least one passing dependency and gets only the
// passing ones' outputs, directly.
#[test]
fn passed_join_gets_only_passing_outputs() {
    let p = graph("passed");
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(p.saved("consumer"), json!({"ok": {"v": 1}, "params": {}}));
}

// RFC-0002:C-SETTLED-JOIN: "all" needs every dependency passing and then gets each output
// directly; otherwise it is blocked.
#[test]
fn all_join_blocks_on_a_failure_and_forwards_outputs_directly() {
    let p = graph("all");
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(
        p.row("consumer")["blocked"],
        json!({"reason": "dependency_did_not_pass", "task": "broken"})
    );
    let p = Pack::playbook(&format!(
        "[workflow.params]\ntopic = \"slag\"\n{}{}{}",
        command("x", r#"echo '{"a": [1, 2]}'"#, ""),
        command("y", r#"echo '{"b": "two"}'"#, ""),
        command("z", &save_inputs_then("{}"), "depends_on = [\"x\", \"y\"]")
    ));
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(
        p.saved("z"),
        json!({"x": {"a": [1, 2]}, "y": {"b": "two"}, "params": {"topic": "slag"}})
    );
}

// RFC-0002:C-SETTLED-JOIN: a settled join does not dispatch once a required failure has stopped
// dispatch: it settles blocked.
#[test]
fn settled_join_does_not_outlive_a_required_failure() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command("a", "exit 1", ""),
        command("slow", r#"echo '{}'"#, "required = false"),
        command(
            "s",
            &save_inputs_then("{}"),
            "depends_on = [\"slow\"]\njoin = \"settled\""
        )
    ));
    assert_eq!(p.run(&[]).code, 3);
    assert_eq!(
        p.row("s")["blocked"],
        json!({"reason": "required_task_failed", "task": "a"})
    );
}

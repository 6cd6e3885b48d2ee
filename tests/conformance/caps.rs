//! RFC-0002:C-PLAYBOOK-CAPS: `needs` against the run's capabilities, before any dispatch.

use crate::support::{command, Pack};
use serde_json::json;

// RFC-0002:C-PLAYBOOK-CAPS: a required task whose capability is unavailable truncates the plan
// before any dispatch; the verdict is invalid.
#[test]
fn required_unrunnable_task_truncates_the_plan() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command("prep", "touch \"$PACK/ran\"; echo '{}'", ""),
        command("train", "echo '{}'", "needs = \"gpu\""),
        command(
            "epi",
            "touch \"$PACK/ran\"; echo '{}'",
            "stage = \"epilogue\""
        )
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(!p.path().join("ran").exists(), "nothing may dispatch");
    assert_eq!(p.row("train")["status"], "truncated");
    assert_eq!(
        p.row("prep")["blocked"],
        json!({"reason": "truncated", "task": "train"})
    );
    assert_eq!(
        p.row("epi")["blocked"],
        json!({"reason": "truncated", "task": "train"})
    );
    let s = p.shutdown();
    assert_eq!(
        (s["outcome"].as_str(), s["verdict"].as_str()),
        (Some("error"), Some("invalid"))
    );

    // With the capability the same plan runs.
    let r = p.run(&["--cap", "gpu"]);
    assert_eq!(r.code, 0, "{r:?}");
}

// RFC-0002:C-PLAYBOOK-CAPS: an advisory unrunnable task is skipped with its dependents; a
// settled-join dependent still runs; the verdict is unaffected.
#[test]
fn advisory_unrunnable_task_is_skipped_with_its_dependents() {
    let p = Pack::playbook(&format!(
        "{}{}{}{}",
        command(
            "gpu_bench",
            "echo '{}'",
            "needs = \"gpu\"\nrequired = false"
        ),
        command(
            "plot",
            "echo '{}'",
            "depends_on = [\"gpu_bench\"]\nrequired = false"
        ),
        command(
            "wrap",
            "echo '{}'",
            "depends_on = [\"gpu_bench\"]\njoin = \"settled\""
        ),
        command("main", "echo '{}'", "")
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("gpu_bench")["status"], "skipped");
    assert_eq!(p.row("plot")["status"], "skipped");
    assert_eq!(p.row("wrap")["status"], "pass");
    assert_eq!(p.shutdown()["verdict"], "valid");
}

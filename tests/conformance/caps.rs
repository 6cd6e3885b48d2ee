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
    assert!(!p.probe().join("ran").exists(), "nothing may dispatch");
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

// RFC-0002:C-PLAYBOOK-CAPS: `plan show` predicts the skips `plan run` settles, from the same
// verdict: a `passed` join over a skipped advisory task and a passing one runs, an `all` join
// is skipped with it.
#[test]
fn plan_show_predicts_the_skips_plan_run_settles() {
    let p = Pack::playbook(&format!(
        "{}{}{}{}",
        command("a", "echo '{}'", ""),
        command("gpu", "echo '{}'", "needs = \"gpu\"\nrequired = false"),
        command(
            "c",
            "echo '{}'",
            "depends_on = [\"a\", \"gpu\"]\njoin = \"passed\""
        ),
        command("d", "echo '{}'", "depends_on = [\"gpu\"]\nrequired = false")
    ));
    let manifest = p
        .path()
        .join("crucible.toml")
        .to_string_lossy()
        .into_owned();
    let show = p
        .command(&["plan".into(), "show".into(), "--manifest".into(), manifest])
        .run();
    assert_eq!(show.code, 0, "{show:?}");
    let skipped: Vec<&str> = show
        .stdout
        .lines()
        .filter(|l| l.starts_with("skipped: "))
        .collect();
    assert_eq!(
        skipped,
        vec![
            "skipped: gpu: needs `gpu`, which this run does not provide",
            "skipped: d: skipped with `gpu`, whose capability is unavailable",
        ]
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("c")["status"], "pass");
    for line in skipped {
        let (task, note) = line["skipped: ".len()..].split_once(": ").unwrap();
        assert_eq!(p.row(task)["status"], "skipped");
        assert_eq!(p.row(task)["note"], note);
    }
}

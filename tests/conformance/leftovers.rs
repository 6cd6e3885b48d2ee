//! Issue 19: a refused run leaves no state directory, no empty `state/runs/` and no workspace
//! behind, whatever refused it; an engine fault (here: the git memory cannot take a commit) ends
//! the run with the engine's `error` outcome naming the cause, not as the task's failure.

use crate::support::{command, Pack};
use std::os::unix::io::AsRawFd;

/// Nothing of a launch is left in the pack's directory.
fn assert_nothing_left(p: &Pack, case: &str) {
    for dir in ["state", "workspace"] {
        assert!(!p.path().join(dir).exists(), "{case}: {dir}/ was left");
    }
}

fn with_header(p: &Pack, header: &str) {
    let manifest = std::fs::read_to_string(p.path().join("crucible.toml")).unwrap();
    std::fs::write(
        p.path().join("crucible.toml"),
        format!("{header}\n{manifest}"),
    )
    .unwrap();
}

// Each refusal path: compile error, missing ceilings, admission, a failing workspace setup, an
// empty inject glob, a resume with nothing to resume, a rerun of an unknown parent.
#[test]
fn a_refused_run_leaves_nothing_behind() {
    let ok = || command("a", "touch \"$PACK/ran\"; echo '{}'", "");
    let cases: Vec<(&str, Pack, &[&str])> = vec![
        (
            "compile error",
            {
                let p = Pack::playbook("file = \"w.star\"\n");
                p.file("w.star", "a = command(name = \"a\", run = \n");
                p
            },
            &[],
        ),
        (
            "missing ceilings",
            Pack::playbook(&ok()),
            &["--no-max-cost", "--no-max-time"],
        ),
        (
            "admission",
            Pack::playbook("[[workflow.task]]\nname = \"w\"\nkind = \"agent\"\nprompt = \"hi\"\n"),
            &[],
        ),
        (
            "workspace setup",
            {
                let p = Pack::playbook(&ok());
                with_header(&p, "[workspace]\nsetup_cmd = \"exit 7\"");
                p
            },
            &[],
        ),
        (
            "empty inject glob",
            {
                let p = Pack::playbook(&ok());
                with_header(&p, "[workspace]\ninject = [\"nothing/*.txt\"]");
                p
            },
            &[],
        ),
        (
            "resume with nothing to resume",
            Pack::playbook(&ok()),
            &["--resume"],
        ),
    ];
    for (case, p, args) in cases {
        let r = p.run(args);
        assert_eq!(r.code, 1, "{case}: {r:?}");
        assert!(!p.probe().join("ran").exists(), "{case}");
        assert_nothing_left(&p, case);
    }
    let p = Pack::playbook(&ok());
    let manifest = p.path().join("crucible.toml");
    let r = p
        .command(&[
            "plan".into(),
            "rerun".into(),
            "--manifest".into(),
            manifest.to_string_lossy().into(),
            "--parent".into(),
            "latest".into(),
            "--max-cost".into(),
            "1".into(),
            "--max-time".into(),
            "1m".into(),
        ])
        .run();
    assert_eq!(r.code, 1, "rerun: {r:?}");
    assert_nothing_left(&p, "rerun of an unknown parent");
}

// A launch refused because another engine holds the state directory's lock makes neither
// `runs/` nor the workspace, and leaves the holder's lock file in place.
#[test]
fn a_launch_refused_by_the_lock_leaves_nothing_behind() {
    let p = Pack::playbook(&command("a", "touch \"$PACK/ran\"; echo '{}'", ""));
    std::fs::create_dir_all(p.state()).unwrap();
    let held = std::fs::File::create(p.state().join("engine.lock")).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(
        unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("is in use"), "{}", r.stderr);
    assert!(!p.state().join("runs").exists());
    assert!(!p.workspace().exists());
    assert!(p.state().join("engine.lock").exists());
    assert!(!p.probe().join("ran").exists());
}

// An engine fault: the git memory refuses the passing task's commit (its task ref is locked, as
// an unwritable or full git directory would refuse it). The run ends `error` naming the cause;
// the task has no failed row (it did not fail), nothing further is dispatched, the epilogue
// included, and the verdict is invalid. Unsandboxed, so the task can reach the git directory.
#[test]
fn an_engine_fault_ends_the_run_as_the_engines_error() {
    let lock_the_ref = r#"mkdir -p "$(sed 's/^gitdir: //' .git)/refs/crucible/tasks/a.lock"; echo changed > f; echo '{}'"#;
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command("a", lock_the_ref, ""),
        command(
            "b",
            "touch \"$PACK/b-ran\"; echo '{}'",
            "depends_on = [\"a\"]"
        ),
        command(
            "ep",
            "touch \"$PACK/ep-ran\"; echo '{}'",
            "stage = \"epilogue\""
        ),
    ));
    let r = p.run(&["--no-sandbox"]);
    assert_eq!(r.code, 3, "{r:?}");
    let shutdown = p.shutdown();
    assert_eq!(shutdown["outcome"], "error");
    assert_eq!(shutdown["verdict"], "invalid");
    let reason = shutdown["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("engine fault: cannot commit task a's changes to the git memory: "),
        "{reason}"
    );
    assert!(reason.contains("a.lock"), "{reason}");
    assert!(!p.has_row("a"));
    assert!(!p.probe().join("b-ran").exists());
    assert!(!p.probe().join("ep-ran").exists());
    assert!(
        r.stdout.contains("outcome: error: engine fault: "),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("a unsettled"), "{}", r.stdout);
}

//! `crucible runs`: the runs of a state directory, oldest first.

use crate::support::{command, Pack};

#[test]
fn runs_lists_each_run_with_its_outcome() {
    let p = Pack::playbook(&command("a", "echo '{}'", ""));
    assert_eq!(p.run(&[]).code, 0);
    std::fs::write(
        p.path().join("crucible.toml"),
        format!(
            "[workflow]\ntype = \"playbook\"\n{}",
            command("a", "exit 1", "")
        ),
    )
    .unwrap();
    assert_eq!(p.run(&[]).code, 3);
    let out = p
        .command(&[
            "runs".into(),
            "--state-dir".into(),
            p.state().to_string_lossy().into(),
        ])
        .run();
    assert_eq!(out.code, 0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(lines[1].contains("finished") && lines[1].contains("valid"));
    assert!(lines[2].contains("error") && lines[2].contains("invalid"));
    let current = std::fs::read_to_string(p.state().join("current")).unwrap();
    assert!(lines[2].starts_with(current.trim()));
}

// RFC-0002:C-PLAYBOOK-RERUN: a parent that is not a run in the state directory is refused.
#[test]
fn rerun_of_an_unknown_parent_is_refused() {
    let p = Pack::playbook(&command("a", "echo '{}'", ""));
    let args: Vec<String> = [
        "plan",
        "rerun",
        "--parent",
        "x",
        "--select",
        "a",
        "--max-cost",
        "1",
        "--max-time",
        "1m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let r = p.command(&args).run();
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("no such run"), "{}", r.stderr);
}

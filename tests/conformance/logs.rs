//! Issue 19: each attempt's stdout and stderr are kept under the run's directory (bounded,
//! secrets masked, out of every task's reach), and a failed task's summary row shows where its
//! log is with its last lines.

use crate::support::{command, Pack};
use std::path::PathBuf;

/// The run directory of the most recent run.
pub fn run_dir(p: &Pack) -> PathBuf {
    let current = std::fs::read_to_string(p.state().join("current")).expect("a run");
    p.state().join("runs").join(current.trim())
}

/// Every kept log file of the most recent run, concatenated.
pub fn all_logs(p: &Pack) -> String {
    let mut text = String::new();
    let logs = run_dir(p).join("logs");
    for task in std::fs::read_dir(&logs).expect("logs/").flatten() {
        for f in std::fs::read_dir(task.path()).unwrap().flatten() {
            text.push_str(&std::fs::read_to_string(f.path()).unwrap());
        }
    }
    text
}

// A passing task's stderr is kept, not thrown away; the row names its log directory.
#[test]
fn a_passing_tasks_streams_are_kept() {
    let p = Pack::playbook(&command("a", "echo progress >&2; echo '{}'", ""));
    assert_eq!(p.run(&[]).code, 0);
    let row = p.row("a");
    let dir = run_dir(&p).join(row["log"].as_str().expect("a log"));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    assert_eq!(read("attempt-1.stderr"), "progress\n");
    assert_eq!(read("attempt-1.stdout"), "{}\n");
}

// A failed task: its log's path and last lines under its row (nextest style), escaped.
#[test]
fn a_failed_task_shows_its_log_and_last_lines() {
    let run =
        r#"for i in $(seq 1 30); do echo "line $i" >&2; done; printf 'bell\007\n' >&2; exit 1"#;
    let p = Pack::playbook(&command("build", run, ""));
    let r = p.run(&[]);
    assert_eq!(r.code, 3, "{r:?}");
    let file = run_dir(&p)
        .join(p.row("build")["log"].as_str().unwrap())
        .join("attempt-1.stderr");
    let header = format!("    last 10 line(s) of {}:", file.display());
    let lines: Vec<&str> = r.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == header)
        .unwrap_or_else(|| panic!("no excerpt header in:\n{}", r.stdout));
    assert_eq!(lines[at + 1], "    │ line 22");
    assert_eq!(lines[at + 10], "    │ bell\\u{7}");
    assert!(!r.stdout.contains('\u{7}'));
}

// A task cannot read another task's kept log: the state directory is outside its sandbox
// (docs/security.md).
#[test]
fn a_task_cannot_read_the_logs() {
    let p = Pack::playbook("");
    let state = p.state();
    let body = format!(
        "{}{}",
        command("first", "echo secret-output >&2; echo '{}'", ""),
        command(
            "second",
            &format!(
                r#"if cat {}/runs/*/logs/*/attempt-1.stderr; then echo '{{"saw": true}}'; else echo '{{"saw": false}}'; fi"#,
                state.display()
            ),
            "depends_on = [\"first\"]"
        )
    );
    p.file(
        "crucible.toml",
        &std::fs::read_to_string(p.path().join("crucible.toml"))
            .unwrap()
            .replacen(
                "type = \"playbook\"\n",
                &format!("type = \"playbook\"\n{body}"),
                1,
            ),
    );
    assert_eq!(p.run(&[]).code, 0);
    assert_eq!(p.row("second")["output"]["saw"], false);
    // The same read, unsandboxed, finds the first run's log: the path above is right.
    assert_eq!(p.run(&["--no-sandbox"]).code, 0);
    assert_eq!(p.row("second")["output"]["saw"], true);
}

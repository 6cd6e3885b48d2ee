//! The terminal view (issue: the playbook runner): on a terminal, one line per running task with
//! its elapsed time and a footer with spend against `--max-cost` and time against `--max-time`;
//! plain, stable lines otherwise. `script` gives the binary a real pseudo-terminal.

use crate::support::{command, Pack, BIN};
use std::process::Command;

#[test]
fn a_terminal_gets_the_live_view_and_a_pipe_gets_plain_lines() {
    let p = Pack::playbook(&command("slow", "sleep 0.6; echo '{}'", ""));
    let args = p.run_args(&[]).join(" ");
    let out = Command::new("script")
        .args(["-qec", &format!("{BIN} {args}"), "/dev/null"])
        .current_dir(p.path())
        .env("PACK", p.probe())
        .output()
        .expect("script(1) runs");
    let tty = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{tty}");
    assert!(tty.contains("▶ slow"), "a running-task line: {tty}");
    assert!(tty.contains("spent $0.00 of $5.00"), "the footer: {tty}");
    assert!(tty.contains("of 1m"), "time against --max-time: {tty}");
    assert!(tty.contains("verdict: valid"), "{tty}");

    let piped = p.command(&p.run_args(&[])).0.output().unwrap();
    let plain = String::from_utf8_lossy(&piped.stdout);
    assert!(
        plain.contains("started slow\nsettled slow pass\n"),
        "{plain}"
    );
    assert!(
        !plain.contains('\u{1b}'),
        "no escape codes on a pipe: {plain}"
    );
}

//! Operator stop (RFC-0002:C-PLAYBOOK-LANE outcomes): SIGTERM kills attempts in flight, writes
//! the `stopped` shutdown, skips the epilogue, and the verdict is invalid.

use crate::support::{
    assert_all_gone, assert_sleeping, command, marked_sleep, wait_for_file, Pack,
};
use std::process::Stdio;

#[test]
fn sigterm_stops_the_run() {
    let mark = marked_sleep();
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command(
            "long",
            &format!("echo x > half.txt; setsid sleep {mark} </dev/null >/dev/null 2>&1 & touch \"$PACK/started\"; wait"),
            ""
        ),
        command("later", "echo '{}'", "depends_on = [\"long\"]"),
        command(
            "epi",
            "touch \"$PACK/epi.ran\"; echo '{}'",
            "stage = \"epilogue\""
        )
    ));
    let mut cmd = p.command(&p.run_args(&[])).0;
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&p.probe().join("started"), 20);
    assert_sleeping(&mark);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let s = p.shutdown();
    assert_eq!(
        (s["outcome"].as_str(), s["verdict"].as_str()),
        (Some("stopped"), Some("invalid"))
    );
    // Issue 11 item 6: the attempt the stop killed ran and gets its row; nothing else ran.
    let long = p.row("long");
    assert_eq!(long["status"], "fail");
    assert_eq!(long["note"], "stopped by the operator");
    assert_eq!(long["attempts"], 1);
    assert!(!p.has_row("later") && !p.has_row("epi"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("long fail"), "{stdout}");
    assert!(stdout.contains("later unsettled"), "{stdout}");
    assert!(!p.probe().join("epi.ran").exists());
    assert!(
        !p.workspace().join("half.txt").exists(),
        "an unsettled task commits nothing"
    );
    assert_all_gone(&mark);
}

// ARCHITECTURE.md (engine model): a second signal does not wait for the orderly stop. It kills
// every attempt's process group at once and exits 3 without a shutdown line, so the run reads
// as interrupted and `--resume` can continue it.
#[test]
fn a_second_signal_exits_at_once_and_kills_every_attempt() {
    let mark = marked_sleep();
    let p = Pack::playbook(&command(
        "long",
        // Ignores TERM, so the orderly stop would have to wait for the KILL grace period.
        &format!("trap '' TERM; setsid sleep {mark} </dev/null >/dev/null 2>&1 & touch \"$PACK/started\"; wait"),
        "",
    ));
    let mut child = p
        .command(&p.run_args(&[]))
        .0
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&p.probe().join("started"), 20);
    assert_sleeping(&mark);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    let kinds: Vec<String> = p
        .log()
        .iter()
        .map(|l| l["kind"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(!kinds.iter().any(|k| k == "shutdown"), "{kinds:?}");
    assert_all_gone(&mark);
}

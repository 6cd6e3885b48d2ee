//! Operator stop (RFC-0002:C-PLAYBOOK-LANE outcomes): SIGTERM kills attempts in flight, writes
//! the `stopped` shutdown, skips the epilogue, and the verdict is invalid.

use crate::support::{command, process_gone, read_pid, wait_for_file, Pack};
use std::process::Stdio;

#[test]
fn sigterm_stops_the_run() {
    let p = Pack::playbook(&format!(
        "{}{}{}",
        command("long", "echo x > half.txt; sleep 300 & echo $! > \"$PACK/bg.pid\"; touch \"$PACK/started\"; wait", ""),
        command("later", "echo '{}'", "depends_on = [\"long\"]"),
        command("epi", "touch \"$PACK/epi.ran\"; echo '{}'", "stage = \"epilogue\"")
    ));
    let mut cmd = p.command(&p.run_args(&[])).0;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&p.path().join("started"), 20);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    let s = p.shutdown();
    assert_eq!(
        (s["outcome"].as_str(), s["verdict"].as_str()),
        (Some("stopped"), Some("invalid"))
    );
    assert!(!p.has_row("long") && !p.has_row("later") && !p.has_row("epi"));
    assert!(!p.path().join("epi.ran").exists());
    assert!(
        !p.workspace().join("half.txt").exists(),
        "an unsettled task commits nothing"
    );
    let pid = read_pid(&p.path().join("bg.pid"));
    assert!(process_gone(pid));
}

// ARCHITECTURE.md (engine model): a second signal does not wait for the orderly stop. It kills
// every attempt's process group at once and exits 3 without a shutdown line, so the run reads
// as interrupted and `--resume` can continue it.
#[test]
fn a_second_signal_exits_at_once_and_kills_every_attempt() {
    let p = Pack::playbook(&command(
        "long",
        // Ignores TERM, so the orderly stop would have to wait for the KILL grace period.
        "trap '' TERM; sleep 300 & echo $! > \"$PACK/bg.pid\"; touch \"$PACK/started\"; wait",
        "",
    ));
    let mut child = p
        .command(&p.run_args(&[]))
        .0
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&p.path().join("started"), 20);
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
    let pid = read_pid(&p.path().join("bg.pid"));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !process_gone(pid) {
        assert!(
            std::time::Instant::now() < until,
            "the attempt's group survived"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

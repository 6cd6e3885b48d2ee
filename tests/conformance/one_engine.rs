//! One engine per state directory and workspace (issue 11, item 3; RFC-0002:C-PLAYBOOK-RESUME
//! for the resume side): a second launch while a run is going is refused at once, naming the run
//! and its engine's pid, and touches nothing; a lock left by a killed engine is taken over.

use crate::resume::{ledgered, run_with, Ledger};
use crate::support::{Pack, BIN};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A task that marks the workspace, says it started, waits for `$LEDGER.go`, then passes only
/// if its mark is still there (a second engine rebuilding the workspace would remove it).
fn marking_task() -> String {
    ledgered(
        "hold",
        "echo mine > mark; while [ ! -e \"$LEDGER.go\" ]; do sleep 0.05; done; test -e mark && echo '{}'",
        "",
    )
}

fn start(p: &Pack, ledger: &Ledger, args: &[&str]) -> Child {
    Command::new(BIN)
        .args(p.run_args(args))
        .current_dir(p.path())
        .env("LEDGER", &ledger.path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts")
}

fn wait_started(ledger: &Ledger) {
    let until = Instant::now() + Duration::from_secs(30);
    while ledger.entries().is_empty() {
        assert!(Instant::now() < until, "the task never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn current(p: &Pack) -> String {
    crate::resume::current(p)
}

// Two `plan run`s of one pack: the second is refused before it touches the workspace, naming
// the run in progress and its pid; the first is unharmed and passes.
#[test]
fn two_engines_at_once_the_second_is_refused() {
    let p = Pack::playbook(&marking_task());
    let ledger = Ledger::new();
    let mut first = start(&p, &ledger, &[]);
    wait_started(&ledger);
    let run = current(&p);
    for args in [&[][..], &["--resume"][..]] {
        let second = run_with(&p, &ledger, args);
        assert_eq!(second.code, 1, "{second:?}");
        assert!(second.stderr.contains("is in use"), "{}", second.stderr);
        assert!(second.stderr.contains(&run), "{}", second.stderr);
        assert!(
            second.stderr.contains(&format!("pid {}", first.id())),
            "{}",
            second.stderr
        );
    }
    assert_eq!(current(&p), run, "the refused launches started no run");
    std::fs::write(ledger.path.with_extension("go"), "").unwrap();
    assert_eq!(first.wait().unwrap().code(), Some(0));
    assert_eq!(p.row("hold")["status"], "pass");
    assert_eq!(ledger.entries(), ["hold"]);
}

// The same pack under a second state directory shares the workspace: refused as well, naming
// the run that built the workspace.
#[test]
fn two_engines_on_one_workspace_through_two_state_dirs() {
    let p = Pack::playbook(&marking_task());
    let ledger = Ledger::new();
    let mut first = start(&p, &ledger, &[]);
    wait_started(&ledger);
    let run = current(&p);
    let other = tempfile::tempdir().unwrap();
    let other_state = other.path().to_string_lossy().into_owned();
    let second = run_with(&p, &ledger, &["--state-dir", &other_state]);
    assert_eq!(second.code, 1, "{second:?}");
    assert!(second.stderr.contains("workspace"), "{}", second.stderr);
    assert!(second.stderr.contains(&run), "{}", second.stderr);
    std::fs::write(ledger.path.with_extension("go"), "").unwrap();
    assert_eq!(first.wait().unwrap().code(), Some(0));
    assert_eq!(ledger.entries(), ["hold"]);
}

// An engine killed outright leaves its lock file behind, but not the lock: the next launch
// takes it over and runs.
#[test]
fn a_killed_engines_lock_is_taken_over() {
    let p = Pack::playbook(&marking_task());
    let ledger = Ledger::new();
    let mut first = start(&p, &ledger, &[]);
    wait_started(&ledger);
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(p.state().join("engine.lock").exists());
    std::fs::write(ledger.path.with_extension("go"), "").unwrap();
    let r = run_with(&p, &ledger, &["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
}

//! The examples run end to end (RFC-0002:C-PLAYBOOK-SURFACE): each is copied to a tempdir and
//! run there through the real binary, as a user would run it from its directory.

use crate::support::BIN;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        // A local run of the example leaves these behind; they are not part of it.
        if name == "workspace" || name == "state" {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

fn run_in(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(["plan", "run"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), format!("{stdout}{stderr}"))
}

fn git_log(ws: &Path) -> String {
    let out = Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(ws)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

// RFC-0002:C-PLAYBOOK-SURFACE: the litmus test runs on the command backend, valid, from its own
// directory with a relative manifest.
#[test]
fn playbook_example_runs_valid() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&repo_root().join("examples/playbook"), tmp.path());
    let (code, out) = run_in(tmp.path(), &["--max-cost", "1", "--max-time", "2m"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("verdict: valid"), "{out}");
    let ws = tmp.path().join("workspace");
    assert_eq!(
        git_log(&ws),
        "task summary\ntask draft\ncrucible: baseline workspace\n"
    );
    let summary = std::fs::read_to_string(ws.join("SUMMARY.md")).unwrap();
    assert!(summary.contains("# Haiku run: finished") && summary.contains("- shape: pass"));
}

// The audit example does real work on this repository: one isolated check per crate, and the
// report committed by the epilogue.
#[test]
fn audit_example_reports_on_every_crate() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&repo_root().join("examples/audit"), tmp.path());
    let manifest = tmp.path().join("crucible.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        "path = \"../..\"",
        &format!("path = {:?}", repo_root().to_string_lossy()),
    );
    std::fs::write(&manifest, text).unwrap();
    let (code, out) = run_in(
        tmp.path(),
        &["--max-cost", "0", "--max-time", "5m", "--jobs", "2"],
    );
    assert_eq!(code, 0, "{out}");
    let ws = tmp.path().join("workspace");
    let audit = std::fs::read_to_string(ws.join("AUDIT.md")).unwrap();
    for c in [
        "crucible-plan",
        "crucible-pack",
        "crucible-engine",
        "crucible-cli",
    ] {
        assert!(audit.contains(&format!("| {c} |")), "{audit}");
    }
    assert_eq!(git_log(&ws).lines().next(), Some("task report"));
}

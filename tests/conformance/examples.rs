//! The examples run end to end (RFC-0002:C-PLAYBOOK-SURFACE): each is copied to a tempdir and
//! run there through the real binary, as a user would run it from its directory.

use crate::support::BIN;
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
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

pub(crate) fn run_in(dir: &Path, args: &[&str]) -> (i32, String) {
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
    // `collect` changes nothing, so it passes without a commit.
    assert_eq!(
        git_log(&ws),
        "task summary\ntask assemble\ntask draft_fixed\ntask draft_changed\ntask draft_added\ncrucible: baseline workspace\n"
    );
    let changelog = std::fs::read_to_string(ws.join("CHANGELOG.md")).unwrap();
    // The product parameter reached the agent inside the external-input markers, as data.
    assert!(
        changelog.starts_with("# Changelog for crucible\n"),
        "{changelog}"
    );
    assert!(changelog.contains("## fixed\n\n- Epilogue tasks run after a failed main graph too"));
    let summary = std::fs::read_to_string(ws.join("SUMMARY.md")).unwrap();
    assert!(summary.contains("run ended: finished") && summary.contains("- length: pass"));
}

// A parameter changes what runs, and a failed grade makes the verdict invalid while the epilogue
// still reports (RFC-0002:C-PLAYBOOK-LANE).
#[test]
fn playbook_example_fails_its_grade_with_a_high_threshold() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&repo_root().join("examples/playbook"), tmp.path());
    let (code, out) = run_in(
        tmp.path(),
        &[
            "--max-cost",
            "1",
            "--max-time",
            "2m",
            "--param",
            "product=widgets",
            "--param",
            "min_words=500",
        ],
    );
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("verdict: invalid"), "{out}");
    let ws = tmp.path().join("workspace");
    let changelog = std::fs::read_to_string(ws.join("CHANGELOG.md")).unwrap();
    assert!(
        changelog.starts_with("# Changelog for widgets\n"),
        "{changelog}"
    );
    let summary = std::fs::read_to_string(ws.join("SUMMARY.md")).unwrap();
    assert!(
        summary.contains("run ended: error") && summary.contains("- length: fail"),
        "{summary}"
    );
}

// The audit example does real work on this repository: one isolated check per crate, and the
// report committed by the epilogue.
#[test]
fn audit_example_reports_on_every_crate() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&repo_root().join("examples/repo-audit"), tmp.path());
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
        "crucible-agent",
        "crucible-cli",
        "crucible-dsl",
        "crucible-engine",
        "crucible-pack",
        "crucible-plan",
    ] {
        assert!(audit.contains(&format!("| {c} |")), "{audit}");
    }
    assert_eq!(git_log(&ws).lines().next(), Some("task report"));
}

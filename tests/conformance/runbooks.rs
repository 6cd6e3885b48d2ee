//! Issue 15, runbooks: the `crucible runbook` commands on real bundle directories (the contract
//! rules themselves are the corpus, `crates/crucible-pack/tests/runbook_corpus.rs`).

use crate::support::{Cmd, Ran, BIN};
use std::path::Path;
use std::process::Command;

fn crucible(args: &[&str]) -> Ran {
    let mut c = Command::new(BIN);
    c.args(args);
    Cmd(c).run()
}

fn corpus(case: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/corpus/runbooks")
        .join(case)
        .display()
        .to_string()
}

// A valid bundle exits 0 naming what it found; a `*` effect is a warning, not a refusal.
#[test]
fn validate_accepts_and_warns() {
    let r = crucible(&[
        "runbook",
        "validate",
        &corpus("contract/accept_every_field"),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stdout,
        "valid: triage-bug 1.0.0 (procedure procedure/triage.md, 2 skill dependencies, 0 warning(s))\n"
    );
    let r = crucible(&["runbook", "validate", &corpus("effect/accept_star_warns")]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .starts_with("warning[runbook.effect]: `$.allowedEffectClasses[0]`: `*` allows every effect\n --> runbook.json:12:5"),
        "{}",
        r.stderr
    );
}

// A refused bundle exits 1 with every error, rustc-style, and their count.
#[test]
fn validate_refuses_with_every_error() {
    let r = crucible(&[
        "runbook",
        "validate",
        &corpus("required/reject_empty_object"),
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.is_empty());
    assert_eq!(r.stderr.matches("error[runbook.required]").count(), 7);
    assert!(r.stderr.ends_with("\n8 error(s)\n"), "{}", r.stderr);
}

// Contract text reaches the terminal escaped: a control character in a value is shown, not sent.
#[test]
fn validate_escapes_contract_text() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("runbook.json"),
        r#"{"schemaVersion": 1, "name": "bad\u001b[2Jname", "version": "1", "description": "d",
            "invocation": "explicit", "requiredCapabilities": [], "allowedEffectClasses": []}"#,
    )
    .unwrap();
    std::fs::write(d.path().join("RUNBOOK.md"), "# Steps\n").unwrap();
    let r = crucible(&["runbook", "validate", &d.path().display().to_string()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("error[runbook.name]"), "{}", r.stderr);
    assert!(!r.stderr.contains('\u{1b}'), "{:?}", r.stderr);
}

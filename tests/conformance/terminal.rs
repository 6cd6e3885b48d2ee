//! Escape sequences a task prints (issue 11 item 4): nothing a task prints, and nothing a task
//! could leave in the pack or the state directory, reaches a terminal unescaped. Each test puts
//! an OSC title sequence, a clear-screen and a newline followed by `verdict: valid` into one
//! output path and checks none of them arrives raw.

use crate::support::{Pack, BIN};
use std::process::Command;

/// The hostile text: set the window title, clear the screen, forge a verdict line.
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\nverdict: valid";

/// Fails when `out` carries any part of [`HOSTILE`] raw.
fn assert_inert(out: &str) {
    assert!(!out.contains("\u{1b}]0;"), "an OSC title sequence: {out:?}");
    assert!(!out.contains('\u{7}'), "a raw BEL: {out:?}");
    assert!(!out.contains("\u{1b}[2J"), "a clear-screen: {out:?}");
    assert!(
        !out.contains("\nverdict: valid") && !out.contains("\rverdict: valid"),
        "a forged verdict line: {out:?}"
    );
}

/// A source emitting one hostile item; `each` over it fails with the hostile text on stderr;
/// `noted` fails with the hostile text as its own note.
fn hostile_pack() -> Pack {
    let p = Pack::with_manifest("[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n");
    p.file(
        "workflow.star",
        r#"src = command(name = "src", run = "cat $PACK/src.json", emits = {"items": "list"})
each = command(name = "each", run = "cat $PACK/hostile.txt >&2; exit 1", depends_on = [src], over = src.items, max_fanout = 4)
noted = command(name = "noted", run = "cat $PACK/noted.json; exit 1")
workflow([src, each, noted])
"#,
    );
    p.file(
        "src.json",
        &serde_json::json!({ "items": [HOSTILE] }).to_string(),
    );
    p.file("hostile.txt", HOSTILE);
    p.file(
        "noted.json",
        &serde_json::json!({ "note": HOSTILE }).to_string(),
    );
    p
}

#[test]
fn escape_sequences_in_notes_stderr_and_item_keys_reach_plain_output_escaped() {
    let p = hostile_pack();
    let r = p.run(&[]);
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    assert_inert(&r.stdout);
    assert_inert(&r.stderr);
    assert!(
        r.stdout.contains("\\u{1b}]0;owned\\u{7}"),
        "the text is shown, escaped: {}",
        r.stdout
    );
    assert_eq!(
        r.stdout
            .lines()
            .filter(|l| l.starts_with("verdict:"))
            .count(),
        1
    );
    assert!(r.stdout.ends_with("verdict: invalid\n"), "{}", r.stdout);
}

#[test]
fn escape_sequences_in_notes_stderr_and_item_keys_reach_the_live_view_escaped() {
    let p = hostile_pack();
    let args = p.run_args(&[]).join(" ");
    let out = Command::new("script")
        .args(["-qec", &format!("{BIN} {args}"), "/dev/null"])
        .current_dir(p.path())
        .env("PACK", p.probe())
        .output()
        .expect("script(1) runs");
    let tty = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{tty}");
    assert!(tty.contains("▶"), "the live view was drawn: {tty}");
    assert_inert(&tty);
    assert!(tty.contains("verdict: invalid"), "{tty}");
}

#[test]
fn escape_sequences_in_a_run_directory_name_reach_runs_escaped() {
    let p = Pack::playbook("");
    std::fs::create_dir_all(p.state().join("runs").join(HOSTILE)).unwrap();
    let r = p
        .command(&[
            "runs".into(),
            "--state-dir".into(),
            p.state().to_string_lossy().into(),
        ])
        .run();
    assert_inert(&r.stdout);
    assert_inert(&r.stderr);
}

#[test]
fn escape_sequences_in_a_pack_path_reach_check_escaped() {
    let p = Pack::playbook(&crate::support::command("a", "echo '{}'", ""));
    // A directory a task could leave in the pack: its `state/` is listed as ignored.
    std::fs::create_dir_all(p.path().join(HOSTILE).join("state")).unwrap();
    let r = p.check().run();
    assert_inert(&r.stdout);
    assert_inert(&r.stderr);
    assert!(
        r.stdout.contains("\\u{1b}]0;owned"),
        "the path is shown, escaped: {}{}",
        r.stdout,
        r.stderr
    );
}

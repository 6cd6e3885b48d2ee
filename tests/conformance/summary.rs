//! Issue 19: what `plan run` prints as it ends and what `runs show` prints, snapshot-tested
//! (tests/conformance/snapshots, `CRUCIBLE_UPDATE_SNAPSHOTS=1` rewrites them), and a failure's
//! stderr shown once: in the log excerpt, not again folded onto the note.

use crate::logs::run_dir;
use crate::support::{command, snapshot, Pack};

/// A passing task, a failing one with three stderr lines, and one blocked behind it; each
/// depends on the one before, so the lines come in one order.
fn pack() -> Pack {
    Pack::playbook(&format!(
        "{}{}{}",
        command("a", "echo hello >&2; echo '{}'", ""),
        command(
            "build",
            r#"for i in 1 2 3; do echo "line $i" >&2; done; exit 1"#,
            "depends_on = [\"a\"]"
        ),
        command("after", "echo '{}'", "depends_on = [\"build\"]"),
    ))
}

/// `text` with what differs between runs replaced: the run id, the pack's directory, the start
/// time, each progress line's time and the pack digest by names, and every timing's digits by `#` (a decimal number not
/// after `$`; spend is stable), so columns keep their width.
fn stable(p: &Pack, text: &str) -> String {
    let id = std::fs::read_to_string(p.state().join("current")).unwrap();
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir(p).join("run.json")).unwrap())
            .unwrap();
    let text = text
        .replace(id.trim(), "<run>")
        .replace(&p.path().display().to_string(), "<pack>")
        .replace(run["started_at"].as_str().unwrap(), "<started>")
        .replace(run["pack"].as_str().unwrap(), "<digest>");
    // A progress line's time: `2026-12-01T03:04:05.678Z ` (24 characters and a space).
    let text: String = text
        .lines()
        .map(|l| match l.get(..24) {
            Some(ts) if ts.as_bytes()[10] == b'T' && ts.ends_with('Z') => {
                format!("<time>{}\n", &l[24..])
            }
            _ => format!("{l}\n"),
        })
        .collect();
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let after_number = i > 0 && matches!(chars[i - 1], '$' | '.' | '0'..='9');
        if !chars[i].is_ascii_digit() || after_number {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
            i += 1;
        }
        let number: String = chars[start..i].iter().collect();
        if number.contains('.') && !number.ends_with('.') {
            out.extend(number.chars().map(|c| if c == '.' { '.' } else { '#' }));
        } else {
            out.push_str(&number);
        }
    }
    out
}

// The end of a run on a pipe: the progress lines, one line per task (a failure's note without
// its stderr tail, then the log's path and last lines), the outcome, spend against the
// ceilings, the next step, the run id and the verdict.
#[test]
fn plan_run_summary_snapshot() {
    let p = pack();
    let r = p.run(&["--max-cost", "1", "--max-time", "1m"]);
    assert_eq!(r.code, 3, "{r:?}");
    snapshot("plan-run-summary.txt", &stable(&p, &r.stdout));
}

// `runs show`: the run's identity and ceilings, then each row with its note and log (a failed
// row's last lines), then the outcome and verdict.
#[test]
fn runs_show_snapshot() {
    let p = pack();
    assert_eq!(p.run(&["--max-cost", "1", "--max-time", "1m"]).code, 3);
    let manifest = p.path().join("crucible.toml");
    let r = p
        .command(&[
            "runs".into(),
            "show".into(),
            "latest".into(),
            "--manifest".into(),
            manifest.to_string_lossy().into(),
        ])
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    snapshot("runs-show.txt", &stable(&p, &r.stdout));
}

// The row keeps the stderr tail on its note (RFC-0001 notes §4: a consumer's `settled` entry and
// the epilogue's `outcome` carry it, and a task has no log); only the printed line leaves it to
// the excerpt below it.
#[test]
fn a_failure_prints_its_stderr_once() {
    let p = pack();
    let r = p.run(&[]);
    assert_eq!(p.row("build")["note"], "exit 1: line 1 ⏎ line 2 ⏎ line 3");
    assert!(r.stdout.contains("build fail attempts=1 "), "{}", r.stdout);
    assert!(!r.stdout.contains('⏎'), "{}", r.stdout);
    assert_eq!(r.stdout.matches("line 3").count(), 1, "{}", r.stdout);
}

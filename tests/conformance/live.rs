//! The terminal view (issue: the playbook runner; issue 19): on a terminal, one line per running
//! task with its elapsed time, a revise loop's member once with its current round, coloured
//! statuses (off under `NO_COLOR`), and a footer with the done/total count, spend against
//! `--max-cost` and time against `--max-time`; plain lines otherwise, each with its time and a
//! settled row with its duration. Both end with the session log's path before the run id and
//! the verdict. `script` gives the binary a real pseudo-terminal.

use crate::support::{command, Pack, BIN};
use std::process::Command;

/// `plan run` of `p` on a pseudo-terminal, with `env` set: its exit code and what it drew.
fn on_a_terminal(p: &Pack, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let args = p.run_args(&[]).join(" ");
    let out = Command::new("script")
        .args(["-qec", &format!("{BIN} {args}"), "/dev/null"])
        .current_dir(p.path())
        .env("PACK", p.probe())
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
        .output()
        .expect("script(1) runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Whether `line` starts with an RFC 3339 UTC time with milliseconds and a space.
fn timestamped(line: &str) -> bool {
    let b = line.as_bytes();
    line.len() > 25
        && b[4] == b'-'
        && b[10] == b'T'
        && b[23] == b'Z'
        && b[24] == b' '
        && b[..4].iter().all(u8::is_ascii_digit)
}

#[test]
fn a_terminal_gets_the_live_view_and_a_pipe_gets_plain_lines() {
    let p = Pack::playbook(&command("slow", "sleep 0.6; echo '{}'", ""));
    let (code, tty) = on_a_terminal(&p, &[]);
    assert_eq!(code, Some(0), "{tty}");
    assert!(tty.contains("▶ slow"), "a running-task line: {tty}");
    assert!(
        tty.contains("0/1 done · spent $0.00 of $5.00"),
        "the footer: {tty}"
    );
    assert!(tty.contains("1/1 done"), "the count: {tty}");
    assert!(tty.contains("of 1m"), "time against --max-time: {tty}");
    assert!(
        tty.contains("slow \u{1b}[32mpass\u{1b}[0m attempts=1"),
        "colour: {tty}"
    );
    assert!(tty.contains("session log: "), "{tty}");
    assert!(tty.contains("verdict: valid"), "{tty}");

    let (_, plain_tty) = on_a_terminal(&p, &[("NO_COLOR", "1")]);
    assert!(plain_tty.contains("▶ slow"), "{plain_tty}");
    assert!(!plain_tty.contains("\u{1b}[3"), "NO_COLOR: {plain_tty}");

    let piped = p.command(&p.run_args(&[])).0.output().unwrap();
    let plain = String::from_utf8_lossy(&piped.stdout);
    let lines: Vec<&str> = plain.lines().collect();
    let progress: Vec<&str> = lines
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect();
    assert_eq!(progress.len(), 3, "{plain}");
    assert!(progress.iter().all(|l| timestamped(l)), "{plain}");
    assert!(progress[0][25..].starts_with("run "), "{plain}");
    assert_eq!(&progress[1][25..], "started slow", "{plain}");
    assert!(
        progress[2][25..].starts_with("settled slow pass 0."),
        "{plain}"
    );
    assert!(progress[2].ends_with('s'), "{plain}");
    assert!(
        !plain.contains('\u{1b}'),
        "no escape codes on a pipe: {plain}"
    );
    let run_dir = crate::logs::run_dir(&p);
    let n = lines.len();
    assert_eq!(
        lines[n - 3],
        format!("session log: {}", run_dir.join("session.jsonl").display())
    );
    assert!(lines[n - 2].starts_with("run: ") && lines[n - 1] == "verdict: valid");
}

// A revise loop runs one round at a time, and the in-flight list shows each member once with
// its current round (it once showed `▶ draft ▶ review ▶ draft ▶ review` together).
#[test]
fn a_revise_loop_shows_once_with_its_round() {
    let p = Pack::with_manifest("[workflow]\ntype = \"playbook\"\nfile = \"w.star\"\n");
    p.file(
        "w.star",
        r#"draft = command(name = "draft", run = "sleep 0.4; echo '{}'")
review = command(name = "review", run = "sleep 0.4; echo '{}'; exit 1", depends_on = [draft], revise = [draft], max_rounds = 3)
workflow([draft, review])
"#,
    );
    let (code, tty) = on_a_terminal(&p, &[]);
    assert_eq!(code, Some(3), "{tty}");
    // Each redraw starts after the clear sequence: one frame is the in-flight list as drawn.
    for frame in tty.split("\u{1b}[J") {
        let shown = |name: &str| {
            frame
                .lines()
                .filter(|l| l.contains(&format!("▶ {name}")))
                .count()
        };
        assert!(shown("draft") + shown("review") <= 1, "{frame:?}");
    }
    for part in ["▶ draft round 2", "▶ review round 3", "2/2 done"] {
        assert!(tty.contains(part), "{part}: {tty}");
    }
}

// A mapped task shows once in the in-flight list, with its instances running and settled.
#[test]
fn a_map_shows_once_with_its_instances() {
    let p = Pack::with_manifest("[workflow]\ntype = \"playbook\"\nfile = \"w.star\"\n");
    p.file(
        "w.star",
        r#"src = command(name = "src", run = "echo '{\"items\": [\"a\", \"b\", \"c\"]}'", emits = {"items": "list"})
each = command(name = "each", run = "sleep 0.4; echo '{}'", depends_on = [src], over = src.items, max_fanout = 4)
workflow([src, each])
"#,
    );
    let (code, tty) = on_a_terminal(&p, &[]);
    assert_eq!(code, Some(0), "{tty}");
    for frame in tty.split("\u{1b}[J") {
        let shown = frame.lines().filter(|l| l.contains("▶ each")).count();
        assert!(shown <= 1, "{frame:?}");
    }
    for part in ["▶ each 1 instance(s) running, 2 settled", "2/2 done"] {
        assert!(tty.contains(part), "{part}: {tty}");
    }
}

//! Reading a run back for the operator (issue 19): a failed task's log excerpt under the run's
//! summary. Everything shown from a log is a task's text, so every line is escaped.

use crucible_plan::terminal::escape;
use crucible_plan::wire::TaskResult;
use std::path::{Path, PathBuf};

/// How many of a failed task's last log lines the summary shows (the rest is in the file).
pub const EXCERPT_LINES: usize = 10;

/// The files a row's last attempt kept: its stderr and stdout, in that order.
fn last_turn_files(run_dir: &Path, row: &TaskResult) -> Option<[PathBuf; 2]> {
    let dir = run_dir.join(row.log.as_deref()?);
    let turn = format!("attempt-{}", row.attempts.max(1));
    Some(["stderr", "stdout"].map(|ext| dir.join(format!("{turn}.{ext}"))))
}

/// The most of one log line an excerpt shows: an agent's stream is one long JSON line per event.
const LINE_MAX: usize = 240;

/// `line` cut to [`LINE_MAX`] characters, escaped.
fn excerpt_line(line: &str) -> String {
    let cut: String = line.chars().take(LINE_MAX).collect();
    let more = if cut.len() < line.len() { "…" } else { "" };
    format!("    │ {}{more}", escape(&cut))
}

/// The last `n` non-empty lines of `text`.
fn last_lines(text: &str, n: usize) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// Under a row that did not pass: where its log is, and the last lines of its last attempt's
/// stderr (its stdout when stderr is empty), nextest style. Empty when no process ran for it.
pub fn failure_excerpt(run_dir: &Path, row: &TaskResult) -> Vec<String> {
    let Some(files) = last_turn_files(run_dir, row) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let shown = files.iter().find_map(|f| {
        let text = std::fs::read_to_string(f).ok()?;
        (!text.trim().is_empty()).then_some((f, text))
    });
    match shown {
        Some((file, text)) => {
            let lines = last_lines(&text, EXCERPT_LINES);
            out.push(format!(
                "    last {} line(s) of {}:",
                lines.len(),
                escape(&file.display().to_string())
            ));
            out.extend(lines.iter().map(|l| excerpt_line(l)));
        }
        None => out.push(format!(
            "    log: {} (no output)",
            escape(&files[0].with_extension("*").display().to_string())
        )),
    }
    out
}

//! Reading runs back for the operator (issue 19): `runs` and `runs show`, `logs`, the run ids
//! they take (`latest`, a unique prefix), and a failed task's log excerpt under a run's
//! summary. Everything shown from a log is a task's text, so every line is escaped.

use crate::args::{LogsArgs, RunsArgs, RunsCommand, StateAt};
use anyhow::{anyhow, bail, Context, Result};
use crucible_engine::state::{self, RunState};
use crucible_plan::terminal::escape;
use crucible_plan::wire::{Event, Line, TaskResult};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

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

/// A row's note as printed beside its failure excerpt: without the stderr tail the engine folds
/// onto a failure's note (RFC-0001 notes §4: readers of the row, tasks among them, have no
/// log), when that tail is the kept stderr the excerpt shows. Otherwise the whole note.
pub fn shown_note(run_dir: &Path, row: &TaskResult) -> Option<String> {
    let note = row.note.as_deref()?;
    let head = last_turn_files(run_dir, row)
        .and_then(|[stderr, _]| std::fs::read(stderr).ok())
        .map(|bytes| crucible_engine::stderr_tail(&bytes))
        .filter(|tail| !tail.is_empty())
        .and_then(|tail| note.strip_suffix(tail.as_str())?.strip_suffix(": "));
    Some(head.unwrap_or(note).to_string())
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

/// The state directory a command reads: `--state-dir`, else `state` beside the manifest (the
/// place `plan run` writes), refused when neither names anything.
pub fn state_dir(at: &StateAt) -> Result<PathBuf> {
    if let Some(d) = &at.state_dir {
        return Ok(d.clone());
    }
    let manifest =
        std::path::absolute(&at.manifest).with_context(|| format!("{}", at.manifest.display()))?;
    if !manifest.is_file() {
        bail!(
            "{}: no such manifest; name the pack's with --manifest, or the runs' directory with --state-dir",
            escape(&at.manifest.display().to_string())
        );
    }
    Ok(manifest
        .parent()
        .expect("an absolute file path has a parent")
        .join("state"))
}

/// The run directory `spec` names (`latest`, an id or a unique prefix) under `state`.
pub fn resolve(state: &Path, spec: &str) -> Result<(String, PathBuf)> {
    let id = state::resolve_run(state, spec).map_err(|e| anyhow!("{}", escape(&e)))?;
    let dir = state::run_dir(state, &id).map_err(|e| anyhow!(e))?;
    Ok((id, dir))
}

/// `crucible runs`: one line per run, oldest first; `runs show RUN` for one.
pub fn runs(args: &RunsArgs) -> Result<ExitCode> {
    let state = state_dir(&args.at)?;
    if let Some(RunsCommand::Show(show)) = &args.command {
        return run_show(&state, &show.run);
    }
    let runs =
        state::list_runs(&state).with_context(|| format!("cannot read {}", state.display()))?;
    if runs.is_empty() {
        println!("no runs in {}", escape(&state.display().to_string()));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<36}  {:<24}  {:<19}  {:<8}  spent",
        "run", "started", "status", "verdict"
    );
    for r in runs {
        let (verdict, spent) = match &r.state {
            RunState::Ended(s) => (s.verdict.as_str(), format!("${:.2}", s.spent_usd)),
            RunState::Running | RunState::Crashed { .. } => ("-", "-".to_string()),
        };
        println!(
            "{:<36}  {:<24}  {:<19}  {:<8}  {}",
            escape(&r.id),
            escape(&r.started_at),
            r.state.label(),
            verdict,
            spent,
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How many instance or round rows each task's row stands for, from a run's log.
#[derive(Default)]
pub struct Parts(HashMap<String, (Part, u32)>);

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Instance,
    Round,
}

/// `name[round-N]` is round N of `name`; `name[key]` is its instance `key`; a bare name is the
/// task itself.
pub fn split_part(task: &str) -> Option<(&str, Part, &str)> {
    let (base, rest) = task.split_once('[')?;
    let inner = rest.strip_suffix(']')?;
    match inner.strip_prefix("round-") {
        Some(n) if n.parse::<u32>().is_ok() => Some((base, Part::Round, n)),
        _ => Some((base, Part::Instance, inner)),
    }
}

impl Parts {
    pub fn of(lines: &[Line]) -> Parts {
        let mut parts = Parts::default();
        for l in lines {
            if let Event::TaskResult(r) = &l.event {
                parts.add(&r.task);
            }
        }
        parts
    }

    /// Counts a settled row: an instance or a round of its task; a task's own row counts none.
    pub fn add(&mut self, task: &str) {
        if let Some((base, part, _)) = split_part(task) {
            self.0.entry(base.to_string()).or_insert((part, 0)).1 += 1;
        }
    }

    /// What `task` ran as so far, and how many of them settled.
    pub fn get(&self, task: &str) -> Option<(Part, u32)> {
        self.0.get(task).copied()
    }

    /// `instances=3 ` or `rounds=2 ` for a task that ran as instances or rounds, else empty.
    pub fn label(&self, task: &str) -> String {
        match self.0.get(task) {
            Some((Part::Instance, n)) => format!("instances={n} "),
            Some((Part::Round, n)) => format!("rounds={n} "),
            None => String::new(),
        }
    }
}

/// `runs show RUN`.
fn run_show(state: &Path, spec: &str) -> Result<ExitCode> {
    let (id, dir) = resolve(state, spec)?;
    let listing = state::list_runs(state)?
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| anyhow!("run {id} vanished"))?;
    let lines = state::read_log(&dir);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "run      {id}");
    if let Some(r) = state::read_run_json(&dir) {
        let _ = writeln!(out, "started  {}", escape(&r.started_at));
        if let Some(p) = &r.parent {
            let _ = writeln!(out, "parent   {}", escape(p));
        }
        let _ = writeln!(out, "pack     {}", escape(&r.pack));
        let _ = writeln!(
            out,
            "ceilings ${:.2} and {}",
            r.max_cost,
            crucible_plan::duration::format(r.max_secs as u64)
        );
        let params = serde_json::to_string(&r.params).unwrap_or_default();
        let _ = writeln!(out, "params   {}", escape(&params));
    }
    let _ = writeln!(out, "dir      {}", escape(&dir.display().to_string()));
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<24}  {:<9}  {:<14}  {:>8}  {:>8}  {:>7}",
        "task", "status", "part", "attempts", "secs", "cost"
    );
    let parts = Parts::of(&lines);
    for l in &lines {
        let Event::TaskResult(r) = &l.event else {
            continue;
        };
        let part = match split_part(&r.task) {
            Some((_, Part::Instance, key)) => format!("instance {key}"),
            Some((_, Part::Round, n)) => format!("round {n}"),
            None => parts.label(&r.task).trim().to_string(),
        };
        let _ = writeln!(
            out,
            "{:<24}  {:<9}  {:<14}  {:>8}  {:>8.2}  {:>7}",
            escape(&r.task),
            r.status,
            escape(&part),
            r.attempts,
            r.secs,
            format!("${:.2}", r.cost_usd)
        );
        if let Some(note) = shown_note(&dir, r) {
            let _ = writeln!(out, "    note: {}", escape(&cut(&note, 400)));
        }
        let excerpt = if r.status.is_pass() {
            Vec::new()
        } else {
            failure_excerpt(&dir, r)
        };
        match (&r.log, excerpt.is_empty()) {
            (Some(log), true) => {
                let _ = writeln!(
                    out,
                    "    log:  {}",
                    escape(&dir.join(log).display().to_string())
                );
            }
            (None, true) => {}
            (_, false) => {
                for line in excerpt {
                    let _ = writeln!(out, "{line}");
                }
            }
        }
    }
    let _ = writeln!(out);
    match &listing.state {
        RunState::Ended(s) => {
            let _ = writeln!(
                out,
                "{}",
                outcome_line(&s.outcome, s.ceiling, s.reason.as_deref())
            );
            let _ = writeln!(
                out,
                "spent ${:.2}, {:.1}s; verdict: {}",
                s.spent_usd, s.elapsed_secs, s.verdict
            );
        }
        other => {
            let _ = writeln!(out, "status: {}", other.label());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn cut(text: &str, max: usize) -> String {
    let c: String = text.chars().take(max).collect();
    if c.len() < text.len() {
        format!("{c}…")
    } else {
        c
    }
}

/// Whether `row` is `task` or one of its instances or rounds.
fn row_of(row: &str, task: &str) -> bool {
    row == task || split_part(row).is_some_and(|(base, _, _)| base == task)
}

/// Prints every kept file of one row's log, each under a header naming it.
fn print_row_logs(out: &mut impl Write, run_dir: &Path, row: &TaskResult) {
    let Some(rel) = &row.log else {
        return;
    };
    let dir = run_dir.join(rel);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        if text.is_empty() {
            continue;
        }
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
        let _ = writeln!(
            out,
            "── {} {} ──",
            escape(&row.task),
            escape(name.as_deref().unwrap_or_default())
        );
        for line in text.lines() {
            let _ = writeln!(out, "{}", escape(line));
        }
    }
}

/// `crucible logs RUN [TASK] [--follow]`: the kept output of each settled row, in the order
/// rows settled; with `--follow`, new rows as they settle until the shutdown line.
pub fn logs(args: &LogsArgs) -> Result<ExitCode> {
    let state = state_dir(&args.at)?;
    let (_, dir) = resolve(&state, &args.run)?;
    let wanted = |row: &TaskResult| args.task.as_deref().is_none_or(|t| row_of(&row.task, t));
    let mut printed = 0;
    let mut matched = false;
    loop {
        let lines = state::read_log(&dir);
        let mut out = std::io::stdout().lock();
        let mut ended = false;
        let rows: Vec<&TaskResult> = lines
            .iter()
            .filter_map(|l| match &l.event {
                Event::TaskResult(r) => Some(r),
                Event::Shutdown(_) => {
                    ended = true;
                    None
                }
                _ => None,
            })
            .collect();
        for row in rows.iter().skip(printed).filter(|r| wanted(r)) {
            matched = true;
            print_row_logs(&mut out, &dir, row);
        }
        printed = rows.len();
        let _ = out.flush();
        if !args.follow || ended {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if let (Some(task), false) = (&args.task, matched) {
        bail!("no settled row of task {:?} in this run", escape(task));
    }
    Ok(ExitCode::SUCCESS)
}

/// `outcome: <outcome> (<ceiling>): <reason>`, the line `plan run` and `runs show` both end on.
pub fn outcome_line(
    outcome: &impl std::fmt::Display,
    ceiling: Option<impl std::fmt::Display>,
    reason: Option<&str>,
) -> String {
    let mut line = format!("outcome: {outcome}");
    if let Some(c) = ceiling {
        line.push_str(&format!(" ({c})"));
    }
    if let Some(r) = reason {
        line.push_str(&format!(": {}", escape(r)));
    }
    line
}

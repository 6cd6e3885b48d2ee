//! A local launch series (RFC-0002:C-RUN-HISTORY, issue 13): `plan run --series NAME` makes the
//! engine the orchestrator of a series kept in its own state directory, so a crontab line gives
//! a playbook its history with no controller. The series is the runs whose `run.json` names it;
//! nothing else is stored, so no record can be altered once its run is terminal.
//!
//! A run is terminal once it wrote its shutdown line, or once a later firing holding the state
//! directory's lock finds it without one: its engine died, and the newer run takes `current`, so
//! it can never be resumed again. It then records a null outcome and verdict, ending at its last
//! logged line.

use std::path::Path;

use crucible_plan::ceilings::MAX_HISTORY;
use crucible_plan::wire::{Event, TaskResult};
use serde_json::Value;

use crate::history::{History, Record, RecordEntry};
use crate::state;

/// The longest series name: it is a path-free label, shown and stored as given.
const MAX_NAME: usize = 64;

/// A series name: 1 to 64 of ASCII letters, digits, `-`, `_` and `.`, not starting with `.`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a series name: use 1 to {MAX_NAME} letters, digits, `-`, `_` or `.`, \
             not starting with `.`"
        ))
    }
}

/// The history a new run of series `name` starts with: every earlier terminal run of the
/// series in `state`, the most recent [`MAX_HISTORY`] by end time.
/// Called with the state directory's lock held, so no run of the series is still running.
///
/// Runs of one state directory never overlap (the lock), and a run can be resumed only while
/// it is the current one, so they end in the order they started, which is their ids' order:
/// only the newest [`MAX_HISTORY`] runs of the series are read, however long it has run.
pub fn history(state: &Path, name: &str, max_bytes: u64) -> Result<History, String> {
    let ids = state::run_ids(state).map_err(|e| format!("cannot read the series' runs: {e}"))?;
    let mut records = Vec::new();
    for id in ids.iter().rev() {
        if records.len() == MAX_HISTORY as usize {
            break;
        }
        let dir = state::runs_dir(state).join(id);
        let Some(run) = state::read_run_json(&dir) else {
            continue;
        };
        if run.series.as_deref() == Some(name) {
            let link = format!("file://{}", dir.display());
            if let Some(r) = record_of(&dir, run, link) {
                records.push(r);
            }
        }
    }
    History::of_records(records, max_bytes)
}

/// The history record of the terminal run in `dir` (an engine run directory, holding `run.json`
/// and `session.jsonl`), named by `link`: outcome and verdict are null when the run wrote no
/// shutdown line, and it ends at its last logged line. `None` for a run that logged nothing (it
/// never started). The controller builds its series' records with this too.
pub fn record(dir: &Path, link: String) -> Option<Record> {
    record_of(dir, state::read_run_json(dir)?, link)
}

/// [`record`] of a run whose `run.json` is already read.
fn record_of(dir: &Path, run: state::RunJson, link: String) -> Option<Record> {
    let lines = state::read_log(dir);
    let last_ts = lines.last()?.ts.clone();
    let mut shutdown = None;
    let mut record_task = String::new();
    let mut rows: Vec<&TaskResult> = Vec::new();
    for line in &lines {
        match &line.event {
            Event::Shutdown(s) => shutdown = Some((line.ts.clone(), s)),
            Event::PlanAdmitted(p) => record_task = p.history_record.clone(),
            Event::TaskResult(r) => rows.push(r),
            _ => {}
        }
    }
    let settled = (!record_task.is_empty())
        .then(|| {
            let round = format!("{record_task}[round-");
            rows.iter()
                .rev()
                .find(|r| r.task == record_task || r.task.starts_with(&round))
        })
        .flatten();
    let entry = RecordEntry {
        status: settled.map(|r| r.status.as_str().to_string()),
        output: settled
            .filter(|r| r.status.is_pass())
            .map(|r| r.output.clone().unwrap_or(Value::Null)),
        task: record_task,
    };
    Some(Record {
        run: run.run,
        started_at: run.started_at,
        ended_at: shutdown.as_ref().map_or(last_ts, |(ts, _)| ts.clone()),
        outcome: shutdown
            .as_ref()
            .map(|(_, s)| s.outcome.as_str().to_string()),
        verdict: shutdown
            .as_ref()
            .map(|(_, s)| s.verdict.as_str().to_string()),
        revision: run.pack,
        link,
        entry,
    })
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn series_names_are_plain_labels() {
        for good in ["nightly", "repo-health.v2", "a_b"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".hidden", "a/b", "../x", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}

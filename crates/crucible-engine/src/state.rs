//! The state layout (ARCHITECTURE.md, "Fixed: state layout"): `current`, and per run
//! `runs/<run-id>/` with `session.jsonl`, `run.json`, `files/` and `memory/`.

use crucible_plan::wire::{decode_log, Event};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// A run's identity, written before the first dispatch.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunJson {
    pub run: String,
    pub pack: String,
    pub plan: String,
    pub variant: String,
    pub params: BTreeMap<String, Value>,
    pub max_cost: f64,
    pub max_secs: f64,
    pub base_commit: String,
    pub parent: Option<String>,
    pub series: Option<String>,
    pub started_at: String,
}

/// A new run id: a UUIDv7, so ids sort by start time.
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

pub fn runs_dir(state: &Path) -> PathBuf {
    state.join("runs")
}

/// Whether `id` is a run id as [`new_run_id`] writes it: a UUID, lower-case and hyphenated.
/// Anything else (`../../../../etc` in `current`, a `--parent` path) names no run.
pub fn is_run_id(id: &str) -> bool {
    uuid::Uuid::try_parse(id).is_ok_and(|u| u.hyphenated().to_string() == id)
}

/// `runs/<id>/` of a valid run id; every path to a run's directory is built here, so a run id
/// read from `current`, the command line or a directory listing can never leave `runs/`.
pub fn run_dir(state: &Path, id: &str) -> Result<PathBuf, String> {
    if is_run_id(id) {
        Ok(runs_dir(state).join(id))
    } else {
        Err(format!(
            "no such run: {:?} is not a run id (a run id is a UUID such as {})",
            id,
            new_run_id()
        ))
    }
}

/// Creates `runs/<id>/` with its `files/` directory; `memory/` is made by the workspace setup.
pub fn create_run_dir(state: &Path, id: &str) -> io::Result<PathBuf> {
    let dir = run_dir(state, id).map_err(io::Error::other)?;
    std::fs::create_dir_all(dir.join("files"))?;
    Ok(dir)
}

/// Writes a file by temp-then-rename so a reader never sees half of it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)
}

pub fn write_run_json(dir: &Path, run: &RunJson) -> io::Result<()> {
    let text = serde_json::to_string_pretty(run).expect("run.json serializes");
    write_atomic(&dir.join("run.json"), text.as_bytes())
}

pub fn write_current(state: &Path, id: &str) -> io::Result<()> {
    write_atomic(&state.join("current"), format!("{id}\n").as_bytes())
}

/// Where a run is: running, crashed (its engine died before the shutdown line), or ended.
#[derive(Clone, Debug, PartialEq)]
pub enum RunState {
    /// Its engine holds the state directory now.
    Running,
    /// No shutdown line and no engine: `resumable` when it is the most recent run, the only
    /// one `plan run --resume` continues.
    Crashed {
        resumable: bool,
    },
    Ended(crucible_plan::wire::Shutdown),
}

impl RunState {
    /// The status column of `crucible runs`: `running`, `crashed (resumable)`, `crashed`, or
    /// the shutdown outcome.
    pub fn label(&self) -> String {
        match self {
            RunState::Running => "running".into(),
            RunState::Crashed { resumable: true } => "crashed (resumable)".into(),
            RunState::Crashed { resumable: false } => "crashed".into(),
            RunState::Ended(s) => s.outcome.as_str().into(),
        }
    }
}

/// One line of `crucible runs`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunListing {
    pub id: String,
    pub started_at: String,
    pub state: RunState,
}

/// The id in `current`: the most recent run.
pub fn current(state: &Path) -> Option<String> {
    let text = std::fs::read_to_string(state.join("current")).ok()?;
    let id = text.trim();
    is_run_id(id).then(|| id.to_string())
}

/// The run `spec` names in `state`: `latest` (the most recent run), a whole run id, or a prefix
/// of exactly one run's id. The error says what matched instead.
pub fn resolve_run(state: &Path, spec: &str) -> Result<String, String> {
    let ids = run_ids(state).map_err(|e| format!("cannot read {}: {e}", state.display()))?;
    if spec == "latest" {
        return current(state)
            .or_else(|| ids.last().cloned())
            .ok_or_else(|| format!("no runs in {}", state.display()));
    }
    let matching: Vec<&String> = ids.iter().filter(|id| id.starts_with(spec)).collect();
    match matching.as_slice() {
        [one] if !spec.is_empty() => Ok(one.to_string()),
        [] | [_] => Err(format!(
            "no such run: {spec:?} names no run in {} (give a run id, a unique prefix of one, or `latest`)",
            state.display()
        )),
        many => Err(format!(
            "{spec:?} is the start of {} runs ({}…): give more of the id",
            many.len(),
            many.iter()
                .take(3)
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The run ids in `runs/`, oldest first.
pub(crate) fn run_ids(state: &Path) -> io::Result<Vec<String>> {
    let mut ids: Vec<String> = match std::fs::read_dir(runs_dir(state)) {
        Ok(rd) => rd
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|id| is_run_id(id))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    ids.sort();
    Ok(ids)
}

/// Every run in a state directory, oldest first.
pub fn list_runs(state: &Path) -> io::Result<Vec<RunListing>> {
    let current = current(state);
    let running = crate::lock::engine_running(state);
    let mut out = Vec::new();
    for id in run_ids(state)? {
        let run_dir = runs_dir(state).join(&id);
        let started_at = read_run_json(&run_dir)
            .map(|r| r.started_at)
            .unwrap_or_default();
        let latest = current.as_deref() == Some(id.as_str());
        let state = match read_shutdown(&run_dir) {
            Some(s) => RunState::Ended(s),
            None if latest && running => RunState::Running,
            None => RunState::Crashed { resumable: latest },
        };
        out.push(RunListing {
            id,
            started_at,
            state,
        });
    }
    Ok(out)
}

/// A run's `run.json`, when it can be read.
pub fn read_run_json(run_dir: &Path) -> Option<RunJson> {
    let text = std::fs::read_to_string(run_dir.join("run.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// A run's session log as the engine wrote it (an unreadable log reads as empty).
pub fn read_log(run_dir: &Path) -> Vec<crucible_plan::wire::Line> {
    let log = std::fs::read_to_string(run_dir.join("session.jsonl")).unwrap_or_default();
    decode_log(&log).unwrap_or_default()
}

fn read_shutdown(run_dir: &Path) -> Option<crucible_plan::wire::Shutdown> {
    read_log(run_dir)
        .into_iter()
        .rev()
        .find_map(|l| match l.event {
            Event::Shutdown(s) => Some(s),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_uuids_are_run_ids() {
        assert!(is_run_id(&new_run_id()));
        for bad in [
            "../../../../etc",
            "",
            "x",
            "0192A3B4-0000-7000-8000-000000000000",
        ] {
            assert!(run_dir(Path::new("state"), bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn run_ids_sort_by_start() {
        let a = new_run_id();
        let b = new_run_id();
        assert!(a < b);
    }
}

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

/// One line of `crucible runs`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunListing {
    pub id: String,
    pub started_at: String,
    /// `None` while running, or when the process died before its shutdown line.
    pub outcome: Option<String>,
    pub verdict: Option<String>,
    pub spent_usd: Option<f64>,
}

/// Every run in a state directory, oldest first.
pub fn list_runs(state: &Path) -> io::Result<Vec<RunListing>> {
    let dir = runs_dir(state);
    let mut ids: Vec<String> = match std::fs::read_dir(&dir) {
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
    let mut out = Vec::new();
    for id in ids {
        let run_dir = dir.join(&id);
        let started_at = std::fs::read_to_string(run_dir.join("run.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<RunJson>(&t).ok())
            .map(|r| r.started_at)
            .unwrap_or_default();
        let log = std::fs::read_to_string(run_dir.join("session.jsonl")).unwrap_or_default();
        let shutdown = decode_log(&log).ok().and_then(|lines| {
            lines.into_iter().rev().find_map(|l| match l.event {
                Event::Shutdown(s) => Some(s),
                _ => None,
            })
        });
        out.push(RunListing {
            id,
            started_at,
            outcome: shutdown.as_ref().map(|s| s.outcome.as_str().to_string()),
            verdict: shutdown.as_ref().map(|s| s.verdict.as_str().to_string()),
            spent_usd: shutdown.as_ref().map(|s| s.spent_usd),
        });
    }
    Ok(out)
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

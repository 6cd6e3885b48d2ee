//! The history of a launch series (RFC-0002:C-RUN-HISTORY): the earlier terminal runs the
//! orchestrator that started this run supplies in `CRUCIBLE_HISTORY`, and the reserved input
//! `history` a task that declares a depth receives from them. A run started any other way
//! belongs to no series and gives every such task an empty list.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crucible_plan::ceilings::MAX_HISTORY;

/// The series' most recent terminal runs, as the orchestrator supplies them.
pub const HISTORY_ENV: &str = "CRUCIBLE_HISTORY";
/// The bound on the encoded size of the history one task receives.
pub const HISTORY_MAX_BYTES_ENV: &str = "CRUCIBLE_HISTORY_MAX_BYTES";
pub const DEFAULT_HISTORY_MAX_BYTES: u64 = 64 * 1024;

/// Where a run keeps the history it was started with, so a resumed run gives every task the
/// same history the interrupted one did.
const HISTORY_FILE: &str = "history.json";

/// One earlier run, exactly the fields the contract allows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub run: String,
    pub started_at: String,
    pub ended_at: String,
    pub outcome: Option<String>,
    pub verdict: Option<String>,
    pub revision: String,
    pub link: String,
    pub entry: RecordEntry,
}

/// What the earlier run's record task left: its name, terminal status and passing output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordEntry {
    pub task: String,
    pub status: Option<String>,
    pub output: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    version: u32,
    records: Vec<Record>,
}

/// The records of this run's series, oldest first by end time, and the per-task size bound.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    records: Vec<Record>,
    max_bytes: u64,
}

impl History {
    /// No series: every task that reads history gets an empty list.
    pub fn none(max_bytes: u64) -> History {
        History {
            records: Vec::new(),
            max_bytes,
        }
    }

    /// The bound on the encoded history one task receives.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Decode `CRUCIBLE_HISTORY` strictly: version 1, at most [`MAX_HISTORY`] records, each with
    /// exactly the contract's fields and an RFC 3339 end time to order by.
    pub fn parse(text: &str, max_bytes: u64) -> Result<History, String> {
        let doc: Document = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if doc.version != 1 {
            return Err(format!("version {} is not 1", doc.version));
        }
        if doc.records.len() > MAX_HISTORY as usize {
            return Err(format!(
                "{} records, more than the engine's ceiling of {MAX_HISTORY}",
                doc.records.len()
            ));
        }
        History::of_records(doc.records, max_bytes)
    }

    /// A series' terminal runs in any order: the most recent [`MAX_HISTORY`] by end time (an
    /// RFC 3339 instant), oldest first.
    pub fn of_records(records: Vec<Record>, max_bytes: u64) -> Result<History, String> {
        let mut keyed = Vec::with_capacity(records.len());
        for r in records {
            let ended = humantime::parse_rfc3339_weak(&r.ended_at).map_err(|e| {
                format!(
                    "run `{}`: ended_at {:?} is not an RFC 3339 time: {e}",
                    r.run, r.ended_at
                )
            })?;
            keyed.push((ended, r));
        }
        // Stable: runs that ended at the same instant keep the order they were given in.
        keyed.sort_by_key(|(ended, _)| *ended);
        let recent = keyed.len().saturating_sub(MAX_HISTORY as usize);
        Ok(History {
            records: keyed.into_iter().skip(recent).map(|(_, r)| r).collect(),
            max_bytes,
        })
    }

    /// The reserved input of a task reading `depth` runs: its most recent records, oldest
    /// first, with whole records dropped from the oldest end while the encoded input is over
    /// the bound, and how many were dropped.
    pub fn input(&self, depth: u32) -> Value {
        let start = self.records.len().saturating_sub(depth as usize);
        let mut records = &self.records[start..];
        let mut dropped = 0;
        loop {
            let value = json!({"records": records, "dropped": dropped});
            let size = serde_json::to_vec(&value)
                .expect("JSON always serializes")
                .len();
            if size as u64 <= self.max_bytes || records.is_empty() {
                return value;
            }
            records = &records[1..];
            dropped += 1;
        }
    }

    /// Keep the history in the run's directory for a resumption.
    pub fn save(&self, run_dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec(self).expect("JSON always serializes");
        std::fs::write(run_dir.join(HISTORY_FILE), text)
    }

    /// The history the run was started with; a run that kept none had none.
    pub fn load(run_dir: &Path, max_bytes: u64) -> std::io::Result<History> {
        match std::fs::read(run_dir.join(HISTORY_FILE)) {
            Ok(text) => serde_json::from_slice(&text).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(History::none(max_bytes)),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(run: &str, ended_at: &str, output: Value) -> Value {
        json!({"run": run, "started_at": "2026-11-01T00:00:00Z", "ended_at": ended_at,
               "outcome": "finished", "verdict": "valid", "revision": "tree1:abc",
               "link": format!("https://ctl.example/runs/{run}"),
               "entry": {"task": "scan", "status": "pass", "output": output}})
    }

    fn doc(records: Vec<Value>) -> String {
        json!({"version": 1, "records": records}).to_string()
    }

    fn runs(input: &Value) -> Vec<&str> {
        input["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run"].as_str().unwrap())
            .collect()
    }

    // RFC-0002:C-RUN-HISTORY: the most recent `depth` records by end time, oldest first.
    #[test]
    fn a_task_gets_its_depth_of_the_most_recent_runs_oldest_first() {
        let h = History::parse(
            &doc(vec![
                record("r3", "2026-11-03T00:00:00Z", json!({})),
                record("r1", "2026-11-01T00:00:00Z", json!({})),
                record("r4", "2026-11-04T00:00:00Z", json!({})),
                record("r2", "2026-11-02T00:00:00Z", json!({})),
            ]),
            DEFAULT_HISTORY_MAX_BYTES,
        )
        .unwrap();
        assert_eq!(runs(&h.input(2)), ["r3", "r4"]);
        assert_eq!(runs(&h.input(30)), ["r1", "r2", "r3", "r4"]);
        assert_eq!(h.input(2)["dropped"], 0);
        assert_eq!(
            History::none(1).input(5),
            json!({"records": [], "dropped": 0})
        );
    }

    // RFC-0002:C-RUN-HISTORY: over the bound, whole records go from the oldest end, counted.
    #[test]
    fn the_size_bound_drops_whole_records_from_the_oldest_end() {
        let big = json!({"text": "x".repeat(400)});
        let records = (1..=4)
            .map(|i| {
                record(
                    &format!("r{i}"),
                    &format!("2026-11-0{i}T00:00:00Z"),
                    big.clone(),
                )
            })
            .collect();
        let one = serde_json::to_vec(&record("r1", "2026-11-01T00:00:00Z", big.clone()))
            .unwrap()
            .len() as u64;
        let h = History::parse(&doc(records), 2 * one + 100).unwrap();
        let input = h.input(3);
        assert_eq!(runs(&input), ["r3", "r4"]);
        assert_eq!(input["dropped"], 1);
        // Never a truncated record: one too big for the bound is dropped whole.
        let h = History::parse(&doc(vec![record("r1", "2026-11-01T00:00:00Z", big)]), 10).unwrap();
        assert_eq!(h.input(1), json!({"records": [], "dropped": 1}));
    }

    // RFC-0002:C-RUN-HISTORY: a record carries exactly the contract's fields; anything else, a
    // wrong version, too many records or an unreadable end time is refused.
    #[test]
    fn the_document_is_decoded_strictly() {
        let mut extra = record("r1", "2026-11-01T00:00:00Z", json!({}));
        extra["score"] = json!(1);
        for (text, why) in [
            (doc(vec![extra]), "unknown field"),
            (
                json!({"version": 2, "records": []}).to_string(),
                "version 2",
            ),
            (doc(vec![record("r1", "yesterday", json!({}))]), "RFC 3339"),
            (
                doc((0..31)
                    .map(|i| record(&format!("r{i}"), "2026-11-01T00:00:00Z", json!({})))
                    .collect()),
                "more than the engine's ceiling of 30",
            ),
        ] {
            let e = History::parse(&text, DEFAULT_HISTORY_MAX_BYTES).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    // RFC-0002:C-RUN-HISTORY: an orchestrator's own series keeps the most recent 30 by end
    // time, oldest first, whatever order its runs come in.
    #[test]
    fn a_series_gives_the_most_recent_thirty_oldest_first() {
        let records: Vec<Record> = (0..35)
            .rev()
            .map(|i| {
                let ended = format!("2026-11-01T00:{i:02}:00Z");
                serde_json::from_value(record(&format!("r{i}"), &ended, json!({}))).unwrap()
            })
            .collect();
        let h = History::of_records(records, DEFAULT_HISTORY_MAX_BYTES).unwrap();
        let expected: Vec<String> = (5..35).map(|i| format!("r{i}")).collect();
        assert_eq!(runs(&h.input(30)), expected);
        assert_eq!(h.max_bytes(), DEFAULT_HISTORY_MAX_BYTES);
    }

    #[test]
    fn a_saved_history_loads_back_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::parse(
            &doc(vec![record("r1", "2026-11-01T00:00:00Z", json!({"n": 1}))]),
            999,
        )
        .unwrap();
        h.save(dir.path()).unwrap();
        assert_eq!(History::load(dir.path(), 1).unwrap(), h);
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(History::load(empty.path(), 7).unwrap(), History::none(7));
    }
}

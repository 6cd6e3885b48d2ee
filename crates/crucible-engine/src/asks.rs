//! Work emission (RFC-0002:C-ASKS): a passing attempt may leave `PLAN_ASKS.json` at its
//! workspace root, a list of `{key, workflow, params}` descriptions of work for another run. The
//! engine records them on the session log (`asks_emitted`, before the task's row) and never
//! dispatches them: admission belongs to the receiving orchestrator. The number one run may emit
//! is bounded; a task whose asks would pass the bound fails, with none of them recorded.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::Deserialize;
use serde_json::Value;

use crucible_plan::wire::Ask;

use crate::files;

/// Where an attempt writes its asks, beside `PLAN_TASK_RESULT.json`.
pub const ASKS_FILE: &str = "PLAN_ASKS.json";
/// The operator's bound on the asks one run may emit.
pub const MAX_ASKS_ENV: &str = "CRUCIBLE_MAX_ASKS";
pub const DEFAULT_MAX_ASKS: u32 = 100;
/// One ask, encoded, at most: an ask names work and references material by its published
/// location; it never carries file content.
pub const ASK_MAX_BYTES: usize = 16 * 1024;
const KEY_MAX: usize = 256;
const WORKFLOW_MAX: usize = 128;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Emitted {
    key: String,
    workflow: String,
    params: std::collections::BTreeMap<String, Value>,
}

/// Read and remove the asks an attempt left in `root`: `Ok(None)` when it left none, `Err` with
/// the note of a measured failure when they are malformed. The file is opened by the same
/// confined walk as a declared file, so a link cannot make the engine record another file.
pub fn take(root: &Path, limit: u32) -> Result<Option<Vec<Ask>>, String> {
    let file = match files::open_in_root(root, ASKS_FILE) {
        Ok(f) => f,
        Err(files::FileProblem::Absent) => return Ok(None),
        Err(p) => return Err(format!("`{ASKS_FILE}` {p}")),
    };
    // Whatever it holds, it is the attempt's answer, not its work: it never reaches a commit.
    let _ = std::fs::remove_file(root.join(ASKS_FILE));
    let bound = (limit as u64 + 1) * ASK_MAX_BYTES as u64;
    let mut text = Vec::new();
    file.take(bound + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("`{ASKS_FILE}` could not be read: {e}"))?;
    if text.len() as u64 > bound {
        return Err(format!("`{ASKS_FILE}` is larger than {bound} bytes"));
    }
    let emitted: Vec<Emitted> = serde_json::from_slice(&text)
        .map_err(|e| format!("`{ASKS_FILE}` is not a list of {{key, workflow, params}}: {e}"))?;
    emitted
        .into_iter()
        .enumerate()
        .map(|(n, e)| check(n, e))
        .collect::<Result<_, _>>()
        .map(Some)
}

fn check(n: usize, e: Emitted) -> Result<Ask, String> {
    let at = |what: String| format!("`{ASKS_FILE}` ask #{}: {what}", n + 1);
    let printable = |s: &str| !s.is_empty() && !s.chars().any(char::is_control);
    if !printable(&e.key) || e.key.len() > KEY_MAX {
        return Err(at(format!(
            "its key must be 1 to {KEY_MAX} bytes without control characters"
        )));
    }
    if !printable(&e.workflow) || e.workflow.len() > WORKFLOW_MAX || e.workflow.contains(' ') {
        return Err(at(format!(
            "its workflow must be 1 to {WORKFLOW_MAX} bytes without spaces or control characters"
        )));
    }
    let ask = Ask {
        key: e.key,
        workflow: e.workflow,
        params: e.params,
    };
    let size = serde_json::to_vec(&ask)
        .expect("JSON always serializes")
        .len();
    if size > ASK_MAX_BYTES {
        return Err(at(format!(
            "it is {size} bytes, over {ASK_MAX_BYTES}: reference material by its published location rather than carrying it"
        )));
    }
    Ok(ask)
}

/// The run's bound and what it has emitted so far (a resumed run counts its log's asks).
#[derive(Debug)]
pub struct AsksBudget {
    limit: u32,
    used: AtomicU32,
}

impl AsksBudget {
    pub fn new(limit: u32, used: u32) -> AsksBudget {
        AsksBudget {
            limit,
            used: AtomicU32::new(used),
        }
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Count `n` asks, or refuse them all with the failure note when they would pass the bound.
    pub fn charge(&self, n: usize) -> Result<(), String> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(n).filter(|total| *total <= self.limit)
            })
            .map(drop)
            .map_err(|used| {
                format!(
                    "emitting {n} asks would pass the run's bound of {} ({MAX_ASKS_ENV}); {used} were emitted before; none of these were recorded",
                    self.limit
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) {
        std::fs::write(dir.join(ASKS_FILE), text).unwrap();
    }

    #[test]
    fn asks_are_read_checked_and_removed() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(take(d.path(), 10), Ok(None));
        write(
            d.path(),
            r#"[{"key": "repo:a#12", "workflow": "fix-issue", "params": {"issue": 12}}]"#,
        );
        let asks = take(d.path(), 10).unwrap().unwrap();
        assert_eq!(asks.len(), 1);
        assert_eq!(asks[0].key, "repo:a#12");
        assert_eq!(asks[0].params["issue"], 12);
        assert!(!d.path().join(ASKS_FILE).exists(), "removed once read");
    }

    #[test]
    fn malformed_asks_are_a_failure_naming_the_rule() {
        let d = tempfile::tempdir().unwrap();
        for (text, why) in [
            (r#"{"key": "k"}"#, "not a list"),
            (
                r#"[{"key": "k", "workflow": "w"}]"#,
                "missing field `params`",
            ),
            (
                r#"[{"key": "k", "workflow": "w", "params": {}, "x": 1}]"#,
                "unknown field",
            ),
            (
                r#"[{"key": "", "workflow": "w", "params": {}}]"#,
                "its key must be",
            ),
            (
                r#"[{"key": "k", "workflow": "a b", "params": {}}]"#,
                "its workflow must be",
            ),
        ] {
            write(d.path(), text);
            let e = take(d.path(), 10).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        let big = format!(
            r#"[{{"key": "k", "workflow": "w", "params": {{"body": "{}"}}}}]"#,
            "x".repeat(ASK_MAX_BYTES)
        );
        write(d.path(), &big);
        assert!(take(d.path(), 10)
            .unwrap_err()
            .contains("published location"));
    }

    // RFC-0002:C-TASK-FILES confinement applies: a link is never followed into another file.
    #[test]
    fn a_link_in_place_of_the_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret.json");
        std::fs::write(&secret, r#"[{"key": "k", "workflow": "w", "params": {}}]"#).unwrap();
        std::os::unix::fs::symlink(&secret, d.path().join(ASKS_FILE)).unwrap();
        let e = take(d.path(), 10).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
    }

    #[test]
    fn the_bound_refuses_a_whole_batch() {
        let b = AsksBudget::new(3, 1);
        assert!(b.charge(2).is_ok());
        let e = b.charge(1).unwrap_err();
        assert!(e.contains("bound of 3"), "{e}");
        assert!(b.charge(0).is_ok());
    }
}

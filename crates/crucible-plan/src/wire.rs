//! The session log's wire format (ARCHITECTURE.md, "Fixed: the session log").
//!
//! `state/runs/<run-id>/session.jsonl` is NDJSON: one object per line with `"v": 1`, `"kind"`
//! and `"ts"` (RFC 3339, UTC). These are the serialized types; the engine's in-memory state is
//! kept apart from them. Readers skip unknown kinds and a torn last line.

use crate::vocab::{BlockedReason, Ceiling, Outcome, Status, Verdict};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The wire version every line carries.
pub const WIRE_VERSION: u32 = 1;

/// The gate label a playbook carries: the task lane's (RFC-0002:C-PLAYBOOK-LANE).
pub const GATE_TASK: &str = "task";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    Start(Start),
    PlanAdmitted(PlanAdmitted),
    TaskResult(TaskResult),
    AsksEmitted(AsksEmitted),
    DecisionOpened(DecisionOpened),
    RunbookStage(RunbookStage),
    RunbookStagesClosed(RunbookStagesClosed),
    Resumed(Resumed),
    Shutdown(Shutdown),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Start {
    pub run: String,
    pub gate: String,
    /// The pack digest, `tree1:…`.
    pub pack: String,
    /// The plan digest.
    pub plan: String,
    /// The manifest variant (`""` for `crucible.toml`).
    pub variant: String,
    pub params: BTreeMap<String, Value>,
    pub max_cost: f64,
    pub max_secs: f64,
    pub parent: Option<String>,
    pub series: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanAdmitted {
    pub plan_version: u32,
    /// The history record task, or `""`.
    pub history_record: String,
    pub tasks: Vec<AdmittedTask>,
}

/// One task as the admitted-plan event shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdmittedTask {
    pub name: String,
    pub kind: String,
    pub depends_on: Vec<String>,
    /// `""` for a fresh conversation.
    pub session: String,
    pub needs: String,
    pub required: bool,
    pub join: String,
    pub stage: String,
    /// `"producer.field"` or `""`.
    pub over: String,
    pub max_fanout: u32,
    pub keyed: Vec<String>,
    /// Field name → type, as the plan spells it.
    pub emits: BTreeMap<String, Value>,
    /// Path → schema (canonical JSON text) or null.
    pub emits_files: BTreeMap<String, Option<String>>,
    /// `""`, one target as a string, or several as a list in order.
    pub revise: Value,
    pub max_rounds: u32,
    pub history_depth: u32,
    /// The per-attempt limit as written (`"90s"`), or null.
    pub timeout: Option<String>,
    pub digest: String,
}

impl AdmittedTask {
    /// The admitted-plan view of a compiled task with its definition digest.
    pub fn from_task(task: &crate::Task, digest: &str) -> AdmittedTask {
        let emits = task
            .emits
            .iter()
            .map(|(name, ty)| {
                (
                    name.clone(),
                    serde_json::to_value(ty).expect("types serialize"),
                )
            })
            .collect();
        let emits_files = task
            .emits_files
            .iter()
            .map(|f| {
                (
                    f.path.clone(),
                    f.schema.as_ref().map(crate::canonical::to_string),
                )
            })
            .collect();
        let revise = match task.revise.as_slice() {
            [] => Value::from(""),
            [one] => Value::from(one.as_str()),
            many => Value::from(many.to_vec()),
        };
        AdmittedTask {
            name: task.name.clone(),
            kind: task.kind.as_str().to_string(),
            depends_on: task.depends_on.clone(),
            session: task.session.clone().unwrap_or_default(),
            needs: task.needs.clone(),
            required: task.required,
            join: task.join.as_str().to_string(),
            stage: task.stage.as_str().to_string(),
            over: task
                .over
                .as_ref()
                .map(|o| o.to_string())
                .unwrap_or_default(),
            max_fanout: task.max_fanout,
            keyed: task.keyed.iter().map(|k| k.to_string()).collect(),
            emits,
            emits_files,
            revise,
            max_rounds: task.max_rounds,
            history_depth: task.history,
            timeout: task.timeout_secs.map(crate::duration::format),
            digest: digest.to_string(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Blocked {
    pub reason: BlockedReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    /// `name`, `name[key]` or `name[round-N]`.
    pub task: String,
    pub status: Status,
    pub note: Option<String>,
    pub output: Option<Value>,
    pub attempts: u32,
    pub cost_usd: f64,
    pub secs: f64,
    /// Always null in a playbook.
    pub score: Option<f64>,
    /// Whether a declared file set was captured and published for this row.
    pub files: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<Blocked>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<String>,
    /// Why a reserved field in the output was refused (early completion from an agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The cause of a transport failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// The repair turns of an agent task's attempt, in order (none: absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<Repair>,
    /// The `session()` an agent task's turns continued (none: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionTurns>,
    /// The directory, relative to the run's, where each of its turns' stdout and stderr are
    /// kept (`logs/<task>`); absent when no process ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// The runbook a `skill()` task ran: its release, checkpoints and predicates (issue 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runbook: Option<Box<RunbookLedger>>,
}

/// A runbook turn's ledger (issue 15): the sealed release it ran, each checkpoint's declared
/// artifacts as hashes (never their contents), each success predicate's verdict, and each gate's
/// decision. Kept in the task's row, so it is auditable and a resumed run folds it back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunbookLedger {
    pub name: String,
    /// The release's `tree1:` digest, as the plan pinned it.
    pub digest: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<CheckpointRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub predicates: Vec<PredicateRecord>,
}

/// A stage boundary as the turn left it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    pub stage: String,
    pub artifacts: Vec<ArtifactRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateRecord>,
}

/// One declared artifact: its SHA-256 and size, or why it has no hash (absent, a link, a
/// special file: then no size either; too large: its size only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhashed: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredicateRecord {
    #[serde(rename = "type")]
    pub kind: crate::runbook::PredicateKind,
    pub path: String,
    pub holds: bool,
}

/// A person's decision at a gate (a human decision, RFC-0002:C-HUMAN-DECISION).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateRecord {
    pub id: String,
    pub approved: bool,
    /// The principal who answered (`terminal:USER`, `user:NAME`), or `expired` when the request
    /// expired unanswered.
    pub by: String,
    /// The digest of the evidence the decision was made over.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// The answer's note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What an agent task did to its `session()`'s conversation (RFC-0002:C-REVISE-LOOP): whether it
/// started or resumed it, the harness's id for it and how many turns it has had. Never the
/// transcript: that stays with the harness. A resumed run folds the id back, so the session's
/// next turn continues the same conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionTurns {
    /// The session's name in the playbook.
    pub name: String,
    /// The harness's id of the conversation: what the session's next turn resumes.
    pub id: String,
    /// Whether the task's first turn started the conversation or resumed it.
    pub action: SessionAction,
    /// The session's turns so far, this task's included (repair turns and retried attempts
    /// that reached the conversation count).
    pub turns: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionAction {
    Started,
    Resumed,
}

/// One repair turn: the same session resumed with the masked notes on what a passing turn's
/// output missed or broke, and asked to fix it in place. Not a retry: `attempts` is unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Repair {
    /// `<task> repair <round>/<of>`, e.g. `audit[RHAI-1] repair 1/2`.
    pub label: String,
    pub round: u32,
    /// The task's declared number of repair turns.
    pub of: u32,
    /// What this turn spent.
    pub cost_usd: f64,
    /// The notes the turn was shown: field and file names and schema paths, never a value.
    pub notes: Vec<String>,
}

impl TaskResult {
    /// A row for `task` settling as `status`, with nothing else recorded yet: no note, output,
    /// attempt or spend.
    pub fn new(task: impl Into<String>, status: Status) -> TaskResult {
        TaskResult {
            task: task.into(),
            status,
            note: None,
            output: None,
            attempts: 0,
            cost_usd: 0.0,
            secs: 0.0,
            score: None,
            files: false,
            blocked: None,
            reused_from: None,
            refused: None,
            transport: None,
            repairs: Vec::new(),
            session: None,
            log: None,
            runbook: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ask {
    pub key: String,
    pub workflow: String,
    pub params: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AsksEmitted {
    pub task: String,
    pub asks: Vec<Ask>,
}

/// A human-decided route's request opened (RFC-0002:C-HUMAN-DECISION): when, until when, and
/// over which evidence. A resumed run reopens it with the same evidence and expiry, so neither a
/// restart nor a resume extends it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionOpened {
    pub task: String,
    /// The runbook gate of `task` the request is for (issue 15); none for a route's request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    /// The evidence digest (`sha256:…`, over its canonical encoding).
    pub digest: String,
    /// RFC 3339.
    pub opened_at: String,
    /// RFC 3339.
    pub expires_at: String,
    /// Who answers: `terminal` or `controller`.
    pub via: String,
}

/// A stage of a staged runbook task whose turn is done (issue 15): its checkpoint as the turn
/// left it, and once a person decided its gate, that decision. Written when the stage's
/// artifacts were hashed (and kept beside the run), and again when its gate was decided; a
/// resumed run folds the last line of each stage, so a stage whose turn is done never runs
/// again (C-PLAYBOOK-RESUME), and one whose gate was approved is settled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunbookStage {
    pub task: String,
    /// The task's set name: the task, or one instance of a mapped one.
    pub set: String,
    pub checkpoint: CheckpointRecord,
    /// What the task's attempt had spent by then, in USD: a resumed run's row counts it.
    #[serde(default)]
    pub cost_usd: f64,
}

/// The attempt that logged stages of `set` ended (issue 15): its stages are not resumable any
/// more, so a later attempt of the same set (a revise loop's next round) starts from the first
/// stage, and a resumed run folds none of the lines before this one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunbookStagesClosed {
    pub task: String,
    pub set: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resumed {
    pub run: String,
    pub folded: u32,
    pub spent: f64,
    pub elapsed_secs: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shutdown {
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<Ceiling>,
    pub reason: Option<String>,
    pub verdict: Verdict,
    pub spent_usd: f64,
    pub elapsed_secs: f64,
}

/// One decoded line: its timestamp and event.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub ts: String,
    pub event: Event,
}

/// Encodes one event as a log line (without the trailing newline).
pub fn encode(event: &Event, ts: &str) -> String {
    let mut v = serde_json::to_value(event).expect("events always serialize");
    let obj = v.as_object_mut().expect("an event is an object");
    obj.insert("v".into(), Value::from(WIRE_VERSION));
    obj.insert("ts".into(), Value::from(ts));
    serde_json::to_string(&v).expect("a JSON value always serializes")
}

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
#[error("session log line {line}: {message}")]
pub struct DecodeError {
    pub line: usize,
    pub message: String,
}

/// The deepest task output the engine records, in JSON nesting levels. A row wraps the output
/// and consumers' entries wrap it again, and JSON readers (serde_json among them) stop at 128
/// levels: an output deeper than this is refused at capture, and a row holding one is refused
/// when read, so every row the engine writes can be read back (issue 11 item 6).
pub const MAX_OUTPUT_DEPTH: usize = 64;

/// The largest result line (the last stdout line holding a task's output) the engine reads, in
/// bytes. A longer line is refused at capture as over this bound.
pub const MAX_RESULT_BYTES: usize = 512 << 10;

/// How deeply `v` nests: a scalar is 1, `[1]` is 2. Iterative, so any input is safe.
pub fn json_depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 1)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        }
    }
    deepest
}

/// Decodes a whole log for a reader outside the engine (`crucible runs`, tools). Blank lines
/// and unknown kinds are skipped; a torn (unparseable) last line without a trailing newline is
/// tolerated; any other malformed line is refused with its line number.
pub fn decode_log(text: &str) -> Result<Vec<Line>, DecodeError> {
    decode(text, false, &[])
}

/// Decodes a log this engine wrote, to fold it back (resume, rerun): as [`decode_log`], but a
/// row the engine could not have written is refused with its line number rather than skipped
/// or folded. The engine writes only the kinds it knows, and one `task_result` per task: an
/// unknown kind, or a second row for a task already settled, was put there by someone else.
/// A line of a kind in `skip` is only checked to be a well-formed line of that kind, and left
/// out: a resumption has no use for the admitted plan, by far the longest line of a large run's
/// log (a third of it at 100,000 tasks).
pub fn decode_own_log(text: &str, skip: &[&str]) -> Result<Vec<Line>, DecodeError> {
    decode(text, true, skip)
}

fn decode(text: &str, own: bool, skip: &[&str]) -> Result<Vec<Line>, DecodeError> {
    let ends_clean = text.ends_with('\n');
    let lines: Vec<&str> = text.split('\n').collect();
    let last = lines.len().saturating_sub(1);
    let decoded = decode_lines(&lines, skip);
    // The lines in order up to the first malformed one, and where each was.
    let (mut out, mut at) = (Vec::with_capacity(decoded.len()), Vec::new());
    let mut malformed = None;
    for (i, decoded) in decoded {
        let refuse = |message: String| DecodeError {
            line: i + 1,
            message,
        };
        match decoded {
            Ok(Read::Line(line)) => {
                out.push(line);
                at.push(i);
            }
            Ok(Read::Unknown) if own => {
                malformed = Some(refuse(
                    "a kind this engine does not write: the log was not written by it alone".into(),
                ));
                break;
            }
            Ok(Read::Unknown | Read::Skipped) => {}
            Err(_) if i == last && !ends_clean => {} // torn by a crash mid-write
            Err(message) => {
                malformed = Some(refuse(message));
                break;
            }
        }
    }
    // A second row for a task comes before the malformed line, if any: it is named first.
    if own {
        let mut settled = std::collections::HashSet::with_capacity(out.len());
        for (line, i) in out.iter().zip(&at) {
            if let Event::TaskResult(r) = &line.event {
                if !settled.insert(r.task.as_str()) {
                    return Err(DecodeError {
                        line: i + 1,
                        message: format!(
                            "a second task_result for `{}`, which an earlier line settled",
                            r.task
                        ),
                    });
                }
            }
        }
    }
    match malformed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Lines decoded per thread at the least: below this a thread costs more than it saves.
const LINES_PER_THREAD: usize = 8192;

/// Every non-blank line decoded, with its index, in order. A long log (a resume of a large run
/// reads every row) is decoded in contiguous parts on every core; the checks that depend on
/// order stay with the caller, which reads the parts in order.
fn decode_lines(lines: &[&str], skip: &[&str]) -> Vec<(usize, Result<Read, String>)> {
    let part = |from: usize, lines: &[&str]| -> Vec<_> {
        (lines.iter().enumerate())
            .filter(|(_, raw)| !raw.trim().is_empty())
            .map(|(i, raw)| (from + i, read_line(raw, skip)))
            .collect()
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(lines.len() / LINES_PER_THREAD).max(1);
    if threads == 1 {
        return part(0, lines);
    }
    let size = lines.len().div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = (lines.chunks(size).enumerate())
            .map(|(k, chunk)| s.spawn(move || part(k * size, chunk)))
            .collect();
        (parts.into_iter())
            .flat_map(|p| p.join().expect("decoding a line does not panic"))
            .collect()
    })
}

/// One line as read. Nearly every line is a `Line`: boxing it would cost an allocation each.
#[allow(clippy::large_enum_variant)]
enum Read {
    Line(Line),
    /// A kind the reader asked to leave out.
    Skipped,
    /// A kind this reader does not know.
    Unknown,
}

/// Decodes one line; `Ok(None)` for a kind this reader does not know.
pub fn decode_line(raw: &str) -> Result<Option<Line>, String> {
    Ok(match read_line(raw, &[])? {
        Read::Line(line) => Some(line),
        Read::Skipped | Read::Unknown => None,
    })
}

fn read_line(raw: &str, skip: &[&str]) -> Result<Read, String> {
    /// The envelope alone: the event's own fields are skipped here and read once, straight
    /// into the event's type below (no map of values built and walked again per line).
    #[derive(Deserialize)]
    struct Envelope {
        v: Option<Value>,
        ts: Option<Value>,
        kind: Option<Value>,
    }
    let env: Envelope = serde_json::from_str(raw).map_err(|e| match e.is_data() {
        // Well-formed JSON of another shape (every field here takes any value).
        true => "not a JSON object".to_string(),
        false => format!("not JSON: {e}"),
    })?;
    if let Some(ver) = env.v {
        if ver.as_u64() != Some(u64::from(WIRE_VERSION)) {
            return Err(format!("unsupported wire version {ver}"));
        }
    }
    let ts = match env.ts {
        Some(Value::String(ts)) => ts,
        _ => String::new(),
    };
    let kind = env
        .kind
        .as_ref()
        .and_then(Value::as_str)
        .ok_or("no `kind`")?;
    if skip.contains(&kind) {
        return Ok(Read::Skipped);
    }
    fn read<T: serde::de::DeserializeOwned>(raw: &str) -> serde_json::Result<T> {
        serde_json::from_str(raw)
    }
    let event = match kind {
        "start" => read(raw).map(Event::Start),
        "plan_admitted" => read(raw).map(Event::PlanAdmitted),
        "task_result" => read(raw).map(Event::TaskResult),
        "asks_emitted" => read(raw).map(Event::AsksEmitted),
        "decision_opened" => read(raw).map(Event::DecisionOpened),
        "runbook_stage" => read(raw).map(Event::RunbookStage),
        "runbook_stages_closed" => read(raw).map(Event::RunbookStagesClosed),
        "resumed" => read(raw).map(Event::Resumed),
        "shutdown" => read(raw).map(Event::Shutdown),
        _ => return Ok(Read::Unknown),
    }
    .map_err(|e| format!("bad `{kind}`: {e}"))?;
    if let Event::TaskResult(TaskResult {
        output: Some(o), ..
    }) = &event
    {
        let depth = json_depth(o);
        if depth > MAX_OUTPUT_DEPTH {
            return Err(format!(
                "the output nests {depth} deep, over the bound of {MAX_OUTPUT_DEPTH}"
            ));
        }
    }
    Ok(Read::Line(Line { ts, event }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shutdown() -> Event {
        Event::Shutdown(Shutdown {
            outcome: Outcome::Finished,
            ceiling: None,
            reason: None,
            verdict: Verdict::Valid,
            spent_usd: 0.0,
            elapsed_secs: 1.5,
        })
    }

    #[test]
    fn lines_round_trip_with_envelope() {
        let line = encode(&shutdown(), "2026-11-30T00:00:00Z");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["v"], 1);
        assert_eq!(v["kind"], "shutdown");
        assert_eq!(v["outcome"], "finished");
        let back = decode_line(&line).unwrap().unwrap();
        assert_eq!(back.event, shutdown());
        assert_eq!(back.ts, "2026-11-30T00:00:00Z");
    }

    #[test]
    fn torn_last_line_is_tolerated_but_not_a_torn_middle() {
        let good = encode(&shutdown(), "t");
        let torn = format!("{good}\n{{\"v\":1,\"kind\":\"task_re");
        assert_eq!(decode_log(&torn).unwrap().len(), 1);
        let bad = format!("{{oops\n{good}\n");
        let err = decode_log(&bad).unwrap_err();
        assert_eq!(err.line, 1);
    }

    #[test]
    fn unknown_kinds_are_skipped() {
        let log = "{\"v\":1,\"kind\":\"note\",\"ts\":\"t\",\"msg\":\"hi\"}\n";
        assert!(decode_log(log).unwrap().is_empty());
    }

    #[test]
    fn the_engine_refuses_rows_it_could_not_have_written() {
        let good = encode(&shutdown(), "t");
        let unknown = format!("{good}\n{{\"v\":1,\"kind\":\"note\",\"ts\":\"t\"}}\n");
        assert_eq!(decode_own_log(&unknown, &[]).unwrap_err().line, 2);
        let row = encode(&Event::TaskResult(TaskResult::new("a", Status::Pass)), "t");
        let twice = format!("{row}\n{good}\n{row}\n");
        assert_eq!(decode_log(&twice).unwrap().len(), 3);
        let err = decode_own_log(&twice, &[]).unwrap_err();
        assert_eq!(err.line, 3);
        assert!(
            err.message.contains("second task_result"),
            "{}",
            err.message
        );
    }

    // A log long enough to be decoded in parts on every core reads as it would line by line:
    // every row in order, a kind asked to be left out left out but still checked, and each
    // refusal naming its own line, the earliest first.
    #[test]
    fn a_long_log_is_decoded_in_order_and_refused_at_the_right_line() {
        let n = 3 * LINES_PER_THREAD;
        let admitted = encode(
            &Event::PlanAdmitted(PlanAdmitted {
                plan_version: 1,
                history_record: String::new(),
                tasks: Vec::new(),
            }),
            "t",
        );
        let rows: Vec<String> = (0..n)
            .map(|i| {
                encode(
                    &Event::TaskResult(TaskResult::new(format!("t{i}"), Status::Pass)),
                    "t",
                )
            })
            .collect();
        let log = format!("{admitted}\n{}\n", rows.join("\n"));
        let all = decode_own_log(&log, &[]).unwrap();
        assert_eq!(all.len(), n + 1);
        assert!(matches!(all[0].event, Event::PlanAdmitted(_)));
        let without = decode_own_log(&log, &["plan_admitted"]).unwrap();
        let names: Vec<&str> = (without.iter())
            .map(|l| match &l.event {
                Event::TaskResult(r) => r.task.as_str(),
                other => panic!("{other:?} was left in"),
            })
            .collect();
        assert_eq!(names, (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>());
        // A left-out line is still a line of the log: malformed, it is refused.
        let torn_admitted = format!("{{\"kind\":\"plan_admitted\",\n{}\n", rows.join("\n"));
        let err = decode_own_log(&torn_admitted, &["plan_admitted"]).unwrap_err();
        assert_eq!(err.line, 1);
        // Far into the last part: a malformed line, and before it a second row for a task.
        let mut lines = rows.clone();
        lines[n - 10] = "{oops".into();
        assert_eq!(
            decode_own_log(&(lines.join("\n") + "\n"), &[])
                .unwrap_err()
                .line,
            n - 9
        );
        lines[n - 20] = rows[5].clone();
        let err = decode_own_log(&(lines.join("\n") + "\n"), &[]).unwrap_err();
        assert_eq!(
            (err.line, err.message.contains("second task_result")),
            (n - 19, true)
        );
    }

    #[test]
    fn depth_is_counted_without_recursion() {
        assert_eq!(json_depth(&serde_json::json!(1)), 1);
        assert_eq!(json_depth(&serde_json::json!({"a": [1, {"b": []}]})), 4);
        let deep: Value =
            serde_json::from_str(&format!("{}{}", "[".repeat(100), "]".repeat(100))).unwrap();
        assert_eq!(json_depth(&deep), 100);
    }
}

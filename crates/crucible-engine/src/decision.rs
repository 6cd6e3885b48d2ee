//! Human-decided routes (RFC-0002:C-HUMAN-DECISION, C-DECISION-EVIDENCE): the decision request,
//! its evidence and digest, the rules every answer is held to, and the seam through which a
//! person answers ([`Decider`]): the CLI's terminal, or a controller the engine polls
//! ([`controller::Controller`]; the wire protocol is in docs/decisions.md).
//!
//! The coordinator builds the evidence when the route is dispatched (`Coord::open_decision`),
//! bounded by the operator's limit before any request opens; the attempt
//! (`attempt::decide_by_person`) opens the request, waits for its answer without spending, and
//! turns the answer or the expiry into the route's output (`graph::route::human_output`).

pub mod controller;

use crate::files::StagedSet;
use crate::graph::Entry;
use crucible_plan::{canonical, QuestionKind, Status, Task};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::SystemTime;

/// The operator's bound on one request's encoded evidence, in bytes.
pub const MAX_EVIDENCE_BYTES_ENV: &str = "CRUCIBLE_MAX_EVIDENCE_BYTES";
pub const DEFAULT_MAX_EVIDENCE_BYTES: u64 = 16 << 20;
/// The operator's bound on an answer's note, in bytes.
pub const MAX_NOTE_BYTES_ENV: &str = "CRUCIBLE_MAX_DECISION_NOTE_BYTES";
pub const DEFAULT_MAX_NOTE_BYTES: usize = 4096;

/// The operator's bounds on human decisions, discoverable in `check`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub evidence_bytes: u64,
    pub note_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            evidence_bytes: DEFAULT_MAX_EVIDENCE_BYTES,
            note_bytes: DEFAULT_MAX_NOTE_BYTES,
        }
    }
}

/// One question as a request carries it: its options are a choice's declared labels or the
/// values a pick offers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuestionView {
    pub id: String,
    /// `noul`, `choice`, `score` or `pick`.
    pub kind: String,
    pub ask: String,
    pub options: Vec<String>,
    /// Whether it takes one or more distinct options.
    pub multiple: bool,
}

/// A decision request (RFC-0002:C-HUMAN-DECISION), identified by its run and route: what the
/// engine opens, and what the controller's open body is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub run: String,
    pub route: String,
    pub questions: Vec<QuestionView>,
    /// The evidence (C-DECISION-EVIDENCE), key-sorted.
    pub evidence: Value,
    /// `sha256:` over the evidence's canonical encoding.
    pub digest: String,
    /// RFC 3339.
    pub opened_at: String,
    /// RFC 3339.
    pub expires_at: String,
    /// The operator's bound on a note.
    pub max_note_bytes: usize,
}

/// A person's answer: question id → the chosen labels or picked values, in the order given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub principal: String,
    /// RFC 3339.
    pub time: String,
    /// The evidence digest the answer names.
    pub digest: String,
    #[serde(default)]
    pub note: Option<String>,
    pub answers: BTreeMap<String, Vec<String>>,
}

/// Where a request stands.
#[derive(Clone, Debug, PartialEq)]
pub enum State {
    Open,
    Answered(Answer),
    Expired,
    Withdrawn,
}

/// A request as the one answering holds it: its state, and the digest and expiry it carries
/// (a request opened earlier for the same run and route keeps its own).
#[derive(Clone, Debug, PartialEq)]
pub struct Polled {
    pub state: State,
    pub digest: String,
    pub expires_at: String,
}

/// Why a request could not be had.
#[derive(Clone, Debug, PartialEq)]
pub enum DecideError {
    /// The one answering could not be reached: retried as a transport failure, and it neither
    /// answers nor expires the request.
    Transport(String),
    /// The one answering refused the request, or said something that is not a request.
    Refused(String),
}

/// Whoever answers a run's human-decided routes. Every request comes from the engine: an
/// answerer never reaches into the run.
pub trait Decider: Send + Sync {
    /// `terminal` or `controller`, as the session log records it.
    fn via(&self) -> &'static str;
    /// Who answers, for `check` and the run's notes.
    fn describe(&self) -> String;
    /// Opens `req`, or, where its run and route already have one, returns that one unchanged.
    fn open(&self, req: &Request) -> Result<Polled, DecideError>;
    /// Where `req` stands, waiting at most until `until` for it to move.
    fn poll(&self, req: &Request, until: SystemTime) -> Result<Polled, DecideError>;
    /// The engine no longer waits on `req`: it settled, or the run stopped (`withdraw`, which
    /// withdraws it so every later answer is refused).
    fn close(&self, req: &Request, withdraw: bool);
}

/// A question's kind as the wire spells it.
fn kind_token(kind: QuestionKind) -> &'static str {
    kind.as_str()
}

/// The questions of `task`'s route as a request carries them, each pick with the values it
/// offers.
pub fn questions(task: &Task, offered: &BTreeMap<String, Vec<String>>) -> Vec<QuestionView> {
    let spec = task.route.as_ref().expect("a route task has a route");
    spec.questions
        .iter()
        .map(|(id, q)| QuestionView {
            id: id.clone(),
            kind: kind_token(q.kind).to_string(),
            ask: q.ask.clone(),
            options: match q.kind {
                QuestionKind::Pick => offered.get(id).cloned().unwrap_or_default(),
                _ => q.labels.iter().map(|l| l.value.clone()).collect(),
            },
            multiple: q.multiple,
        })
        .collect()
}

/// Whether `chosen` answers `q`: exactly one of its options, or for a multiple question one or
/// more distinct ones. `uncertain` is never an option.
pub fn check_question(q: &QuestionView, chosen: &[String]) -> Result<(), String> {
    let id = &q.id;
    if chosen.is_empty() {
        return Err(format!("question `{id}`: no answer"));
    }
    if chosen.len() > 1 && !q.multiple {
        return Err(format!(
            "question `{id}`: {} answers, and it takes one",
            chosen.len()
        ));
    }
    for (n, c) in chosen.iter().enumerate() {
        if !q.options.contains(c) {
            return Err(format!(
                "question `{id}`: {} is not one of its options",
                shown(c)
            ));
        }
        if chosen[..n].contains(c) {
            return Err(format!("question `{id}`: {} chosen twice", shown(c)));
        }
    }
    Ok(())
}

/// Whether `a` is an answer to `req`, whose evidence digest is `digest`: it names that digest,
/// answers every question by [`check_question`] and nothing else, and its note is within the
/// operator's bound.
pub fn check_answer(req: &Request, digest: &str, a: &Answer) -> Result<(), String> {
    if a.digest != digest {
        return Err(format!(
            "the answer names evidence {}, and the request carries {digest}",
            shown(&a.digest)
        ));
    }
    if let Some(n) = a.note.as_ref().filter(|n| n.len() > req.max_note_bytes) {
        return Err(format!(
            "the note is {} bytes, over the bound of {} ({MAX_NOTE_BYTES_ENV})",
            n.len(),
            req.max_note_bytes
        ));
    }
    if let Some(extra) = a
        .answers
        .keys()
        .find(|k| !req.questions.iter().any(|q| &q.id == *k))
    {
        return Err(format!(
            "an answer for undeclared question {}",
            shown(extra)
        ));
    }
    for q in &req.questions {
        check_question(q, a.answers.get(&q.id).map_or(&[], Vec::as_slice))?;
    }
    Ok(())
}

/// A value from outside, quoted for a note.
fn shown(s: &str) -> String {
    let mut q = serde_json::to_string(s).expect("a string serializes");
    if q.len() > 80 {
        let cut = (0..=77).rev().find(|&i| q.is_char_boundary(i)).unwrap_or(0);
        q.truncate(cut);
        q.push_str("…\"");
    }
    q
}

/// What the evidence is built from, as the coordinator sees it when the request opens.
pub struct Parts<'a> {
    /// Each dependency the route's join gives it, with its entry.
    pub inputs: Vec<(String, Entry)>,
    /// The declared-file sets staged for the route.
    pub sets: &'a [StagedSet],
    pub spent_usd: f64,
    pub elapsed_secs: f64,
    pub max_cost: f64,
    pub max_secs: u64,
    /// Each task whose `when` names a question of the route.
    pub gated: Vec<&'a Task>,
    /// Each pick's offered values.
    pub picks: &'a BTreeMap<String, Vec<String>>,
    /// The review template, where the route declares one.
    pub review: Option<&'a str>,
}

/// The evidence (RFC-0002:C-DECISION-EVIDENCE), exactly: each dependency with its status and its
/// declared output where it passed (`inputs`), the declared files staged for the route by
/// producer (`files`: path, size, SHA-256 and content), the run's spend, elapsed time and both
/// ceilings (`run`), each task a `when` on the route starts with the labels that start it
/// (`gated`), each pick's values (`picks`), and the review rendered over all of these
/// (`review`). Over `max_bytes` encoded it fails naming the bound; it is never truncated.
/// Returns the evidence, key-sorted, and its digest.
pub fn evidence(parts: &Parts, max_bytes: u64) -> Result<(Value, String), String> {
    let over = |size: u64| over_bound(max_bytes, size);
    let mut inputs = Map::new();
    for (name, e) in &parts.inputs {
        let output = match e.status {
            Status::Pass => e.output.clone().unwrap_or(Value::Null),
            _ => Value::Null,
        };
        inputs.insert(
            name.clone(),
            json!({"status": e.status.as_str(), "output": output}),
        );
    }
    let mut files = Map::new();
    let mut size: u64 = 0;
    for set in parts.sets {
        let producer = match &set.key {
            Some(k) => format!("{}[{k}]", set.task),
            None => set.task.clone(),
        };
        let mut held = Vec::new();
        for (path, bytes) in read_set(&set.source, max_bytes, &mut size).map_err(|e| match e {
            SetError::Over(n) => over(n),
            SetError::Io(e) => format!("the files of `{producer}` cannot be read: {e}"),
        })? {
            let mut f = Map::new();
            f.insert("path".into(), json!(path));
            f.insert("bytes".into(), json!(bytes.len()));
            f.insert("sha256".into(), json!(canonical::sha256(&bytes)));
            match String::from_utf8(bytes) {
                Ok(text) => f.insert("text".into(), json!(text)),
                Err(e) => f.insert("base64".into(), json!(base64(e.as_bytes()))),
            };
            held.push(Value::Object(f));
        }
        files.insert(producer, Value::Array(held));
    }
    let gated: Vec<Value> = (parts.gated.iter())
        .filter_map(|t| {
            let w = t.when.as_ref()?;
            Some(
                json!({"task": t.name, "kind": t.kind.as_str(), "needs": t.needs,
                        "question": w.question, "labels": w.answers}),
            )
        })
        .collect();
    let mut ev = json!({
        "inputs": inputs,
        "files": files,
        "run": {
            "spent_usd": parts.spent_usd,
            "elapsed_secs": parts.elapsed_secs,
            "max_cost_usd": parts.max_cost,
            "max_secs": parts.max_secs,
        },
        "gated": gated,
        "picks": parts.picks,
    });
    let review = match parts.review {
        Some(t) => Some(
            crate::report::render_escaped(t, &ev, escape_markdown)
                .map_err(|e| format!("the review does not render: {e}"))?,
        ),
        None => None,
    };
    ev["review"] = json!(review);
    seal(&ev, max_bytes)
}

/// Why evidence of at least `size` bytes cannot be put to a person.
pub fn over_bound(max_bytes: u64, size: u64) -> String {
    format!(
        "the evidence is over the bound of {max_bytes} bytes ({MAX_EVIDENCE_BYTES_ENV}) at {size} bytes or more; it is never truncated"
    )
}

/// Evidence key-sorted and its digest (`sha256:` over its canonical encoding), or why it is over
/// the operator's bound.
pub fn seal(ev: &Value, max_bytes: u64) -> Result<(Value, String), String> {
    let ev = canonical::sorted(ev);
    let text = canonical::to_string(&ev);
    if text.len() as u64 > max_bytes {
        return Err(over_bound(max_bytes, text.len() as u64));
    }
    let digest = canonical::sha256(text.as_bytes());
    Ok((ev, digest))
}

enum SetError {
    Over(u64),
    Io(std::io::Error),
}

/// Every regular file of a published set, by its path in the set, in path order; reading stops
/// as soon as the running total passes `max` (the set is the engine's own, so no link is
/// followed).
fn read_set(
    dir: &std::path::Path,
    max: u64,
    total: &mut u64,
) -> Result<Vec<(String, Vec<u8>)>, SetError> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)
            .map_err(SetError::Io)?
            .collect::<Result<_, _>>()
            .map_err(SetError::Io)?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let ty = e.file_type().map_err(SetError::Io)?;
            if ty.is_dir() {
                stack.push((e.path(), path));
            } else if ty.is_file() {
                let len = e.metadata().map_err(SetError::Io)?.len();
                *total += len;
                if *total > max {
                    return Err(SetError::Over(*total));
                }
                out.push((path, std::fs::read(e.path()).map_err(SetError::Io)?));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A value inserted into a review as CommonMark text: every ASCII punctuation character
/// backslash-escaped, so no inserted value makes markup, a link or raw HTML.
pub fn escape_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_ascii_punctuation() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `at` as RFC 3339.
pub fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// An RFC 3339 time, or `None` when it does not parse.
pub fn parse_time(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: &str, options: &[&str], multiple: bool) -> QuestionView {
        QuestionView {
            id: id.into(),
            kind: "choice".into(),
            ask: "?".into(),
            options: options.iter().map(|s| s.to_string()).collect(),
            multiple,
        }
    }

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    // RFC-0002:C-HUMAN-DECISION — exactly one option, or one or more distinct for a multiple
    // question; never `uncertain`, never an option the question lacks.
    #[test]
    fn answers_outside_the_options_are_refused() {
        let single = q("go", &["yes", "no"], false);
        let multi = q("jobs", &["a", "b"], true);
        assert!(check_question(&single, &v(&["yes"])).is_ok());
        assert!(check_question(&multi, &v(&["b", "a"])).is_ok());
        let cases = [
            (&single, v(&[]), "question `go`: no answer"),
            (
                &single,
                v(&["yes", "no"]),
                "question `go`: 2 answers, and it takes one",
            ),
            (
                &single,
                v(&["uncertain"]),
                "question `go`: \"uncertain\" is not one of its options",
            ),
            (
                &multi,
                v(&["a", "a"]),
                "question `jobs`: \"a\" chosen twice",
            ),
            (
                &multi,
                v(&["c"]),
                "question `jobs`: \"c\" is not one of its options",
            ),
        ];
        for (q, chosen, want) in cases {
            assert_eq!(check_question(q, &chosen).unwrap_err(), want);
        }
    }

    // RFC-0002:C-DECISION-EVIDENCE — an answer is bound to the digest it names; notes are bounded.
    #[test]
    fn answers_name_the_digest_and_keep_the_note_bound() {
        let req = Request {
            run: "r".into(),
            route: "gate".into(),
            questions: vec![q("go", &["yes", "no"], false)],
            evidence: json!({}),
            digest: "sha256:aa".into(),
            opened_at: String::new(),
            expires_at: String::new(),
            max_note_bytes: 4,
        };
        let mut a = Answer {
            principal: "p".into(),
            time: String::new(),
            digest: "sha256:aa".into(),
            note: Some("ok".into()),
            answers: [("go".to_string(), v(&["no"]))].into(),
        };
        assert!(check_answer(&req, "sha256:aa", &a).is_ok());
        a.note = Some("too long".into());
        assert!(check_answer(&req, "sha256:aa", &a)
            .unwrap_err()
            .contains("over the bound of 4"));
        a.note = None;
        a.digest = "sha256:bb".into();
        assert_eq!(
            check_answer(&req, "sha256:aa", &a).unwrap_err(),
            "the answer names evidence \"sha256:bb\", and the request carries sha256:aa"
        );
        a.digest = "sha256:aa".into();
        a.answers.insert("other".into(), v(&["x"]));
        assert!(check_answer(&req, "sha256:aa", &a)
            .unwrap_err()
            .contains("undeclared question"));
    }

    #[test]
    fn base64_and_markdown_escaping() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(&[0xff, 0x00, 0x80, 0x01]), "/wCAAQ==");
        assert_eq!(
            escape_markdown("<b>*x*</b> [l](u)"),
            "\\<b\\>\\*x\\*\\<\\/b\\> \\[l\\]\\(u\\)"
        );
    }
}

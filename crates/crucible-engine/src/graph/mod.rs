//! The graph's three ways to branch and repeat, as pure decisions the coordinator calls
//! (RFC-0002:C-SETTLED-JOIN route/`when`/mapping parts, C-REVISE-LOOP, the lane parts of
//! C-PLAYBOOK-BUDGET; RFC-0001-NOTES §5).
//!
//! - [`caps`]: the capability verdict: what truncates the plan, what is skipped with what.
//! - [`fanout`]: a mapped task's instance list from its source, `keyed` inputs, and the node fold.
//! - [`route`]: a route's answers from a source dependency or a decision model, dynamic
//!   options, and the request a decision model receives.
//! - [`when`]: `when`/`answers` decisions and one readiness function for every join.
//! - [`revise`]: loops, their gate, rounds, the `revision` input and the rows a loop writes.
//!
//! Nothing here does I/O or keeps run state beyond what a caller hands in; a failure is a
//! [`GraphError`] whose message is the note the failing task records.

pub mod caps;
pub mod fanout;
pub mod revise;
pub mod route;
pub mod when;

use crucible_plan::Status;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// A settled task as a consumer sees it: the entry a `join = "settled"` task, an epilogue's
/// `outcome` and a revise loop's `review` receive (RFC-0002:C-SETTLED-JOIN).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    pub status: Status,
    pub note: Option<String>,
    pub output: Option<Value>,
    /// Whether a captured file set was staged for this consumer.
    pub files: bool,
    /// Present exactly for a mapped node: each instance's entry under its raw key, empty when the
    /// node produced no instances.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_instance: Option<BTreeMap<String, Entry>>,
}

impl Entry {
    /// An unmapped task's entry.
    pub fn new(status: Status, note: Option<String>, output: Option<Value>, files: bool) -> Entry {
        Entry {
            status,
            note,
            output,
            files,
            per_instance: None,
        }
    }

    /// The entry as JSON, the shape written into inputs.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("an entry always serializes")
    }

    pub fn is_mapped(&self) -> bool {
        self.per_instance.is_some()
    }
}

/// Why a branching decision failed the task it was made for. The message is the task's note.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind}")]
pub struct GraphError {
    /// The task (or instance) that fails.
    pub task: String,
    pub kind: GraphErrorKind,
}

impl GraphError {
    pub(crate) fn new(task: impl Into<String>, kind: GraphErrorKind) -> GraphError {
        GraphError {
            task: task.into(),
            kind,
        }
    }

    /// The note the failing task records.
    pub fn note(&self) -> String {
        self.kind.to_string()
    }
}

/// What went wrong. Messages describe values by type or bounded excerpt, never echo them whole.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GraphErrorKind {
    /// A mapped task's (or a dynamic choice's) source did not pass: a retained failure output is
    /// never a source list.
    #[error("source `{origin}` is absent: `{task}` settled {status}, not pass")]
    AbsentSource {
        origin: String,
        task: String,
        status: Status,
    },
    #[error("source `{origin}` is absent from `{task}`'s output")]
    MissingField { origin: String, task: String },
    #[error("source `{origin}` is {found}, not a list of strings")]
    NotAList { origin: String, found: String },
    #[error("source `{origin}` item {index} is {found}, not a string")]
    NotAString {
        origin: String,
        index: usize,
        found: &'static str,
    },
    #[error("source `{origin}` holds {items} items, more than max_fanout {cap}")]
    OverCap {
        origin: String,
        items: usize,
        cap: u32,
    },
    #[error("source `{origin}` repeats item {item}; each item names one instance")]
    DuplicateItem { origin: String, item: String },
    #[error("keyed field `{field}` is {found}, not an object keyed by item")]
    KeyedNotObject { field: String, found: &'static str },
    /// A source-decided route's dependency gave no usable answer.
    #[error("route source `{origin}` settled {status}, not pass")]
    RouteSourceDidNotPass { origin: String, status: Status },
    #[error("route source `{origin}` output is {found}, not an object")]
    RouteSourceNotObject { origin: String, found: &'static str },
    #[error("question `{question}`: no answer under `{question}` in `{origin}`'s output")]
    NoAnswer { question: String, origin: String },
    #[error("question `{question}`: {found} is not one of its labels")]
    NotALabel { question: String, found: String },
    #[error("question `{question}` is a {kind} question, which only a person answers")]
    HumanOnly {
        question: String,
        kind: &'static str,
    },
    /// A decision model's response broke the protocol.
    #[error("decision response: {0}")]
    BadResponse(String),
    /// A dynamic choice's options could not be read.
    #[error("question `{question}`: options `{origin}` {problem}")]
    BadOptions {
        question: String,
        origin: String,
        problem: String,
    },
    /// A pick's source list could not be offered when the request opens.
    #[error("question `{question}`: {problem}")]
    BadPick { question: String, problem: String },
    /// A person's answer breaks C-HUMAN-DECISION (the orchestrator should have refused it).
    #[error("human answer: {0}")]
    BadHumanAnswer(String),
}

/// The JSON type of a value, for messages.
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The longest text a message quotes verbatim.
const QUOTE_MAX: usize = 64;

/// A string for a message: quoted when short and printable, otherwise described by its length,
/// so a note never carries a long or control-laden value.
pub(crate) struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if s.len() <= QUOTE_MAX && !s.chars().any(char::is_control) {
            write!(f, "\"{s}\"")
        } else {
            write!(f, "a string of {} bytes", s.len())
        }
    }
}

/// A value for a message: a short string quoted, anything else by type.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{}", Shown(s)),
        Value::Bool(b) => format!("the boolean {b}"),
        other => json_type(other).to_string(),
    }
}

/// The output object of a passing entry, if it has one.
pub(crate) fn passing_object(entry: &Entry) -> Option<&Map<String, Value>> {
    if entry.status.is_pass() {
        entry.output.as_ref().and_then(Value::as_object)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // RFC-0002:C-SETTLED-JOIN — an entry carries the output rather than being it; per_instance
    // appears only on a mapped node.
    #[test]
    fn entry_shape() {
        let e = Entry::new(Status::Fail, None, Some(json!({"x": 1})), false);
        assert_eq!(
            e.to_value(),
            json!({"status": "fail", "note": null, "output": {"x": 1}, "files": false})
        );
        let mut m = e.clone();
        m.per_instance = Some(BTreeMap::new());
        assert_eq!(m.to_value()["per_instance"], json!({}));
    }

    #[test]
    fn messages_do_not_echo_long_values() {
        let long = "x".repeat(500);
        assert_eq!(describe(&Value::from(long)), "a string of 500 bytes");
        assert_eq!(describe(&json!("ok")), "\"ok\"");
        assert_eq!(describe(&json!("a\nb")), "a string of 3 bytes");
        assert_eq!(describe(&json!([1])), "a list");
        assert_eq!(describe(&json!(true)), "the boolean true");
    }
}

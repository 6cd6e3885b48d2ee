//! The Plan IR: plain serde types, the only thing the engine accepts.
//!
//! A plan is fully static: parameters are bound, prompts are rendered (external values already
//! inside their markers), schemas are compiled in by content, `otherwise` is expanded. Optional
//! fields are omitted from the canonical JSON when unset so that the encoding is byte-stable.

use crate::vocab::{Direction, Join, QuestionKind, Stage, TaskKind, WorkflowType};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// The only plan version this engine reads or writes.
pub const PLAN_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub version: u32,
    #[serde(rename = "type")]
    pub workflow_type: WorkflowType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_record: Option<String>,
    /// Every declared parameter's bound value, in its declared type; `{}` when none.
    #[serde(default)]
    pub params: BTreeMap<String, Value>,
    pub tasks: Vec<Task>,
}

impl Plan {
    pub fn task(&self, name: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.name == name)
    }

    /// Main-graph tasks in declaration order.
    pub fn main_graph(&self) -> impl Iterator<Item = &Task> {
        self.tasks.iter().filter(|t| t.stage == Stage::Iteration)
    }

    /// Epilogue tasks in declaration order.
    pub fn epilogue(&self) -> impl Iterator<Item = &Task> {
        self.tasks.iter().filter(|t| t.stage == Stage::Epilogue)
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}
fn is_true(b: &bool) -> bool {
    *b
}
fn is_zero(n: &u32) -> bool {
    *n == 0
}
fn yes() -> bool {
    true
}
fn any_need() -> String {
    "any".to_string()
}
fn is_any(s: &str) -> bool {
    s == "any"
}
fn is_all(j: &Join) -> bool {
    *j == Join::All
}
fn is_iteration(s: &Stage) -> bool {
    *s == Stage::Iteration
}

/// One compiled task. Kind-specific fields are `None`/empty on other kinds; validation checks
/// that each kind carries exactly its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub name: String,
    pub kind: TaskKind,

    // ---- graph shape (every kind) ----
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// The subset of `depends_on` wrapped in `optional(...)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub optional: Vec<String>,
    #[serde(default = "any_need", skip_serializing_if = "is_any")]
    pub needs: String,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "is_all")]
    pub join: Join,
    #[serde(default, skip_serializing_if = "is_iteration")]
    pub stage: Stage,
    #[serde(default, skip_serializing_if = "is_false")]
    pub isolated: bool,
    /// Declared output fields and their types (`Any` for the list form, which a
    /// `[[workflow.task]]` table may also write as a list of names).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "emits_from_map_or_list"
    )]
    pub emits: BTreeMap<String, FieldType>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emits_files: Vec<FileDecl>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<FieldRef>,
    /// Instance cap; 0 when unmapped.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_fanout: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keyed: Vec<FieldRef>,
    /// Revise targets, in the order the reviewer names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revise: Vec<String>,
    /// Round cap; 0 when the task revises nothing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_rounds: u32,
    /// Per-attempt limit in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// History depth; 0 when undeclared.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub history: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<When>,

    // ---- agent (agent() and skill()) ----
    /// The rendered prompt: pack text, with outside values between the fixed markers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The skill directory a skill() task was built from (its SKILL.md is in `prompt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill: Option<String>,
    /// The runbook a skill() task runs (its bundle is `skill`, its procedure is in `prompt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runbook: Option<crate::runbook::TaskRunbook>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The durable conversation this task joins; `None` is a fresh one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repair: u32,

    // ---- command and evaluate ----
    /// The shell command, run through `sh -c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,

    // ---- report ----
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportSpec>,

    // ---- route ----
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteSpec>,

    // ---- top_k and engine operations (scored lanes) ----
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
}

impl Task {
    /// A task of `kind` named `name` with every other field at its default.
    pub fn new(name: impl Into<String>, kind: TaskKind) -> Task {
        Task {
            name: name.into(),
            kind,
            depends_on: Vec::new(),
            optional: Vec::new(),
            needs: any_need(),
            required: true,
            join: Join::All,
            stage: Stage::Iteration,
            isolated: false,
            emits: BTreeMap::new(),
            emits_files: Vec::new(),
            over: None,
            max_fanout: 0,
            keyed: Vec::new(),
            revise: Vec::new(),
            max_rounds: 0,
            timeout_secs: None,
            history: 0,
            when: None,
            prompt: None,
            skill: None,
            runbook: None,
            harness: None,
            model: None,
            effort: None,
            sandbox: None,
            session: None,
            repair: 0,
            run: None,
            threshold: None,
            direction: None,
            report: None,
            route: None,
            k: None,
            op: None,
        }
    }

    /// Whether an attempt of this task asks a model (RFC-0002:C-PLAYBOOK-BUDGET): an agent task
    /// or a route a decision model decides.
    pub fn can_spend(&self) -> bool {
        match self.kind {
            TaskKind::Agent => true,
            TaskKind::Route => self
                .route
                .as_ref()
                .is_some_and(|r| r.min_confidence.is_some()),
            _ => false,
        }
    }

    pub fn is_optional_dep(&self, dep: &str) -> bool {
        self.optional.iter().any(|d| d == dep)
    }

    pub fn is_epilogue(&self) -> bool {
        self.stage == Stage::Epilogue
    }
}

/// `emits` as a table of name → type, or the list form: names only, each of type `Any`.
fn emits_from_map_or_list<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, FieldType>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Emits {
        Map(BTreeMap<String, FieldType>),
        List(Vec<String>),
    }
    Ok(match Emits::deserialize(d)? {
        Emits::Map(m) => m,
        Emits::List(names) => names.into_iter().map(|n| (n, FieldType::Any)).collect(),
    })
}

/// `producer.field`, serialized as that dotted string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldRef {
    pub task: String,
    pub field: String,
}

impl fmt::Display for FieldRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.task, self.field)
    }
}

impl FieldRef {
    pub fn parse(s: &str) -> Option<FieldRef> {
        let (task, field) = s.rsplit_once('.')?;
        (!task.is_empty() && !field.is_empty()).then(|| FieldRef {
            task: task.to_string(),
            field: field.to_string(),
        })
    }
}

impl Serialize for FieldRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for FieldRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        FieldRef::parse(&s)
            .ok_or_else(|| de::Error::custom(format!("`{s}` is not `producer.field`")))
    }
}

/// The type a task promises for one emitted field.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldType {
    /// Declared by the list form: present, any JSON type.
    Any,
    String,
    Integer,
    Number,
    Boolean,
    List,
    Object,
    /// One http(s) URL.
    Link,
    /// A list of http(s) URLs.
    Links,
    /// One of these labels.
    Labels(Vec<String>),
    /// A value this JSON Schema (draft 2020-12) admits; held by content.
    Schema(Value),
}

impl FieldType {
    pub fn parse_name(name: &str) -> Option<FieldType> {
        Some(match name {
            "any" => FieldType::Any,
            "string" => FieldType::String,
            "integer" => FieldType::Integer,
            "number" => FieldType::Number,
            "boolean" => FieldType::Boolean,
            "list" => FieldType::List,
            "object" => FieldType::Object,
            "link" => FieldType::Link,
            "links" => FieldType::Links,
            _ => return None,
        })
    }

    pub const NAMES: &'static [&'static str] = &[
        "string", "integer", "number", "boolean", "list", "object", "link", "links",
    ];

    fn name(&self) -> Option<&'static str> {
        Some(match self {
            FieldType::Any => "any",
            FieldType::String => "string",
            FieldType::Integer => "integer",
            FieldType::Number => "number",
            FieldType::Boolean => "boolean",
            FieldType::List => "list",
            FieldType::Object => "object",
            FieldType::Link => "link",
            FieldType::Links => "links",
            FieldType::Labels(_) | FieldType::Schema(_) => return None,
        })
    }
}

/// Serialized as a type name, a list of labels, or `{"schema": "<canonical JSON text>"}` (text
/// so that TOML, which has no null, can carry any schema).
impl Serialize for FieldType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            FieldType::Labels(labels) => labels.serialize(s),
            FieldType::Schema(schema) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("schema", &crate::canonical::to_string(schema))?;
                m.end()
            }
            other => s.serialize_str(other.name().expect("named type")),
        }
    }
}

impl<'de> Deserialize<'de> for FieldType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(name) => FieldType::parse_name(&name)
                .ok_or_else(|| de::Error::custom(format!("unknown field type `{name}`"))),
            Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    other => Err(de::Error::custom(format!("label {other} is not a string"))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(FieldType::Labels),
            Value::Object(map) => schema_from_map(map).map(FieldType::Schema),
            other => Err(de::Error::custom(format!("{other} is not a field type"))),
        }
    }
}

fn schema_from_map<E: de::Error>(mut map: serde_json::Map<String, Value>) -> Result<Value, E> {
    match (map.remove("schema"), map.is_empty()) {
        (Some(Value::String(text)), true) => serde_json::from_str(&text)
            .map_err(|e| E::custom(format!("schema text is not JSON: {e}"))),
        _ => Err(E::custom("expected {\"schema\": \"<json text>\"}")),
    }
}

/// One declared file: a workspace-relative path, optionally with a schema its JSON must meet.
/// Serialized as the bare path, or `{path, schema}` with the schema as canonical JSON text.
#[derive(Clone, Debug, PartialEq)]
pub struct FileDecl {
    pub path: String,
    pub schema: Option<Value>,
}

impl Serialize for FileDecl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match &self.schema {
            None => s.serialize_str(&self.path),
            Some(schema) => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("path", &self.path)?;
                m.serialize_entry("schema", &crate::canonical::to_string(schema))?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for FileDecl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(path) => Ok(FileDecl { path, schema: None }),
            Value::Object(mut map) => {
                let path = match map.remove("path") {
                    Some(Value::String(p)) => p,
                    _ => return Err(de::Error::custom("a file declaration needs `path`")),
                };
                let schema = schema_from_map(map)?;
                Ok(FileDecl {
                    path,
                    schema: Some(schema),
                })
            }
            other => Err(de::Error::custom(format!(
                "{other} is not a file declaration"
            ))),
        }
    }
}

/// `when = route.question` with the answers that run the task (`otherwise` already expanded).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    pub route: String,
    pub question: String,
    pub answers: Vec<String>,
    /// `otherwise` on a choice whose options come from a field: the task also runs on every
    /// option the choice resolves to, which only the decision can know (the DSL reference).
    #[serde(default, skip_serializing_if = "is_false")]
    pub every_option: bool,
}

/// An engine-owned report task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportSpec {
    /// The destination kind, e.g. `slack`.
    pub destination: String,
    /// The template's content, compiled in from the pack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The selected task whose declared output the report carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity_field: Option<String>,
}

/// An engine-owned decision over the dependencies' outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// Question id → question, sorted by id.
    pub questions: BTreeMap<String, Question>,
    /// A decision model answers; labels below this probability are `uncertain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_confidence: Option<f64>,
    /// A dependency's output answers instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub human: bool,
    /// The review template's content (human routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<String>,
    /// Declared JSON files of dependencies the decision model reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    pub kind: QuestionKind,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ask: String,
    /// Declared labels in order (noul: yes, no; score: lowest first). Empty for a choice whose
    /// options come from a field, and for a pick.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<Label>,
    /// A choice's options read from a dependency's field at each decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options_from: Option<FieldRef>,
    /// A pick's source list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<FieldRef>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub multiple: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<String>,
}

impl Question {
    /// A question of `kind` asking `ask`, with no labels, source or drops yet.
    pub fn new(kind: QuestionKind, ask: impl Into<String>) -> Question {
        Question {
            kind,
            ask: ask.into(),
            labels: Vec::new(),
            options_from: None,
            source: None,
            multiple: false,
            drop: Vec::new(),
        }
    }

    /// A yes/no question: a noul's labels are fixed.
    pub fn noul(ask: impl Into<String>) -> Question {
        Question {
            labels: vec![Label::new("yes"), Label::new("no")],
            ..Question::new(QuestionKind::Noul, ask)
        }
    }

    /// Every answer this question can give, `uncertain` included (none for a pick).
    pub fn answers(&self) -> Vec<String> {
        if self.kind == QuestionKind::Pick {
            return Vec::new();
        }
        let mut out: Vec<String> = self.labels.iter().map(|l| l.value.clone()).collect();
        out.push(crate::vocab::UNCERTAIN.to_string());
        out
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Label {
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Label {
    /// A label without a description.
    pub fn new(value: impl Into<String>) -> Label {
        Label {
            value: value.into(),
            description: None,
        }
    }
}

//! A route's answers (RFC-0001-NOTES §5, DSL `route`, `noul`, `choice`, `score`;
//! RFC-0002:C-HUMAN-DECISION output shape): read from a source dependency's output, or from a
//! decision model's probabilities, and the request body that model receives (System One shape),
//! so the HTTP client is transport only.
//!
//! Every answer is `{label, confidence, probabilities}`; a score question adds `score` (null when
//! the label is `uncertain`) and `asked_as`; a choice whose options come from a field adds
//! `options`. Readings chosen (docs/decisions.md):
//! - A source may answer `"uncertain"`, recorded as the uncertain answer (the DSL's score text
//!   says a source's `uncertain` records no score).
//! - `asked_as` is `"score"` for a source (it answered a level) and `"choice"` for a System One
//!   model, whose protocol asks only noul and choice questions.
//! - A model's tie goes to the label declared first: the lowest level for a score, the first
//!   option for a choice.
//! - Dynamic options are checked as labels (1–64 of `[A-Za-z0-9_]`, never `uncertain`); the
//!   64-option bound counts distinct labels after a repeat keeps its first entry.

use super::{describe, json_type, passing_object, Entry, GraphError, GraphErrorKind, Shown};
use crucible_plan::vocab::ceilings::MAX_DYNAMIC_OPTIONS;
use crucible_plan::{Label, Question, QuestionKind, RouteSpec, UNCERTAIN};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashSet};

/// How a score question was put to its decider, recorded under `asked_as`.
pub const ASKED_AS_SCORE: &str = "score";
pub const ASKED_AS_CHOICE: &str = "choice";

/// The options each dynamic choice read at this decision, by question id.
pub type Options = BTreeMap<String, Vec<Label>>;

/// One question's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub label: String,
    pub confidence: f64,
    pub probabilities: BTreeMap<String, f64>,
    /// For a score question: the score (none when uncertain) and how it was asked.
    pub scored: Option<(Option<f64>, &'static str)>,
    /// For a choice whose options come from a field: the options it chose among.
    pub options: Option<Vec<Label>>,
}

impl Answer {
    /// `uncertain`: confidence 0 and an empty distribution.
    pub fn uncertain(question: &Question, asked_as: &'static str) -> Answer {
        Answer {
            label: UNCERTAIN.to_string(),
            confidence: 0.0,
            probabilities: BTreeMap::new(),
            scored: (question.kind == QuestionKind::Score).then_some((None, asked_as)),
            options: None,
        }
    }

    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("label".into(), Value::from(self.label.clone()));
        m.insert("confidence".into(), Value::from(self.confidence));
        m.insert("probabilities".into(), json!(self.probabilities));
        if let Some((score, asked_as)) = self.scored {
            m.insert("score".into(), json!(score));
            m.insert("asked_as".into(), Value::from(asked_as));
        }
        if let Some(options) = &self.options {
            m.insert(
                "options".into(),
                Value::from(options.iter().map(option_value).collect::<Vec<_>>()),
            );
        }
        Value::Object(m)
    }
}

fn option_value(l: &Label) -> Value {
    match &l.description {
        None => Value::from(l.value.clone()),
        Some(d) => json!({"value": l.value, "description": d}),
    }
}

/// The route's output: each answer under its question id.
pub fn output(answers: BTreeMap<String, Answer>) -> Value {
    Value::Object(
        answers
            .into_iter()
            .map(|(id, a)| (id, a.to_value()))
            .collect(),
    )
}

fn refuse_human_only(route: &str, id: &str, q: &Question) -> Result<(), GraphError> {
    let kind = match (q.kind, q.multiple) {
        (QuestionKind::Pick, _) => "pick",
        (_, true) => "multiple choice",
        _ => return Ok(()),
    };
    Err(GraphError::new(
        route,
        GraphErrorKind::HumanOnly {
            question: id.to_string(),
            kind,
        },
    ))
}

/// A question's declared labels; a noul's are always `yes` and `no`.
fn declared(q: &Question) -> Vec<&str> {
    match q.kind {
        QuestionKind::Noul => vec!["yes", "no"],
        _ => q.labels.iter().map(|l| l.value.as_str()).collect(),
    }
}

/// A score from a level's position: 0 for the lowest, 1 for the highest.
fn position_score(index: usize, levels: usize) -> f64 {
    index as f64 / (levels - 1) as f64
}

/// Answers every question from the source dependency's output (`route(source = task)`): a
/// declared label, `uncertain`, or for a noul a boolean, each with probability 1. Any other value
/// fails the route naming the question and the value's type (RFC-0001-NOTES §5).
pub fn from_source(
    route: &str,
    spec: &RouteSpec,
    source: &Entry,
) -> Result<BTreeMap<String, Answer>, GraphError> {
    let name = spec.source.clone().unwrap_or_default();
    let fail = |kind| GraphError::new(route, kind);
    if !source.status.is_pass() {
        return Err(fail(GraphErrorKind::RouteSourceDidNotPass {
            origin: name,
            status: source.status,
        }));
    }
    let Some(out) = passing_object(source) else {
        return Err(fail(GraphErrorKind::RouteSourceNotObject {
            origin: name,
            found: source.output.as_ref().map_or("null", json_type),
        }));
    };
    let mut answers = BTreeMap::new();
    for (id, q) in &spec.questions {
        refuse_human_only(route, id, q)?;
        let value = out.get(id).ok_or_else(|| {
            fail(GraphErrorKind::NoAnswer {
                question: id.clone(),
                origin: name.clone(),
            })
        })?;
        let label = match (q.kind, value) {
            (QuestionKind::Noul, Value::Bool(b)) => if *b { "yes" } else { "no" }.to_string(),
            (_, Value::String(s)) if s == UNCERTAIN => {
                answers.insert(id.clone(), Answer::uncertain(q, ASKED_AS_SCORE));
                continue;
            }
            (_, Value::String(s)) if declared(q).contains(&s.as_str()) => s.clone(),
            (_, other) => {
                return Err(fail(GraphErrorKind::NotALabel {
                    question: id.clone(),
                    found: describe(other),
                }))
            }
        };
        let scored = (q.kind == QuestionKind::Score).then(|| {
            let pos = q.labels.iter().position(|l| l.value == label).unwrap_or(0);
            (Some(position_score(pos, q.labels.len())), ASKED_AS_SCORE)
        });
        answers.insert(
            id.clone(),
            Answer {
                probabilities: BTreeMap::from([(label.clone(), 1.0)]),
                label,
                confidence: 1.0,
                scored,
                options: None,
            },
        );
    }
    Ok(answers)
}

/// Whether `s` may be a label: 1–64 of `[A-Za-z0-9_]`, and not the reserved `uncertain`.
fn is_label(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && s != UNCERTAIN
}

/// Reads a dynamic choice's options from its field at decision time (DSL `choice(options =
/// producer.field)`): the list itself, or on a mapped route (`item`) the list under the item in
/// an object keyed by item. Entries are labels or `{value, description}`; a repeated label keeps
/// its first entry; more than 64 or fewer than two distinct options fail the decision.
pub fn read_options(
    route: &str,
    id: &str,
    question: &Question,
    deps: &BTreeMap<String, Entry>,
    item: Option<&str>,
) -> Result<Vec<Label>, GraphError> {
    let field = question
        .options_from
        .as_ref()
        .expect("read_options is called for a dynamic choice");
    let fail = |problem: String| {
        GraphError::new(
            route,
            GraphErrorKind::BadOptions {
                question: id.to_string(),
                origin: field.to_string(),
                problem,
            },
        )
    };
    let entry = deps.get(&field.task);
    let out = match entry {
        Some(e) if e.status.is_pass() => passing_object(e),
        Some(e) => {
            return Err(fail(format!(
                "is absent: `{}` settled {}",
                field.task, e.status
            )))
        }
        None => return Err(fail(format!("is absent: `{}` did not settle", field.task))),
    };
    let mut value = out
        .and_then(|o| o.get(&field.field))
        .ok_or_else(|| fail(format!("is absent from `{}`'s output", field.task)))?;
    if let Some(key) = item {
        value = value
            .as_object()
            .ok_or_else(|| {
                fail(format!(
                    "is {}, not an object keyed by item",
                    json_type(value)
                ))
            })?
            .get(key)
            .ok_or_else(|| fail(format!("holds no entry for item {}", Shown(key))))?;
    }
    let list = value
        .as_array()
        .ok_or_else(|| fail(format!("is {}, not a list", json_type(value))))?;
    let mut seen = HashSet::new();
    let mut options = Vec::new();
    for (index, entry) in list.iter().enumerate() {
        let label = match entry {
            Value::String(s) => Label {
                value: s.clone(),
                description: None,
            },
            Value::Object(o) => match (o.get("value"), o.get("description")) {
                (Some(Value::String(v)), None | Some(Value::Null)) => Label {
                    value: v.clone(),
                    description: None,
                },
                (Some(Value::String(v)), Some(Value::String(d))) => Label {
                    value: v.clone(),
                    description: Some(d.clone()),
                },
                _ => {
                    return Err(fail(format!(
                        "entry {index} is not {{value: string, description: string}}"
                    )))
                }
            },
            other => {
                return Err(fail(format!(
                    "entry {index} is {}, not a label",
                    json_type(other)
                )))
            }
        };
        if !is_label(&label.value) {
            return Err(fail(format!(
                "entry {index} ({}) is not a label: 1-64 letters, digits or _, not \"uncertain\"",
                Shown(&label.value)
            )));
        }
        if seen.insert(label.value.clone()) {
            options.push(label);
        }
    }
    if options.len() > MAX_DYNAMIC_OPTIONS {
        return Err(fail(format!(
            "holds {} options, more than {MAX_DYNAMIC_OPTIONS}",
            options.len()
        )));
    }
    if options.len() < 2 {
        return Err(fail(format!(
            "holds {} distinct option(s); a choice needs at least two",
            options.len()
        )));
    }
    Ok(options)
}

/// The labels a model chooses among: the declared ones, or the options read for a dynamic choice.
fn labels_for<'a>(id: &str, q: &'a Question, options: &'a Options) -> &'a [Label] {
    if q.options_from.is_some() {
        options.get(id).map(Vec::as_slice).unwrap_or(&[])
    } else {
        &q.labels
    }
}

/// The System One request body (RFC-0001-NOTES §5): `{model, state, questions: {id:
/// {instructions, type, criteria?}}}`. A score is asked as a choice over its levels; a noul
/// carries no criteria.
pub fn request_body(model: &str, spec: &RouteSpec, state: Value, options: &Options) -> Value {
    let questions: Map<String, Value> = spec
        .questions
        .iter()
        .map(|(id, q)| {
            let mut m = Map::new();
            m.insert("instructions".into(), Value::from(q.ask.clone()));
            if q.kind == QuestionKind::Noul {
                m.insert("type".into(), Value::from("noul"));
            } else {
                m.insert("type".into(), Value::from("choice"));
                let criteria: Map<String, Value> = labels_for(id, q, options)
                    .iter()
                    .map(|l| (l.value.clone(), json!(l.description)))
                    .collect();
                m.insert("criteria".into(), Value::Object(criteria));
            }
            (id.clone(), Value::Object(m))
        })
        .collect();
    json!({"model": model, "state": state, "questions": questions})
}

/// A probability as the protocol requires: a finite number in [0, 1].
fn probability(id: &str, label: &str, v: &Value) -> Result<f64, String> {
    match v.as_f64() {
        Some(p) if (0.0..=1.0).contains(&p) => Ok(p),
        Some(_) => Err(format!(
            "question `{id}`: p for {} is outside [0, 1]",
            Shown(label)
        )),
        None => Err(format!(
            "question `{id}`: p for {} is {}, not a number",
            Shown(label),
            json_type(v)
        )),
    }
}

/// Validates a decision model's response against the questions and turns it into answers
/// (RFC-0001-NOTES §5 System One): every question answered exactly once with its own type,
/// every declared label and no other, each p in [0, 1]. The distribution is normalised and the
/// label taken from it alone; below `min_confidence` the label is `uncertain` but the confidence
/// and distribution are kept.
pub fn from_model(
    route: &str,
    spec: &RouteSpec,
    response: &Value,
    options: &Options,
) -> Result<BTreeMap<String, Answer>, GraphError> {
    let bad = |m: String| GraphError::new(route, GraphErrorKind::BadResponse(m));
    let min_confidence = spec.min_confidence.unwrap_or(0.0);
    let given = response
        .get("answers")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("`answers` is absent or not an object".into()))?;
    if let Some(extra) = given.keys().find(|k| !spec.questions.contains_key(*k)) {
        return Err(bad(format!(
            "an answer for undeclared question {}",
            Shown(extra)
        )));
    }
    let mut answers = BTreeMap::new();
    for (id, q) in &spec.questions {
        refuse_human_only(route, id, q)?;
        let a = match given.get(id) {
            None | Some(Value::Null) => return Err(bad(format!("question `{id}`: no answer"))),
            Some(a) => a,
        };
        let want = if q.kind == QuestionKind::Noul {
            "noul"
        } else {
            "choice"
        };
        let got = a.get("type").and_then(Value::as_str);
        if got != Some(want) {
            return Err(bad(format!(
                "question `{id}`: type {} where \"{want}\" was asked",
                a.get("type").map_or("absent".into(), describe)
            )));
        }
        let labels = labels_for(id, q, options);
        // (label, p) in declared order, so a tie goes to the first.
        let raw: Vec<(String, f64)> = if q.kind == QuestionKind::Noul {
            let p = probability(id, "noul", a.get("noul").unwrap_or(&Value::Null)).map_err(bad)?;
            vec![("yes".into(), p), ("no".into(), 1.0 - p)]
        } else {
            let probs = a
                .get("probabilities")
                .and_then(Value::as_object)
                .ok_or_else(|| bad(format!("question `{id}`: `probabilities` is not an object")))?;
            if let Some(undeclared) = probs
                .keys()
                .find(|k| !labels.iter().any(|l| &l.value == *k))
            {
                return Err(bad(format!(
                    "question `{id}`: undeclared label {}",
                    Shown(undeclared)
                )));
            }
            labels
                .iter()
                .map(|l| match probs.get(&l.value) {
                    None => Err(bad(format!(
                        "question `{id}`: label {} is missing",
                        Shown(&l.value)
                    ))),
                    Some(v) => probability(id, &l.value, v)
                        .map(|p| (l.value.clone(), p))
                        .map_err(bad),
                })
                .collect::<Result<_, _>>()?
        };
        let total: f64 = raw.iter().map(|(_, p)| p).sum();
        if total <= 0.0 {
            return Err(bad(format!("question `{id}`: every probability is 0")));
        }
        let normal: Vec<(String, f64)> = raw.into_iter().map(|(l, p)| (l, p / total)).collect();
        let (mut top, mut confidence) = (0, normal[0].1);
        for (i, (_, p)) in normal.iter().enumerate().skip(1) {
            if *p > confidence {
                (top, confidence) = (i, *p);
            }
        }
        let certain = confidence >= min_confidence;
        let label = if certain {
            normal[top].0.clone()
        } else {
            UNCERTAIN.to_string()
        };
        let scored = (q.kind == QuestionKind::Score).then(|| {
            let n = normal.len();
            let expected = normal
                .iter()
                .enumerate()
                .map(|(i, (_, p))| p * position_score(i, n))
                .sum::<f64>();
            (certain.then_some(expected), ASKED_AS_CHOICE)
        });
        answers.insert(
            id.clone(),
            Answer {
                label,
                confidence,
                probabilities: normal.into_iter().collect(),
                scored,
                options: q.options_from.is_some().then(|| labels.to_vec()),
            },
        );
    }
    Ok(answers)
}

/// The values a pick offers, read when the request opens (RFC-0002:C-HUMAN-DECISION): a
/// non-empty list of strings in the output of a passing dependency; otherwise the route fails
/// naming the source.
pub fn pick_values(
    route: &str,
    id: &str,
    question: &Question,
    deps: &BTreeMap<String, Entry>,
) -> Result<Vec<String>, GraphError> {
    let source = question
        .source
        .as_ref()
        .expect("pick_values is called for a pick");
    let fail = |problem: String| {
        GraphError::new(
            route,
            GraphErrorKind::BadPick {
                question: id.to_string(),
                problem,
            },
        )
    };
    let values = super::fanout::source_list(source, deps.get(&source.task))
        .map_err(|kind| fail(kind.to_string()))?;
    if values.is_empty() {
        return Err(fail(format!("source `{source}` is an empty list")));
    }
    Ok(values)
}

/// What a person decided, or that the request expired (RFC-0002:C-HUMAN-DECISION).
#[derive(Clone, Debug, PartialEq)]
pub enum HumanDecision {
    Answered {
        principal: String,
        /// RFC 3339.
        time: String,
        /// The evidence digest the answer names.
        digest: String,
        note: Option<String>,
        /// Question id → the chosen labels or picked values, in the order given.
        answers: BTreeMap<String, Vec<String>>,
    },
    Expired {
        time: String,
        digest: String,
    },
}

/// The key a human-decided route's output records its decision under.
pub const DECISION: &str = "decision";
/// The decision outcome of a request that expired unanswered.
pub const EXPIRED: &str = "expired";
/// The decision outcome of an answered request.
pub const ANSWERED: &str = "answered";

/// A human-decided route's output (RFC-0002:C-HUMAN-DECISION): each noul, choice or score as
/// the label with probability 1 (a multiple choice also lists every chosen label under `labels`,
/// the first being the resolved one; a score adds its position score), each pick as the list
/// of values picked, and the decision record under `decision`. An expired request records every
/// question `uncertain` and every pick an empty list. `offered` holds each pick's values as
/// the request offered them.
pub fn human_output(
    route: &str,
    spec: &RouteSpec,
    decision: &HumanDecision,
    offered: &BTreeMap<String, Vec<String>>,
) -> Result<Value, GraphError> {
    let bad = |m: String| GraphError::new(route, GraphErrorKind::BadHumanAnswer(m));
    let mut out = Map::new();
    let answers = match decision {
        HumanDecision::Answered { answers, .. } => Some(answers),
        HumanDecision::Expired { .. } => None,
    };
    if let Some(extra) = answers.and_then(|a| a.keys().find(|k| !spec.questions.contains_key(*k))) {
        return Err(bad(format!(
            "an answer for undeclared question {}",
            Shown(extra)
        )));
    }
    for (id, q) in &spec.questions {
        let Some(chosen) = answers.map(|a| a.get(id).map(Vec::as_slice).unwrap_or(&[])) else {
            let v = match q.kind {
                QuestionKind::Pick => json!([]),
                _ => Answer::uncertain(q, ASKED_AS_SCORE).to_value(),
            };
            out.insert(id.clone(), v);
            continue;
        };
        let mut seen = HashSet::new();
        if let Some(dup) = chosen.iter().find(|c| !seen.insert(c.as_str())) {
            return Err(bad(format!("question `{id}`: {} chosen twice", Shown(dup))));
        }
        let allowed: Vec<&str> = match q.kind {
            QuestionKind::Pick => offered
                .get(id)
                .map(|v| v.iter().map(String::as_str).collect())
                .unwrap_or_default(),
            _ => declared(q),
        };
        if let Some(other) = chosen.iter().find(|c| !allowed.contains(&c.as_str())) {
            return Err(bad(format!(
                "question `{id}`: {} is not one of its options",
                Shown(other)
            )));
        }
        match (chosen.len(), q.multiple) {
            (0, _) => return Err(bad(format!("question `{id}`: no answer"))),
            (1, _) | (_, true) => {}
            (n, false) => return Err(bad(format!("question `{id}`: {n} answers, one allowed"))),
        }
        if q.kind == QuestionKind::Pick {
            out.insert(id.clone(), json!(chosen));
            continue;
        }
        let label = chosen[0].clone();
        let scored = (q.kind == QuestionKind::Score).then(|| {
            let pos = q.labels.iter().position(|l| l.value == label).unwrap_or(0);
            (Some(position_score(pos, q.labels.len())), ASKED_AS_SCORE)
        });
        let answer = Answer {
            probabilities: chosen.iter().map(|c| (c.clone(), 1.0)).collect(),
            label,
            confidence: 1.0,
            scored,
            options: None,
        };
        let mut v = answer.to_value();
        if q.multiple {
            v["labels"] = json!(chosen);
        }
        out.insert(id.clone(), v);
    }
    let record = match decision {
        HumanDecision::Answered {
            principal,
            time,
            digest,
            note,
            ..
        } => json!({"outcome": ANSWERED, "principal": principal, "time": time,
                    "digest": digest, "note": note}),
        HumanDecision::Expired { time, digest } => json!({"outcome": EXPIRED, "principal": null,
                    "time": time, "digest": digest, "note": null}),
    };
    out.insert(DECISION.to_string(), record);
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::{FieldRef, Status};

    fn labels(ls: &[&str]) -> Vec<Label> {
        ls.iter().map(|l| Label::new(*l)).collect()
    }

    fn q(kind: QuestionKind, ls: &[&str]) -> Question {
        Question {
            labels: labels(ls),
            ..Question::new(kind, format!("{kind:?}?"))
        }
    }

    fn spec() -> RouteSpec {
        RouteSpec {
            questions: BTreeMap::from([
                // A noul answers yes/no whether or not the plan spells its labels.
                ("risky".into(), q(QuestionKind::Noul, &[])),
                (
                    "area".into(),
                    q(QuestionKind::Choice, &["docs", "code", "infra"]),
                ),
                ("size".into(), q(QuestionKind::Score, &["s", "m", "l"])),
            ]),
            min_confidence: None,
            source: Some("triage".into()),
            human: false,
            review: None,
            files: Vec::new(),
        }
    }

    fn pass(v: Value) -> Entry {
        Entry::new(Status::Pass, None, Some(v), false)
    }

    // DSL route(source = ...) — each question kind from a source, probability 1.
    #[test]
    fn each_kind_from_a_source() {
        let got = from_source(
            "gate",
            &spec(),
            &pass(json!({"risky": true, "area": "code", "size": "m", "extra": 1})),
        )
        .unwrap();
        assert_eq!(
            output(got),
            json!({
                "risky": {"label": "yes", "confidence": 1.0, "probabilities": {"yes": 1.0}},
                "area": {"label": "code", "confidence": 1.0, "probabilities": {"code": 1.0}},
                "size": {"label": "m", "confidence": 1.0, "probabilities": {"m": 1.0},
                         "score": 0.5, "asked_as": "score"},
            })
        );
        let got = from_source(
            "gate",
            &spec(),
            &pass(json!({"risky": "no", "area": "uncertain", "size": "l"})),
        )
        .unwrap();
        assert_eq!(got["risky"].label, "no");
        assert_eq!(
            got["area"].to_value(),
            json!({"label": "uncertain", "confidence": 0.0, "probabilities": {}})
        );
        assert_eq!(got["size"].scored, Some((Some(1.0), ASKED_AS_SCORE)));
        let got = from_source(
            "gate",
            &spec(),
            &pass(json!({"risky": false, "area": "docs", "size": "uncertain"})),
        )
        .unwrap();
        assert_eq!(got["risky"].label, "no");
        assert_eq!(got["size"].to_value()["score"], Value::Null);
    }

    // DSL route(source) — any other value fails the route, naming the question and the type.
    #[test]
    fn other_source_values_fail() {
        let base = json!({"risky": true, "area": "code", "size": "m"});
        let table = [
            (
                "risky",
                json!(1),
                "question `risky`: a number is not one of its labels",
            ),
            (
                "risky",
                json!("maybe"),
                "question `risky`: \"maybe\" is not one of its labels",
            ),
            (
                "area",
                json!(true),
                "question `area`: the boolean true is not one of its labels",
            ),
            (
                "area",
                Value::from("x".repeat(300)),
                "question `area`: a string of 300 bytes is not one of its labels",
            ),
            (
                "size",
                json!(["s"]),
                "question `size`: a list is not one of its labels",
            ),
        ];
        for (id, v, want) in table {
            let mut out = base.clone();
            out[id] = v;
            let e = from_source("gate", &spec(), &pass(out)).unwrap_err();
            assert_eq!((e.task.as_str(), e.note()), ("gate", want.to_string()));
        }
        let mut out = base.clone();
        out.as_object_mut().unwrap().remove("area");
        assert_eq!(
            from_source("gate", &spec(), &pass(out)).unwrap_err().note(),
            "question `area`: no answer under `area` in `triage`'s output"
        );
        let failed = Entry::new(Status::Fail, None, Some(base), false);
        assert_eq!(
            from_source("gate", &spec(), &failed).unwrap_err().note(),
            "route source `triage` settled fail, not pass"
        );
        assert_eq!(
            from_source("gate", &spec(), &pass(json!([1])))
                .unwrap_err()
                .note(),
            "route source `triage` output is a list, not an object"
        );
    }

    fn model_spec(min: f64) -> RouteSpec {
        RouteSpec {
            min_confidence: Some(min),
            source: None,
            ..spec()
        }
    }

    fn response() -> Value {
        json!({"answers": {
            "risky": {"type": "noul", "noul": 0.8},
            "area": {"type": "choice", "probabilities": {"docs": 0.2, "code": 0.2, "infra": 0.4}},
            "size": {"type": "choice", "probabilities": {"s": 0.25, "m": 0.25, "l": 0.0}},
        }})
    }

    // RFC-0001-NOTES §5 — normalise, label from probabilities alone, lowest level on a tie,
    // expected-position score.
    #[test]
    fn model_answers_are_normalised() {
        let got = from_model("gate", &model_spec(0.3), &response(), &Options::new()).unwrap();
        let risky = &got["risky"];
        assert_eq!(risky.label, "yes");
        assert!((risky.confidence - 0.8).abs() < 1e-12);
        assert!((risky.probabilities["no"] - 0.2).abs() < 1e-12);
        assert_eq!(got["area"].label, "infra");
        assert!((got["area"].confidence - 0.5).abs() < 1e-12);
        let size = &got["size"];
        assert_eq!(size.label, "s"); // tie between s and m: lowest level
        assert_eq!(size.probabilities["s"], 0.5);
        let (score, asked) = size.scored.unwrap();
        assert_eq!(asked, ASKED_AS_CHOICE);
        assert!((score.unwrap() - 0.25).abs() < 1e-12); // 0.5*0 + 0.5*0.5
    }

    // RFC-0001-NOTES §5 — below min_confidence the label is uncertain, the rest is kept.
    #[test]
    fn below_min_confidence_is_uncertain_with_its_distribution() {
        let got = from_model("gate", &model_spec(0.6), &response(), &Options::new()).unwrap();
        assert_eq!(got["risky"].label, "yes");
        let area = got["area"].to_value();
        assert_eq!(area["label"], json!("uncertain"));
        assert_eq!(area["confidence"], json!(0.5));
        assert_eq!(area["probabilities"]["infra"], json!(0.5));
        assert_eq!(got["size"].to_value()["score"], Value::Null);
    }

    // RFC-0001-NOTES §5 — invalid responses fail the task.
    #[test]
    fn invalid_responses_fail() {
        let set = |path: &[&str], v: Value| {
            let mut r = response();
            let mut cur = &mut r["answers"];
            for p in &path[..path.len() - 1] {
                cur = &mut cur[*p];
            }
            cur.as_object_mut()
                .unwrap()
                .insert(path[path.len() - 1].into(), v);
            r
        };
        let mut missing = response();
        missing["answers"].as_object_mut().unwrap().remove("area");
        let mut missing_label = response();
        missing_label["answers"]["area"]["probabilities"]
            .as_object_mut()
            .unwrap()
            .remove("docs");
        let table = [
            (json!({}), "`answers` is absent or not an object"),
            (missing, "question `area`: no answer"),
            (set(&["area"], Value::Null), "question `area`: no answer"),
            (
                set(&["other"], json!({})),
                "an answer for undeclared question \"other\"",
            ),
            (
                set(&["risky", "type"], json!("choice")),
                "question `risky`: type \"choice\" where \"noul\" was asked",
            ),
            (
                set(&["area", "probabilities", "ops"], json!(0.1)),
                "question `area`: undeclared label \"ops\"",
            ),
            (missing_label, "question `area`: label \"docs\" is missing"),
            (
                set(&["risky", "noul"], json!(1.5)),
                "question `risky`: p for \"noul\" is outside [0, 1]",
            ),
            (
                set(&["size", "probabilities", "s"], json!(-0.1)),
                "question `size`: p for \"s\" is outside [0, 1]",
            ),
            (
                set(&["size", "probabilities", "m"], json!("0.2")),
                "question `size`: p for \"m\" is a string, not a number",
            ),
            (
                set(
                    &["area", "probabilities"],
                    json!({"docs": 0, "code": 0, "infra": 0}),
                ),
                "question `area`: every probability is 0",
            ),
        ];
        for (resp, want) in table {
            let e = from_model("gate", &model_spec(0.5), &resp, &Options::new()).unwrap_err();
            assert_eq!(e.note(), format!("decision response: {want}"));
        }
    }

    // RFC-0002:C-HUMAN-DECISION — a model or source never asks a pick or a multiple choice.
    #[test]
    fn human_only_kinds_are_refused() {
        let mut s = spec();
        s.questions.get_mut("area").unwrap().multiple = true;
        let e = from_source(
            "gate",
            &s,
            &pass(json!({"risky": true, "area": "code", "size": "m"})),
        )
        .unwrap_err();
        assert_eq!(
            e.note(),
            "question `area` is a multiple choice question, which only a person answers"
        );
    }

    fn dynamic() -> Question {
        Question {
            options_from: FieldRef::parse("scan.teams"),
            ..q(QuestionKind::Choice, &[])
        }
    }

    fn scan(v: Value) -> BTreeMap<String, Entry> {
        BTreeMap::from([("scan".to_string(), pass(json!({ "teams": v })))])
    }

    // DSL choice(options = producer.field) — read at decision time, first entry wins, bounds.
    #[test]
    fn dynamic_options() {
        let d = dynamic();
        let got = read_options(
            "gate",
            "team",
            &d,
            &scan(json!(["a", {"value": "b", "description": "Bee"}, {"value": "a", "description": "dup"}])),
            None,
        )
        .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].description, None);
        assert_eq!(got[1].description.as_deref(), Some("Bee"));

        let keyed = scan(json!({"x": ["p", "q"], "y": ["r"]}));
        assert_eq!(
            read_options("gate", "team", &d, &keyed, Some("x"))
                .unwrap()
                .len(),
            2
        );
        let many: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
        let table = [
            (scan(json!(["a", "a"])), None, "holds 1 distinct option(s); a choice needs at least two"),
            (scan(json!(many)), None, "holds 65 options, more than 64"),
            (scan(json!("a")), None, "is a string, not a list"),
            (scan(json!(["a", 1])), None, "entry 1 is a number, not a label"),
            (
                scan(json!(["a", "uncertain"])),
                None,
                "entry 1 (\"uncertain\") is not a label: 1-64 letters, digits or _, not \"uncertain\"",
            ),
            (
                scan(json!(["a", {"value": "b", "description": 3}])),
                None,
                "entry 1 is not {value: string, description: string}",
            ),
            (keyed.clone(), Some("y"), "holds 1 distinct option(s); a choice needs at least two"),
            (keyed.clone(), Some("z"), "holds no entry for item \"z\""),
            (
                BTreeMap::from([(
                    "scan".to_string(),
                    Entry::new(Status::Fail, None, Some(json!({"teams": ["a", "b"]})), false),
                )]),
                None,
                "is absent: `scan` settled fail",
            ),
        ];
        for (deps, item, want) in table {
            let e = read_options("gate", "team", &d, &deps, item).unwrap_err();
            assert_eq!(
                e.note(),
                format!("question `team`: options `scan.teams` {want}")
            );
        }
    }

    // RFC-0001-NOTES §5 — the answer records the options; the request shows them as criteria.
    #[test]
    fn dynamic_choice_through_a_model() {
        let spec = RouteSpec {
            questions: BTreeMap::from([("team".into(), dynamic())]),
            min_confidence: Some(0.5),
            source: None,
            human: false,
            review: None,
            files: Vec::new(),
        };
        let opts = Options::from([(
            "team".to_string(),
            vec![
                Label {
                    value: "a".into(),
                    description: Some("Ay".into()),
                },
                Label {
                    value: "b".into(),
                    description: None,
                },
            ],
        )]);
        let body = request_body("m1", &spec, json!({"scan": {}}), &opts);
        assert_eq!(
            body,
            json!({"model": "m1", "state": {"scan": {}}, "questions": {"team": {
                "instructions": "Choice?", "type": "choice", "criteria": {"a": "Ay", "b": null}}}})
        );
        let resp =
            json!({"answers": {"team": {"type": "choice", "probabilities": {"a": 0.3, "b": 0.7}}}});
        let got = from_model("gate", &spec, &resp, &opts).unwrap();
        assert_eq!(
            got["team"].to_value()["options"],
            json!([{"value": "a", "description": "Ay"}, "b"])
        );
        assert_eq!(got["team"].label, "b");
    }

    #[test]
    fn request_body_asks_a_score_as_a_choice_and_a_noul_bare() {
        let body = request_body("m", &model_spec(0.5), json!({}), &Options::new());
        assert_eq!(
            body["questions"]["size"],
            json!({"instructions": "Score?", "type": "choice",
                   "criteria": {"s": null, "m": null, "l": null}})
        );
        assert_eq!(
            body["questions"]["risky"],
            json!({"instructions": "Noul?", "type": "noul"})
        );
    }
    fn human_spec() -> RouteSpec {
        let mut pick = q(QuestionKind::Pick, &[]);
        pick.source = FieldRef::parse("scan.jobs");
        pick.multiple = true;
        let mut multi = q(QuestionKind::Choice, &["a", "b", "c"]);
        multi.multiple = true;
        RouteSpec {
            questions: BTreeMap::from([
                ("go".into(), q(QuestionKind::Noul, &["yes", "no"])),
                ("tags".into(), multi),
                ("size".into(), q(QuestionKind::Score, &["s", "m", "l"])),
                ("jobs".into(), pick),
            ]),
            min_confidence: None,
            source: None,
            human: true,
            review: None,
            files: Vec::new(),
        }
    }

    fn answered(answers: &[(&str, &[&str])]) -> HumanDecision {
        HumanDecision::Answered {
            principal: "user:ann".into(),
            time: "2026-11-30T00:00:00Z".into(),
            digest: "sha256:ab".into(),
            note: None,
            answers: answers
                .iter()
                .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
                .collect(),
        }
    }

    // RFC-0002:C-HUMAN-DECISION — output shape of an answered request.
    #[test]
    fn human_answer_output() {
        let offered = BTreeMap::from([("jobs".to_string(), vec!["j1".into(), "j2".into()])]);
        let got = human_output(
            "gate",
            &human_spec(),
            &answered(&[
                ("go", &["no"]),
                ("tags", &["c", "a"]),
                ("size", &["l"]),
                ("jobs", &["j2"]),
            ]),
            &offered,
        )
        .unwrap();
        assert_eq!(
            got,
            json!({
                "go": {"label": "no", "confidence": 1.0, "probabilities": {"no": 1.0}},
                "tags": {"label": "c", "labels": ["c", "a"], "confidence": 1.0,
                         "probabilities": {"a": 1.0, "c": 1.0}},
                "size": {"label": "l", "confidence": 1.0, "probabilities": {"l": 1.0},
                         "score": 1.0, "asked_as": "score"},
                "jobs": ["j2"],
                "decision": {"outcome": "answered", "principal": "user:ann",
                             "time": "2026-11-30T00:00:00Z", "digest": "sha256:ab", "note": null},
            })
        );
    }

    // RFC-0002:C-HUMAN-DECISION — an expired request records uncertain and empty picks.
    #[test]
    fn human_expiry_output() {
        let got = human_output(
            "gate",
            &human_spec(),
            &HumanDecision::Expired {
                time: "t".into(),
                digest: "d".into(),
            },
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(got["go"]["label"], json!("uncertain"));
        assert_eq!(got["go"]["probabilities"], json!({}));
        assert_eq!(got["size"]["score"], Value::Null);
        assert_eq!(got["jobs"], json!([]));
        assert_eq!(got["decision"]["principal"], Value::Null);
        assert_eq!(got["decision"]["outcome"], json!("expired"));
    }

    #[test]
    fn human_answers_outside_the_rules_are_refused() {
        let offered = BTreeMap::from([("jobs".to_string(), vec!["j1".into()])]);
        let ok: &[(&str, &[&str])] = &[("tags", &["a"]), ("size", &["s"]), ("jobs", &["j1"])];
        let table: Vec<(&str, &[&str], &str)> = vec![
            (
                "go",
                &["uncertain"],
                "question `go`: \"uncertain\" is not one of its options",
            ),
            (
                "go",
                &["yes", "no"],
                "question `go`: 2 answers, one allowed",
            ),
            ("go", &[], "question `go`: no answer"),
            ("go", &["yes", "yes"], "question `go`: \"yes\" chosen twice"),
        ];
        for (id, vals, want) in table {
            let mut a = ok.to_vec();
            a.push((id, vals));
            let e = human_output("gate", &human_spec(), &answered(&a), &offered).unwrap_err();
            assert_eq!(e.note(), format!("human answer: {want}"));
        }
        let mut a = ok.to_vec();
        a.push(("go", &["yes"]));
        a[2] = ("jobs", &["j9"]);
        let e = human_output("gate", &human_spec(), &answered(&a), &offered).unwrap_err();
        assert_eq!(
            e.note(),
            "human answer: question `jobs`: \"j9\" is not one of its options"
        );
    }

    // RFC-0002:C-HUMAN-DECISION — a pick's source must hold a non-empty list of strings.
    #[test]
    fn pick_values_from_a_passing_source() {
        let s = human_spec();
        let jobs = &s.questions["jobs"];
        let deps = |v: Value| BTreeMap::from([("scan".to_string(), pass(json!({ "jobs": v })))]);
        assert_eq!(
            pick_values("gate", "jobs", jobs, &deps(json!(["x", "y"]))).unwrap(),
            ["x", "y"]
        );
        assert_eq!(
            pick_values("gate", "jobs", jobs, &deps(json!([])))
                .unwrap_err()
                .note(),
            "question `jobs`: source `scan.jobs` is an empty list"
        );
        assert_eq!(
            pick_values("gate", "jobs", jobs, &BTreeMap::new())
                .unwrap_err()
                .note(),
            "question `jobs`: source `scan.jobs` is absent: `scan` settled blocked, not pass"
        );
    }
    // DSL route over/keyed — a mapped source route decides each item from its own keyed entry;
    // a task mapped over the same list then reads each item's answer.
    #[test]
    fn a_mapped_source_route_end_to_end() {
        use crate::graph::{fanout, when};
        use crucible_plan::{Join, Task, TaskKind, When};
        let mut gate = Task::new("gate", TaskKind::Route);
        gate.depends_on = vec!["find".into(), "triage".into()];
        gate.over = FieldRef::parse("find.items");
        gate.keyed = vec![FieldRef::parse("triage.risky").unwrap()];
        let spec = RouteSpec {
            questions: BTreeMap::from([("risky".into(), q(QuestionKind::Noul, &[]))]),
            ..spec()
        };
        let triage = json!({"risky": {"a": true, "b": false}});
        let deps = BTreeMap::from([
            ("find".to_string(), pass(json!({"items": ["a", "b"]}))),
            ("triage".to_string(), pass(triage.clone())),
        ]);
        let mut settled = Vec::new();
        for inst in fanout::expand(&gate, &deps).unwrap() {
            let mut inputs = Map::from_iter([("triage".to_string(), triage.clone())]);
            inst.apply(&mut inputs, Join::All);
            let answers = from_source(&inst.name, &spec, &pass(inputs["triage"].clone())).unwrap();
            settled.push((inst.key.clone(), pass(output(answers))));
        }
        let node = fanout::fold(settled);
        assert_eq!(
            node.output.as_ref().unwrap()["b"]["risky"]["label"],
            json!("no")
        );
        let mut fix = Task::new("fix", TaskKind::Command);
        fix.depends_on = vec!["find".into(), "gate".into()];
        fix.over = FieldRef::parse("find.items");
        fix.when = Some(When {
            route: "gate".into(),
            question: "risky".into(),
            answers: vec!["yes".into()],
            every_option: false,
        });
        let view = BTreeMap::from([("gate".to_string(), when::Dep::of(&node))]);
        assert!(when::instance_runs(&fix, "a", &view));
        assert!(!when::instance_runs(&fix, "b", &view));
    }
}

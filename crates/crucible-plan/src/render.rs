//! Renderers: the `[workflow]`/`[[workflow.task]]` TOML form, which round-trips with the JSON
//! plan and pastes into a manifest as is, and mermaid source for people.

use crate::canonical;
use crate::plan::{Plan, Task};
use crate::vocab::TaskKind;

/// The plan's version key, implied in the TOML form.
const PLAN_VERSION_KEY: &str = "version";
use serde::Deserialize;
use serde_json::Value;
use std::fmt::Write;

/// A plan that could not be rendered or read back.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {kind}")]
pub struct RenderError {
    pub context: &'static str,
    pub kind: RenderErrorKind,
}

#[derive(Debug, thiserror::Error)]
pub enum RenderErrorKind {
    #[error("{0}")]
    TomlWrite(#[from] toml::ser::Error),
    #[error("{0}")]
    TomlRead(#[from] toml::de::Error),
    #[error("{0}")]
    Shape(String),
}

/// The plan as a `[workflow]` table with one `[[workflow.task]]` per task: the form a manifest
/// carries inline. The version is implied (there is only one).
pub fn to_toml(plan: &Plan) -> Result<String, RenderError> {
    let err = |kind| RenderError {
        context: "plan → TOML",
        kind,
    };
    let Value::Object(mut top) = canonical::sorted(plan) else {
        unreachable!("a plan serializes to an object")
    };
    top.remove(PLAN_VERSION_KEY);
    let tasks = top.remove("tasks").unwrap_or(Value::Array(Vec::new()));
    if top
        .get("params")
        .is_some_and(|p| p.as_object().is_some_and(|m| m.is_empty()))
    {
        top.remove("params");
    }
    top.insert("task".into(), tasks);
    let mut doc = toml::Table::new();
    let workflow = json_to_toml(Value::Object(top)).map_err(|e| err(RenderErrorKind::Shape(e)))?;
    doc.insert("workflow".into(), workflow);
    toml::to_string(&doc).map_err(|e| err(RenderErrorKind::TomlWrite(e)))
}

/// JSON → TOML by hand: with starlark in the build serde_json has `arbitrary_precision`, and a
/// `serde_json::Value` number serialized through another format becomes a private map.
fn json_to_toml(v: Value) -> Result<toml::Value, String> {
    Ok(match v {
        Value::Null => return Err("TOML has no null".into()),
        Value::Bool(b) => toml::Value::Boolean(b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => toml::Value::Integer(i),
            (None, Some(f)) => toml::Value::Float(f),
            _ => return Err(format!("{n} does not fit TOML")),
        },
        Value::String(s) => toml::Value::String(s),
        Value::Array(xs) => {
            toml::Value::Array(xs.into_iter().map(json_to_toml).collect::<Result<_, _>>()?)
        }
        Value::Object(m) => toml::Value::Table(
            m.into_iter()
                .map(|(k, v)| Ok((k, json_to_toml(v)?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

/// TOML → JSON by hand, for the same reason.
fn toml_to_json(v: toml::Value) -> Value {
    match v {
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        toml::Value::String(s) => Value::String(s),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(xs) => Value::Array(xs.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect())
        }
    }
}

/// Reads the TOML form back into a plan.
pub fn from_toml(text: &str) -> Result<Plan, RenderError> {
    let err = |kind| RenderError {
        context: "TOML → plan",
        kind,
    };
    let table: toml::Table = toml::from_str(text).map_err(|e| err(RenderErrorKind::TomlRead(e)))?;
    let doc = toml_to_json(toml::Value::Table(table));
    let Some(Value::Object(mut wf)) = doc.get("workflow").cloned() else {
        return Err(err(RenderErrorKind::Shape("no [workflow] table".into())));
    };
    let tasks = wf.remove("task").unwrap_or(Value::Array(Vec::new()));
    wf.insert("tasks".into(), tasks);
    wf.insert(PLAN_VERSION_KEY.into(), Value::from(crate::PLAN_VERSION));
    Plan::deserialize(Value::Object(wf)).map_err(|e| err(RenderErrorKind::Shape(e.to_string())))
}

fn node_id(name: &str) -> String {
    // Prefixed: `end` and friends are mermaid keywords.
    format!(
        "t_{}",
        name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_")
    )
}

fn node(t: &Task) -> String {
    let label = format!(
        "{}<br/>{}",
        t.name,
        if t.skill.is_some() {
            "skill"
        } else {
            t.kind.as_str()
        }
    );
    let id = node_id(&t.name);
    match t.kind {
        TaskKind::Agent => format!("{id}[\"{label}\"]"),
        TaskKind::Command => format!("{id}[/\"{label}\"/]"),
        TaskKind::Evaluate => format!("{id}{{{{\"{label}\"}}}}"),
        TaskKind::Route => format!("{id}{{\"{label}\"}}"),
        TaskKind::Report => format!("{id}[[\"{label}\"]]"),
        TaskKind::TopK | TaskKind::Engine => format!("{id}((\"{label}\"))"),
    }
}

/// Mermaid flowchart source: nodes shaped by kind, solid edges for dependencies, dotted ones
/// for optional dependencies, `when` edges labelled `route.question=answers`, revise back-edges
/// labelled with their round cap, and the epilogue in its own subgraph.
pub fn to_mermaid(plan: &Plan) -> String {
    let mut out = String::from("flowchart TD\n");
    for t in plan.main_graph() {
        let _ = writeln!(out, "  {}", node(t));
    }
    if plan.epilogue().next().is_some() {
        out.push_str("  subgraph epilogue\n");
        for t in plan.epilogue() {
            let _ = writeln!(out, "    {}", node(t));
        }
        out.push_str("  end\n");
    }
    for t in &plan.tasks {
        let to = node_id(&t.name);
        for d in &t.depends_on {
            let from = node_id(d);
            match &t.when {
                Some(w) if &w.route == d => {
                    let _ = writeln!(
                        out,
                        "  {from} -- \"{}.{}={}\" --> {to}",
                        w.route,
                        w.question,
                        w.answers.join("|")
                    );
                }
                _ if t.is_optional_dep(d) => {
                    let _ = writeln!(out, "  {from} -.-> {to}");
                }
                _ => {
                    let _ = writeln!(out, "  {from} --> {to}");
                }
            }
        }
        for r in &t.revise {
            let _ = writeln!(
                out,
                "  {to} -. \"revise ≤{}\" .-> {}",
                t.max_rounds,
                node_id(r)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{FieldRef, FieldType, FileDecl, Question, RouteSpec, When};
    use crate::vocab::{Join, Stage, WorkflowType};
    use std::collections::BTreeMap;

    fn sample() -> Plan {
        let mut a = Task::new("draft", TaskKind::Agent);
        a.prompt = Some("write\nit".into());
        a.emits.insert("items".into(), FieldType::List);
        a.emits.insert(
            "verdict".into(),
            FieldType::Labels(vec!["ok".into(), "bad".into()]),
        );
        a.emits.insert(
            "obj".into(),
            FieldType::Schema(serde_json::json!({"type": "object", "required": ["a"]})),
        );
        a.emits_files.push(FileDecl {
            path: "out/r.json".into(),
            schema: Some(serde_json::json!({"type": "array"})),
        });
        a.emits_files.push(FileDecl {
            path: "notes.md".into(),
            schema: None,
        });
        let mut g = Task::new("gate", TaskKind::Route);
        g.depends_on = vec!["draft".into()];
        g.route = Some(RouteSpec {
            questions: BTreeMap::from([("ok".into(), Question::noul("ok?"))]),
            min_confidence: Some(0.7),
            source: None,
            human: false,
            review: None,
            files: vec![],
        });
        let mut m = Task::new("each", TaskKind::Command);
        m.run = Some("true".into());
        m.depends_on = vec!["draft".into(), "gate".into()];
        m.over = Some(FieldRef {
            task: "draft".into(),
            field: "items".into(),
        });
        m.max_fanout = 8;
        m.when = Some(When {
            route: "gate".into(),
            question: "ok".into(),
            answers: vec!["yes".into()],
            every_option: false,
        });
        m.threshold = None;
        let mut e = Task::new("tell", TaskKind::Command);
        e.run = Some("echo".into());
        e.stage = Stage::Epilogue;
        e.join = Join::All;
        e.timeout_secs = Some(90);
        Plan {
            version: crate::PLAN_VERSION,
            workflow_type: WorkflowType::Playbook,
            result: None,
            history_record: Some("draft".into()),
            params: BTreeMap::from([
                ("n".into(), serde_json::json!(3)),
                ("tags".into(), serde_json::json!(["a", "b"])),
            ]),
            tasks: vec![a, g, m, e],
        }
    }

    // RFC-0001:C-WORKFLOW — the TOML form round-trips (plan → TOML → plan equal).
    #[test]
    fn toml_round_trips() {
        let plan = sample();
        let text = to_toml(&plan).unwrap();
        assert!(text.contains("[[workflow.task]]"), "{text}");
        let back = from_toml(&text).unwrap();
        assert_eq!(back, plan);
        assert_eq!(canonical::to_string(&back), canonical::to_string(&plan));
    }

    #[test]
    fn mermaid_shapes_edges_and_epilogue() {
        let mut plan = sample();
        let mut r = Task::new("review", TaskKind::Evaluate);
        r.run = Some("true".into());
        r.depends_on = vec!["draft".into()];
        r.revise = vec!["draft".into()];
        r.max_rounds = 3;
        plan.tasks.push(r);
        let m = to_mermaid(&plan);
        assert!(m.contains("t_gate{\"gate<br/>route\"}"), "{m}");
        assert!(m.contains("t_gate -- \"gate.ok=yes\" --> t_each"), "{m}");
        assert!(m.contains("subgraph epilogue"), "{m}");
        assert!(m.contains("t_review -. \"revise ≤3\" .-> t_draft"), "{m}");
    }

    // RFC-0002:C-PLAYBOOK-RERUN — digests are stable for equal plans and change downstream.
    #[test]
    fn digests_are_stable_and_propagate() {
        let plan = sample();
        let d1 = canonical::task_digests(&plan);
        let d2 = canonical::task_digests(&from_toml(&to_toml(&plan).unwrap()).unwrap());
        assert_eq!(d1, d2);
        let mut edited = plan.clone();
        edited.tasks[0].prompt = Some("write it better".into());
        let d3 = canonical::task_digests(&edited);
        assert_ne!(d1["draft"], d3["draft"]);
        assert_ne!(d1["each"], d3["each"]);
        assert_eq!(d1["tell"], d3["tell"]);
        assert_eq!(
            canonical::plan_digest(&plan),
            canonical::plan_digest(&plan.clone())
        );
    }
}

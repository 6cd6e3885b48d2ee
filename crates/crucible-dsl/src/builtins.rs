//! The constructors, by lane. Each one type-checks its arguments at the call, so an error points
//! at the argument, and converts the values to owned plan data at once.

use crate::ctx::{Args, Pending, WhenDecl, WorkflowDecl, R};
use crate::diag::rules;
use crate::settings;
use crate::signature::ctor;
use crate::values::{
    Marked, OptionalDep, Part, QuestionValue, SchemaValue, SessionValue, TaskRef, WorkflowValue,
    SENTINEL,
};
use crucible_plan::vocab::{ceilings, markers};
use crucible_plan::{
    Direction, FieldRef, FieldType, FileDecl, Join, Label, Question, QuestionKind, ReportSpec,
    RouteSpec, Stage, Task, TaskKind, WorkflowType,
};
use serde_json::Value as Json;
use starlark::collections::SmallMap;
use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::tuple::UnpackTuple;
use starlark::values::{Value, ValueLike};
use std::collections::BTreeMap;

type Kw<'v> = SmallMap<String, Value<'v>>;

/// Registers a task and returns its value.
fn register<'v>(
    a: &Args<'v, '_>,
    eval: &Evaluator<'v, '_, '_>,
    task: Task,
    when: Option<WhenDecl>,
) -> R<Value<'v>> {
    let mut tasks = a.ctx.tasks.borrow_mut();
    if tasks.len() >= a.ctx.limits.max_tasks {
        drop(tasks);
        return Err(a.fail(
            None,
            rules::LIMIT,
            format!("more than {} tasks", a.ctx.limits.max_tasks),
            "split the work into fewer tasks, or launch one run per item".into(),
        ));
    }
    let idx = tasks.len();
    let name = task.name.clone();
    tasks.push(Pending {
        task,
        loc: a.loc.clone(),
        when,
    });
    Ok(eval.heap().alloc(TaskRef { idx, name }))
}

fn name_arg(a: &mut Args) -> R<String> {
    a.req_str("name")
}

/// The arguments every graph task shares.
fn graph(a: &mut Args, t: &mut Task) -> R<Option<WhenDecl>> {
    let (deps, optional) = a.deps("depends_on", true)?;
    t.depends_on = deps;
    t.optional = optional;
    if let Some(n) = a.str("needs")? {
        t.needs = n;
    }
    if let Some(j) = a.str("join")? {
        t.join = Join::parse(&j).ok_or_else(|| {
            a.fail(
                Some("join"),
                rules::ARG,
                format!("join = \"{j}\" is not a join"),
                "use \"all\", \"passed\" or \"settled\"".into(),
            )
        })?;
    }
    if let Some(r) = a.bool("required")? {
        t.required = r;
    }
    if let Some(i) = a.bool("isolated")? {
        t.isolated = i;
    }
    emits(a, t)?;
    emits_files(a, t)?;
    if let Some((_, task, field)) = a.field("over")? {
        t.over = Some(FieldRef { task, field });
    }
    if let Some(n) = a.uint("max_fanout", 1, ceilings::MAX_FANOUT as i64, "over")? {
        t.max_fanout = n;
    }
    t.keyed = a
        .fields("keyed")?
        .into_iter()
        .map(|(task, field)| FieldRef { task, field })
        .collect();
    t.revise = a.tasks("revise")?.into_iter().map(|(_, n)| n).collect();
    if let Some(n) = a.int("max_rounds")? {
        if !(ceilings::MIN_ROUNDS as i64..=ceilings::MAX_ROUNDS as i64).contains(&n) {
            return Err(a.fail(
                Some("max_rounds"),
                "RFC-0002:C-REVISE-LOOP",
                format!(
                    "max_rounds = {n} is outside {} to {}",
                    ceilings::MIN_ROUNDS,
                    ceilings::MAX_ROUNDS
                ),
                format!(
                    "use {} to {} rounds, counting the first",
                    ceilings::MIN_ROUNDS,
                    ceilings::MAX_ROUNDS
                ),
            ));
        }
        t.max_rounds = n as u32;
    }
    t.timeout_secs = a.duration("timeout")?;
    if let Some(s) = a.str("stage")? {
        t.stage = Stage::parse(&s).ok_or_else(|| {
            a.fail(
                Some("stage"),
                rules::ARG,
                format!("stage = \"{s}\" is not a stage"),
                "use \"iteration\" or \"epilogue\"".into(),
            )
        })?;
    }
    if let Some(h) = a.uint(
        "history",
        1,
        ceilings::MAX_HISTORY as i64,
        "RFC-0002:C-RUN-HISTORY",
    )? {
        t.history = h;
    }
    when(a)
}

fn when(a: &mut Args) -> R<Option<WhenDecl>> {
    let w = a.field("when")?;
    let answers = a.str_or_list("answers")?;
    let otherwise = a.bool("otherwise")?.unwrap_or(false);
    let Some((route, _, question)) = w else {
        if answers.is_some() || otherwise {
            return Err(a.fail(
                Some(if otherwise { "otherwise" } else { "answers" }),
                rules::ROUTE,
                "answers and otherwise need `when`".into(),
                "set when = route.question".into(),
            ));
        }
        return Ok(None);
    };
    if otherwise && answers.is_some() {
        return Err(a.fail(
            Some("otherwise"),
            rules::ROUTE,
            "both answers and otherwise".into(),
            "otherwise stands in place of answers: keep one".into(),
        ));
    }
    Ok(Some(WhenDecl {
        route,
        question,
        answers,
        otherwise,
    }))
}

fn field_type<'v>(a: &Args<'v, '_>, v: Value<'v>) -> R<FieldType> {
    if let Some(s) = v.downcast_ref::<SchemaValue>() {
        return Ok(FieldType::Schema(a.ctx.schemas.borrow()[s.idx].clone()));
    }
    if let Some(name) = v.unpack_str() {
        return FieldType::parse_name(name)
            .filter(|t| *t != FieldType::Any)
            .ok_or_else(|| {
                a.fail(
                    Some("emits"),
                    rules::ARG,
                    format!("`{name}` is not a field type"),
                    format!(
                        "use {}, a list of labels, or schema_file(...)",
                        FieldType::NAMES.join(", ")
                    ),
                )
            });
    }
    let labels = a
        .items("emits", v)?
        .into_iter()
        .map(|x| a.as_str("emits", x))
        .collect::<R<Vec<_>>>()?;
    Ok(FieldType::Labels(labels))
}

fn emits(a: &mut Args, t: &mut Task) -> R<()> {
    let Some(v) = a.take("emits") else {
        return Ok(());
    };
    if v.unpack_str().is_none() && crucible_is_dict(v) {
        for (k, ty) in a.entries("emits", v)? {
            let key = a.as_str("emits", k)?;
            let ty = field_type(a, ty)?;
            t.emits.insert(key, ty);
        }
    } else {
        for x in a.items("emits", v)? {
            t.emits.insert(a.as_str("emits", x)?, FieldType::Any);
        }
    }
    Ok(())
}

fn crucible_is_dict(v: Value) -> bool {
    starlark::values::dict::DictRef::from_value(v).is_some()
}

fn emits_files(a: &mut Args, t: &mut Task) -> R<()> {
    let Some(v) = a.take("emits_files") else {
        return Ok(());
    };
    if crucible_is_dict(v) {
        for (k, s) in a.entries("emits_files", v)? {
            let path = a.as_str("emits_files", k)?;
            let schema = if s.is_none() {
                None
            } else {
                match s.downcast_ref::<SchemaValue>() {
                    Some(sv) => Some(a.ctx.schemas.borrow()[sv.idx].clone()),
                    None => {
                        return Err(a.fail(
                            Some("emits_files"),
                            rules::ARG,
                            format!("the value for `{path}` is not schema_file(...) or None"),
                            "map each path to schema_file(\"...\") or None".into(),
                        ))
                    }
                }
            };
            t.emits_files.push(FileDecl { path, schema });
        }
    } else {
        for x in a.items("emits_files", v)? {
            t.emits_files.push(FileDecl {
                path: a.as_str("emits_files", x)?,
                schema: None,
            });
        }
    }
    Ok(())
}

/// Renders prompt text: pack text as is, external values between the markers.
pub fn render<'v>(a: &Args<'v, '_>, arg: &str, v: Value<'v>) -> R<String> {
    let parts = if let Some(m) = v.downcast_ref::<Marked>() {
        m.parts.clone()
    } else {
        vec![Part {
            origin: None,
            text: a.as_str(arg, v)?,
        }]
    };
    let mut out = String::new();
    for p in parts {
        if p.text.contains(SENTINEL) {
            return Err(a.converted_err(arg));
        }
        if markers::carries_marker(&p.text) {
            let whose = p.origin.as_deref().unwrap_or("pack text");
            return Err(a.fail(
                Some(arg),
                rules::PARAMS,
                format!("{whose} carries the external-input marker text"),
                "remove the marker text: a value may not open or close a marked region".into(),
            ));
        }
        match &p.origin {
            None => out.push_str(&p.text),
            Some(origin) => out.push_str(&markers::wrap(origin, &p.text)),
        }
    }
    if out.len() as u64 > a.ctx.limits.max_prompt_bytes {
        return Err(a.fail(
            Some(arg),
            rules::LIMIT,
            format!(
                "the prompt is {} bytes, over the limit of {}",
                out.len(),
                a.ctx.limits.max_prompt_bytes
            ),
            "shorten the prompt or move material into files the task reads".into(),
        ));
    }
    Ok(out)
}

/// The agent-only arguments shared by agent() and skill().
/// `harness`, `model` and `effort` as the source writes them: checked with the same rules as
/// a launch setting, harness and effort stored lowercase.
fn agent_config(a: &mut Args) -> R<(Option<String>, Option<String>, Option<String>)> {
    let mut pick = |arg: &str, list: &[&str]| -> R<Option<String>> {
        let Some(v) = a.str(arg)? else {
            return Ok(None);
        };
        let lower = v.to_ascii_lowercase();
        if list.contains(&lower.as_str()) {
            Ok(Some(lower))
        } else {
            Err(a.fail(
                Some(arg),
                rules::ARG,
                format!("{}(): `{v}` is not a known {arg}", a.ctor),
                format!("use one of {}", list.join(", ")),
            ))
        }
    };
    let harness = pick("harness", settings::HARNESSES)?;
    let effort = pick("effort", settings::EFFORTS)?;
    let model = a.str("model")?;
    if let Some(m) = model.as_deref().filter(|m| !settings::is_model_name(m)) {
        return Err(a.fail(
            Some("model"),
            rules::ARG,
            format!("{}(): `{m}` is not a model name", a.ctor),
            "a model name is 1 to 200 letters, digits and . _ - : / @ [ ], not starting with -"
                .into(),
        ));
    }
    Ok((harness, model, effort))
}

fn agent_args(a: &mut Args, t: &mut Task) -> R<()> {
    (t.harness, t.model, t.effort) = agent_config(a)?;
    t.sandbox = a.str("sandbox")?;
    if let Some(v) = a.take("session") {
        if let Some(s) = v.downcast_ref::<SessionValue>() {
            t.session = Some(s.name.clone());
            t.harness = t.harness.take().or_else(|| s.harness.clone());
            t.model = t.model.take().or_else(|| s.model.clone());
            t.effort = t.effort.take().or_else(|| s.effort.clone());
        } else {
            t.session = Some(a.as_str("session", v)?);
        }
    }
    if let Some(r) = a.uint(
        "repair",
        0,
        ceilings::MAX_REPAIR as i64,
        "RFC-0001:C-WORKFLOW",
    )? {
        t.repair = r;
    }
    Ok(())
}

fn refuse_repair(a: &mut Args) -> R<()> {
    if a.take("repair").is_some() {
        return Err(a.fail(
            Some("repair"),
            "RFC-0001:C-WORKFLOW",
            format!("repair on a {} task", a.ctor),
            "repair resumes an agent's conversation: remove it from command and evaluate tasks"
                .into(),
        ));
    }
    Ok(())
}

fn question_labels<'v>(a: &Args<'v, '_>, arg: &str, v: Value<'v>) -> R<Vec<Label>> {
    if crucible_is_dict(v) {
        a.entries(arg, v)?
            .into_iter()
            .map(|(k, d)| {
                Ok(Label {
                    value: a.as_str(arg, k)?,
                    description: if d.is_none() {
                        None
                    } else {
                        Some(a.as_str(arg, d)?)
                    },
                })
            })
            .collect()
    } else {
        a.items(arg, v)?
            .into_iter()
            .map(|x| {
                Ok(Label {
                    value: a.as_str(arg, x)?,
                    description: None,
                })
            })
            .collect()
    }
}

fn question<'v>(a: &Args<'v, '_>, eval: &Evaluator<'v, '_, '_>, q: Question) -> Value<'v> {
    let mut qs = a.ctx.questions.borrow_mut();
    qs.push(q);
    eval.heap().alloc(QuestionValue { idx: qs.len() - 1 })
}

/// An engine-owned step of the scored loop; each reads only the arguments its table declares.
fn engine_task<'v>(eval: &mut Evaluator<'v, '_, '_>, op: &'static str, kw: Kw<'v>) -> R<Value<'v>> {
    let mut a = Args::new(eval, ctor(op), Vec::new(), kw)?;
    let mut t = Task::new(name_arg(&mut a)?, TaskKind::Engine);
    t.op = Some(op.to_string());
    t.depends_on = a.deps("depends_on", false)?.0;
    for arg in ["score", "tiebreak", "measurement"] {
        if let Some((_, n)) = a.task(arg)? {
            if !t.depends_on.contains(&n) {
                t.depends_on.push(n);
            }
        }
    }
    for (_, n) in a.tasks("evidence")? {
        if !t.depends_on.contains(&n) {
            t.depends_on.push(n);
        }
    }
    if let Some(j) = a.str("join")? {
        t.join = match j.as_str() {
            "all" => Join::All,
            "passed" => Join::Passed,
            _ => {
                return Err(a.fail(
                    Some("join"),
                    rules::ARG,
                    format!("grade join = \"{j}\""),
                    "use \"all\" or \"passed\"".into(),
                ))
            }
        };
    }
    if let Some(v) = a.take("session") {
        t.session = Some(match v.downcast_ref::<SessionValue>() {
            Some(s) => s.name.clone(),
            None => a.as_str("session", v)?,
        });
    }
    register(&a, eval, t, None)
}

#[starlark_module]
pub fn common(builder: &mut GlobalsBuilder) {
    fn agent<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("agent"), Vec::new(), kwargs)?;
        let mut t = Task::new(name_arg(&mut a)?, TaskKind::Agent);
        let p = a.take("prompt");
        let p = a.require("prompt", p)?;
        t.prompt = Some(render(&a, "prompt", p)?);
        agent_args(&mut a, &mut t)?;
        let w = graph(&mut a, &mut t)?;
        register(&a, eval, t, w)
    }

    fn skill<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("skill"), Vec::new(), kwargs)?;
        let mut t = Task::new(name_arg(&mut a)?, TaskKind::Agent);
        let (arg, dir) = match (a.str("skill")?, a.str("runbook")?) {
            (Some(dir), None) => ("skill", dir),
            (None, Some(dir)) => ("runbook", dir),
            (given, _) => {
                return Err(a.fail(
                    None,
                    rules::ARG,
                    format!(
                        "skill() needs {} of `skill` and `runbook`",
                        if given.is_some() {
                            "one, not both,"
                        } else {
                            "one"
                        }
                    ),
                    "pass skill = \"dir\" (a skill or bundle directory) or runbook = \"dir\""
                        .into(),
                ));
            }
        };
        let dir = dir.trim_end_matches('/').to_string();
        if !a.ctx.pack.is_dir(&dir).unwrap_or(false) {
            return Err(a.fail(
                Some(arg),
                rules::FILE,
                format!("skill(): `{dir}` is not a directory below the pack"),
                "name a skill or runbook directory below the pack, reached without links".into(),
            ));
        }
        let instructions = if arg == "runbook" || crate::runbook::is_bundle(&a, &dir) {
            let (text, runbook) = crate::runbook::compile(&a, arg, &dir)?;
            t.runbook = Some(runbook);
            text
        } else {
            a.pack_text("skill", &format!("{dir}/SKILL.md"))?
        };
        let mut prompt = Marked {
            parts: vec![Part {
                origin: None,
                text: instructions,
            }],
        };
        if let Some(args) = a.take("args") {
            let entries = a.entries("args", args)?;
            if !entries.is_empty() {
                prompt.parts.push(Part {
                    origin: None,
                    text: "\n\n## Arguments\n".into(),
                });
            }
            for (k, v) in entries {
                let key = a.as_str("args", k)?;
                prompt.parts.push(Part {
                    origin: None,
                    text: format!("\n- {key}: "),
                });
                if let Some(m) = v.downcast_ref::<Marked>() {
                    prompt.parts.extend(m.parts.iter().cloned());
                } else if let Some(s) = v.unpack_str() {
                    prompt.parts.push(Part {
                        origin: None,
                        text: s.to_string(),
                    });
                } else if v.unpack_i32().is_some()
                    || v.unpack_bool().is_some()
                    || v.get_type() == "float"
                {
                    prompt.parts.push(Part {
                        origin: None,
                        text: v.to_str(),
                    });
                } else {
                    return Err(a.fail(
                        Some("args"),
                        rules::ARG,
                        format!("skill arg `{key}` is a {}", v.get_type()),
                        "pass strings, numbers, booleans or launch values".into(),
                    ));
                }
            }
        }
        let v = eval.heap().alloc(prompt);
        t.prompt = Some(render(&a, "args", v)?);
        t.skill = Some(dir);
        agent_args(&mut a, &mut t)?;
        let w = graph(&mut a, &mut t)?;
        register(&a, eval, t, w)
    }

    fn command<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("command"), Vec::new(), kwargs)?;
        let mut t = Task::new(name_arg(&mut a)?, TaskKind::Command);
        t.run = Some(a.req_str("run")?);
        refuse_repair(&mut a)?;
        let w = graph(&mut a, &mut t)?;
        register(&a, eval, t, w)
    }

    fn evaluate<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("evaluate"), Vec::new(), kwargs)?;
        let mut t = Task::new(name_arg(&mut a)?, TaskKind::Evaluate);
        t.run = Some(a.req_str("run")?);
        t.threshold = a.number("threshold")?;
        t.direction = direction(&mut a)?;
        refuse_repair(&mut a)?;
        let w = graph(&mut a, &mut t)?;
        register(&a, eval, t, w)
    }

    fn report<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("report"), Vec::new(), kwargs)?;
        let mut t = Task::new(name_arg(&mut a)?, TaskKind::Report);
        // A report runs after the main graph settles and selects its result without an edge
        // (RFC-0002:C-REPORTS), so it always compiles into the epilogue.
        t.stage = Stage::Epilogue;
        let dest = a.take("destination");
        let dest = a.require("destination", dest)?;
        let mut kind = None;
        for (k, v) in a.entries("destination", dest)? {
            match a.as_str("destination", k)?.as_str() {
                "kind" => kind = Some(a.as_str("destination", v)?),
                other => return Err(a.fail(Some("destination"), "RFC-0002:C-REPORTS", format!("destination key `{other}`"), "a workflow selects a destination kind only: {\"kind\": \"slack\"}; the controller holds endpoints and credentials".into())),
            }
        }
        let destination = kind.ok_or_else(|| {
            a.fail(
                Some("destination"),
                "RFC-0002:C-REPORTS",
                "destination has no kind".into(),
                "write destination = {\"kind\": \"slack\"}".into(),
            )
        })?;
        let template = match a.str("template")? {
            Some(p) => Some(a.pack_text("template", &p)?),
            None => None,
        };
        let result = a.task("result")?.map(|(_, n)| n);
        let severity_field = a.str("severity_field")?;
        if let Some(r) = a.bool("required")? {
            t.required = r;
        }
        t.report = Some(ReportSpec {
            destination,
            template,
            result,
            severity_field,
        });
        register(&a, eval, t, None)
    }

    fn session<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("session"), Vec::new(), kwargs)?;
        let name = a.req_str("name")?;
        let (harness, model, effort) = agent_config(&mut a)?;
        let s = SessionValue {
            name,
            harness,
            model,
            effort,
        };
        Ok(eval.heap().alloc(s))
    }

    fn param<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("param"), args.items, kwargs)?;
        let v = a.take_pos(0, "name");
        let v = a.require("name", v)?;
        let name = a.as_str("#0", v)?;
        let ctx = a.ctx;
        let Some(value) = ctx.params.get(&name) else {
            let mut d = ctx.diag(
                &a.loc,
                Some("#0"),
                rules::PARAMS,
                format!("`{name}` is not a declared parameter"),
                if ctx.declares_params {
                    "declare it in the params block".into()
                } else {
                    "declare a params block as the source's first statement".into()
                },
            );
            d.did_you_mean =
                crate::diag::did_you_mean(&name, ctx.params.keys().map(String::as_str));
            return Err(ctx.fail(d));
        };
        let heap = eval.heap();
        Ok(match value {
            // Numbers and booleans cannot carry instructions: they are plain values.
            Json::Bool(b) => Value::new_bool(*b),
            Json::Number(n) if n.is_i64() => heap.alloc(n.as_i64().expect("checked")),
            Json::Number(n) => heap.alloc(n.as_f64().unwrap_or_default()),
            Json::String(s) => heap.alloc(Marked {
                parts: vec![Part {
                    origin: Some(format!("param {name}")),
                    text: s.clone(),
                }],
            }),
            other => heap.alloc(Marked {
                parts: vec![Part {
                    origin: Some(format!("param {name}")),
                    text: other.to_string(),
                }],
            }),
        })
    }

    fn prompt_file<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("prompt_file"), args.items, kwargs)?;
        let v = a.take_pos(0, "path");
        let v = a.require("path", v)?;
        let path = a.as_str("#0", v)?;
        let text = a.pack_text("#0", &path)?;
        if markers::carries_marker(&text) {
            return Err(a.fail(
                Some("#0"),
                rules::PARAMS,
                format!("`{path}` carries the external-input marker text"),
                "remove the marker text from the pack file".into(),
            ));
        }
        Ok(eval.heap().alloc(text))
    }

    fn schema_file<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("schema_file"), args.items, kwargs)?;
        let v = a.take_pos(0, "path");
        let v = a.require("path", v)?;
        let path = a.as_str("#0", v)?;
        let text = a.pack_text("#0", &path)?;
        let schema = check_schema(&text).map_err(|why| {
            a.fail(
                Some("#0"),
                rules::SCHEMA,
                format!("`{path}` {why}"),
                "give a valid JSON Schema draft 2020-12 with local $refs only".into(),
            )
        })?;
        let mut schemas = a.ctx.schemas.borrow_mut();
        schemas.push(schema);
        Ok(eval.heap().alloc(SchemaValue {
            idx: schemas.len() - 1,
            path,
        }))
    }

    fn optional<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("optional"), args.items, kwargs)?;
        let v = a.take_pos(0, "task");
        let v = a.require("task", v)?;
        let (idx, name) = a.as_task("#0", v)?;
        Ok(eval.heap().alloc(OptionalDep { idx, name }))
    }

    fn workflow<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("workflow"), args.items, kwargs)?;
        let v = a.take_pos(0, "tasks");
        let v = a.require("tasks", v)?;
        // Errors point at the positional list; passed as `tasks = ...` they fall back to the call.
        let arg = "#0";
        let mut tasks = Vec::new();
        for x in a.items(arg, v)? {
            let (idx, name) = a.as_task(arg, x)?;
            if tasks.contains(&idx) {
                return Err(a.fail(
                    Some(arg),
                    rules::LISTED,
                    format!("task `{name}` is listed twice"),
                    "list each task once".into(),
                ));
            }
            tasks.push(idx);
        }
        // The lane was read from the syntax tree before evaluation; a computed type is refused
        // there, so a literal here always agrees with it.
        if let Some(s) = a.str("type")? {
            if WorkflowType::parse(&s) != Some(a.ctx.lane) {
                return Err(a.fail(
                    Some("type"),
                    rules::LANE,
                    format!(
                        "type = \"{s}\" is not the lane `{}` this source compiles in",
                        a.ctx.lane
                    ),
                    "make [workflow].type and workflow(type = ...) agree".into(),
                ));
            }
        }
        let result = a.task("result")?.map(|t| t.0);
        let history_record = a.task("history_record")?.map(|t| t.0);
        let mut slot = a.ctx.workflow.borrow_mut();
        if slot.is_some() {
            drop(slot);
            return Err(a.fail(
                None,
                rules::LISTED,
                "workflow() is called twice".into(),
                "call workflow() once, as the source's final expression".into(),
            ));
        }
        *slot = Some(WorkflowDecl {
            tasks,
            result,
            history_record,
        });
        Ok(eval.heap().alloc(WorkflowValue))
    }

    /// `str()` refuses an external value: no conversion may yield it as plain text.
    fn str<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        if x.downcast_ref::<Marked>().is_some() {
            let a = Args::new(eval, ctor("str"), vec![x], SmallMap::new())?;
            return Err(a.fail(Some("#0"), rules::PARAMS, "str() of a value from outside the pack".into(), "concatenate the value with + into a prompt; a command reads it from `params` in $CRUCIBLE_INPUTS_FILE".into()));
        }
        if x.unpack_str().is_some() {
            return Ok(x);
        }
        Ok(eval.heap().alloc(x.to_str()))
    }

    /// `repr()` refuses an external value, like `str()`.
    fn repr<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        if x.downcast_ref::<Marked>().is_some() {
            let a = Args::new(eval, ctor("repr"), vec![x], SmallMap::new())?;
            return Err(a.fail(
                Some("#0"),
                rules::PARAMS,
                "repr() of a value from outside the pack".into(),
                "concatenate the value with + into a prompt".into(),
            ));
        }
        Ok(eval.heap().alloc(x.to_repr()))
    }
}

fn direction(a: &mut Args) -> R<Option<Direction>> {
    match a.str("direction")? {
        None => Ok(None),
        Some(d) => Direction::parse(&d).map(Some).ok_or_else(|| {
            a.fail(
                Some("direction"),
                rules::ARG,
                format!("direction = \"{d}\""),
                "use \"lower\" or \"higher\"".into(),
            )
        }),
    }
}

/// Parses and checks a schema file: JSON, draft 2020-12 only, no remote `$ref`.
pub fn check_schema(text: &str) -> Result<Json, String> {
    let schema: Json = serde_json::from_str(text).map_err(|e| format!("is not JSON: {e}"))?;
    if let Some(s) = schema.get("$schema") {
        if s != "https://json-schema.org/draft/2020-12/schema" {
            return Err(format!("declares $schema {s}, not draft 2020-12"));
        }
    }
    fn refs(v: &Json, out: &mut Vec<String>) {
        match v {
            Json::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("$ref" | "$dynamicRef", Json::String(r)) => out.push(r.clone()),
                        _ => refs(x, out),
                    }
                }
            }
            Json::Array(xs) => xs.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    refs(&schema, &mut found);
    if let Some(r) = found.iter().find(|r| !r.starts_with('#')) {
        return Err(format!("references `{r}`, which is not local"));
    }
    jsonschema::draft202012::meta::validate(&schema)
        .map_err(|e| format!("is not a valid 2020-12 schema: {e}"))?;
    jsonschema::draft202012::new(&schema).map_err(|e| format!("does not compile: {e}"))?;
    Ok(schema)
}

#[starlark_module]
pub fn routes(builder: &mut GlobalsBuilder) {
    fn route<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("route"), Vec::new(), kwargs)?;
        let mut t = Task::new(name_arg(&mut a)?, TaskKind::Route);
        let qv = a.take("questions");
        let qv = a.require("questions", qv)?;
        let mut questions = BTreeMap::new();
        for (k, v) in a.entries("questions", qv)? {
            let id = a.as_str("questions", k)?;
            let Some(q) = v.downcast_ref::<QuestionValue>() else {
                return Err(a.fail(
                    Some("questions"),
                    rules::ARG,
                    format!("question `{id}` is a {}", v.get_type()),
                    "map each id to noul(), choice(), score() or pick()".into(),
                ));
            };
            questions.insert(id, a.ctx.questions.borrow()[q.idx].clone());
        }
        let min_confidence = a.number("min_confidence")?;
        let source = a.task("source")?.map(|t| t.1);
        let human = a.bool("human")?.unwrap_or(false);
        let review = match a.str("review")? {
            Some(p) => Some(a.pack_text("review", &p)?),
            None => None,
        };
        let files = a.str_list("files")?.unwrap_or_default();
        let w = graph(&mut a, &mut t)?;
        // A model-decided route asks the broker's decision capability, and `human = True`
        // declares the `human` one the DSL reference has no other spelling for
        // (RFC-0002:C-PLAYBOOK-CAPS, C-HUMAN-DECISION).
        if t.needs == "any" {
            if human {
                t.needs = "human".into();
            } else if min_confidence.is_some() {
                t.needs = "decision".into();
            }
        }
        t.route = Some(RouteSpec {
            questions,
            min_confidence,
            source,
            human,
            review,
            files,
        });
        register(&a, eval, t, w)
    }

    fn noul<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("noul"), Vec::new(), kwargs)?;
        let q = Question {
            drop: a.str_or_list("drop")?.unwrap_or_default(),
            ..Question::noul(a.str("ask")?.unwrap_or_default())
        };
        Ok(question(&a, eval, q))
    }

    fn choice<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("choice"), Vec::new(), kwargs)?;
        let ask = a.str("ask")?.unwrap_or_default();
        let opts = a.take("options");
        let opts = a.require("options", opts)?;
        let (labels, options_from) = match opts.downcast_ref::<crate::values::FieldRefValue>() {
            Some(f) => (
                Vec::new(),
                Some(FieldRef {
                    task: f.task.clone(),
                    field: f.field.clone(),
                }),
            ),
            None => (question_labels(&a, "options", opts)?, None),
        };
        let q = Question {
            labels,
            options_from,
            multiple: a.bool("multiple")?.unwrap_or(false),
            drop: a.str_or_list("drop")?.unwrap_or_default(),
            ..Question::new(QuestionKind::Choice, ask)
        };
        Ok(question(&a, eval, q))
    }

    fn score<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("score"), Vec::new(), kwargs)?;
        let ask = a.str("ask")?.unwrap_or_default();
        let lv = a.take("levels");
        let lv = a.require("levels", lv)?;
        let labels = question_labels(&a, "levels", lv)?;
        let q = Question {
            labels,
            drop: a.str_or_list("drop")?.unwrap_or_default(),
            ..Question::new(QuestionKind::Score, ask)
        };
        Ok(question(&a, eval, q))
    }

    fn pick<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("pick"), Vec::new(), kwargs)?;
        let ask = a.str("ask")?.unwrap_or_default();
        let Some((_, task, field)) = a.field("source")? else {
            return Err(a.fail(
                None,
                rules::ARG,
                "pick() needs `source`".into(),
                "pass source = producer.field".into(),
            ));
        };
        let q = Question {
            source: Some(FieldRef { task, field }),
            multiple: a.bool("multiple")?.unwrap_or(false),
            ..Question::new(QuestionKind::Pick, ask)
        };
        Ok(question(&a, eval, q))
    }
}

#[starlark_module]
pub fn scored(builder: &mut GlobalsBuilder) {
    fn propose<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        engine_task(eval, "propose", kwargs)
    }

    fn apply<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        engine_task(eval, "apply", kwargs)
    }

    fn measure<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        engine_task(eval, "measure", kwargs)
    }

    fn grade<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        engine_task(eval, "grade", kwargs)
    }

    fn decide<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        engine_task(eval, "decide", kwargs)
    }

    fn top_k<'v>(
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("top_k"), Vec::new(), kwargs)?;
        let mut t = Task::new(name_arg(&mut a)?, TaskKind::TopK);
        t.k = a.uint("k", 1, i32::MAX as i64, rules::ARG)?;
        t.direction = direction(&mut a)?;
        t.depends_on = a.deps("depends_on", false)?.0;
        if let Some(r) = a.bool("required")? {
            t.required = r;
        }
        register(&a, eval, t, None)
    }

    /// The built-in propose/apply/measure/decide loop as visible nodes, plus `extra_tasks`.
    fn default_autoresearch<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: Kw<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut a = Args::new(eval, ctor("default_autoresearch"), args.items, kwargs)?;
        let extra = match a.take_pos(0, "extra_tasks") {
            None => Vec::new(),
            Some(v) => a.items("#0", v)?,
        };
        for x in &extra {
            a.as_task("#0", *x)?;
        }
        let mut out = Vec::new();
        let mut prev: Option<String> = None;
        for op in ["propose", "apply", "measure", "decide"] {
            let mut t = Task::new(op, TaskKind::Engine);
            t.op = Some(op.to_string());
            t.depends_on = prev.iter().cloned().collect();
            prev = Some(op.to_string());
            out.push(register(&a, eval, t, None)?);
        }
        out.extend(extra);
        Ok(eval.heap().alloc(out))
    }
}

//! Graph-level validation of a [`Plan`]: every compile-time rule of RFC-0002 and the DSL
//! reference that can be checked on the IR. The DSL compiler, `[[workflow.task]]` TOML plans and
//! the engine's admission all call [`validate`], so a rule lives in exactly one place.
//!
//! Errors are collected, not short-circuited, so an author sees every problem at once; each one
//! names the task and argument, the rule (an RFC clause id where one applies) and the fix.

use crate::plan::{FieldRef, FieldType, Plan, Question, Task};
use crate::validated::Graph;
use crate::vocab::{
    ceilings, markers, Join, QuestionKind, Stage, TaskKind, WorkflowType, RESERVED_INPUTS,
    UNCERTAIN, UNDECLARABLE_OUTPUT_FIELDS,
};
use crate::PLAN_VERSION;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One violated rule.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlanError {
    /// The task the rule concerns; `None` for plan-level rules.
    pub task: Option<String>,
    /// The constructor argument (plan field) at fault, when one is.
    pub arg: Option<String>,
    /// A clause id such as `RFC-0002:C-REVISE-LOOP`, or a short rule id.
    pub rule: String,
    pub message: String,
    pub fix: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: ", self.rule)?;
        if let Some(t) = &self.task {
            write!(f, "task `{t}`")?;
            if let Some(a) = &self.arg {
                write!(f, " ({a})")?;
            }
            write!(f, ": ")?;
        }
        write!(f, "{} (fix: {})", self.message, self.fix)
    }
}

/// Rule ids for rules no RFC clause names.
pub mod rules {
    pub const LANE: &str = "RFC-0002:C-PLAYBOOK-LANE";
    pub const JOIN: &str = "RFC-0002:C-SETTLED-JOIN";
    pub const REVISE: &str = "RFC-0002:C-REVISE-LOOP";
    pub const HISTORY: &str = "RFC-0002:C-RUN-HISTORY";
    pub const REPORTS: &str = "RFC-0002:C-REPORTS";
    pub const HUMAN: &str = "RFC-0002:C-HUMAN-DECISION";
    pub const FILES: &str = "RFC-0002:C-TASK-FILES";
    pub const ROUTE: &str = "RFC-0001:C-ROUTE";
    pub const WORKFLOW: &str = "RFC-0001:C-WORKFLOW";
    pub const NAMES: &str = "names";
    pub const DEPS: &str = "dependencies";
    pub const CYCLE: &str = "cycle";
    pub const EMITS: &str = "emits-types";
    pub const KIND: &str = "kind-fields";
    pub const SESSION: &str = "sessions";
    pub const MAP: &str = "over";
    pub const OPTIONAL: &str = "optional";
    pub const TIMEOUT: &str = "timeout";
    pub const VERSION: &str = "plan-version";
}

/// Every rule the plan breaks; empty when it is valid.
pub fn validate(plan: &Plan) -> Vec<PlanError> {
    checked(plan).0
}

/// Every rule the plan breaks, and its graph: what [`ValidatedPlan`](crate::ValidatedPlan)
/// keeps when there is none.
pub(crate) fn checked(plan: &Plan) -> (Vec<PlanError>, Graph) {
    let mut v = Validator::new(plan);
    v.run();
    (v.errors, v.graph)
}

struct Validator<'a> {
    plan: &'a Plan,
    by_name: BTreeMap<&'a str, &'a Task>,
    graph: Graph,
    errors: Vec<PlanError>,
}

fn is_identifier(s: &str, extra: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || extra.contains(c))
}

/// Whether a schema provably admits only strings (by type, const or enum).
fn schema_is_string(s: &Value) -> bool {
    if s.get("type").and_then(Value::as_str) == Some("string") {
        return true;
    }
    if let Some(c) = s.get("const") {
        return c.is_string();
    }
    if let Some(Value::Array(e)) = s.get("enum") {
        return !e.is_empty() && e.iter().all(Value::is_string);
    }
    false
}

/// Whether a field type provably holds a list of strings.
fn is_string_list(ty: &FieldType) -> bool {
    match ty {
        FieldType::List | FieldType::Links => true,
        FieldType::Schema(s) => {
            s.get("type").and_then(Value::as_str) == Some("array")
                && s.get("items").is_some_and(schema_is_string)
        }
        _ => false,
    }
}

/// The answers a source field can give a question, when its type says; `None` when it cannot
/// answer the question at all. The compiler uses it to expand `otherwise` to reachable answers.
pub fn source_answers(ty: &FieldType, q: &Question) -> Option<BTreeSet<String>> {
    let labels: BTreeSet<String> = q.labels.iter().map(|l| l.value.clone()).collect();
    let bools = || BTreeSet::from(["yes".to_string(), "no".to_string()]);
    let given: BTreeSet<String> = match ty {
        FieldType::Any => return Some(labels),
        FieldType::Boolean if q.kind == QuestionKind::Noul => return Some(bools()),
        FieldType::Labels(l) => l.iter().cloned().collect(),
        FieldType::Schema(s) => {
            if q.kind == QuestionKind::Noul
                && s.get("type").and_then(Value::as_str) == Some("boolean")
            {
                return Some(bools());
            }
            let values: Vec<&Value> = match (s.get("const"), s.get("enum")) {
                (Some(c), _) => vec![c],
                (None, Some(Value::Array(e))) => e.iter().collect(),
                _ => return None,
            };
            let mut out = BTreeSet::new();
            for v in values {
                match v {
                    Value::String(s) => out.insert(s.clone()),
                    Value::Bool(b) if q.kind == QuestionKind::Noul => {
                        out.insert(if *b { "yes" } else { "no" }.to_string())
                    }
                    _ => return None,
                };
            }
            out
        }
        _ => return None,
    };
    given.is_subset(&labels).then_some(given)
}

impl<'a> Validator<'a> {
    fn new(plan: &'a Plan) -> Self {
        let mut by_name = BTreeMap::new();
        for t in &plan.tasks {
            by_name.entry(t.name.as_str()).or_insert(t);
        }
        Validator {
            plan,
            by_name,
            graph: Graph::of(plan),
            errors: Vec::new(),
        }
    }

    fn err(
        &mut self,
        task: Option<&str>,
        arg: Option<&str>,
        rule: &str,
        message: String,
        fix: impl Into<String>,
    ) {
        self.errors.push(PlanError {
            task: task.map(str::to_string),
            arg: arg.map(str::to_string),
            rule: rule.to_string(),
            message,
            fix: fix.into(),
        });
    }

    fn terr(&mut self, t: &Task, arg: &str, rule: &str, message: String, fix: impl Into<String>) {
        self.err(Some(&t.name), Some(arg), rule, message, fix);
    }

    fn run(&mut self) {
        let plan = self.plan;
        if plan.version != PLAN_VERSION {
            self.err(
                None,
                Some("version"),
                rules::VERSION,
                format!("plan version {} is not supported", plan.version),
                format!("write version = {PLAN_VERSION}"),
            );
        }
        self.names();
        for t in &plan.tasks {
            self.deps(t);
            self.kind_fields(t);
            self.lane(t);
            self.emits(t);
            self.mapping(t);
            self.when(t);
            self.timeout(t);
            self.repair_and_session(t);
            if let Some(spec) = &t.route {
                self.route(t, spec);
            }
            self.report(t);
        }
        self.cycles();
        self.sessions();
        self.coverage();
        self.optional();
        self.revise();
        self.plan_level();
    }

    fn names(&mut self) {
        let mut seen = BTreeSet::new();
        for t in &self.plan.tasks {
            if !is_identifier(&t.name, "-") {
                self.terr(t, "name", rules::NAMES, format!("`{}` is not a task name", t.name), "use 1 to 64 letters, digits, `_` or `-`: a dot would read as `producer.field` and `[` `]` name instances");
            }
            if !seen.insert(t.name.as_str()) {
                self.terr(
                    t,
                    "name",
                    rules::NAMES,
                    format!("two tasks are named `{}`", t.name),
                    "give every task a unique name",
                );
            }
        }
    }

    fn deps(&mut self, t: &Task) {
        let mut seen = BTreeSet::new();
        for d in &t.depends_on {
            if RESERVED_INPUTS.contains(&d.as_str()) {
                self.terr(t, "depends_on", rules::JOIN, format!("dependency `{d}` is named after a reserved input"), format!("rename the task `{d}`: the engine writes `{}` itself and would overwrite its entry", RESERVED_INPUTS.join("`, `")));
            }
            if d == &t.name {
                self.terr(
                    t,
                    "depends_on",
                    rules::DEPS,
                    "the task depends on itself".into(),
                    "remove it from its own depends_on",
                );
            } else if !seen.insert(d.as_str()) {
                self.terr(
                    t,
                    "depends_on",
                    rules::DEPS,
                    format!("`{d}` is listed twice"),
                    "list each dependency once",
                );
            }
            match self.by_name.get(d.as_str()) {
                None => {
                    let fix = match did_you_mean(d, self.by_name.keys().copied()) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None => "depend on a task the workflow defines".into(),
                    };
                    self.terr(
                        t,
                        "depends_on",
                        rules::DEPS,
                        format!("unknown task `{d}`"),
                        fix,
                    );
                }
                Some(dep) if t.stage == Stage::Epilogue && dep.stage == Stage::Iteration => {
                    self.terr(t, "depends_on", rules::LANE, format!("epilogue task depends on main-graph task `{d}`"), "drop the dependency: an epilogue task reads the main graph under the reserved input `outcome`");
                }
                Some(dep) if t.stage == Stage::Iteration && dep.stage == Stage::Epilogue => {
                    self.terr(
                        t,
                        "depends_on",
                        rules::LANE,
                        format!("main-graph task depends on epilogue task `{d}`"),
                        "move this task to the epilogue or drop the dependency",
                    );
                }
                Some(dep)
                    if t.required
                        && t.join == Join::All
                        && !dep.required
                        && !t.is_optional_dep(d) =>
                {
                    self.terr(t, "depends_on", rules::WORKFLOW, format!("required task joins `all` on advisory task `{d}`"), "join = \"passed\" or \"settled\", make this task advisory too, or make the dependency required");
                }
                _ => {}
            }
        }
        for o in &t.optional {
            if !t.depends_on.contains(o) {
                self.terr(
                    t,
                    "depends_on",
                    rules::OPTIONAL,
                    format!("optional `{o}` is not a dependency"),
                    "wrap only entries of depends_on in optional()",
                );
            }
        }
        match t.join {
            Join::All => {}
            j if t.depends_on.is_empty() => {
                self.terr(
                    t,
                    "join",
                    rules::JOIN,
                    format!("join = \"{j}\" with no dependency"),
                    "declare at least one dependency, or drop join",
                );
            }
            _ => {}
        }
        if t.join == Join::Settled
            && matches!(t.kind, TaskKind::TopK | TaskKind::Report | TaskKind::Engine)
        {
            self.terr(t, "join", rules::JOIN, format!("join = \"settled\" on a {} task", t.kind), "a reducer, report or engine operation is defined over the passing set: use join = \"all\"");
        }
    }

    fn kind_fields(&mut self, t: &Task) {
        use TaskKind::*;
        let agent = t.kind == Agent;
        let checks: [(&str, bool, bool); 15] = [
            ("prompt", t.prompt.is_some(), agent),
            ("skill", t.skill.is_some(), agent),
            ("runbook", t.runbook.is_some(), agent && t.skill.is_some()),
            ("harness", t.harness.is_some(), agent),
            ("model", t.model.is_some(), agent),
            ("effort", t.effort.is_some(), agent),
            ("sandbox", t.sandbox.is_some(), agent),
            (
                "session",
                t.session.is_some(),
                agent || t.op.as_deref() == Some("propose"),
            ),
            ("repair", t.repair != 0, agent),
            ("run", t.run.is_some(), matches!(t.kind, Command | Evaluate)),
            ("threshold", t.threshold.is_some(), t.kind == Evaluate),
            (
                "direction",
                t.direction.is_some(),
                matches!(t.kind, Evaluate | TopK),
            ),
            ("report", t.report.is_some(), t.kind == Report),
            ("route", t.route.is_some(), t.kind == Route),
            ("k", t.k.is_some(), t.kind == TopK),
        ];
        for (field, set, allowed) in checks {
            if set && !allowed {
                let rule = if field == "repair" {
                    rules::WORKFLOW
                } else {
                    rules::KIND
                };
                self.terr(
                    t,
                    field,
                    rule,
                    format!("`{field}` is not an argument of a {} task", t.kind),
                    format!("remove `{field}`"),
                );
            }
        }
        if t.op.is_some() && t.kind != Engine {
            self.terr(
                t,
                "op",
                rules::KIND,
                format!("`op` on a {} task", t.kind),
                "remove `op`",
            );
        }
        let need = |field: &str, set: bool| (!set).then(|| field.to_string());
        let missing = match t.kind {
            Agent => need("prompt", t.prompt.is_some()),
            Command | Evaluate => need("run", t.run.is_some()),
            Report => need("report", t.report.is_some()),
            Route => need("route", t.route.is_some()),
            TopK => need("k", t.k.is_some()).or_else(|| need("direction", t.direction.is_some())),
            Engine => need("op", t.op.is_some()),
        };
        if let Some(field) = missing {
            self.terr(
                t,
                &field,
                rules::KIND,
                format!("a {} task needs `{field}`", t.kind),
                format!("set `{field}`"),
            );
        }
        if t.kind == Evaluate && t.threshold.is_some() != t.direction.is_some() {
            self.terr(
                t,
                "threshold",
                rules::KIND,
                "threshold and direction go together".into(),
                "set both threshold and direction, or neither",
            );
        }
        if let Some(th) = t.threshold {
            if !th.is_finite() {
                self.terr(
                    t,
                    "threshold",
                    rules::KIND,
                    "threshold is not finite".into(),
                    "use a finite number",
                );
            }
        }
        if t.kind == TopK {
            self.scores(t);
            if t.k == Some(0) {
                self.terr(
                    t,
                    "k",
                    rules::KIND,
                    "k = 0 keeps nothing".into(),
                    "k must be at least 1",
                );
            }
            if t.depends_on.is_empty() {
                self.terr(
                    t,
                    "depends_on",
                    rules::KIND,
                    "top_k reduces no dependency".into(),
                    "list the candidates in depends_on",
                );
            }
        }
        if let Some(p) = &t.prompt {
            if markers::carries_marker(p) && !p.contains(markers::OPEN) {
                self.terr(
                    t,
                    "prompt",
                    rules::KIND,
                    "the prompt carries external-input marker text outside a marked region".into(),
                    "remove the marker text from the pack's prompt",
                );
            }
        }
        if let Some(s) = &t.session {
            if !is_identifier(s, ".-") {
                self.terr(
                    t,
                    "session",
                    rules::SESSION,
                    format!("`{s}` is not a session name"),
                    "use 1 to 64 letters, digits, `.`, `_` or `-`",
                );
            }
        }
    }

    fn lane(&mut self, t: &Task) {
        let ty = self.plan.workflow_type;
        if ty == WorkflowType::Playbook && matches!(t.kind, TaskKind::Engine | TaskKind::TopK) {
            self.terr(t, "kind", rules::LANE, format!("a playbook may not contain a {} task", t.kind), "a playbook runs no engine operation: use a command or evaluate task that grades its own result");
        }
        if ty == WorkflowType::Autoresearch {
            if t.kind == TaskKind::Route {
                self.terr(
                    t,
                    "kind",
                    rules::ROUTE,
                    "route() in an autoresearch workflow".into(),
                    "an autoresearch workflow keeps or discards on its measure: remove the route",
                );
            }
            if t.when.is_some() {
                self.terr(
                    t,
                    "when",
                    rules::ROUTE,
                    "`when` in an autoresearch workflow".into(),
                    "remove `when`",
                );
            }
        }
        if ty != WorkflowType::Playbook {
            if !t.revise.is_empty() {
                self.terr(
                    t,
                    "revise",
                    rules::REVISE,
                    format!("revise in a {ty} workflow"),
                    "revise loops are for playbooks only",
                );
            }
            if t.history != 0 {
                self.terr(
                    t,
                    "history",
                    rules::HISTORY,
                    format!("history in a {ty} workflow"),
                    "history is for playbooks only",
                );
            }
        }
        if t.history > ceilings::MAX_HISTORY {
            self.terr(
                t,
                "history",
                rules::HISTORY,
                format!(
                    "history = {} is outside 1 to {}",
                    t.history,
                    ceilings::MAX_HISTORY
                ),
                format!("read between 1 and {} earlier runs", ceilings::MAX_HISTORY),
            );
        }
    }

    fn emits(&mut self, t: &Task) {
        for (field, ty) in &t.emits {
            if UNDECLARABLE_OUTPUT_FIELDS.contains(&field.as_str()) {
                self.terr(t, "emits", rules::LANE, format!("`{field}` is a reserved output field"), format!("remove `{field}` from emits: it appears only on the attempt that ends the run"));
            } else if !is_identifier(field, "") {
                self.terr(
                    t,
                    "emits",
                    rules::EMITS,
                    format!("`{field}` is not a field name"),
                    "use 1 to 64 letters, digits or `_`",
                );
            }
            if let FieldType::Labels(labels) = ty {
                if labels.is_empty() || labels.iter().any(|l| !is_identifier(l, "")) {
                    self.terr(
                        t,
                        "emits",
                        rules::EMITS,
                        format!("field `{field}`: labels must be 1 to 64 letters, digits or `_`"),
                        "list at least one identifier label",
                    );
                }
            }
        }
        let mut seen = BTreeSet::new();
        for f in &t.emits_files {
            let bad = f.path.starts_with('/')
                || f.path
                    .split('/')
                    .any(|s| s.is_empty() || s == "." || s == "..")
                || f.path.contains('\n')
                || f.path.contains('\0');
            // The workspace's `.git` is the engine's memory link (it names the state path) and
            // its history: never a task's file to publish.
            let git = f.path.split('/').any(|s| s.eq_ignore_ascii_case(".git"));
            if git {
                self.terr(
                    t,
                    "emits_files",
                    rules::FILES,
                    format!("`{}` is inside `.git`, the engine's own", f.path),
                    "declare files of the work, outside `.git`",
                );
            }
            if bad {
                self.terr(
                    t,
                    "emits_files",
                    rules::FILES,
                    format!("`{}` is not a relative path inside the workspace", f.path),
                    "write a workspace-relative path with no `.`, `..` or empty segment",
                );
            }
            if !seen.insert(f.path.as_str()) {
                self.terr(
                    t,
                    "emits_files",
                    rules::FILES,
                    format!("`{}` is declared twice", f.path),
                    "declare each file once",
                );
            }
        }
    }

    fn mapping(&mut self, t: &Task) {
        match (&t.over, t.max_fanout) {
            (None, 0) => {}
            (None, _) => self.terr(
                t,
                "max_fanout",
                rules::MAP,
                "max_fanout without over".into(),
                "set over, or remove max_fanout",
            ),
            (Some(_), n) if n == 0 || n > ceilings::MAX_FANOUT => self.terr(
                t,
                "max_fanout",
                rules::MAP,
                format!(
                    "over needs max_fanout from 1 to {} (got {n})",
                    ceilings::MAX_FANOUT
                ),
                format!("set max_fanout between 1 and {}", ceilings::MAX_FANOUT),
            ),
            _ => {}
        }
        if !t.keyed.is_empty() && t.over.is_none() {
            self.terr(
                t,
                "keyed",
                rules::MAP,
                "keyed without over".into(),
                "keyed narrows dependencies per item: set over too, or remove keyed",
            );
        }
        if let Some(over) = &t.over {
            if !t.depends_on.contains(&over.task) {
                self.terr(
                    t,
                    "over",
                    rules::MAP,
                    format!(
                        "over names `{over}` but `{}` is not a dependency",
                        over.task
                    ),
                    format!("add `{}` to depends_on", over.task),
                );
            } else if let Some(p) = self.by_name.get(over.task.as_str()).copied() {
                self.check_string_list(t, "over", p, &over.field, true);
            }
            if t.session.is_some() {
                self.terr(
                    t,
                    "session",
                    rules::SESSION,
                    "a mapped task cannot share a session".into(),
                    "remove session: instances run concurrently",
                );
            }
        }
        for k in &t.keyed {
            match self.by_name.get(k.task.as_str()).copied() {
                Some(p) if t.depends_on.contains(&k.task) => {
                    if p.over.is_some() {
                        self.terr(
                            t,
                            "keyed",
                            rules::MAP,
                            format!("keyed `{k}` reads a mapped task"),
                            "keyed reads object fields of unmapped dependencies",
                        );
                    }
                    if let Some(ty) = p.emits.get(&k.field) {
                        if !matches!(
                            ty,
                            FieldType::Object | FieldType::Any | FieldType::Schema(_)
                        ) {
                            self.terr(
                                t,
                                "keyed",
                                rules::MAP,
                                format!("keyed `{k}` is not an object field"),
                                "declare the field as \"object\"",
                            );
                        }
                    }
                }
                _ => self.terr(
                    t,
                    "keyed",
                    rules::MAP,
                    format!("keyed `{k}` is not a field of a dependency"),
                    format!("add `{}` to depends_on", k.task),
                ),
            }
        }
    }

    /// A top_k reads each candidate's `score`: a candidate that types it must type a number.
    fn scores(&mut self, t: &Task) {
        for d in &t.depends_on {
            let Some(p) = self.by_name.get(d.as_str()).copied() else {
                continue;
            };
            let numeric = |ty: &FieldType| match ty {
                FieldType::Number | FieldType::Integer | FieldType::Any => true,
                FieldType::Schema(s) => {
                    let typed = matches!(
                        s.get("type").and_then(Value::as_str),
                        Some("number" | "integer")
                    );
                    let enum_ok = s
                        .get("enum")
                        .and_then(Value::as_array)
                        .is_none_or(|e| e.iter().all(Value::is_number));
                    typed && enum_ok
                }
                _ => false,
            };
            match p.emits.get("score") {
                Some(ty) if !numeric(ty) => self.terr(
                    t,
                    "depends_on",
                    rules::EMITS,
                    format!("candidate `{d}` types `score` as something other than a number"),
                    format!("type `{d}.score` as \"number\""),
                ),
                None if !p.emits.is_empty() => self.terr(
                    t,
                    "depends_on",
                    rules::EMITS,
                    format!("candidate `{d}` declares emits without `score`"),
                    format!("add \"score\": \"number\" to `{d}`'s emits"),
                ),
                _ => {}
            }
        }
    }

    /// The field a task reads as a list of strings (`over`, a pick's source): declared, and not
    /// typed as anything else.
    fn check_string_list(
        &mut self,
        t: &Task,
        arg: &str,
        producer: &Task,
        field: &str,
        strict: bool,
    ) {
        if let Some(spec) = &producer.route {
            if let Some(q) = spec.questions.get(field) {
                if q.kind != QuestionKind::Pick {
                    self.terr(
                        t,
                        arg,
                        rules::EMITS,
                        format!(
                            "`{}.{field}` is a {} answer, not a list",
                            producer.name, q.kind
                        ),
                        "map over a pick question's values, or a list field",
                    );
                }
                return;
            }
        }
        if producer.emits.is_empty() && !strict {
            return;
        }
        match producer.emits.get(field) {
            None => self.terr(t, arg, rules::EMITS, format!("`{}` does not declare `{field}` in emits", producer.name), format!("declare `{field}` in `{}`'s emits as \"list\"", producer.name)),
            // An untyped field (list-form emits) proves nothing either way: the engine checks
            // the value when the consumer runs, and fails it naming the field and what it held.
            Some(FieldType::Any) => {}
            Some(ty) if !is_string_list(ty) => self.terr(t, arg, rules::EMITS, format!("`{}.{field}` is not provably a list of strings", producer.name), "type the field \"list\", \"links\", or a schema_file with \"type\": \"array\" and string items"),
            Some(_) => {}
        }
    }

    fn when(&mut self, t: &Task) {
        let Some(w) = &t.when else { return };
        let Some(route) = self.by_name.get(w.route.as_str()).copied() else {
            self.terr(
                t,
                "when",
                rules::ROUTE,
                format!("`when` names unknown route `{}`", w.route),
                "name a route() task",
            );
            return;
        };
        let Some(spec) = &route.route else {
            self.terr(
                t,
                "when",
                rules::ROUTE,
                format!("`{}` is not a route", w.route),
                "`when` branches on a route() question",
            );
            return;
        };
        if !t.depends_on.contains(&w.route) {
            self.terr(
                t,
                "when",
                rules::ROUTE,
                format!(
                    "`when` names `{}` but the task does not depend on it",
                    w.route
                ),
                format!("add `{}` to depends_on", w.route),
            );
        }
        let Some(q) = spec.questions.get(&w.question) else {
            let fix = match did_you_mean(&w.question, spec.questions.keys().map(String::as_str)) {
                Some(s) => format!("did you mean `{}.{s}`?", w.route),
                None => "name one of the route's questions".into(),
            };
            self.terr(
                t,
                "when",
                rules::ROUTE,
                format!("route `{}` asks no question `{}`", w.route, w.question),
                fix,
            );
            return;
        };
        if q.kind == QuestionKind::Pick {
            self.terr(
                t,
                "when",
                rules::HUMAN,
                format!(
                    "`{}.{}` is a pick, which has no labels",
                    w.route, w.question
                ),
                "map over the pick's values with over instead",
            );
            return;
        }
        if let Some(route_over) = route.over.as_ref().filter(|o| t.over.as_ref() != Some(*o)) {
            self.terr(
                t,
                "when",
                rules::ROUTE,
                format!("`{}` decides once per item of `{}`", w.route, route_over),
                "map this task over the same list, or branch on an unmapped route",
            );
        }
        if w.answers.is_empty() && !w.every_option {
            self.terr(
                t,
                "answers",
                rules::ROUTE,
                "`when` accepts no answer".into(),
                "list the answers that run the task, or use otherwise = True",
            );
        }
        let valid = q.answers();
        let possible = self.possible_answers(route, &w.question, q);
        for a in &w.answers {
            if !valid.contains(a) {
                let fix = match did_you_mean(a, valid.iter().map(String::as_str)) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("use one of {}", quoted(&valid)),
                };
                self.terr(
                    t,
                    "answers",
                    rules::ROUTE,
                    format!("`{}.{}` never answers `{a}`", w.route, w.question),
                    fix,
                );
            } else if !possible.contains(a) {
                self.terr(
                    t,
                    "answers",
                    rules::ROUTE,
                    format!(
                        "`{}`'s source can never give `{a}` for `{}`",
                        w.route, w.question
                    ),
                    "remove the label: the source field's type excludes it",
                );
            }
        }
    }

    /// The answers a question can actually produce: a typed source narrows its labels.
    fn possible_answers(&self, route: &Task, qid: &str, q: &Question) -> BTreeSet<String> {
        let mut all: BTreeSet<String> = q.answers().into_iter().collect();
        let source = route.route.as_ref().and_then(|s| s.source.as_deref());
        if let Some(producer) = source.and_then(|s| self.by_name.get(s)) {
            if let Some(given) = producer.emits.get(qid).and_then(|ty| source_answers(ty, q)) {
                all.retain(|a| a == UNCERTAIN || given.contains(a));
            }
        }
        all
    }

    fn timeout(&mut self, t: &Task) {
        let Some(secs) = t.timeout_secs else { return };
        if secs == 0 {
            self.terr(
                t,
                "timeout",
                rules::TIMEOUT,
                "timeout is not positive".into(),
                "write a positive duration such as 90s, 10m or 2h",
            );
        }
        if secs > crate::duration::MAX_SECS {
            self.terr(
                t,
                "timeout",
                rules::TIMEOUT,
                format!(
                    "timeout is longer than the longest duration, {}",
                    crate::duration::format(crate::duration::MAX_SECS)
                ),
                "write a duration of at most 8760h",
            );
        }
        // A route's timeout is checked with its decider (human routes only).
        if !matches!(
            t.kind,
            TaskKind::Agent | TaskKind::Command | TaskKind::Evaluate | TaskKind::Route
        ) {
            self.terr(
                t,
                "timeout",
                rules::TIMEOUT,
                format!("timeout on a {} task", t.kind),
                "timeout bounds agent, command and evaluate attempts, and human routes",
            );
        }
    }

    fn repair_and_session(&mut self, t: &Task) {
        if t.repair > ceilings::MAX_REPAIR {
            self.terr(
                t,
                "repair",
                rules::WORKFLOW,
                format!("repair = {} exceeds {}", t.repair, ceilings::MAX_REPAIR),
                format!("use 0 to {} repair turns", ceilings::MAX_REPAIR),
            );
        }
        if t.session.is_some() && t.isolated {
            self.terr(
                t,
                "isolated",
                rules::SESSION,
                "a task in a session cannot be isolated".into(),
                "remove isolated = True or the session",
            );
        }
    }

    fn route(&mut self, t: &Task, spec: &crate::plan::RouteSpec) {
        let deciders = [
            spec.min_confidence.is_some(),
            spec.source.is_some(),
            spec.human,
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if deciders != 1 {
            self.terr(
                t,
                "min_confidence",
                rules::ROUTE,
                "a route needs exactly one decider".into(),
                "set exactly one of min_confidence, source or human = True",
            );
        }
        if let Some(c) = spec.min_confidence {
            if !(c > 0.0 && c <= 1.0) {
                self.terr(
                    t,
                    "min_confidence",
                    rules::ROUTE,
                    format!("min_confidence {c} is outside (0, 1]"),
                    "use a probability above 0 and at most 1",
                );
            }
        }
        if spec.questions.is_empty() {
            self.terr(
                t,
                "questions",
                rules::ROUTE,
                "a route asks no question".into(),
                "declare at least one question",
            );
        }
        if spec.human {
            if t.needs != "human" {
                self.terr(
                    t,
                    "needs",
                    rules::HUMAN,
                    format!("a human-decided route needs \"human\", not \"{}\"", t.needs),
                    "drop needs: human = True declares needs = \"human\"",
                );
            }
            if spec.questions.contains_key("decision") {
                self.terr(
                    t,
                    "questions",
                    rules::HUMAN,
                    "a human-decided route may not ask a question named `decision`".into(),
                    "rename the question: its output records the decision under `decision`",
                );
            }
            if t.over.is_some() {
                self.terr(
                    t,
                    "over",
                    rules::HUMAN,
                    "a human-decided route cannot map".into(),
                    "remove over",
                );
            }
        } else {
            if spec.review.is_some() {
                self.terr(
                    t,
                    "review",
                    rules::HUMAN,
                    "review without human = True".into(),
                    "remove review",
                );
            }
            if t.timeout_secs.is_some() {
                self.terr(
                    t,
                    "timeout",
                    rules::HUMAN,
                    "timeout on a route no person decides".into(),
                    "remove timeout",
                );
            }
        }
        let source = spec.source.as_ref().and_then(|s| {
            if !t.depends_on.contains(s) {
                self.terr(
                    t,
                    "source",
                    rules::ROUTE,
                    format!("source `{s}` is not a dependency"),
                    format!("add `{s}` to depends_on"),
                );
            }
            self.by_name.get(s.as_str()).copied()
        });
        if spec.source.is_some() && !spec.files.is_empty() {
            self.terr(
                t,
                "files",
                rules::ROUTE,
                "files with source".into(),
                "files are read by a decision model: remove them or use min_confidence",
            );
        }
        for f in &spec.files {
            let declared = t
                .depends_on
                .iter()
                .filter_map(|d| self.by_name.get(d.as_str()))
                .any(|d| {
                    d.emits_files
                        .iter()
                        .any(|fd| &fd.path == f && fd.schema.is_some())
                });
            if !declared {
                self.terr(
                    t,
                    "files",
                    rules::ROUTE,
                    format!("`{f}` is not a schema-typed file of a dependency"),
                    "declare it in a dependency's emits_files with schema_file(...)",
                );
            }
        }
        for (id, q) in &spec.questions {
            if !is_identifier(id, "") {
                self.terr(
                    t,
                    "questions",
                    rules::ROUTE,
                    format!("`{id}` is not a question id"),
                    "use 1 to 64 letters, digits or `_`",
                );
            }
            self.question(t, spec, id, q, source);
        }
    }

    fn question(
        &mut self,
        t: &Task,
        spec: &crate::plan::RouteSpec,
        id: &str,
        q: &Question,
        source: Option<&Task>,
    ) {
        let labels: Vec<&str> = q.labels.iter().map(|l| l.value.as_str()).collect();
        let distinct: BTreeSet<&str> = labels.iter().copied().collect();
        let arg = "questions";
        match q.kind {
            QuestionKind::Noul => {
                if labels != ["yes", "no"] {
                    self.terr(
                        t,
                        arg,
                        rules::ROUTE,
                        format!("noul `{id}` must answer yes or no"),
                        "a noul's labels are yes and no",
                    );
                }
            }
            QuestionKind::Choice | QuestionKind::Score => {
                if q.options_from.is_none()
                    && (distinct.len() < 2 || distinct.len() != labels.len())
                {
                    self.terr(
                        t,
                        arg,
                        rules::ROUTE,
                        format!("{} `{id}` needs at least two distinct labels", q.kind),
                        "list two or more different labels",
                    );
                }
                if labels.contains(&UNCERTAIN) {
                    self.terr(
                        t,
                        arg,
                        rules::ROUTE,
                        format!("`{id}` declares the reserved label `uncertain`"),
                        "rename the label",
                    );
                }
                if let Some(bad) = labels.iter().find(|l| !is_identifier(l, "")) {
                    self.terr(
                        t,
                        arg,
                        rules::ROUTE,
                        format!("`{bad}` is not a label"),
                        "labels are 1 to 64 letters, digits or `_`",
                    );
                }
                if let Some(from) = &q.options_from {
                    if spec.min_confidence.is_none() {
                        self.terr(t, arg, rules::ROUTE, format!("choice `{id}` reads options from `{from}` without a decision model"), "options read from a field need min_confidence");
                    }
                    match self.by_name.get(from.task.as_str()) {
                        Some(p) if t.depends_on.contains(&from.task) && p.over.is_none() => {}
                        _ => self.terr(
                            t,
                            arg,
                            rules::ROUTE,
                            format!("options `{from}` are not a field of an unmapped dependency"),
                            format!("add `{}` to depends_on", from.task),
                        ),
                    }
                }
            }
            QuestionKind::Pick => {
                if !spec.human {
                    self.terr(
                        t,
                        arg,
                        rules::HUMAN,
                        format!("pick `{id}` on a route no person decides"),
                        "pick needs human = True",
                    );
                }
                match &q.source {
                    None => self.terr(
                        t,
                        arg,
                        rules::HUMAN,
                        format!("pick `{id}` has no source"),
                        "set source = \"producer.field\"",
                    ),
                    Some(src) => self.pick_source(t, src),
                }
            }
        }
        if q.multiple && !spec.human {
            self.terr(
                t,
                arg,
                rules::HUMAN,
                format!("`{id}` takes multiple answers on a route no person decides"),
                "multiple needs human = True",
            );
        }
        if q.multiple && !matches!(q.kind, QuestionKind::Choice | QuestionKind::Pick) {
            self.terr(
                t,
                arg,
                rules::HUMAN,
                format!("multiple on {} `{id}`", q.kind),
                "only a choice or a pick takes multiple",
            );
        }
        let answers = q.answers();
        for d in &q.drop {
            if !answers.contains(d) {
                self.terr(
                    t,
                    arg,
                    rules::ROUTE,
                    format!("`{id}` drops `{d}`, which it never answers"),
                    format!("drop one of {}", quoted(&answers)),
                );
            }
        }
        if let Some(p) = source {
            match p.emits.get(id) {
                Some(ty) if source_answers(ty, q).is_none() => {
                    let want = if q.kind == QuestionKind::Noul {
                        "\"boolean\" or labels from yes, no"
                    } else {
                        "labels the question declares"
                    };
                    self.terr(
                        t,
                        "source",
                        rules::ROUTE,
                        format!(
                            "source `{}` types `{id}` with values question `{id}` cannot answer",
                            p.name
                        ),
                        format!("type `{}.{id}` as {want}", p.name),
                    );
                }
                None if !p.emits.is_empty() => {
                    self.terr(
                        t,
                        "source",
                        rules::ROUTE,
                        format!("source `{}` does not declare `{id}`", p.name),
                        format!("add `{id}` to `{}`'s emits", p.name),
                    );
                }
                _ => {}
            }
        }
    }

    fn pick_source(&mut self, t: &Task, src: &FieldRef) {
        if !t.depends_on.contains(&src.task) {
            self.terr(
                t,
                "questions",
                rules::HUMAN,
                format!("pick source `{src}` is not a dependency of the route"),
                format!("add `{}` to depends_on", src.task),
            );
            return;
        }
        if let Some(p) = self.by_name.get(src.task.as_str()).copied() {
            self.check_string_list(t, "questions", p, &src.field, false);
        }
    }

    fn report(&mut self, t: &Task) {
        let Some(r) = &t.report else { return };
        match (&r.result, &r.severity_field) {
            (None, Some(f)) => self.terr(
                t,
                "severity_field",
                rules::REPORTS,
                format!("severity_field `{f}` on a report that selects no task"),
                "set result = <task>, or remove severity_field",
            ),
            (Some(res), sev) => match self.by_name.get(res.as_str()).copied() {
                None => self.terr(
                    t,
                    "result",
                    rules::REPORTS,
                    format!("result `{res}` is not a task of this workflow"),
                    "select a task in the same graph",
                ),
                Some(sel) => {
                    if let Some(f) = sev {
                        if !sel.emits.contains_key(f) {
                            self.terr(t, "severity_field", rules::REPORTS, format!("`{res}` does not declare `{f}`"), format!("add `{f}` to `{res}`'s emits, or name one of its declared fields"));
                        }
                    }
                }
            },
            (None, None) => {}
        }
        if r.destination.is_empty() {
            self.terr(
                t,
                "destination",
                rules::REPORTS,
                "a report needs a destination kind".into(),
                "set destination = {\"kind\": \"slack\"}",
            );
        }
    }

    fn ancestors(&self, name: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut stack = vec![name.to_string()];
        while let Some(n) = stack.pop() {
            if let Some(t) = self.by_name.get(n.as_str()) {
                for d in &t.depends_on {
                    if out.insert(d.clone()) {
                        stack.push(d.clone());
                    }
                }
            }
        }
        out
    }

    fn cycles(&mut self) {
        // Whatever the topological order leaves out is on or behind a cycle.
        let ordered: BTreeSet<usize> = self.graph.order().iter().copied().collect();
        let mut stuck: Vec<String> = (0..self.plan.tasks.len())
            .filter(|i| !ordered.contains(i))
            .map(|i| self.plan.tasks[i].name.clone())
            .collect();
        stuck.sort();
        if let Some(first) = stuck.first().cloned() {
            self.err(Some(&first), Some("depends_on"), rules::CYCLE, format!("the dependencies form a cycle through {}", quoted(&stuck)), "break the cycle: a loop in the source must unroll into tasks, and a send-back is declared with revise");
        }
    }

    fn sessions(&mut self) {
        let mut by_session: BTreeMap<&str, Vec<&Task>> = BTreeMap::new();
        for t in &self.plan.tasks {
            if let Some(s) = &t.session {
                by_session.entry(s.as_str()).or_default().push(t);
            }
        }
        for (s, tasks) in by_session {
            for (i, a) in tasks.iter().enumerate() {
                for b in &tasks[i + 1..] {
                    if !self.ancestors(&b.name).contains(&a.name)
                        && !self.ancestors(&a.name).contains(&b.name)
                    {
                        self.terr(b, "session", rules::SESSION, format!("`{}` and `{}` share session `{s}` but neither depends on the other", a.name, b.name), format!("order them: add `{}` to `{}`'s depends_on", a.name, b.name));
                    }
                }
            }
        }
    }

    /// Every label of a question some `when` refers to is routed or dropped (RFC-0001:C-ROUTE).
    fn coverage(&mut self) {
        let mut routed: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
        for t in &self.plan.tasks {
            if let Some(w) = &t.when {
                routed
                    .entry((w.route.as_str(), w.question.as_str()))
                    .or_default()
                    .extend(w.answers.iter().map(String::as_str));
            }
        }
        for ((route, qid), listed) in routed {
            let Some(rt) = self.by_name.get(route).copied() else {
                continue;
            };
            let Some(q) = rt.route.as_ref().and_then(|s| s.questions.get(qid)) else {
                continue;
            };
            if q.kind == QuestionKind::Pick {
                continue;
            }
            let possible = self.possible_answers(rt, qid, q);
            let missing: Vec<String> = possible
                .iter()
                .filter(|a| !listed.contains(a.as_str()) && !q.drop.contains(a))
                .cloned()
                .collect();
            if !missing.is_empty() {
                self.err(Some(route), Some("questions"), rules::ROUTE, format!("`{route}.{qid}` leaves {} unrouted", quoted(&missing)), "route them with a `when` (or otherwise = True), or list them in the question's drop");
            }
        }
    }

    fn can_be_not_taken(&self, name: &str, seen: &mut BTreeSet<String>) -> bool {
        if !seen.insert(name.to_string()) {
            return false;
        }
        let Some(t) = self.by_name.get(name).copied() else {
            return false;
        };
        if t.when.is_some() {
            return true;
        }
        if t.route.is_some() && t.over.is_some() {
            return true;
        }
        t.join == Join::All
            && t.depends_on
                .iter()
                .any(|d| !t.is_optional_dep(d) && self.can_be_not_taken(d, seen))
    }

    fn optional(&mut self) {
        let targets: BTreeSet<&str> = self
            .plan
            .tasks
            .iter()
            .flat_map(|t| t.revise.iter().map(String::as_str))
            .collect();
        for t in &self.plan.tasks {
            for o in &t.optional {
                if t.join != Join::All {
                    self.terr(
                        t,
                        "depends_on",
                        rules::OPTIONAL,
                        format!("optional(`{o}`) under join = \"{}\"", t.join),
                        "optional() applies under join = \"all\" only: remove it",
                    );
                }
                if self.by_name.contains_key(o.as_str())
                    && !self.can_be_not_taken(o, &mut BTreeSet::new())
                {
                    self.terr(
                        t,
                        "depends_on",
                        rules::OPTIONAL,
                        format!("`{o}` can never settle not_taken"),
                        format!(
                            "remove optional(): `{o}` has no `when` and no conditional dependency"
                        ),
                    );
                }
                if targets.contains(o.as_str()) {
                    self.terr(
                        t,
                        "depends_on",
                        rules::OPTIONAL,
                        format!("`{o}` is a revise target"),
                        "remove optional() from a task a reviewer revises",
                    );
                }
            }
        }
    }

    fn revise(&mut self) {
        let mut member_of: BTreeMap<String, String> = BTreeMap::new();
        let reviewers: Vec<&Task> = self
            .plan
            .tasks
            .iter()
            .filter(|t| !t.revise.is_empty() || t.max_rounds != 0)
            .collect();
        let all_targets: BTreeSet<&str> = reviewers
            .iter()
            .flat_map(|t| t.revise.iter().map(String::as_str))
            .collect();
        for r in reviewers {
            let rule = rules::REVISE;
            if r.revise.is_empty() {
                self.terr(
                    r,
                    "max_rounds",
                    rule,
                    "max_rounds without revise".into(),
                    "name the tasks to send back with revise, or remove max_rounds",
                );
                continue;
            }
            if r.max_rounds == 0 {
                self.terr(
                    r,
                    "revise",
                    rule,
                    "revise without max_rounds".into(),
                    format!(
                        "set max_rounds from {} to {}",
                        ceilings::MIN_ROUNDS,
                        ceilings::MAX_ROUNDS
                    ),
                );
            } else if !(ceilings::MIN_ROUNDS..=ceilings::MAX_ROUNDS).contains(&r.max_rounds) {
                self.terr(
                    r,
                    "max_rounds",
                    rule,
                    format!(
                        "max_rounds = {} is outside {} to {}",
                        r.max_rounds,
                        ceilings::MIN_ROUNDS,
                        ceilings::MAX_ROUNDS
                    ),
                    format!(
                        "set max_rounds from {} to {}, counting the first round",
                        ceilings::MIN_ROUNDS,
                        ceilings::MAX_ROUNDS
                    ),
                );
            }
            if all_targets.contains(r.name.as_str()) {
                self.terr(
                    r,
                    "revise",
                    rule,
                    "a reviewer is itself a revise target".into(),
                    "loops do not nest or chain: remove one of the two revise declarations",
                );
            }
            let mut seen = BTreeSet::new();
            let ancestors = self.ancestors(&r.name);
            for target in &r.revise {
                if !seen.insert(target.as_str()) {
                    self.terr(
                        r,
                        "revise",
                        rule,
                        format!("`{target}` is named twice"),
                        "name each target once",
                    );
                    continue;
                }
                if target == &r.name {
                    self.terr(
                        r,
                        "revise",
                        rule,
                        "the reviewer names itself".into(),
                        "revise names the tasks before the reviewer",
                    );
                    continue;
                }
                if !self.by_name.contains_key(target.as_str()) {
                    self.terr(
                        r,
                        "revise",
                        rule,
                        format!("unknown task `{target}`"),
                        "name a task of this workflow",
                    );
                    continue;
                }
                if !ancestors.contains(target) {
                    self.terr(
                        r,
                        "revise",
                        rule,
                        format!(
                            "the reviewer is not reachable from `{target}` through dependencies"
                        ),
                        format!("make `{}` depend (directly or not) on `{target}`", r.name),
                    );
                }
            }
            let body: BTreeSet<String> = r.revise.iter().cloned().chain([r.name.clone()]).collect();
            // A task between two body tasks: an ancestor of one body task and a descendant of another.
            for t in &self.plan.tasks {
                if body.contains(&t.name) {
                    continue;
                }
                let below = self.ancestors(&t.name);
                let feeds_body = body.iter().any(|b| self.ancestors(b).contains(&t.name));
                if feeds_body && body.iter().any(|b| below.contains(b)) {
                    self.terr(
                        r,
                        "revise",
                        rule,
                        format!(
                            "`{}` lies between two tasks of the loop but is not revised",
                            t.name
                        ),
                        format!("add `{}` to revise", t.name),
                    );
                }
            }
            for b in &body {
                let Some(bt) = self.by_name.get(b.as_str()).copied() else {
                    continue;
                };
                if !matches!(
                    bt.kind,
                    TaskKind::Agent | TaskKind::Command | TaskKind::Evaluate
                ) {
                    self.terr(
                        r,
                        "revise",
                        rule,
                        format!("loop body task `{b}` is a {} task", bt.kind),
                        "a loop body holds agent, command and evaluate tasks only",
                    );
                }
                if bt.over.is_some() {
                    self.terr(
                        r,
                        "revise",
                        rule,
                        format!("loop body task `{b}` maps over a list"),
                        "remove over from the body, or the task from the loop",
                    );
                }
                if let Some(other) = member_of.insert(b.clone(), r.name.clone()) {
                    if other != r.name {
                        self.terr(
                            r,
                            "revise",
                            rule,
                            format!("`{b}` is in the loops of `{other}` and `{}`", r.name),
                            "a task belongs to at most one loop",
                        );
                    }
                }
            }
        }
    }

    fn plan_level(&mut self) {
        let plan = self.plan;
        if let Some(res) = &plan.result {
            match self.by_name.get(res.as_str()) {
                None => self.err(
                    None,
                    Some("result"),
                    rules::WORKFLOW,
                    format!("result `{res}` is not a task"),
                    "name a listed task",
                ),
                Some(t) if t.when.is_some() => self.err(
                    Some(res),
                    Some("result"),
                    rules::ROUTE,
                    "the result task is conditional".into(),
                    "select a task without `when`",
                ),
                _ => {}
            }
        }
        if let Some(rec) = &plan.history_record {
            if plan.workflow_type != WorkflowType::Playbook {
                self.err(
                    None,
                    Some("history_record"),
                    rules::HISTORY,
                    format!("history_record in a {} workflow", plan.workflow_type),
                    "history records are for playbooks only",
                );
            }
            match self.by_name.get(rec.as_str()) {
                None => self.err(
                    None,
                    Some("history_record"),
                    rules::HISTORY,
                    format!("history_record `{rec}` is not a task"),
                    "name a listed task",
                ),
                Some(t) if t.over.is_some() => self.err(
                    Some(rec),
                    Some("history_record"),
                    rules::HISTORY,
                    "the history record task is mapped".into(),
                    "record an unmapped task",
                ),
                _ => {}
            }
        }
    }
}

fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The closest candidate by edit distance, when it is close enough to be a likely misspelling.
pub fn did_you_mean<'s>(
    word: &str,
    candidates: impl IntoIterator<Item = &'s str>,
) -> Option<&'s str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|(d, c)| *d <= (word.len().max(c.len()) / 3).max(1))
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::plan::{RouteSpec, When};

    pub(crate) fn cmd(name: &str, deps: &[&str]) -> Task {
        let mut t = Task::new(name, TaskKind::Command);
        t.run = Some("true".into());
        t.depends_on = deps.iter().map(|d| d.to_string()).collect();
        t
    }

    pub(crate) fn plan(tasks: Vec<Task>) -> Plan {
        Plan {
            version: PLAN_VERSION,
            workflow_type: WorkflowType::Playbook,
            result: None,
            history_record: None,
            params: BTreeMap::new(),
            tasks,
        }
    }

    fn rules_of(p: &Plan) -> Vec<String> {
        validate(p)
            .into_iter()
            .map(|e| format!("{}:{}", e.rule, e.task.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn a_valid_plan_has_no_errors() {
        assert!(validate(&plan(vec![cmd("a", &[]), cmd("b", &["a"])])).is_empty());
    }

    // Cycles only arise in TOML plans: the DSL cannot name a task before constructing it.
    #[test]
    fn cycles_and_unknown_dependencies() {
        let errs = validate(&plan(vec![
            cmd("a", &["c"]),
            cmd("c", &["a"]),
            cmd("d", &["bb"]),
        ]));
        assert!(errs.iter().any(|e| e.rule == rules::CYCLE), "{errs:?}");
        let unknown = errs
            .iter()
            .find(|e| e.message.contains("unknown task `bb`"))
            .expect("unknown dep");
        assert_eq!(unknown.task.as_deref(), Some("d"));
        assert_eq!(unknown.arg.as_deref(), Some("depends_on"));
        let errs = validate(&plan(vec![cmd("alpha", &[]), cmd("b", &["alpah"])]));
        assert!(errs[0].fix.contains("did you mean `alpha`"), "{errs:?}");
    }

    #[test]
    fn kind_fields_and_version() {
        let mut a = cmd("a", &[]);
        a.prompt = Some("x".into());
        let mut p = plan(vec![a, Task::new("b", TaskKind::Agent)]);
        p.version = 2;
        let r = rules_of(&p);
        assert!(r.contains(&format!("{}:", rules::VERSION)), "{r:?}");
        assert!(r.contains(&format!("{}:a", rules::KIND)), "{r:?}");
        assert!(r.contains(&format!("{}:b", rules::KIND)), "{r:?}");
    }

    // RFC-0002:C-PLAYBOOK-LANE — engine operations and reducers are not in a playbook.
    #[test]
    fn lane_rules_on_the_ir() {
        let mut e = Task::new("p", TaskKind::Engine);
        e.op = Some("propose".into());
        let r = rules_of(&plan(vec![e]));
        assert_eq!(r, vec![format!("{}:p", rules::LANE)]);
    }

    // RFC-0002:C-SETTLED-JOIN — settled on a reducer, a report or an engine operation.
    #[test]
    fn settled_join_refusals() {
        let mut k = Task::new("k", TaskKind::TopK);
        k.k = Some(1);
        k.direction = Some(crate::Direction::Higher);
        k.depends_on = vec!["a".into()];
        k.join = Join::Settled;
        let mut p = plan(vec![cmd("a", &[]), k]);
        p.workflow_type = WorkflowType::Custom;
        assert_eq!(rules_of(&p), vec![format!("{}:k", rules::JOIN)]);
        for kind in [TaskKind::Report, TaskKind::Engine] {
            let mut t = Task::new("t", kind);
            t.depends_on = vec!["a".into()];
            t.join = Join::Settled;
            let mut p = plan(vec![cmd("a", &[]), t]);
            p.workflow_type = WorkflowType::Custom;
            let found = rules_of(&p);
            assert!(
                found.contains(&format!("{}:t", rules::JOIN)),
                "{kind}: {found:?}"
            );
        }
    }

    // RFC-0001:C-ROUTE — coverage counts drop, and `when` must name a dependency's question.
    #[test]
    fn route_coverage() {
        let mut g = Task::new("g", TaskKind::Route);
        g.depends_on = vec!["a".into()];
        let q = crate::Question {
            drop: vec!["uncertain".into()],
            ..crate::Question::noul("")
        };
        g.route = Some(RouteSpec {
            questions: BTreeMap::from([("ok".into(), q)]),
            min_confidence: Some(0.5),
            source: None,
            human: false,
            review: None,
            files: vec![],
        });
        let mut b = cmd("b", &["g"]);
        b.when = Some(When {
            route: "g".into(),
            question: "ok".into(),
            answers: vec!["yes".into()],
            every_option: false,
        });
        let r = rules_of(&plan(vec![cmd("a", &[]), g.clone(), b.clone()]));
        assert_eq!(r, vec![format!("{}:g", rules::ROUTE)], "`no` is unrouted");
        let mut c = cmd("c", &["g"]);
        c.when = Some(When {
            route: "g".into(),
            question: "ok".into(),
            answers: vec!["no".into()],
            every_option: false,
        });
        assert!(validate(&plan(vec![cmd("a", &[]), g, b, c])).is_empty());
    }
}

//! Admission: everything refused before any dispatch (exit 1), and the capability verdict
//! (RFC-0002:C-PLAYBOOK-CAPS), decided before any spend.
//!
//! [`admission`] is the one admission function: `check`, `plan show` and `plan run` all call
//! it, so what `check` refuses is what `plan run` refuses. It reads a [`ValidatedPlan`], so the
//! compile-time rules (names, dependencies, cycles, stages) are never checked here again; it
//! refuses what this engine cannot run honestly on this pack and this substrate (a task timeout
//! above `--max-time` where the caller knows it). [`admit`] adds what only a launch has: both
//! ceilings present and well-formed.

use crate::graph::caps::{self, CapVerdict};
use crate::{RunError, RunRequest};
use crucible_agent::harness::{self, HarnessKind};
use crucible_agent::inference::Inference;
use crucible_pack::LoadedManifest;
use crucible_plan::{Graph, TaskKind, ValidatedPlan, WorkflowType};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a launch brings to admission besides the pack.
#[derive(Clone, Copy)]
pub struct Substrate<'a> {
    /// The run's capabilities (`--cap`, and `decision` with a decision binding).
    pub caps: &'a [String],
    pub inference: &'a Inference,
    /// `--agent-cmd`: overrides `[agent].agent_cmd` and selects the command backend.
    pub agent_cmd: Option<&'a str>,
    /// `--harness`: the harness of every agent task.
    pub harness: Option<&'a str>,
    /// `--max-time`, where the caller has it: a task timeout above it is refused.
    pub max_secs: Option<u64>,
    /// The state directory the run would keep, where the caller has it: it may not overlap the
    /// workspace, which is rebuilt from scratch each run.
    pub state_dir: Option<&'a Path>,
    /// `--no-sandbox`: a task's named sandbox cannot be honoured unsandboxed.
    pub no_sandbox: bool,
    /// Who answers human-decided routes, where someone does (RFC-0002:C-HUMAN-DECISION).
    pub decider: Option<&'a str>,
}

/// The capabilities a run has: the launch's own, and `decision` where the inference bindings
/// hold a decision binding (RFC-0001 notes §5).
pub fn substrate_caps(launch: &[String], inference: &Inference) -> Vec<String> {
    let mut caps = launch.to_vec();
    if inference.decision.is_some() && !caps.iter().any(|c| c == "decision") {
        caps.push("decision".into());
    }
    caps
}

/// A plan this engine can run on the substrate.
#[derive(Debug)]
pub struct Admission {
    /// The stand-in command agent turns run, when the plan has agent tasks.
    pub agent_cmd: Option<String>,
    /// Otherwise the CLI of each harness the agent tasks use (`[agent] backend = "local"`).
    pub harnesses: BTreeMap<HarnessKind, PathBuf>,
    pub goal: Option<String>,
    pub caps: CapVerdict,
    /// Each task in a named sandbox, by task name.
    pub sandboxes: BTreeMap<String, crate::sandbox::Named>,
}

/// Everything this engine refuses about running `plan` from `manifest` on `sub`, each reason
/// once, or what it will run with.
pub fn admission(
    plan: &ValidatedPlan,
    manifest: &LoadedManifest,
    sub: Substrate,
) -> Result<Admission, Vec<String>> {
    let mut refused = manifest.unbuilt();
    if plan.workflow_type != WorkflowType::Playbook {
        refused.push(format!(
            "this engine runs playbooks only; the plan's type is {}",
            plan.workflow_type
        ));
    }
    if plan.tasks.is_empty() {
        refused.push("the plan has no tasks".into());
    }
    let sandboxed = !sub.no_sandbox && manifest.manifest.sandbox.enabled;
    let mut sandboxes = BTreeMap::new();
    for t in &plan.tasks {
        if let Some(name) = &t.sandbox {
            match crate::sandbox::named(&manifest.manifest, name, sandboxed) {
                Ok(named) => {
                    sandboxes.insert(t.name.clone(), named);
                }
                Err(e) => refused.push(format!("task `{}` {e}", t.name)),
            }
        }
        // RFC-0002:C-PLAYBOOK-BUDGET: a deadline never extends past the ceiling.
        let over = |&s: &u64| sub.max_secs.is_some_and(|max| s > max);
        if let (Some(s), Some(max)) = (t.timeout_secs.filter(over), sub.max_secs) {
            refused.push(format!(
                "task `{}` declares timeout {} above --max-time {}: a deadline never extends past the ceiling (RFC-0002:C-PLAYBOOK-BUDGET)",
                t.name,
                crucible_plan::duration::format(s),
                crucible_plan::duration::format(max)
            ));
        }
        if let Err(e) = task_runs(t, sub) {
            refused.push(e);
        }
    }
    let agent_cmd = match agent_backend(manifest, sub.agent_cmd) {
        Ok(cmd) => cmd,
        Err(e) => {
            refused.push(e);
            None
        }
    };
    let harnesses = match agent_cmd {
        Some(_) => BTreeMap::new(),
        None => local_harnesses(plan, manifest, sub).unwrap_or_else(|e| {
            refused.extend(e);
            BTreeMap::new()
        }),
    };
    // Issue 15: what a runbook forbids or needs that this run cannot enforce or give.
    for t in &plan.tasks {
        if let Some(rb) = &t.runbook {
            let harness = (sub.harness)
                .or(t.harness.as_deref())
                .or(manifest.manifest.agent.harness.as_deref())
                .and_then(|n| HarnessKind::parse(n).ok());
            let how = crate::runbook::Enforcement {
                sandboxed,
                command_backend: agent_cmd.is_some(),
                harness,
                can_ask: sub.decider.is_some(),
            };
            refused.extend(crate::runbook::unenforceable(&t.name, rb, how));
        }
    }
    let m = &manifest.manifest.agent;
    let goal = match (&m.goal, &m.goal_file) {
        (Some(g), _) => Some(g.clone()),
        (None, Some(f)) => match read_goal(manifest, f) {
            Ok(g) => Some(g),
            Err(e) => {
                refused.push(format!("[agent].goal_file {e}"));
                None
            }
        },
        (None, None) => None,
    };
    if let Err(e) = crate::git::preflight(manifest) {
        refused.push(format!("workspace setup: {e}"));
    }
    if let Some(why) = sub.state_dir.and_then(|sd| overlap(manifest, sd)) {
        refused.push(why);
    }
    if !refused.is_empty() {
        return Err(refused);
    }
    Ok(Admission {
        agent_cmd,
        harnesses,
        goal,
        caps: caps::verdict(plan, sub.caps),
        sandboxes,
    })
}

/// The harnesses the agent tasks use on the local backend, each found at its pinned version,
/// and the agent binding each would talk to checked against it.
fn local_harnesses(
    plan: &ValidatedPlan,
    manifest: &LoadedManifest,
    sub: Substrate,
) -> Result<BTreeMap<HarnessKind, PathBuf>, Vec<String>> {
    let m = &manifest.manifest.agent;
    let mut out = BTreeMap::new();
    let agents: Vec<&crucible_plan::Task> = (plan.tasks.iter())
        .filter(|t| t.kind == TaskKind::Agent)
        .collect();
    if agents.is_empty() {
        return Ok(out);
    }
    match m.backend.as_deref() {
        None | Some("local") => {}
        // Refused with the other unbuilt keys.
        Some("openshell") => return Ok(out),
        Some(_) => {
            return Err(vec![
                "the plan has agent tasks but no agent backend: [agent] backend = \"command\" needs agent_cmd (or pass --agent-cmd)".into(),
            ])
        }
    }
    let mut refused: Vec<String> = (m.cli.keys())
        .filter_map(|name| HarnessKind::parse(name).err())
        .map(|e| format!("[agent.cli]: {e}"))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for t in agents {
        let name = sub
            .harness
            .or(t.harness.as_deref())
            .or(m.harness.as_deref());
        // Each harness is looked up once, whether it was found or refused.
        if !seen.insert(name) {
            continue;
        }
        let cli = |k: HarnessKind| m.cli.get(k.name()).map(|p| manifest.resolve(p));
        match harness::resolve(name, cli) {
            Ok((kind, program)) => {
                out.insert(kind, program);
            }
            Err(e) => refused.push(format!(
                "the plan has agent tasks but no agent backend: agent task `{}` (and any other naming the same harness): {e}",
                t.name
            )),
        }
    }
    if let Some(b) = &sub.inference.agent {
        for kind in out.keys() {
            if !kind.protocols().contains(&b.protocol) {
                refused.push(format!(
                    "the agent binding speaks {:?}, and {} speaks only {:?}",
                    b.protocol,
                    kind.name(),
                    kind.protocols()
                ));
            }
        }
        if let Some(k) = b.key_env.as_ref().filter(|k| std::env::var_os(k).is_none()) {
            refused.push(format!("the agent binding's key variable `{k}` is not set"));
        }
    }
    match refused.is_empty() {
        true => Ok(out),
        false => Err(refused),
    }
}

/// Why the state directory and the workspace cannot both be used: one holds the other. A bad
/// workspace directory is the preflight's to report.
fn overlap(manifest: &LoadedManifest, state_dir: &Path) -> Option<String> {
    let ws = crate::git::workspace_path(manifest).ok()?;
    let (Ok(ws), Ok(sd)) = (std::path::absolute(&ws), std::path::absolute(state_dir)) else {
        return Some("the state directory or the workspace has no absolute path".into());
    };
    (sd.starts_with(&ws) || ws.starts_with(&sd)).then(|| {
        format!(
            "the state directory {} and the workspace {} overlap: keep them apart",
            sd.display(),
            ws.display()
        )
    })
}

/// The run's price table: `[agent.prices]` over the defaults.
pub fn prices(manifest: &LoadedManifest) -> crucible_agent::prices::Prices {
    let overrides = (manifest.manifest.agent.prices.iter())
        .map(|(model, p)| {
            let price = crucible_agent::prices::Price {
                input: p.input,
                cached_input: p.cached_input.unwrap_or(p.input),
                output: p.output,
            };
            (model.clone(), price)
        })
        .collect();
    crucible_agent::prices::Prices { overrides }
}

/// A goal file, read through the pack's confinement and the compiler's file-size bound.
fn read_goal(manifest: &LoadedManifest, rel: &str) -> Result<String, String> {
    let dir = crucible_pack::files::PackDir::open(&manifest.dir).map_err(|e| e.to_string())?;
    let bytes = dir
        .read(rel, crucible_pack::files::MAX_FILE_BYTES)
        .map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| format!("{rel}: not UTF-8 text"))
}

/// The agent backend `[agent].backend` and `--agent-cmd` select: the command agent turns run,
/// or none when a local harness runs them.
fn agent_backend(manifest: &LoadedManifest, flag: Option<&str>) -> Result<Option<String>, String> {
    let m = &manifest.manifest.agent;
    match m.backend.as_deref() {
        // `openshell` is refused with the other unbuilt keys.
        None | Some("local" | "openshell") => Ok(flag.map(str::to_string)),
        Some("command") => Ok(flag.map(str::to_string).or_else(|| m.agent_cmd.clone())),
        Some(other) => Err(format!(
            "[agent].backend = {other:?} is not a backend: use \"local\" or \"command\""
        )),
    }
}

/// Whether this engine runs task `t` on the substrate: its kind, and what that kind needs.
fn task_runs(t: &crucible_plan::Task, sub: Substrate) -> Result<(), String> {
    let n = &t.name;
    let unsupported = |what: &str| {
        Err(format!(
            "task `{n}` uses {what}, which this engine does not run yet"
        ))
    };
    match t.kind {
        TaskKind::Command | TaskKind::Evaluate => {
            if t.run.as_deref().is_none_or(|r| r.trim().is_empty()) {
                return Err(format!("{} task `{n}` has no `run` command", t.kind));
            }
            Ok(())
        }
        TaskKind::Agent => {
            if t.prompt.as_deref().is_none_or(|p| p.trim().is_empty()) {
                return Err(format!("agent task `{n}` has no prompt"));
            }
            Ok(())
        }
        TaskKind::Route => route_runs(t, sub),
        TaskKind::Report => match t.report.as_ref().map(|r| r.destination.as_str()) {
            Some("slack") => Ok(()),
            Some(other) => unsupported(&format!("the report destination `{other}`")),
            None => Err(format!("report task `{n}` names no destination")),
        },
        TaskKind::Engine => Err(format!(
            "task `{n}` names an engine operation, which a playbook may not (RFC-0002:C-PLAYBOOK-LANE)"
        )),
        TaskKind::TopK => unsupported(&format!("kind `{}`", t.kind)),
    }
}

/// A launch this engine runs: the plan admitted, and both ceilings.
#[derive(Debug)]
pub struct Admitted {
    pub max_cost: f64,
    pub max_secs: u64,
    pub goal: Option<String>,
    pub agent_cmd: Option<String>,
    pub harnesses: BTreeMap<HarnessKind, PathBuf>,
    pub graph: Graph,
    /// Required tasks whose `needs` the run lacks: the plan is truncated.
    pub truncating: Vec<usize>,
    /// Tasks skipped for a missing capability, with the note their row carries.
    pub cap_skipped: Vec<(usize, String)>,
    /// Each task in a named sandbox, by task name.
    pub sandboxes: BTreeMap<String, crate::sandbox::Named>,
    /// The run's steering files, read and checked (`steering`).
    pub steering: Vec<(String, String)>,
}

pub fn admit(req: &RunRequest) -> Result<Admitted, RunError> {
    let refuse = |m: String| Err(RunError::refused(m));
    let plan = &req.plan;
    // RFC-0002:C-PLAYBOOK-BUDGET: both ceilings, from the launch, before anything else.
    let (max_cost, max_secs) = match (req.max_cost, req.max_secs) {
        (Some(c), Some(s)) => (c, s),
        (None, None) => return refuse("--max-cost and --max-time are required: a playbook runs only under a cost ceiling and a wall-clock ceiling (RFC-0002:C-PLAYBOOK-BUDGET)".into()),
        (None, Some(_)) => return refuse("--max-cost is required: a playbook runs only under a cost ceiling (RFC-0002:C-PLAYBOOK-BUDGET)".into()),
        (Some(_), None) => return refuse("--max-time is required: a playbook runs only under a wall-clock ceiling (RFC-0002:C-PLAYBOOK-BUDGET)".into()),
    };
    if !max_cost.is_finite() || max_cost < 0.0 {
        return refuse(format!(
            "--max-cost {max_cost} is not a cost: give a non-negative number of USD"
        ));
    }
    if max_secs == 0 {
        return refuse("--max-time must be at least 1s".into());
    }
    // A resumed run's ceiling comes from its log, not the parser: bound it here too.
    if max_secs > crucible_plan::duration::MAX_SECS {
        return refuse(format!(
            "--max-time {max_secs}s is longer than the longest duration, {}",
            crucible_plan::duration::format(crucible_plan::duration::MAX_SECS)
        ));
    }
    let decider = req.decider.as_ref().map(|d| d.describe());
    let sub = Substrate {
        caps: &req.caps,
        inference: &req.inference,
        agent_cmd: req.agent_cmd.as_deref(),
        harness: req.harness.as_deref(),
        max_secs: Some(max_secs),
        state_dir: Some(&req.state_dir),
        no_sandbox: req.no_sandbox,
        decider: decider.as_deref(),
    };
    let a = admission(plan, &req.manifest, sub)
        .map_err(|refused| RunError::refused(refused.join("\n  ")))?;
    let steering = match &req.steering {
        Some(dir) => crate::steering::read(dir).map_err(RunError::refused)?,
        None => Vec::new(),
    };
    Ok(Admitted {
        max_cost,
        max_secs,
        goal: a.goal,
        agent_cmd: a.agent_cmd,
        harnesses: a.harnesses,
        graph: plan.graph().clone(),
        truncating: a.caps.truncating,
        cap_skipped: a.caps.skipped,
        sandboxes: a.sandboxes,
        steering,
    })
}

/// What of a route this engine decides: unmapped, from a source dependency or by the decision
/// model of the run's decision binding. A route whose `needs` the run lacks (a model-decided
/// route without `decision`, a human-decided one without `human`) is settled by the capability
/// verdict; with it, the decider must be one this engine can ask.
fn route_runs(t: &crucible_plan::Task, sub: Substrate) -> Result<(), String> {
    let (caps, decision) = (sub.caps, sub.inference.decision.as_ref());
    let n = &t.name;
    let Some(spec) = &t.route else {
        return Err(format!("route `{n}` has no questions"));
    };
    let need_met = t.needs == "any" || caps.contains(&t.needs);
    if spec.human {
        // RFC-0002:C-HUMAN-DECISION: without `human` the route truncates (or is skipped); with
        // it, someone must be there to answer: a controller, or the terminal.
        if t.over.is_some() && need_met {
            return Err(format!(
                "route `{n}` is decided by a person once per item, which this engine does not run yet: one request per run and route"
            ));
        }
        return match (need_met, sub.decider) {
            (true, None) => Err(format!(
                "route `{n}` is decided by a person, and this run has no one to ask: no controller ({}) and no terminal",
                crate::decision::controller::URL_ENV
            )),
            _ => Ok(()),
        };
    }
    // The compiler makes such a route need `decision`; whenever that need is met, the route
    // dispatches to the decision model.
    if spec.min_confidence.is_some() && need_met {
        let Some(binding) = decision else {
            return Err(format!(
                "route `{n}` asks a decision model and the run has no decision binding: \
                 name one in {} (the `decision` capability alone names no model)",
                crucible_agent::inference::INFERENCE_ENV
            ));
        };
        if let Some(why) = crucible_agent::decision::unusable(binding) {
            return Err(format!("route `{n}` asks a decision model, but {why}"));
        }
    }
    if spec.min_confidence.is_none() && spec.source.is_none() {
        return Err(format!(
            "route `{n}` names neither a source nor min_confidence"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::{Plan, Task};

    fn request(tasks: Vec<Task>) -> (tempfile::TempDir, RunRequest) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crucible.toml");
        std::fs::write(&path, "[workflow]\ntype = \"playbook\"\n").unwrap();
        let plan = Plan {
            version: 1,
            workflow_type: WorkflowType::Playbook,
            result: None,
            history_record: None,
            params: Default::default(),
            tasks,
        };
        let req = RunRequest {
            plan: ValidatedPlan::new(plan).unwrap(),
            manifest: crucible_pack::load(&path).unwrap(),
            pack_digest: "tree1:x".into(),
            state_dir: dir.path().join("state"),
            max_cost: Some(1.0),
            max_secs: Some(60),
            caps: Vec::new(),
            jobs: 1,
            launch: crate::Launch::Fresh,
            read_ahead: None,
            inference: Default::default(),
            history: crate::history::History::none(0),
            series: None,
            reports: Default::default(),
            max_asks: 10,
            no_sandbox: false,
            hidden: Vec::new(),
            decider: None,
            decision_bounds: Default::default(),
            agent_cmd: None,
            harness: None,
            model: None,
            max_files_bytes: crate::files::DEFAULT_MAX_FILES_BYTES,
            groups: Default::default(),
            steering: None,
        };
        (dir, req)
    }

    fn cmd(name: &str, deps: &[&str]) -> Task {
        let mut t = Task::new(name, TaskKind::Command);
        t.run = Some("true".into());
        t.depends_on = deps.iter().map(|d| d.to_string()).collect();
        t
    }

    fn route(name: &str, source: Option<&str>, min_confidence: Option<f64>) -> Task {
        let mut t = Task::new(name, TaskKind::Route);
        t.depends_on = vec!["a".into()];
        let mut questions = std::collections::BTreeMap::new();
        let mut ok = crucible_plan::Question::new(crucible_plan::QuestionKind::Noul, "ok?");
        ok.labels = vec![
            crucible_plan::Label::new("yes"),
            crucible_plan::Label::new("no"),
        ];
        questions.insert("ok".to_string(), ok);
        t.route = Some(crucible_plan::RouteSpec {
            questions,
            min_confidence,
            source: source.map(str::to_string),
            human: false,
            review: None,
            files: Vec::new(),
        });
        if min_confidence.is_some() {
            t.needs = "decision".into();
        }
        t
    }

    fn refusal(req: &RunRequest) -> String {
        admit(req).unwrap_err().message
    }

    // RFC-0002:C-PLAYBOOK-CAPS: a model route without `decision` is left to the capability
    // verdict; with it, it needs a decision binding this engine can ask. A human route without
    // `human` is left to the verdict too; with it, it needs someone to answer.
    #[test]
    fn routes_admitted_by_decider() {
        let (_d, req) = request(vec![cmd("a", &[]), route("r", None, Some(0.5))]);
        assert_eq!(admit(&req).unwrap().truncating, vec![1]);
        let (_d, mut req) = request(vec![cmd("a", &[]), route("r", None, Some(0.5))]);
        req.caps = vec!["decision".into()];
        assert!(refusal(&req).contains("no decision binding"));
        let binding = |protocol: &str| {
            let doc = format!(
                r#"{{"version": 1, "bindings": [{{"role": "decision", "protocol": "{protocol}", "url": "https://s1.example/v1/systemone", "model": "m"}}]}}"#
            );
            crucible_agent::inference::parse(&doc).unwrap()
        };
        req.inference = binding("system_one");
        assert!(admit(&req).is_ok());
        req.inference = binding("decisions");
        assert!(refusal(&req).contains("speaks only system_one"));
        let mut human = route("h", None, None);
        human.route.as_mut().unwrap().human = true;
        human.needs = "human".into();
        let (_d, mut req) = request(vec![cmd("a", &[]), human]);
        assert_eq!(admit(&req).unwrap().truncating, vec![1]);
        req.caps = vec!["human".into()];
        assert!(refusal(&req).contains("this run has no one to ask"));
    }

    #[test]
    fn ceilings_are_the_launch_s_own_and_bound_every_timeout() {
        let (_d, mut req) = request(vec![cmd("a", &[])]);
        req.max_secs = None;
        assert!(refusal(&req).contains("--max-time is required"));
        let mut slow = cmd("a", &[]);
        slow.timeout_secs = Some(120);
        let (_d, req) = request(vec![slow]);
        assert!(refusal(&req).contains("above --max-time 1m"));
    }

    // Every reason is given at once, so `check` can list them all.
    #[test]
    fn every_refusal_is_reported() {
        let mut boxed = Task::new("boxed", TaskKind::Agent);
        boxed.prompt = Some("hi".into());
        boxed.sandbox = Some("net".into());
        let (_d, req) = request(vec![boxed]);
        let e = refusal(&req);
        assert!(
            e.contains("task `boxed` names sandbox `net`, which no [agent.sandbox.net]"),
            "{e}"
        );
        assert!(e.contains("no agent backend"), "{e}");
    }
}

//! Admission: everything refused before any dispatch (exit 1), and the capability verdict
//! (RFC-0002:C-PLAYBOOK-CAPS), decided before any spend.
//!
//! Full graph validation belongs to `crucible_plan::validate`; this checks only what the engine
//! needs in order not to misbehave on an odd plan (unknown or cyclic dependencies, stages mixed
//! across edges) and refuses features this engine does not run yet.

use crate::{RunError, RunRequest};
use crucible_plan::{Join, Stage, TaskKind, WorkflowType, RESERVED_INPUTS};
use std::collections::HashMap;

#[derive(Debug)]
pub struct Admitted {
    pub max_cost: f64,
    pub max_secs: u64,
    pub goal: Option<String>,
    /// The stand-in command agent turns run, when the plan has agent tasks.
    pub agent_cmd: Option<String>,
    /// Dependencies of each task, as indices into `plan.tasks`.
    pub deps: Vec<Vec<usize>>,
    pub dependents: Vec<Vec<usize>>,
    /// Required tasks whose `needs` the run lacks: the plan is truncated.
    pub truncating: Vec<usize>,
    /// Advisory tasks whose `needs` the run lacks, and every task skipped with them.
    pub cap_skipped: Vec<(usize, String)>,
}

pub fn admit(req: &RunRequest) -> Result<Admitted, RunError> {
    let refuse = |m: String| Err(RunError::refused(m));
    let plan = &req.plan;
    // RFC-0002:C-PLAYBOOK-BUDGET: both ceilings, from the launch, before anything else.
    let Some(max_cost) = req.max_cost else {
        return refuse("--max-cost is required: a playbook runs only under a cost ceiling (RFC-0002:C-PLAYBOOK-BUDGET)".into());
    };
    let Some(max_secs) = req.max_secs else {
        return refuse("--max-time is required: a playbook runs only under a wall-clock ceiling (RFC-0002:C-PLAYBOOK-BUDGET)".into());
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
    if plan.workflow_type != WorkflowType::Playbook {
        return refuse(format!(
            "this engine runs playbooks only; the plan's type is {}",
            plan.workflow_type
        ));
    }
    if plan.tasks.is_empty() {
        return refuse("the plan has no tasks".into());
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, t) in plan.tasks.iter().enumerate() {
        if t.name.is_empty() {
            return refuse(format!("task #{} has an empty name", i + 1));
        }
        if index.insert(t.name.as_str(), i).is_some() {
            return refuse(format!("task `{}` is declared twice", t.name));
        }
    }
    let mut deps = vec![Vec::new(); plan.tasks.len()];
    let mut dependents = vec![Vec::new(); plan.tasks.len()];
    let mut has_agent = false;
    for (i, t) in plan.tasks.iter().enumerate() {
        let n = &t.name;
        let unsupported = |what: &str| -> Result<(), RunError> {
            Err(RunError::refused(format!(
                "task `{n}` uses {what}, which this engine does not run yet"
            )))
        };
        match t.kind {
            TaskKind::Command | TaskKind::Evaluate => {
                if t.run.as_deref().is_none_or(|r| r.trim().is_empty()) {
                    return refuse(format!("{} task `{n}` has no `run` command", t.kind));
                }
            }
            TaskKind::Agent => {
                has_agent = true;
                if t.prompt.as_deref().is_none_or(|p| p.trim().is_empty()) {
                    return refuse(format!("agent task `{n}` has no prompt"));
                }
            }
            TaskKind::Route => route_runs(t, &req.caps, req.inference.decision.as_ref())?,
            TaskKind::Report => match t.report.as_ref().map(|r| r.destination.as_str()) {
                Some("slack") => {}
                Some(other) => unsupported(&format!("the report destination `{other}`"))?,
                None => return refuse(format!("report task `{n}` names no destination")),
            },
            TaskKind::Engine => {
                return refuse(format!(
                    "task `{n}` names an engine operation, which a playbook may not (RFC-0002:C-PLAYBOOK-LANE)"
                ))
            }
            other => unsupported(&format!("kind `{other}`"))?,
        }
        if t.sandbox.is_some() {
            unsupported("a sandbox")?;
        }
        if t.isolated && t.session.is_some() {
            return refuse(format!(
                "task `{n}` is isolated and in a session: a task in a session cannot be isolated"
            ));
        }
        for f in ["complete", "reason"] {
            if t.emits.contains_key(f) {
                return refuse(format!(
                    "task `{n}` declares `{f}` in emits: it is a reserved output field (RFC-0002:C-PLAYBOOK-LANE)"
                ));
            }
        }
        match t.timeout_secs {
            Some(0) => return refuse(format!("task `{n}` declares a zero timeout")),
            Some(s) if s > max_secs => {
                return refuse(format!(
                    "task `{n}` declares timeout {} above --max-time {}: a deadline never extends past the ceiling (RFC-0002:C-PLAYBOOK-BUDGET)",
                    crucible_plan::duration::format(s),
                    crucible_plan::duration::format(max_secs)
                ))
            }
            _ => {}
        }
        if t.depends_on.is_empty() && t.join != Join::All {
            return refuse(format!(
                "task `{n}` joins \"{}\" with no dependencies",
                t.join
            ));
        }
        for d in &t.depends_on {
            if RESERVED_INPUTS.contains(&d.as_str()) {
                return refuse(format!(
                    "task `{n}` depends on `{d}`, a reserved input name (RFC-0002:C-SETTLED-JOIN)"
                ));
            }
            let Some(&j) = index.get(d.as_str()) else {
                return refuse(format!("task `{n}` depends on `{d}`, which is not a task"));
            };
            if j == i || deps[i].contains(&j) {
                return refuse(format!(
                    "task `{n}` lists dependency `{d}` badly (self or twice)"
                ));
            }
            match (t.stage, plan.tasks[j].stage) {
                (Stage::Epilogue, Stage::Iteration) => {
                    return refuse(format!(
                        "epilogue task `{n}` depends on main-graph task `{d}`: it receives the `outcome` input instead (RFC-0002:C-PLAYBOOK-LANE)"
                    ))
                }
                (Stage::Iteration, Stage::Epilogue) => {
                    return refuse(format!(
                        "main-graph task `{n}` depends on epilogue task `{d}`"
                    ))
                }
                _ => {}
            }
            deps[i].push(j);
            dependents[j].push(i);
        }
    }
    // Kahn's algorithm: a cycle would leave tasks waiting forever.
    let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut queue: Vec<usize> = (0..waiting.len()).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(waiting.len());
    while let Some(i) = queue.pop() {
        order.push(i);
        for &j in &dependents[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                queue.push(j);
            }
        }
    }
    if order.len() != plan.tasks.len() {
        let stuck: Vec<&str> = (0..waiting.len())
            .filter(|&i| waiting[i] > 0)
            .map(|i| plan.tasks[i].name.as_str())
            .collect();
        return refuse(format!(
            "the dependencies form a cycle through: {}",
            stuck.join(", ")
        ));
    }
    let m = &req.manifest.manifest.agent;
    let agent_cmd = req.agent_cmd.clone().or_else(|| {
        (m.backend.as_deref() == Some("command"))
            .then(|| m.agent_cmd.clone())
            .flatten()
    });
    if has_agent && agent_cmd.is_none() {
        return refuse(
            "the plan has agent tasks but no agent backend: set [agent] backend = \"command\" with agent_cmd, or pass --agent-cmd (harness backends are not built yet)".into(),
        );
    }
    let goal = match (&m.goal, &m.goal_file) {
        (Some(g), _) => Some(g.clone()),
        (None, Some(f)) => Some(
            std::fs::read_to_string(req.manifest.resolve(f))
                .map_err(|e| RunError::refused(format!("[agent].goal_file {f}: {e}")))?,
        ),
        (None, None) => None,
    };
    let (truncating, cap_skipped) = capabilities(req, &deps, &order);
    Ok(Admitted {
        max_cost,
        max_secs,
        goal,
        agent_cmd,
        deps,
        dependents,
        truncating,
        cap_skipped,
    })
}

/// What of a route this engine decides: unmapped, from a source dependency or by the decision
/// model of the run's decision binding. A model-decided route without the `decision`
/// capability is settled by [`capabilities`] (its `needs` is `decision`); with it, the binding
/// must be one this engine can ask.
fn route_runs(
    t: &crucible_plan::Task,
    caps: &[String],
    decision: Option<&crucible_agent::inference::Binding>,
) -> Result<(), RunError> {
    let n = &t.name;
    let Some(spec) = &t.route else {
        return Err(RunError::refused(format!("route `{n}` has no questions")));
    };
    let refuse = |what: &str| {
        Err(RunError::refused(format!(
            "route `{n}` {what}, which this engine does not run yet"
        )))
    };
    if spec.human {
        return refuse("is decided by a person");
    }
    // The compiler makes such a route need `decision`; whenever that need is met, the route
    // dispatches to the decision model.
    let need_met = t.needs == "any" || caps.contains(&t.needs);
    if spec.min_confidence.is_some() && need_met {
        let Some(binding) = decision else {
            return Err(RunError::refused(format!(
                "route `{n}` asks a decision model and the run has no decision binding: \
                 name one in {} (the `decision` capability alone names no model)",
                crucible_agent::inference::INFERENCE_ENV
            )));
        };
        if let Some(why) = crucible_agent::decision::unusable(binding) {
            return Err(RunError::refused(format!(
                "route `{n}` asks a decision model, but {why}"
            )));
        }
    }
    if spec.min_confidence.is_none() && spec.source.is_none() {
        return Err(RunError::refused(format!(
            "route `{n}` names neither a source nor min_confidence"
        )));
    }
    Ok(())
}

/// RFC-0002:C-PLAYBOOK-CAPS: a required task whose `needs` is unavailable truncates the plan;
/// an advisory one is skipped with its dependents. A dependent joining "settled" is not skipped
/// for its dependency's sake; one joining "passed" is skipped only when every dependency is.
fn capabilities(
    req: &RunRequest,
    deps: &[Vec<usize>],
    topo: &[usize],
) -> (Vec<usize>, Vec<(usize, String)>) {
    let tasks = &req.plan.tasks;
    let available = |need: &str| need == "any" || req.caps.iter().any(|c| c == need);
    let truncating: Vec<usize> = (0..tasks.len())
        .filter(|&i| tasks[i].required && !available(&tasks[i].needs))
        .collect();
    let mut skipped: Vec<Option<String>> = vec![None; tasks.len()];
    // In topological order every dependency is decided before its dependents: one pass.
    for &i in topo {
        let t = &tasks[i];
        if t.required && !available(&t.needs) {
            continue;
        }
        let why = if !available(&t.needs) {
            Some(format!(
                "needs `{}`, which this run does not provide",
                t.needs
            ))
        } else {
            let skipped_deps: Vec<usize> = deps[i]
                .iter()
                .copied()
                .filter(|&d| skipped[d].is_some())
                .collect();
            let hit = match t.join {
                Join::All => !skipped_deps.is_empty(),
                Join::Passed => !deps[i].is_empty() && skipped_deps.len() == deps[i].len(),
                Join::Settled => false,
            };
            hit.then(|| {
                format!(
                    "skipped with `{}`, whose capability is unavailable",
                    tasks[skipped_deps[0]].name
                )
            })
        };
        skipped[i] = why;
    }
    let cap_skipped = skipped
        .into_iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|s| (i, s)))
        .collect();
    (truncating, cap_skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::{Plan, Task};

    fn request(tasks: Vec<Task>) -> (tempfile::TempDir, RunRequest) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crucible.toml");
        std::fs::write(&path, "[workflow]\ntype = \"playbook\"\n").unwrap();
        let req = RunRequest {
            plan: Plan {
                version: 1,
                workflow_type: WorkflowType::Playbook,
                result: None,
                history_record: None,
                params: Default::default(),
                tasks,
            },
            manifest: crucible_pack::load(&path).unwrap(),
            pack_digest: "tree1:x".into(),
            state_dir: dir.path().join("state"),
            max_cost: Some(1.0),
            max_secs: Some(60),
            caps: Vec::new(),
            jobs: 1,
            launch: crate::Launch::Fresh,
            inference: Default::default(),
            history: crate::history::History::none(0),
            reports: Default::default(),
            max_asks: 10,
            agent_cmd: None,
            harness: None,
            model: None,
            max_files_bytes: crate::files::DEFAULT_MAX_FILES_BYTES,
        };
        (dir, req)
    }

    fn cmd(name: &str, deps: &[&str]) -> Task {
        let mut t = Task::new(name, TaskKind::Command);
        t.run = Some("true".into());
        t.depends_on = deps.iter().map(|d| d.to_string()).collect();
        t
    }

    // RFC-0002:C-PLAYBOOK-CAPS: skips spread downstream in one pass whatever the declaration
    // order; a settled join is not skipped for its dependency's sake.
    #[test]
    fn advisory_skips_spread_in_topological_order() {
        let mut gpu = cmd("gpu", &[]);
        gpu.needs = "gpu".into();
        gpu.required = false;
        let mut settled = cmd("settled", &["gpu"]);
        settled.join = Join::Settled;
        let (_d, req) = request(vec![cmd("c", &["b"]), cmd("b", &["gpu"]), gpu, settled]);
        let adm = admit(&req).unwrap();
        let skipped: Vec<usize> = adm.cap_skipped.iter().map(|(i, _)| *i).collect();
        assert_eq!(skipped.len(), 3);
        assert!(skipped.contains(&0) && skipped.contains(&1) && skipped.contains(&2));
        assert!(adm.truncating.is_empty());
    }

    fn route(name: &str, source: Option<&str>, min_confidence: Option<f64>) -> Task {
        let mut t = Task::new(name, TaskKind::Route);
        t.depends_on = vec!["a".into()];
        t.route = Some(crucible_plan::RouteSpec {
            questions: Default::default(),
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

    // RFC-0002:C-PLAYBOOK-CAPS: a source route runs; a model route without `decision` is left to
    // the capability verdict; with it, it needs a decision binding this engine can ask.
    #[test]
    fn routes_admitted_by_decider() {
        let (_d, req) = request(vec![cmd("a", &[]), route("r", Some("a"), None)]);
        assert!(admit(&req).is_ok());
        let (_d, req) = request(vec![cmd("a", &[]), route("r", None, Some(0.5))]);
        assert_eq!(admit(&req).unwrap().truncating, vec![1]);
        let (_d, mut req) = request(vec![cmd("a", &[]), route("r", None, Some(0.5))]);
        req.caps = vec!["decision".into()];
        let e = admit(&req).unwrap_err();
        assert!(e.message.contains("no decision binding"), "{e}");
        let binding = |protocol: &str| {
            let doc = format!(
                r#"{{"version": 1, "bindings": [{{"role": "decision", "protocol": "{protocol}", "url": "https://s1.example/v1/systemone", "model": "m"}}]}}"#
            );
            crucible_agent::inference::parse(&doc).unwrap()
        };
        req.inference = binding("system_one");
        assert!(admit(&req).is_ok());
        req.inference = binding("decisions");
        let e = admit(&req).unwrap_err();
        assert!(e.message.contains("speaks only system_one"), "{e}");
        let mut human = route("h", None, None);
        human.route.as_mut().unwrap().human = true;
        let (_d, req) = request(vec![cmd("a", &[]), human]);
        assert!(admit(&req)
            .unwrap_err()
            .message
            .contains("decided by a person"));
    }

    #[test]
    fn ceilings_and_cycles_are_refused() {
        let (_d, mut req) = request(vec![cmd("a", &[])]);
        req.max_secs = None;
        assert!(admit(&req)
            .unwrap_err()
            .message
            .contains("--max-time is required"));
        let (_d, req) = request(vec![cmd("a", &["b"]), cmd("b", &["a"])]);
        assert!(admit(&req).unwrap_err().message.contains("cycle"));
    }
}

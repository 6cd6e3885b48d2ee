//! The capability verdict (RFC-0002:C-PLAYBOOK-CAPS), decided before any dispatch: which
//! required tasks truncate the plan and which tasks are skipped with an advisory one. `plan
//! run` settles these rows, and `check` and `plan show` print the same verdict from the same
//! function.
//!
//! Reading: "skipped along with its dependents" follows each dependent's join. An `all` join
//! is skipped when any dependency is; a `passed` join, which runs on the dependencies that
//! passed, only when every dependency is; a `settled` join never, as RFC-0002:C-SETTLED-JOIN
//! requires ("runnable wherever the substrate satisfies its own capability requirement").

use crucible_plan::{Join, ValidatedPlan};

/// What the run's capabilities leave of the plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapVerdict {
    /// Required tasks whose `needs` the run lacks: the plan is truncated.
    pub truncating: Vec<usize>,
    /// Tasks skipped for a missing capability, with the note their row carries, in the plan's
    /// topological order.
    pub skipped: Vec<(usize, String)>,
}

impl CapVerdict {
    /// One line per skipped task and the verdict, as the inspectors print them.
    pub fn lines(&self, plan: &ValidatedPlan) -> Vec<String> {
        let name = |i: usize| plan.tasks[i].name.as_str();
        let mut out: Vec<String> = self
            .skipped
            .iter()
            .map(|(i, why)| format!("skipped: {}: {why}", name(*i)))
            .collect();
        out.push(match self.truncating.as_slice() {
            [] => "verdict: runnable".to_string(),
            all => format!(
                "verdict: TRUNCATED — {}",
                all.iter()
                    .map(|&i| format!("{} needs {}", name(i), plan.tasks[i].needs))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
        out
    }
}

/// The verdict for a run providing `caps` (`any` is always provided).
pub fn verdict(plan: &ValidatedPlan, caps: &[String]) -> CapVerdict {
    let tasks = &plan.tasks;
    let deps = plan.graph().deps();
    let available = |need: &str| need == "any" || caps.iter().any(|c| c == need);
    let truncating: Vec<usize> = (0..tasks.len())
        .filter(|&i| tasks[i].required && !available(&tasks[i].needs))
        .collect();
    let mut skipped: Vec<Option<String>> = vec![None; tasks.len()];
    // In topological order every dependency is decided before its dependents: one pass.
    for &i in plan.graph().order() {
        let t = &tasks[i];
        if t.required && !available(&t.needs) {
            continue;
        }
        skipped[i] = if !available(&t.needs) {
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
    }
    let skipped = plan
        .graph()
        .order()
        .iter()
        .filter_map(|&i| skipped[i].take().map(|s| (i, s)))
        .collect();
    CapVerdict {
        truncating,
        skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::{Plan, Task, TaskKind, WorkflowType};

    fn cmd(name: &str, deps: &[&str]) -> Task {
        let mut t = Task::new(name, TaskKind::Command);
        t.run = Some("true".into());
        t.depends_on = deps.iter().map(|d| d.to_string()).collect();
        t
    }

    fn validated(tasks: Vec<Task>) -> ValidatedPlan {
        ValidatedPlan::new(Plan {
            version: crucible_plan::PLAN_VERSION,
            workflow_type: WorkflowType::Playbook,
            result: None,
            history_record: None,
            params: Default::default(),
            tasks,
        })
        .unwrap()
    }

    fn advisory(mut t: Task, needs: &str) -> Task {
        t.needs = needs.into();
        t.required = false;
        t
    }

    // RFC-0002:C-PLAYBOOK-CAPS: skips spread downstream in one pass whatever the declaration
    // order; a settled join is not skipped for its dependency's sake.
    #[test]
    fn advisory_skips_spread_in_topological_order() {
        let mut settled = advisory(cmd("settled", &["gpu"]), "any");
        settled.join = Join::Settled;
        let p = validated(vec![
            advisory(cmd("c", &["b"]), "any"),
            advisory(cmd("b", &["gpu"]), "any"),
            advisory(cmd("gpu", &[]), "gpu"),
            settled,
        ]);
        let v = verdict(&p, &[]);
        let skipped: Vec<usize> = v.skipped.iter().map(|(i, _)| *i).collect();
        assert_eq!(skipped, vec![2, 1, 0]);
        assert!(v.truncating.is_empty());
        assert_eq!(
            v.lines(&p),
            vec![
                "skipped: gpu: needs `gpu`, which this run does not provide",
                "skipped: b: skipped with `gpu`, whose capability is unavailable",
                "skipped: c: skipped with `b`, whose capability is unavailable",
                "verdict: runnable",
            ]
        );
        assert_eq!(verdict(&p, &["gpu".into()]), CapVerdict::default());
    }

    // RFC-0002:C-PLAYBOOK-CAPS with the DSL reference's `passed` join: a passed join runs on the
    // dependencies that passed, so one skipped dependency does not skip it.
    #[test]
    fn a_passed_join_is_skipped_only_when_every_dependency_is() {
        let mut c = cmd("c", &["a", "gpu"]);
        c.join = Join::Passed;
        let p = validated(vec![cmd("a", &[]), advisory(cmd("gpu", &[]), "gpu"), c]);
        let v = verdict(&p, &[]);
        assert_eq!(v.skipped.len(), 1, "{v:?}");
        let mut c = advisory(cmd("c", &["gpu", "gpu2"]), "any");
        c.join = Join::Passed;
        let p = validated(vec![
            advisory(cmd("gpu", &[]), "gpu"),
            advisory(cmd("gpu2", &[]), "gpu"),
            c,
        ]);
        assert_eq!(verdict(&p, &[]).skipped.len(), 3);
    }

    #[test]
    fn every_unrunnable_required_task_is_named() {
        let p = validated(vec![cmd("a", &[]), advisory(cmd("gpu", &[]), "gpu"), {
            let mut t = cmd("train", &[]);
            t.needs = "tpu".into();
            t
        }]);
        let v = verdict(&p, &[]);
        assert_eq!(v.truncating, vec![2]);
        assert_eq!(
            v.lines(&p).last().unwrap(),
            "verdict: TRUNCATED — train needs tpu"
        );
    }
}

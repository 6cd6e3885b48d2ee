//! A plan that passed validation, with the dependency graph every consumer reads: the DSL
//! reference's and RFC-0002's compile-time rules hold for it, so the engine, `check` and
//! `plan show` never check names, dependencies or cycles again.
//!
//! [`ValidatedPlan`] is built only by [`ValidatedPlan::new`], which runs
//! [`validate`](crate::validate::validate); the plan inside cannot be changed afterwards.

use crate::plan::Plan;
use crate::validate::{checked, PlanError};
use std::collections::{BTreeSet, HashMap};
use std::ops::Deref;

/// A plan every validation rule holds for, and its graph.
#[derive(Clone, Debug)]
pub struct ValidatedPlan {
    plan: Plan,
    graph: Graph,
}

impl ValidatedPlan {
    /// Validates `plan`; every rule it breaks otherwise.
    pub fn new(plan: Plan) -> Result<ValidatedPlan, Vec<PlanError>> {
        let (errors, graph) = checked(&plan);
        if errors.is_empty() {
            Ok(ValidatedPlan { plan, graph })
        } else {
            Err(errors)
        }
    }

    /// The plan itself, for an owner that no longer needs it checked (the engine's
    /// coordinator, once the run is admitted).
    pub fn into_plan(self) -> Plan {
        self.plan
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}

/// Read-only access to the plan: a validated plan is used wherever a plan is read.
impl Deref for ValidatedPlan {
    type Target = Plan;
    fn deref(&self) -> &Plan {
        &self.plan
    }
}

/// The dependency graph of a plan, as indices into `plan.tasks`.
#[derive(Clone, Debug)]
pub struct Graph {
    index: HashMap<String, usize>,
    deps: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
    /// Every task, each after all its dependencies; among tasks ready together, declaration
    /// order. Tasks on or behind a cycle are missing (validation refuses such a plan).
    order: Vec<usize>,
}

impl Graph {
    /// The edges that name a task, once each and never a task's own name (validation reports
    /// the others), and a topological order by Kahn's algorithm.
    pub(crate) fn of(plan: &Plan) -> Graph {
        let n = plan.tasks.len();
        let mut index = HashMap::with_capacity(n);
        for (i, t) in plan.tasks.iter().enumerate() {
            index.entry(t.name.clone()).or_insert(i);
        }
        let mut deps = vec![Vec::new(); n];
        let mut dependents = vec![Vec::new(); n];
        for (i, t) in plan.tasks.iter().enumerate() {
            for d in &t.depends_on {
                if let Some(&j) = index.get(d) {
                    if j != i && !deps[i].contains(&j) {
                        deps[i].push(j);
                        dependents[j].push(i);
                    }
                }
            }
        }
        let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
        let mut ready: BTreeSet<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &j in &dependents[i] {
                waiting[j] -= 1;
                if waiting[j] == 0 {
                    ready.insert(j);
                }
            }
        }
        Graph {
            index,
            deps,
            dependents,
            order,
        }
    }

    /// The task named `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Each task's dependencies.
    pub fn deps(&self) -> &[Vec<usize>] {
        &self.deps
    }

    /// Each task's dependents.
    pub fn dependents(&self) -> &[Vec<usize>] {
        &self.dependents
    }

    /// Every task after its dependencies.
    pub fn order(&self) -> &[usize] {
        &self.order
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::tests::{cmd, plan};

    #[test]
    fn order_puts_dependencies_first_and_keeps_declaration_order_among_peers() {
        let p = ValidatedPlan::new(plan(vec![
            cmd("c", &["b"]),
            cmd("b", &["a"]),
            cmd("x", &[]),
            cmd("a", &[]),
        ]))
        .unwrap();
        assert_eq!(p.graph().order(), &[2, 3, 1, 0]);
        assert_eq!(p.graph().deps()[0], vec![1]);
        assert_eq!(p.graph().dependents()[3], vec![1]);
        assert_eq!(p.graph().index("x"), Some(2));
        assert_eq!(p.tasks.len(), 4);
    }

    #[test]
    fn only_validation_builds_one() {
        let errors = ValidatedPlan::new(plan(vec![cmd("a", &["b"]), cmd("b", &["a"])]))
            .unwrap_err()
            .into_iter()
            .map(|e| e.rule)
            .collect::<Vec<_>>();
        assert_eq!(errors, vec!["cycle".to_string()]);
        assert!(ValidatedPlan::new(plan(vec![cmd("a", &["nope"])])).is_err());
    }
}

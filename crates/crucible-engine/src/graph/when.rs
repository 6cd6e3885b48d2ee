//! `when`/`answers`/`otherwise`, `optional(...)`, and when a task may dispatch under its join
//! (RFC-0002:C-SETTLED-JOIN, C-PLAYBOOK-BUDGET, C-PLAYBOOK-LANE; RFC-0001-NOTES §5 "when").
//!
//! Readings chosen (docs/decisions.md):
//! - Readiness waits until every dependency is terminal before deciding, so the decision never
//!   depends on the order in which dependencies settled.
//! - Under `all`, a non-optional dependency that was not taken makes the task not taken even when
//!   another dependency failed: the task sits on a branch that was not taken, so it would not have
//!   run whatever the other dependency did.
//! - Under `passed`, a task none of whose dependencies contributed is not taken when every one
//!   was not taken (a rejoin of branches none of which ran), and blocked otherwise. A mapped
//!   dependency contributes its fold whenever it was dispatched (it passed or failed), so a
//!   reducer over a lossy fan-out runs.
//! - A `when` whose route did not pass gives not taken: no answer was given.
//! - The cost ceiling is applied only once the join and `when` would dispatch a task that can
//!   spend, so a task that would be not taken is never recorded as blocked by spend.

use super::Entry;
use crucible_plan::{BlockedReason, Join, Status, Task, When, UNCERTAIN};
use serde_json::Value;
use std::collections::BTreeMap;

/// Whether a `when` runs its task, given the route's settled entry. `item` is the instance key
/// when a mapped task reads a route mapped over the same list: it then reads that item's answer
/// out of the route node's output (an object keyed by item, see [`super::fanout::fold`]).
pub fn runs(when: &When, route: &Entry, item: Option<&str>) -> bool {
    // A mapped route's fold holds only passing items' answers, so an item's answer stands even
    // when another item's decision failed the node.
    if item.is_none() && !route.status.is_pass() {
        return false;
    }
    let Some(output) = route.output.as_ref() else {
        return false;
    };
    let output = match item {
        Some(key) => match output.get(key) {
            Some(o) => o,
            None => return false, // that item's decision did not pass
        },
        None => output,
    };
    let Some(answer) = output.get(&when.question) else {
        return false;
    };
    // `every_option`: any option a field-read choice resolved to, never its `uncertain`.
    let listed = |label: &str| {
        when.answers.iter().any(|a| a == label) || (when.every_option && label != UNCERTAIN)
    };
    if answer
        .get("label")
        .and_then(Value::as_str)
        .is_some_and(listed)
    {
        return true;
    }
    // A multiple choice runs its task when any chosen label is listed (RFC-0002:C-HUMAN-DECISION).
    answer
        .get("labels")
        .and_then(Value::as_array)
        .is_some_and(|ls| ls.iter().filter_map(Value::as_str).any(listed))
}

/// What the coordinator knows about a dependency when deciding readiness.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dep<'a> {
    pub status: Status,
    pub mapped: bool,
    /// The settled entry; needed for the route a `when` reads.
    pub entry: Option<&'a Entry>,
}

impl<'a> Dep<'a> {
    /// A settled dependency as readiness sees it.
    pub fn of(entry: &'a Entry) -> Dep<'a> {
        Dep {
            status: entry.status,
            mapped: entry.is_mapped(),
            entry: Some(entry),
        }
    }
}

/// Why dispatch has stopped, as far as readiness cares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Halt {
    /// A required main-graph task settled other than passing (its name).
    pub required_failed: Option<String>,
    pub cost_exhausted: bool,
    pub wall_clock_exhausted: bool,
    pub truncated: bool,
    /// A task declared early completion.
    pub completed_early: bool,
}

/// What to do with a task now.
#[derive(Clone, Debug, PartialEq)]
pub enum Readiness {
    /// A dependency has not settled yet.
    Wait,
    Dispatch,
    /// Settle not_taken: no dispatch, no spend.
    NotTaken,
    /// Settle blocked for this reason, naming the task responsible where there is one.
    Blocked(BlockedReason, Option<String>),
    /// Early completion: never dispatched and never settled (RFC-0002:C-PLAYBOOK-LANE).
    Unsettled,
}

/// Decides a task's readiness from its dependencies' settled state (`deps` by name; absent
/// means not yet settled) and the run's halt state (RFC-0002:C-SETTLED-JOIN readiness rules).
///
/// For a mapped task whose `when` reads a route mapped over the same list, the node dispatches
/// (expands) and each instance's `when` is decided with [`runs`] and its key.
pub fn readiness(task: &Task, deps: &BTreeMap<String, Dep<'_>>, halt: &Halt) -> Readiness {
    // After early completion a main-graph task stays unsettled whatever halts the epilogue.
    if halt.completed_early && !task.is_epilogue() {
        return Readiness::Unsettled;
    }
    if halt.wall_clock_exhausted {
        return Readiness::Blocked(BlockedReason::WallClockCeiling, None);
    }
    if halt.truncated {
        return Readiness::Blocked(BlockedReason::Truncated, None);
    }
    // An epilogue task outlives a required failure; nothing else does.
    if let Some(failed) = halt
        .required_failed
        .as_ref()
        .filter(|_| !task.is_epilogue())
    {
        return Readiness::Blocked(BlockedReason::RequiredTaskFailed, Some(failed.clone()));
    }
    let mut settled = Vec::with_capacity(task.depends_on.len());
    for name in &task.depends_on {
        match deps.get(name) {
            Some(d) => settled.push((name.as_str(), *d)),
            None => return Readiness::Wait,
        }
    }
    if let Some(decided) = join_decision(task, &settled) {
        return decided;
    }
    if let Some(when) = &task.when {
        let per_instance = task.over.is_some() && deps.get(&when.route).is_some_and(|r| r.mapped);
        let route = deps.get(&when.route).and_then(|r| r.entry);
        if !per_instance && !route.is_some_and(|r| runs(when, r, None)) {
            return Readiness::NotTaken;
        }
    }
    if halt.cost_exhausted && task.can_spend() {
        return Readiness::Blocked(BlockedReason::BudgetCeiling, None);
    }
    Readiness::Dispatch
}

/// The join's verdict once every dependency is terminal; `None` when it lets the task dispatch.
fn join_decision(task: &Task, deps: &[(&str, Dep<'_>)]) -> Option<Readiness> {
    let did_not_pass =
        |name: &str| Readiness::Blocked(BlockedReason::DependencyDidNotPass, Some(name.into()));
    match task.join {
        Join::Settled => None,
        Join::All => {
            if deps
                .iter()
                .any(|(n, d)| d.status == Status::NotTaken && !task.is_optional_dep(n))
            {
                return Some(Readiness::NotTaken);
            }
            deps.iter()
                .find(|(_, d)| !matches!(d.status, Status::Pass | Status::NotTaken))
                .map(|(n, _)| did_not_pass(n))
        }
        Join::Passed => {
            if deps.iter().any(|(_, d)| contributes(Join::Passed, d)) {
                return None;
            }
            match deps.iter().find(|(_, d)| d.status != Status::NotTaken) {
                Some((n, _)) => Some(did_not_pass(n)),
                None => Some(Readiness::NotTaken),
            }
        }
    }
}

/// Whether one instance of a mapped task runs: its `when` read per item when the route is
/// mapped over the same list; otherwise the node-level [`readiness`] already decided.
pub fn instance_runs(task: &Task, key: &str, deps: &BTreeMap<String, Dep<'_>>) -> bool {
    let Some(when) = &task.when else {
        return true;
    };
    match deps.get(&when.route) {
        Some(route) if route.mapped => route.entry.is_some_and(|e| runs(when, e, Some(key))),
        _ => true,
    }
}

/// Whether a dependency gives a task joining `join` an input entry (RFC-0002:C-SETTLED-JOIN):
/// every dependency under `settled`; under `all`/`passed` one that passed, or a mapped node that
/// was dispatched, whose fold reaches its consumer whatever its status.
pub fn contributes(join: Join, dep: &Dep<'_>) -> bool {
    match join {
        Join::Settled => true,
        Join::All | Join::Passed => {
            dep.status.is_pass() || (dep.mapped && dep.status == Status::Fail)
        }
    }
}

/// The value a task joining `join` receives under a dependency's name, or `None` for no entry:
/// the settled entry itself under `settled`; the output directly (for a mapped node, its fold
/// object) under `all`/`passed`. An optional dependency that was not taken gives no entry.
pub fn input_value(join: Join, entry: &Entry) -> Option<Value> {
    if !contributes(join, &Dep::of(entry)) {
        return None;
    }
    Some(match join {
        Join::Settled => entry.to_value(),
        Join::All | Join::Passed => entry.output.clone().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::fanout;
    use crucible_plan::TaskKind;
    use serde_json::json;

    fn route_entry(question: &str, label: &str) -> Entry {
        Entry::new(
            Status::Pass,
            None,
            Some(
                json!({question: {"label": label, "confidence": 1.0, "probabilities": {label: 1.0}}}),
            ),
            false,
        )
    }

    fn when(answers: &[&str]) -> When {
        When {
            route: "gate".into(),
            question: "risky".into(),
            answers: answers.iter().map(|s| s.to_string()).collect(),
            every_option: false,
        }
    }

    fn task(join: Join, deps: &[&str]) -> Task {
        let mut t = Task::new("t", TaskKind::Command);
        t.depends_on = deps.iter().map(|s| s.to_string()).collect();
        t.join = join;
        t
    }

    fn dep(status: Status) -> Dep<'static> {
        Dep {
            status,
            mapped: false,
            entry: None,
        }
    }

    fn deps<'a>(list: &[(&str, Dep<'a>)]) -> BTreeMap<String, Dep<'a>> {
        list.iter().map(|(n, d)| (n.to_string(), *d)).collect()
    }

    // DSL when/answers/otherwise — a listed answer runs the task; `otherwise` is expanded at
    // compile time into the answers list, so it is a list like any other here.
    #[test]
    fn when_table() {
        let yes = route_entry("risky", "yes");
        let unc = route_entry("risky", "uncertain");
        let failed = Entry::new(Status::Fail, None, None, false);
        assert!(runs(&when(&["yes"]), &yes, None));
        assert!(!runs(&when(&["no"]), &yes, None));
        // otherwise = every unlisted, undropped answer, `uncertain` included.
        assert!(runs(&when(&["no", "uncertain"]), &unc, None));
        // drop: an answer no when lists leads nowhere; every when-task is not taken.
        let dropped = route_entry("risky", "no");
        assert!(!runs(&when(&["yes"]), &dropped, None));
        assert!(!runs(&when(&["uncertain"]), &dropped, None));
        // A route that did not pass gave no answer.
        assert!(!runs(&when(&["yes"]), &failed, None));
        // A question the output does not carry gave no answer either.
        assert!(!runs(
            &When {
                question: "other".into(),
                ..when(&["yes"])
            },
            &yes,
            None
        ));
    }

    // DSL `otherwise` on a choice whose options come from a field: it stands for every option
    // the choice resolves to (only the decision knows them), and for `uncertain` only when the
    // compiler put it in the answers.
    #[test]
    fn otherwise_on_a_field_choice_runs_on_every_option() {
        let every = When {
            every_option: true,
            ..when(&[])
        };
        assert!(runs(&every, &route_entry("risky", "beta"), None));
        assert!(!runs(&every, &route_entry("risky", "uncertain"), None));
        let with_uncertain = When {
            every_option: true,
            ..when(&["uncertain"])
        };
        assert!(runs(
            &with_uncertain,
            &route_entry("risky", "uncertain"),
            None
        ));
    }

    // RFC-0002:C-HUMAN-DECISION — a multiple choice runs a when listing any chosen label.
    #[test]
    fn multiple_choice_runs_on_any_chosen_label() {
        let e = Entry::new(
            Status::Pass,
            None,
            Some(
                json!({"risky": {"label": "a", "labels": ["a", "b"], "confidence": 1.0,
                                  "probabilities": {"a": 1.0, "b": 1.0}}}),
            ),
            false,
        );
        assert!(runs(&when(&["b"]), &e, None));
        assert!(!runs(&when(&["c"]), &e, None));
    }

    // DSL route over — a task mapped over the same list reads each item's answer.
    #[test]
    fn a_mapped_when_reads_its_own_items_answer() {
        let node = fanout::fold(vec![
            ("x".into(), route_entry("risky", "yes")),
            ("y".into(), route_entry("risky", "no")),
            ("z".into(), Entry::new(Status::Fail, None, None, false)),
        ]);
        let w = when(&["yes"]);
        // The node failed (z), but each item's passing answer is still in its output.
        assert_eq!(node.status, Status::Fail);
        assert!(runs(&w, &node, Some("x")));
        assert!(!runs(&w, &node, Some("y")));
        assert!(!runs(&w, &node, Some("z")));
    }

    // RFC-0002:C-SETTLED-JOIN — readiness under each join, table-driven.
    #[test]
    fn join_table() {
        use Join::*;
        use Readiness as R;
        use Status::*;
        let dnp = |n: &str| R::Blocked(BlockedReason::DependencyDidNotPass, Some(n.into()));
        type Row<'a> = (Join, &'a [&'a str], Vec<(&'a str, Status)>, Readiness);
        let table: Vec<Row> = vec![
            (All, &[], vec![("a", Pass)], R::Wait),
            (All, &[], vec![("a", Pass), ("b", Pass)], R::Dispatch),
            (All, &[], vec![("a", Pass), ("b", Fail)], dnp("b")),
            (All, &[], vec![("a", Skipped), ("b", Pass)], dnp("a")),
            // an all-join chain goes not_taken with its dependency
            (All, &[], vec![("a", NotTaken), ("b", Pass)], R::NotTaken),
            (All, &[], vec![("a", NotTaken), ("b", Fail)], R::NotTaken),
            // optional: dispatch past a not-taken dependency, but a failure still blocks
            (All, &["a"], vec![("a", NotTaken), ("b", Pass)], R::Dispatch),
            (All, &["a"], vec![("a", Fail), ("b", Pass)], dnp("a")),
            // passed: at least one passed; branches rejoin
            (Passed, &[], vec![("a", NotTaken), ("b", Pass)], R::Dispatch),
            (Passed, &[], vec![("a", Fail), ("b", Pass)], R::Dispatch),
            (
                Passed,
                &[],
                vec![("a", NotTaken), ("b", NotTaken)],
                R::NotTaken,
            ),
            (Passed, &[], vec![("a", NotTaken), ("b", Blocked)], dnp("b")),
            (Passed, &[], vec![("a", Pass)], R::Wait),
            // settled: whatever they settled as, once all are terminal
            (
                Settled,
                &[],
                vec![("a", Fail), ("b", NotTaken)],
                R::Dispatch,
            ),
            (
                Settled,
                &[],
                vec![("a", Transport), ("b", Blocked)],
                R::Dispatch,
            ),
            (Settled, &[], vec![("a", Skipped)], R::Wait),
        ];
        for (join, optional, given, want) in table {
            let mut t = task(join, &["a", "b"]);
            t.optional = optional.iter().map(|s| s.to_string()).collect();
            let d = deps(&given.iter().map(|(n, s)| (*n, dep(*s))).collect::<Vec<_>>());
            assert_eq!(
                readiness(&t, &d, &Halt::default()),
                want,
                "{join:?} {given:?}"
            );
        }
    }

    // RFC-0002:C-SETTLED-JOIN — a mapped dependency's fold reaches an all/passed consumer
    // whatever its status: a failing instance under join = "passed".
    #[test]
    fn a_lossy_fanout_reaches_a_passed_reducer() {
        let node = fanout::fold(vec![
            (
                "a".into(),
                Entry::new(Status::Pass, None, Some(json!(1)), false),
            ),
            ("b".into(), Entry::new(Status::Fail, None, None, false)),
        ]);
        let mapped = Dep {
            status: node.status,
            mapped: true,
            entry: Some(&node),
        };
        let t = task(Join::Passed, &["fan"]);
        assert_eq!(
            readiness(&t, &deps(&[("fan", mapped)]), &Halt::default()),
            Readiness::Dispatch
        );
        assert_eq!(input_value(Join::Passed, &node), Some(json!({"a": 1})));
        // Under all, the failed node blocks the consumer as any failed dependency does.
        let t = task(Join::All, &["fan"]);
        assert_eq!(
            readiness(&t, &deps(&[("fan", mapped)]), &Halt::default()),
            Readiness::Blocked(BlockedReason::DependencyDidNotPass, Some("fan".into()))
        );
        // A blocked mapped node never expanded and contributes nothing.
        let blocked = fanout::unexpanded(Status::Blocked, None);
        assert_eq!(input_value(Join::Passed, &blocked), None);
        assert!(input_value(Join::Settled, &blocked).unwrap()["per_instance"] == json!({}));
    }

    #[test]
    fn input_values_per_join() {
        let failed = Entry::new(Status::Fail, Some("n".into()), Some(json!({"x": 1})), true);
        let passed = Entry::new(Status::Pass, None, Some(json!({"x": 2})), false);
        let not_taken = Entry::new(Status::NotTaken, None, None, false);
        assert_eq!(input_value(Join::All, &passed), Some(json!({"x": 2})));
        assert_eq!(input_value(Join::All, &failed), None);
        assert_eq!(input_value(Join::Passed, &not_taken), None);
        assert_eq!(
            input_value(Join::Settled, &failed),
            Some(json!({"status": "fail", "note": "n", "output": {"x": 1}, "files": true}))
        );
        assert_eq!(
            input_value(Join::Settled, &not_taken).unwrap()["status"],
            json!("not_taken")
        );
    }

    // DSL when — an unsatisfied when settles not_taken; the route must be a dependency.
    #[test]
    fn readiness_applies_when_after_the_join() {
        let yes = route_entry("risky", "yes");
        let mut t = task(Join::All, &["gate"]);
        t.when = Some(when(&["no"]));
        let gate = Dep {
            status: Status::Pass,
            mapped: false,
            entry: Some(&yes),
        };
        let d = deps(&[("gate", gate)]);
        assert_eq!(readiness(&t, &d, &Halt::default()), Readiness::NotTaken);
        t.when = Some(when(&["yes"]));
        assert_eq!(readiness(&t, &d, &Halt::default()), Readiness::Dispatch);
        // A settled-join task whose route failed: no answer was given.
        let failed = Entry::new(Status::Fail, None, None, false);
        let mut s = task(Join::Settled, &["gate"]);
        s.when = Some(when(&["yes"]));
        let d = deps(&[(
            "gate",
            Dep {
                status: Status::Fail,
                mapped: false,
                entry: Some(&failed),
            },
        )]);
        assert_eq!(readiness(&s, &d, &Halt::default()), Readiness::NotTaken);
    }

    #[test]
    fn a_mapped_task_on_a_mapped_route_decides_per_instance() {
        let node = fanout::fold(vec![("x".into(), route_entry("risky", "no"))]);
        let mut t = task(Join::All, &["gate"]);
        t.over = crucible_plan::FieldRef::parse("find.items");
        t.when = Some(when(&["yes"]));
        let d = deps(&[(
            "gate",
            Dep {
                status: Status::Pass,
                mapped: true,
                entry: Some(&node),
            },
        )]);
        assert_eq!(readiness(&t, &d, &Halt::default()), Readiness::Dispatch);
        assert!(!instance_runs(&t, "x", &d));
        t.when = Some(when(&["no"]));
        assert!(instance_runs(&t, "x", &d));
        assert!(!instance_runs(&t, "absent", &d));
        t.when = None;
        assert!(instance_runs(&t, "x", &d));
    }

    // RFC-0002:C-SETTLED-JOIN, C-PLAYBOOK-BUDGET, C-PLAYBOOK-LANE — halts.
    #[test]
    fn halts_block_by_kind() {
        let mut agent = task(Join::Settled, &["a"]);
        agent.kind = TaskKind::Agent;
        let cmd = task(Join::Settled, &["a"]);
        let mut epi = task(Join::Settled, &["a"]);
        epi.stage = crucible_plan::Stage::Epilogue;
        let d = deps(&[("a", dep(Status::Fail))]);
        let b = |r, t: Option<&str>| Readiness::Blocked(r, t.map(String::from));

        let cost = Halt {
            cost_exhausted: true,
            ..Halt::default()
        };
        assert_eq!(
            readiness(&agent, &d, &cost),
            b(BlockedReason::BudgetCeiling, None)
        );
        assert_eq!(readiness(&cmd, &d, &cost), Readiness::Dispatch);
        // The cost ceiling does not turn a not-taken task into a blocked one, nor end a wait.
        let mut nt = agent.clone();
        nt.join = Join::All;
        assert_eq!(
            readiness(&nt, &d, &cost),
            b(BlockedReason::DependencyDidNotPass, Some("a"))
        );
        assert_eq!(readiness(&agent, &BTreeMap::new(), &cost), Readiness::Wait);

        let wall = Halt {
            wall_clock_exhausted: true,
            ..Halt::default()
        };
        for t in [&agent, &cmd, &epi] {
            assert_eq!(
                readiness(t, &d, &wall),
                b(BlockedReason::WallClockCeiling, None)
            );
        }
        let trunc = Halt {
            truncated: true,
            ..Halt::default()
        };
        assert_eq!(
            readiness(&epi, &d, &trunc),
            b(BlockedReason::Truncated, None)
        );

        let req = Halt {
            required_failed: Some("build".into()),
            ..Halt::default()
        };
        assert_eq!(
            readiness(&cmd, &d, &req),
            b(BlockedReason::RequiredTaskFailed, Some("build"))
        );
        assert_eq!(readiness(&epi, &d, &req), Readiness::Dispatch);

        let early = Halt {
            completed_early: true,
            ..Halt::default()
        };
        assert_eq!(readiness(&cmd, &d, &early), Readiness::Unsettled);
        assert_eq!(readiness(&epi, &d, &early), Readiness::Dispatch);
        // A ceiling during the epilogue does not turn an undispatched main-graph task blocked.
        let early_then_wall = Halt {
            completed_early: true,
            wall_clock_exhausted: true,
            ..Halt::default()
        };
        assert_eq!(readiness(&cmd, &d, &early_then_wall), Readiness::Unsettled);
        assert_eq!(
            readiness(&epi, &d, &early_then_wall),
            b(BlockedReason::WallClockCeiling, None)
        );
    }

    /// Settles every task of `tasks` (in order, repeatedly) as readiness says, with each
    /// dispatched task passing; returns the final statuses. Stands in for the coordinator.
    fn settle_all(tasks: &[Task], gate: Entry) -> BTreeMap<String, Status> {
        let mut entries = BTreeMap::from([("gate".to_string(), gate)]);
        loop {
            let mut progressed = false;
            for t in tasks {
                if entries.contains_key(&t.name) {
                    continue;
                }
                let deps: BTreeMap<String, Dep> = entries
                    .iter()
                    .map(|(n, e)| (n.clone(), Dep::of(e)))
                    .collect();
                let status = match readiness(t, &deps, &Halt::default()) {
                    Readiness::Wait => continue,
                    Readiness::Dispatch => Status::Pass,
                    Readiness::NotTaken => Status::NotTaken,
                    Readiness::Blocked(..) => Status::Blocked,
                    Readiness::Unsettled => unreachable!("no early completion here"),
                };
                entries.insert(
                    t.name.clone(),
                    Entry::new(status, None, Some(json!({})), false),
                );
                progressed = true;
            }
            if !progressed {
                return entries.into_iter().map(|(n, e)| (n, e.status)).collect();
            }
        }
    }

    // DSL when/optional/join — an all-join chain goes not_taken with its branch, optional
    // dispatches past it, and passed/settled joins rejoin the branches.
    #[test]
    fn branches_chain_and_rejoin() {
        let mut yes = task(Join::All, &["gate"]);
        yes.name = "yes_branch".into();
        yes.when = Some(when(&["yes"]));
        let mut no = task(Join::All, &["gate"]);
        no.name = "no_branch".into();
        no.when = Some(when(&["no", "uncertain"])); // otherwise
        let mut chain1 = task(Join::All, &["no_branch"]);
        chain1.name = "chain1".into();
        let mut chain2 = task(Join::All, &["chain1"]);
        chain2.name = "chain2".into();
        let mut opt = task(Join::All, &["no_branch", "yes_branch"]);
        opt.name = "opt".into();
        opt.optional = vec!["no_branch".into()];
        let mut rejoin = task(Join::Passed, &["yes_branch", "chain2"]);
        rejoin.name = "rejoin".into();
        let mut settled = task(Join::Settled, &["yes_branch", "chain2"]);
        settled.name = "settled".into();
        let tasks = [settled, rejoin, opt, chain2, chain1, no, yes];

        let got = settle_all(&tasks, route_entry("risky", "yes"));
        use Status::*;
        let want = [
            ("yes_branch", Pass),
            ("no_branch", NotTaken),
            ("chain1", NotTaken),
            ("chain2", NotTaken),
            ("opt", Pass),
            ("rejoin", Pass),
            ("settled", Pass),
        ];
        for (name, status) in want {
            assert_eq!(got[name], status, "{name}");
        }

        let got = settle_all(&tasks, route_entry("risky", "uncertain"));
        let want = [
            ("yes_branch", NotTaken),
            ("no_branch", Pass),
            ("chain2", Pass),
            ("opt", NotTaken), // yes_branch is not optional
            ("rejoin", Pass),
            ("settled", Pass),
        ];
        for (name, status) in want {
            assert_eq!(got[name], status, "{name}");
        }
    }
}

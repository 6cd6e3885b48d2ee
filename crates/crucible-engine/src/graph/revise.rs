//! Revise loops: a reviewer's bounded send-back (RFC-0002:C-REVISE-LOOP).
//!
//! [`loops`] finds each loop in a plan with its body in dependency order; [`LoopRun`] is the
//! round state machine the coordinator drives: which body task is next, the `revision` input,
//! the `task[round-N]` rows as each round settles, whether another round begins, and the final
//! row under each body task's own name.
//!
//! Readings chosen (docs/decisions.md):
//! - The final row's `cost_usd`, `secs` and `attempts` are sums over every round; every other
//!   field is the last round's.
//! - A round-1 row for a task settled without dispatch is held until some body task of that
//!   round dispatches, and dropped if none does (a first round that dispatched nothing writes no
//!   round rows); the final rows still carry those settlements.
//! - The cost ceiling ends a loop between rounds only when some body task can spend; the
//!   wall-clock ceiling always does.

use super::Entry;
use crucible_plan::wire::TaskResult;
use crucible_plan::{Ceiling, Plan, Status, Task};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// A round row's name: the task followed by `[round-N]`.
pub fn round_name(task: &str, round: u32) -> String {
    format!("{task}[round-{round}]")
}

/// One loop of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    pub reviewer: String,
    /// In the order the reviewer names them.
    pub targets: Vec<String>,
    /// Targets and reviewer in dependency order (declaration order among independent tasks).
    pub body: Vec<String>,
    pub max_rounds: u32,
    /// Some body task can spend, so the cost ceiling holds the loop (RFC-0002:C-PLAYBOOK-BUDGET).
    pub can_spend: bool,
}

/// Every loop in `plan`, in the declaration order of their reviewers.
pub fn loops(plan: &Plan) -> Vec<Loop> {
    plan.tasks
        .iter()
        .filter(|t| !t.revise.is_empty())
        .map(|reviewer| {
            let mut members: BTreeSet<&str> = reviewer.revise.iter().map(String::as_str).collect();
            members.insert(&reviewer.name);
            let body = dependency_order(plan, &members);
            let can_spend = body
                .iter()
                .filter_map(|n| plan.task(n))
                .any(Task::can_spend);
            Loop {
                reviewer: reviewer.name.clone(),
                targets: reviewer.revise.clone(),
                body,
                max_rounds: reviewer.max_rounds,
                can_spend,
            }
        })
        .collect()
}

/// `members` ordered so each comes after its dependencies among them, ties by declaration order.
fn dependency_order(plan: &Plan, members: &BTreeSet<&str>) -> Vec<String> {
    let mut order: Vec<String> = Vec::with_capacity(members.len());
    let mut left: Vec<&Task> = plan
        .tasks
        .iter()
        .filter(|t| members.contains(t.name.as_str()))
        .collect();
    while !left.is_empty() {
        let ready = left.iter().position(|t| {
            t.depends_on
                .iter()
                .all(|d| !members.contains(d.as_str()) || order.contains(d))
        });
        // A cycle is refused by plan validation; keep declaration order rather than loop forever.
        let next = left.remove(ready.unwrap_or(0));
        order.push(next.name.clone());
    }
    order
}

impl Loop {
    pub fn contains(&self, task: &str) -> bool {
        self.body.iter().any(|b| b == task)
    }

    pub fn is_target(&self, task: &str) -> bool {
        self.targets.iter().any(|t| t == task)
    }

    /// Every dependency of a body task outside the body, in body then declaration order.
    pub fn outside_deps(&self, plan: &Plan) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for task in self.body.iter().filter_map(|n| plan.task(n)) {
            for d in &task.depends_on {
                if !self.contains(d) && !out.contains(d) {
                    out.push(d.clone());
                }
            }
        }
        out
    }

    /// Whether the first round may dispatch: every dependency outside the body of every body task
    /// has settled.
    pub fn gate_open(&self, plan: &Plan, settled: impl Fn(&str) -> bool) -> bool {
        self.outside_deps(plan).iter().all(|d| settled(d))
    }

    /// Whether the body runs as a loop: every body task can run on the substrate. Otherwise the
    /// coordinator dispatches the body's tasks as tasks outside any loop.
    pub fn runs_as_loop(&self, plan: &Plan, runnable: impl Fn(&Task) -> bool) -> bool {
        self.body.iter().filter_map(|n| plan.task(n)).all(runnable)
    }

    /// Whether another round begins after the reviewer's round settled `reviewer` with `rounds_run`
    /// rounds run (RFC-0002:C-REVISE-LOOP).
    pub fn next(
        &self,
        reviewer: Status,
        rounds_run: u32,
        cost_exhausted: bool,
        wall_clock_exhausted: bool,
    ) -> Next {
        if reviewer != Status::Fail {
            return Next::End(End::ReviewerSettled(reviewer));
        }
        if rounds_run >= self.max_rounds {
            return Next::End(End::RoundsSpent);
        }
        if wall_clock_exhausted {
            return Next::End(End::Ceiling(Ceiling::WallClock));
        }
        if cost_exhausted && self.can_spend {
            return Next::End(End::Ceiling(Ceiling::Cost));
        }
        Next::Round(rounds_run + 1)
    }

    /// The `revision` input for round `round` (≥ 2): the round about to run, the bound, the
    /// reviewer, and its previous round as a settled entry.
    pub fn revision(&self, round: u32, review: &Entry) -> Value {
        json!({
            "round": round,
            "max_rounds": self.max_rounds,
            "reviewer": self.reviewer,
            "review": review.to_value(),
        })
    }
}

/// After a reviewer round: another round, or the end of the loop and why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Next {
    Round(u32),
    End(End),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum End {
    /// The reviewer passed, skipped, transport-failed, was blocked or not taken.
    ReviewerSettled(Status),
    /// The reviewer failed the last allowed round.
    RoundsSpent,
    /// A ceiling was exhausted between rounds; the run halts as for any dispatch.
    Ceiling(Ceiling),
}

/// The final row under a body task's own name from its rounds' rows: the last round's status,
/// output, note, blocked reason, transport cause and files flag, and the sums of every round's
/// spend, time and attempts.
pub fn final_row(task: &str, rounds: &[TaskResult]) -> TaskResult {
    let last = rounds.last().expect("a body task settles in every round");
    TaskResult {
        task: task.to_string(),
        attempts: rounds.iter().map(|r| r.attempts).sum(),
        cost_usd: rounds.iter().map(|r| r.cost_usd).sum(),
        secs: rounds.iter().map(|r| r.secs).sum(),
        reused_from: None,
        ..last.clone()
    }
}

/// One loop's rounds as they run.
#[derive(Clone, Debug)]
pub struct LoopRun {
    pub lp: Loop,
    round: u32,
    /// This round's settlements by task name, as entries for the next body task's join.
    this_round: BTreeMap<String, Entry>,
    /// Every round's row per body task, in round order.
    rows: BTreeMap<String, Vec<TaskResult>>,
    /// Round-1 rows held until some body task of the round dispatches.
    held: Vec<TaskResult>,
    dispatched: bool,
    /// The reviewer's previous round, for `revision`.
    review: Option<Entry>,
}

impl LoopRun {
    /// A loop about to run its first round (once [`Loop::gate_open`]).
    pub fn new(lp: Loop) -> LoopRun {
        LoopRun {
            lp,
            round: 1,
            this_round: BTreeMap::new(),
            rows: BTreeMap::new(),
            held: Vec::new(),
            dispatched: false,
            review: None,
        }
    }

    pub fn round(&self) -> u32 {
        self.round
    }

    /// The next body task to decide this round, in dependency order; `None` once every body
    /// task settled this round.
    pub fn next_task(&self) -> Option<&str> {
        self.lp
            .body
            .iter()
            .find(|t| !self.this_round.contains_key(*t))
            .map(String::as_str)
    }

    /// The entries a body task's join reads: this round's body results over the settled results
    /// outside the body. A body task not yet settled this round has no entry.
    pub fn deps_view(&self, outside: &BTreeMap<String, Entry>) -> BTreeMap<String, Entry> {
        let mut view: BTreeMap<String, Entry> = outside
            .iter()
            .filter(|(n, _)| !self.lp.contains(n))
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect();
        view.extend(self.this_round.iter().map(|(n, e)| (n.clone(), e.clone())));
        view
    }

    /// A body task's settlement this round, as an entry.
    pub fn settled_this_round(&self, task: &str) -> Option<&Entry> {
        self.this_round.get(task)
    }

    /// The reviewer's previous round, from the second round on.
    pub fn review(&self) -> Option<&Entry> {
        self.review.as_ref()
    }

    /// The `revision` input ([`crucible_plan::vocab::inputs::REVISION`]) for `task` this round:
    /// targets from round 2 only, never the reviewer. `files` says whether the reviewer's
    /// failing round's set was staged for it.
    pub fn revision_for(&self, task: &str, files: bool) -> Option<Value> {
        if self.round < 2 || !self.lp.is_target(task) {
            return None;
        }
        let review = self.review.as_ref()?;
        let entry = Entry {
            files,
            ..review.clone()
        };
        Some(self.lp.revision(self.round, &entry))
    }

    /// Records a body task's settlement this round (`result.task` is its own name) and returns
    /// the round rows to write now.
    pub fn settle(&mut self, mut result: TaskResult, dispatched: bool) -> Vec<TaskResult> {
        let row_name = round_name(&result.task, self.round);
        let name = std::mem::replace(&mut result.task, row_name);
        self.this_round.insert(
            name.clone(),
            Entry::new(
                result.status,
                result.note.clone(),
                result.output.clone(),
                result.files,
            ),
        );
        self.rows.entry(name).or_default().push(result.clone());
        if self.round > 1 || self.dispatched {
            return vec![result];
        }
        self.held.push(result);
        if dispatched {
            self.dispatched = true;
            return std::mem::take(&mut self.held);
        }
        Vec::new()
    }

    /// Ends the round once the reviewer settled: begins the next round or ends the loop.
    pub fn end_round(&mut self, cost_exhausted: bool, wall_clock_exhausted: bool) -> Next {
        let reviewer = self
            .this_round
            .get(&self.lp.reviewer)
            .expect("a round ends after its reviewer settles")
            .clone();
        let next = self.lp.next(
            reviewer.status,
            self.round,
            cost_exhausted,
            wall_clock_exhausted,
        );
        if let Next::Round(n) = next {
            self.round = n;
            self.this_round.clear();
            self.review = Some(reviewer);
        }
        next
    }

    /// The rows under each body task's own name, in body order, once the loop ended.
    pub fn finish(&self) -> Vec<TaskResult> {
        self.lp
            .body
            .iter()
            .filter_map(|t| self.rows.get(t).map(|rows| final_row(t, rows)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::when::{readiness, Dep, Halt, Readiness};
    use crucible_plan::wire::Blocked;
    use crucible_plan::{BlockedReason, Join, TaskKind, WorkflowType};

    fn task(name: &str, kind: TaskKind, deps: &[&str]) -> Task {
        let mut t = Task::new(name, kind);
        t.depends_on = deps.iter().map(|s| s.to_string()).collect();
        t
    }

    /// prep → draft → polish → review (revises draft, polish); notes → review; after ← review.
    fn plan() -> Plan {
        let mut review = task("review", TaskKind::Command, &["polish", "notes"]);
        review.revise = vec!["polish".into(), "draft".into()];
        review.max_rounds = 3;
        Plan {
            version: 1,
            workflow_type: WorkflowType::Playbook,
            result: None,
            history_record: None,
            params: BTreeMap::new(),
            tasks: vec![
                task("prep", TaskKind::Command, &[]),
                review,
                task("polish", TaskKind::Agent, &["draft"]),
                task("notes", TaskKind::Command, &[]),
                task("draft", TaskKind::Command, &["prep"]),
                task("after", TaskKind::Command, &["review"]),
            ],
        }
    }

    fn row(task: &str, status: Status, cost: f64) -> TaskResult {
        TaskResult {
            note: (status != Status::Pass).then(|| format!("{task} {status}")),
            output: Some(json!({"by": task})),
            attempts: 1,
            cost_usd: cost,
            secs: 1.0,
            ..TaskResult::new(task, status)
        }
    }

    // RFC-0002:C-REVISE-LOOP — the body in dependency order, the gate on outside dependencies.
    #[test]
    fn loops_and_their_gate() {
        let p = plan();
        let ls = loops(&p);
        assert_eq!(ls.len(), 1);
        let lp = &ls[0];
        assert_eq!(lp.body, ["draft", "polish", "review"]);
        assert_eq!(lp.targets, ["polish", "draft"]);
        assert!(lp.can_spend); // polish is an agent
        assert_eq!(lp.outside_deps(&p), ["prep", "notes"]);
        assert!(!lp.gate_open(&p, |t| t == "prep"));
        assert!(lp.gate_open(&p, |t| t == "prep" || t == "notes"));
        assert!(lp.runs_as_loop(&p, |_| true));
        assert!(!lp.runs_as_loop(&p, |t| t.kind != TaskKind::Agent));
        assert_eq!(round_name("draft", 2), "draft[round-2]");
    }

    // RFC-0002:C-REVISE-LOOP — whether another round begins.
    #[test]
    fn next_round_table() {
        let lp = &loops(&plan())[0];
        use Status::*;
        let table = [
            (Fail, 1, false, false, Next::Round(2)),
            (Fail, 2, false, false, Next::Round(3)),
            (Fail, 3, false, false, Next::End(End::RoundsSpent)),
            (Pass, 1, false, false, Next::End(End::ReviewerSettled(Pass))),
            (
                Blocked,
                1,
                false,
                false,
                Next::End(End::ReviewerSettled(Blocked)),
            ),
            (
                Transport,
                2,
                false,
                false,
                Next::End(End::ReviewerSettled(Transport)),
            ),
            (
                Skipped,
                2,
                false,
                false,
                Next::End(End::ReviewerSettled(Skipped)),
            ),
            (
                NotTaken,
                1,
                false,
                false,
                Next::End(End::ReviewerSettled(NotTaken)),
            ),
            (Fail, 1, true, false, Next::End(End::Ceiling(Ceiling::Cost))),
            (
                Fail,
                1,
                false,
                true,
                Next::End(End::Ceiling(Ceiling::WallClock)),
            ),
        ];
        for (status, run, cost, wall, want) in table {
            assert_eq!(lp.next(status, run, cost, wall), want, "{status} {run}");
        }
        // A loop no body task of which can spend is not held to the cost ceiling.
        let free = Loop {
            can_spend: false,
            ..lp.clone()
        };
        assert_eq!(free.next(Fail, 1, true, false), Next::Round(2));
    }

    /// Drives one round with each body task settling as `statuses` says, as the coordinator
    /// would; returns the rows written.
    fn run_round(run: &mut LoopRun, statuses: &[(Status, f64)]) -> Vec<TaskResult> {
        let mut written = Vec::new();
        for (status, cost) in statuses {
            let t = run.next_task().unwrap().to_string();
            written.extend(run.settle(row(&t, *status, *cost), true));
        }
        written
    }

    // RFC-0002:C-REVISE-LOOP — a loop passing in round 2: revision only for targets from round 2,
    // round rows as each round settles, final rows with summed spend.
    #[test]
    fn passes_in_round_two() {
        let lp = loops(&plan()).remove(0);
        let mut run = LoopRun::new(lp);
        assert_eq!(run.revision_for("draft", false), None);
        let r1 = run_round(
            &mut run,
            &[
                (Status::Pass, 0.0),
                (Status::Pass, 1.0),
                (Status::Fail, 0.0),
            ],
        );
        assert_eq!(
            r1.iter().map(|r| r.task.as_str()).collect::<Vec<_>>(),
            ["draft[round-1]", "polish[round-1]", "review[round-1]"]
        );
        assert_eq!(run.end_round(false, false), Next::Round(2));
        let rev = run.revision_for("draft", true).unwrap();
        assert_eq!(
            rev,
            json!({"round": 2, "max_rounds": 3, "reviewer": "review", "review": {
                "status": "fail", "note": "review fail", "output": {"by": "review"}, "files": true}})
        );
        assert!(run.revision_for("polish", false).is_some());
        assert_eq!(run.revision_for("review", false), None);
        let r2 = run_round(
            &mut run,
            &[
                (Status::Pass, 0.0),
                (Status::Pass, 2.0),
                (Status::Pass, 0.0),
            ],
        );
        assert_eq!(r2[2].task, "review[round-2]");
        assert_eq!(
            run.end_round(false, false),
            Next::End(End::ReviewerSettled(Status::Pass))
        );
        let finals = run.finish();
        assert_eq!(
            finals.iter().map(|r| r.task.as_str()).collect::<Vec<_>>(),
            ["draft", "polish", "review"]
        );
        let polish = &finals[1];
        assert_eq!(
            (polish.cost_usd, polish.attempts, polish.secs),
            (3.0, 2, 2.0)
        );
        assert_eq!(finals[2].status, Status::Pass);
        assert_eq!(finals[2].note, None);
    }

    // RFC-0002:C-REVISE-LOOP — exhausting its rounds leaves the reviewer failing.
    #[test]
    fn exhausts_its_rounds() {
        let mut run = LoopRun::new(loops(&plan()).remove(0));
        for round in 1..=3 {
            run_round(
                &mut run,
                &[
                    (Status::Pass, 0.0),
                    (Status::Pass, 0.5),
                    (Status::Fail, 0.0),
                ],
            );
            let next = run.end_round(false, false);
            if round < 3 {
                assert_eq!(next, Next::Round(round + 1));
                assert_eq!(
                    run.revision_for("draft", false).unwrap()["round"],
                    json!(round + 1)
                );
            } else {
                assert_eq!(next, Next::End(End::RoundsSpent));
            }
        }
        let finals = run.finish();
        assert_eq!(finals[2].status, Status::Fail);
        assert_eq!(finals[2].note.as_deref(), Some("review fail"));
        assert_eq!(finals[1].cost_usd, 1.5);
    }

    // RFC-0002:C-REVISE-LOOP — a body task whose join this round's results do not satisfy
    // settles blocked for the round; the reviewer blocked ends the loop.
    #[test]
    fn blocked_by_a_failed_target() {
        let p = plan();
        let mut run = LoopRun::new(loops(&p).remove(0));
        let outside: BTreeMap<String, Entry> = ["prep", "notes"]
            .iter()
            .map(|n| (n.to_string(), Entry::new(Status::Pass, None, None, false)))
            .collect();
        let mut written = Vec::new();
        while let Some(t) = run.next_task().map(String::from) {
            let view = run.deps_view(&outside);
            let deps: BTreeMap<String, Dep> =
                view.iter().map(|(n, e)| (n.clone(), Dep::of(e))).collect();
            let task = p.task(&t).unwrap();
            assert_eq!(task.join, Join::All);
            let result = match readiness(task, &deps, &Halt::default()) {
                Readiness::Dispatch if t == "draft" => row(&t, Status::Fail, 0.0),
                Readiness::Blocked(reason, by) => TaskResult {
                    blocked: Some(Blocked { reason, task: by }),
                    cost_usd: 0.0,
                    attempts: 0,
                    ..row(&t, Status::Blocked, 0.0)
                },
                other => panic!("{t}: {other:?}"),
            };
            let dispatched = result.status != Status::Blocked;
            written.extend(run.settle(result, dispatched));
        }
        assert_eq!(written.len(), 3);
        assert_eq!(written[1].task, "polish[round-1]");
        assert_eq!(
            written[1].blocked,
            Some(Blocked {
                reason: BlockedReason::DependencyDidNotPass,
                task: Some("draft".into())
            })
        );
        assert_eq!(
            run.end_round(false, false),
            Next::End(End::ReviewerSettled(Status::Blocked))
        );
        let finals = run.finish();
        assert_eq!(finals[0].status, Status::Fail);
        assert_eq!(finals[2].status, Status::Blocked);
        assert_eq!(
            finals[2].blocked.as_ref().unwrap().task.as_deref(),
            Some("polish")
        );
    }

    // RFC-0002:C-REVISE-LOOP — a ceiling between rounds leaves each body task as its last
    // round settled.
    #[test]
    fn stopped_by_a_ceiling_between_rounds() {
        let mut run = LoopRun::new(loops(&plan()).remove(0));
        run_round(
            &mut run,
            &[
                (Status::Pass, 0.0),
                (Status::Pass, 9.0),
                (Status::Fail, 0.0),
            ],
        );
        assert_eq!(
            run.end_round(true, false),
            Next::End(End::Ceiling(Ceiling::Cost))
        );
        assert_eq!(run.round(), 1);
        let finals = run.finish();
        assert_eq!(
            finals.iter().map(|r| r.status).collect::<Vec<_>>(),
            [Status::Pass, Status::Pass, Status::Fail]
        );
        assert_eq!(finals[1].cost_usd, 9.0);
    }

    // RFC-0002:C-REVISE-LOOP — a first round that dispatched no body task writes no round rows;
    // rows settled before the first dispatch are written with it.
    #[test]
    fn round_rows_wait_for_a_dispatch_in_round_one() {
        let mut run = LoopRun::new(loops(&plan()).remove(0));
        assert!(run
            .settle(row("draft", Status::NotTaken, 0.0), false)
            .is_empty());
        assert!(run
            .settle(row("polish", Status::NotTaken, 0.0), false)
            .is_empty());
        assert!(run
            .settle(row("review", Status::NotTaken, 0.0), false)
            .is_empty());
        assert_eq!(
            run.end_round(false, false),
            Next::End(End::ReviewerSettled(Status::NotTaken))
        );
        assert_eq!(run.finish().len(), 3);

        let mut run = LoopRun::new(loops(&plan()).remove(0));
        assert!(run
            .settle(row("draft", Status::Blocked, 0.0), false)
            .is_empty());
        let out = run.settle(row("polish", Status::Pass, 0.0), true);
        assert_eq!(
            out.iter().map(|r| r.task.as_str()).collect::<Vec<_>>(),
            ["draft[round-1]", "polish[round-1]"]
        );
        assert_eq!(
            run.settle(row("review", Status::Blocked, 0.0), false).len(),
            1
        );
    }

    // RFC-0002:C-REVISE-LOOP — a task joining a body task reads this round's result, not an
    // earlier round's or the outside map's.
    #[test]
    fn deps_view_prefers_this_round() {
        let mut run = LoopRun::new(loops(&plan()).remove(0));
        let outside = BTreeMap::from([
            (
                "notes".to_string(),
                Entry::new(Status::Pass, None, None, false),
            ),
            (
                "draft".to_string(),
                Entry::new(Status::Fail, None, None, false),
            ),
        ]);
        assert!(!run.deps_view(&outside).contains_key("draft"));
        run.settle(row("draft", Status::Pass, 0.0), true);
        assert_eq!(run.deps_view(&outside)["draft"].status, Status::Pass);
        assert!(run.deps_view(&outside).contains_key("notes"));
    }
}

//! The coordinator's hooks for the graph's three ways to branch and repeat: joins with `when`
//! and `optional` (RFC-0002:C-SETTLED-JOIN), fan-out lanes (C-PLAYBOOK-BUDGET), source-decided
//! routes (RFC-0001-NOTES §5) and revise loops (C-REVISE-LOOP). The decisions themselves live in
//! `crate::graph`; this module keeps the run state they need and turns them into dispatches and
//! rows on the coordinator.

use super::{blocked, own_lane, row, Coord, Report, TaskState};
use crate::admit::Admitted;
use crate::files::StagingPlan;
use crate::graph::fanout::{self, Instance, Lane, Lanes, Spend};
use crate::graph::revise::{self, LoopRun, Next};
use crate::graph::when::{self, Dep, Halt, Readiness};
use crate::graph::{route, Entry, GraphError};
use crate::taskfiles;
use crucible_plan::vocab::inputs::REVISION;
use crucible_plan::wire::TaskResult;
use crucible_plan::{BlockedReason, Join, Plan, Stage, Status, Task, TaskKind};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Which part of a task an attempt ran.
pub(super) enum Sub {
    /// One instance of a mapped task, by its raw key.
    Instance(String),
    /// The current round of the loop the task is a body member of.
    Round,
}

/// One mapped node whose instances are in progress.
struct FanoutRun {
    lanes: Lanes,
    /// Items in source order.
    order: Vec<String>,
    settled: HashMap<String, TaskResult>,
    /// The node's inputs as its join builds them, before each instance's `item` and `keyed`.
    base: Map<String, Value>,
}

/// One revise loop of the plan.
struct LoopSlot {
    lp: revise::Loop,
    /// Body task indices.
    members: Vec<usize>,
    /// Dependencies of body tasks outside the body: the first round waits for all of them.
    outside: Vec<usize>,
    run: Option<LoopRun>,
    /// A body task's round attempt is out.
    in_flight: bool,
    /// The loop ended, or can never start (its body settled without it).
    over: bool,
}

pub(super) struct Branches {
    index: HashMap<String, usize>,
    fanouts: BTreeMap<usize, FanoutRun>,
    /// A mapped node's folded entry, kept for its consumers' `per_instance`.
    folds: HashMap<usize, Entry>,
    loops: Vec<LoopSlot>,
    /// Body task → its loop.
    member_of: HashMap<usize, usize>,
    /// Instance and round rows folded from an interrupted run's log, by row name: replayed
    /// through `Lanes` and `LoopRun` when their node expands or their loop runs
    /// (RFC-0002:C-PLAYBOOK-RESUME), never dispatched again nor written twice.
    folded: HashMap<String, TaskResult>,
    /// A ready model-decided route's dynamic choices, read when its dependencies settled.
    options: HashMap<usize, route::Options>,
}

impl Branches {
    pub(super) fn new(plan: &Plan, adm: &Admitted) -> Branches {
        let index: HashMap<String, usize> = plan
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let cannot_run: Vec<usize> = (adm.truncating.iter().copied())
            .chain(adm.cap_skipped.iter().map(|(i, _)| *i))
            .collect();
        let mut loops = Vec::new();
        let mut member_of = HashMap::new();
        for lp in revise::loops(plan) {
            let members: Vec<usize> = lp.body.iter().map(|n| index[n.as_str()]).collect();
            // RFC-0002:C-REVISE-LOOP: a body task that cannot run on the substrate makes the body
            // run as tasks outside any loop.
            if members.iter().any(|m| cannot_run.contains(m)) {
                continue;
            }
            for &m in &members {
                member_of.insert(m, loops.len());
            }
            let outside = lp
                .outside_deps(plan)
                .iter()
                .map(|n| index[n.as_str()])
                .collect();
            loops.push(LoopSlot {
                lp,
                members,
                outside,
                run: None,
                in_flight: false,
                over: false,
            });
        }
        Branches {
            index,
            fanouts: BTreeMap::new(),
            folds: HashMap::new(),
            loops,
            member_of,
            folded: HashMap::new(),
            options: HashMap::new(),
        }
    }

    /// Keeps a folded instance or round row for its replay.
    pub(super) fn fold_sub(&mut self, r: TaskResult) {
        self.folded.insert(r.task.clone(), r);
    }

    /// Whether a task's own row carries no spend of its own: a mapped node's and a loop body
    /// task's rows sum their instance or round rows, whose spend counted as they settled.
    pub(super) fn spent_in_subs(&self, i: usize, t: &Task) -> bool {
        t.over.is_some() || self.member_of.contains_key(&i)
    }
}

fn entry_of_row(r: &TaskResult) -> Entry {
    Entry::new(r.status, r.note.clone(), r.output.clone(), r.files)
}

fn with_name(mut r: TaskResult, name: &str) -> TaskResult {
    r.task = name.to_string();
    r
}

impl Coord<'_> {
    /// The dynamic choices a model-decided route read as it became ready (none for any other
    /// task).
    pub(super) fn take_route_options(&mut self, i: usize) -> route::Options {
        self.br.options.remove(&i).unwrap_or_default()
    }

    /// A settled task's entry as consumers see it: a mapped node's fold with `per_instance`.
    pub(super) fn entry_of(&self, j: usize) -> Option<Entry> {
        let r = self.state[j].row()?;
        if let Some(fold) = self.br.folds.get(&j) {
            return Some(fold.clone());
        }
        Some(if self.task(j).over.is_some() {
            fanout::unexpanded(r.status, r.note.clone())
        } else {
            entry_of_row(r)
        })
    }

    /// The dependency entries task `i`'s join gives it (RFC-0002:C-SETTLED-JOIN).
    pub(super) fn dep_inputs(
        &self,
        i: usize,
        entry: &dyn Fn(usize) -> Option<Entry>,
    ) -> Map<String, Value> {
        let t = self.task(i);
        let mut m = Map::new();
        for &d in &self.adm.graph.deps()[i] {
            if let Some(v) = entry(d).and_then(|e| when::input_value(t.join, &e)) {
                m.insert(self.task(d).name.clone(), v);
            }
        }
        m
    }

    /// The entries of task `i`'s dependencies by name, as consumers see them now.
    pub(super) fn dep_entries_of(&self, i: usize) -> BTreeMap<String, Entry> {
        self.dep_entries(i, &|d| self.entry_of(d))
    }

    /// The entries of task `i`'s dependencies by name, from `entry`.
    fn dep_entries(
        &self,
        i: usize,
        entry: &dyn Fn(usize) -> Option<Entry>,
    ) -> BTreeMap<String, Entry> {
        self.adm.graph.deps()[i]
            .iter()
            .filter_map(|&d| entry(d).map(|e| (self.task(d).name.clone(), e)))
            .collect()
    }

    /// Every dependency of `i` is terminal: decide it under its join and `when`, then make it
    /// ready, expand it, decide its route, or leave it to its loop.
    pub(super) fn decide(&mut self, i: usize) {
        if self.br.member_of.contains_key(&i) {
            return; // a loop body task runs in its loop's rounds
        }
        let entries = self.dep_entries(i, &|d| self.entry_of(d));
        let deps: BTreeMap<String, Dep> = entries
            .iter()
            .map(|(n, e)| (n.clone(), Dep::of(e)))
            .collect();
        match when::readiness(self.task(i), &deps, &Halt::default()) {
            Readiness::Dispatch => {}
            Readiness::Wait | Readiness::Unsettled => return,
            other => {
                let r = self.undispatched_row(self.task(i), other);
                self.settle(i, r);
                return;
            }
        }
        let task = self.task(i).clone();
        // Like a ready task that never starts, a node or route stays unsettled once an operator
        // stop or an early completion closed dispatch.
        if (task.over.is_some() || task.kind == TaskKind::Route) && self.parked(task.stage) {
            return;
        }
        if task.over.is_some() {
            self.expand(i, &task, &entries);
        } else if task.route.as_ref().is_some_and(|r| r.human) {
            // A person answers: the request opens as it dispatches (`Coord::open_decision`).
            self.make_ready(i);
        } else if task
            .route
            .as_ref()
            .is_some_and(|r| r.min_confidence.is_some())
        {
            // A decision model answers: a dispatch of its own, held to the cost ceiling.
            match model_options(&task, &entries, None) {
                Ok(options) => {
                    self.br.options.insert(i, options);
                    self.make_ready(i);
                }
                Err(e) => self.settle(i, row(&task, Status::Fail, Some(e.note()))),
            }
        } else if task.kind == TaskKind::Route {
            let mut r = match decide_route(&task, &entries) {
                Ok(output) => TaskResult {
                    output: Some(output),
                    ..row(&task, Status::Pass, None)
                },
                Err(e) => row(&task, Status::Fail, Some(e.note())),
            };
            // The decision is the route's one attempt; a source decides it without spend.
            r.attempts = 1;
            self.settle(i, r);
        } else {
            self.make_ready(i);
        }
    }

    /// The row of a task its join or `when` settles without dispatch.
    fn undispatched_row(&self, t: &Task, decided: Readiness) -> TaskResult {
        match decided {
            Readiness::NotTaken => row(t, Status::NotTaken, None),
            Readiness::Blocked(reason, culprit) => {
                let note = match reason {
                    BlockedReason::DependencyDidNotPass => "dependency did not pass".to_string(),
                    BlockedReason::BudgetCeiling => "budget ceiling reached".to_string(),
                    BlockedReason::WallClockCeiling => "wall-clock ceiling reached".to_string(),
                    BlockedReason::RequiredTaskFailed => format!(
                        "required task {} failed",
                        culprit.as_deref().unwrap_or_default()
                    ),
                    other => other.to_string(),
                };
                blocked(t, reason, culprit.as_deref(), note)
            }
            Readiness::Dispatch | Readiness::Wait | Readiness::Unsettled => {
                unreachable!("only a settling decision has a row")
            }
        }
    }

    /// RFC-0002:C-PLAYBOOK-RESUME: a mapped node folded from the log gets back the fold its
    /// consumers read (`per_instance`), from its folded instance rows in source order. Kept
    /// only when it agrees with the node's logged row: a node settled without expanding has none.
    pub(super) fn refold(&mut self, i: usize) {
        let tasks = Arc::clone(&self.tasks);
        let task = &tasks[i];
        let Some(r) = self.state[i].row() else {
            return;
        };
        if task.over.is_none() {
            return;
        }
        let (status, note) = (r.status, r.note.clone());
        let entries = self.dep_entries(i, &|d| self.entry_of(d));
        let Ok(instances) = fanout::expand(task, &entries) else {
            return; // `entry_of` answers an unexpanded node from its row
        };
        let mut rows = Vec::new();
        for inst in instances {
            match self.br.folded.get(&inst.name) {
                Some(r) => rows.push((inst.key, entry_of_row(r))),
                None => return,
            }
        }
        let entry = fanout::fold(rows);
        if entry.status == status && entry.note == note {
            self.br.folds.insert(i, entry);
        }
    }

    /// Expands a mapped task over its source: lanes to dispatch, or the node fails naming why.
    fn expand(&mut self, i: usize, task: &Task, entries: &BTreeMap<String, Entry>) {
        match fanout::expand(task, entries) {
            Err(e) => {
                let note = e.note();
                self.br
                    .folds
                    .insert(i, fanout::unexpanded(Status::Fail, Some(note.clone())));
                let r = row(task, Status::Fail, Some(note));
                self.settle(i, r);
            }
            Ok(instances) => {
                let base = match self.inputs(i) {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                // A shared lane holds the workspace: its instances run one at a time.
                let width = if own_lane(task) { self.jobs } else { 1 };
                let order = instances.iter().map(|x| x.key.clone()).collect();
                // Instances settled before an interruption are never dispatched again: their
                // folded rows feed the fold as live ones do (RFC-0002:C-PLAYBOOK-RESUME).
                let mut settled = HashMap::new();
                let instances = instances
                    .into_iter()
                    .filter(|x| match self.br.folded.remove(&x.name) {
                        Some(r) => {
                            settled.insert(x.key.clone(), r);
                            false
                        }
                        None => true,
                    })
                    .collect();
                self.state[i] = TaskState::Running;
                self.br.fanouts.insert(
                    i,
                    FanoutRun {
                        lanes: Lanes::new(instances, width, task.can_spend()),
                        order,
                        settled,
                        base,
                    },
                );
            }
        }
    }

    /// Moves every fan-out and loop on as far as lanes, ceilings and stops allow.
    pub(super) fn advance_branches(&mut self) {
        for i in self.br.fanouts.keys().copied().collect::<Vec<_>>() {
            self.advance_fanout(i);
        }
        for l in 0..self.br.loops.len() {
            self.advance_loop(l);
        }
    }

    /// Why dispatch of a task in `stage` stopped for good, when it did: the reason and the task
    /// responsible. `None` also when the stop leaves tasks unsettled (an operator stop, early
    /// completion), which `parked` reports.
    fn closed_for(&self, stage: Stage) -> Option<(BlockedReason, Option<String>)> {
        if self.wall {
            return Some((BlockedReason::WallClockCeiling, None));
        }
        if stage == Stage::Iteration {
            if let Some(h) = self.halted_by {
                return Some((
                    BlockedReason::RequiredTaskFailed,
                    Some(self.task(h).name.clone()),
                ));
            }
        }
        None
    }

    /// Dispatch stopped in a way that leaves undispatched work unsettled.
    fn parked(&self, stage: Stage) -> bool {
        self.stopped
            || self.fault.is_some()
            || (stage == Stage::Iteration && self.completion.is_some())
    }

    fn has_lane(&self, isolated: bool) -> bool {
        if isolated {
            self.isolated_busy < self.jobs
        } else {
            !self.shared_busy
        }
    }

    fn advance_fanout(&mut self, i: usize) {
        let task = self.task(i).clone();
        if self.parked(task.stage) {
            return;
        }
        if let Some((reason, culprit)) = self.closed_for(task.stage) {
            let left = self.br.fanouts.get_mut(&i).map(|f| f.lanes.drain());
            for inst in left.unwrap_or_default() {
                let r = self.undispatched_row(&task, Readiness::Blocked(reason, culprit.clone()));
                self.instance_settled(i, &inst.key, with_name(r, &inst.name));
            }
        }
        loop {
            let Some(f) = self.br.fanouts.get_mut(&i) else {
                return;
            };
            if f.lanes.pending() > 0 && !self.has_lane(own_lane(&task)) {
                return;
            }
            let spend = Spend {
                settled: self.spent,
                in_flight: self.spent_now() - self.spent,
                max_cost: self.adm.max_cost,
            };
            let mut refused = self.cost_exhausted;
            let f = self.br.fanouts.get_mut(&i).expect("checked above");
            let lane = f.lanes.next(spend, &mut refused);
            if refused && !self.cost_exhausted {
                self.exhaust_cost();
            }
            match lane {
                Lane::Wait => return,
                Lane::Done => return self.fold(i),
                Lane::Blocked(inst) => {
                    let b = blocked(
                        &task,
                        BlockedReason::BudgetCeiling,
                        None,
                        "budget ceiling reached".into(),
                    );
                    self.instance_settled(i, &inst.key, with_name(b, &inst.name));
                }
                Lane::Start(inst) => self.start_instance(i, &task, inst),
            }
        }
    }

    fn start_instance(&mut self, i: usize, task: &Task, inst: Instance) {
        let entries = self.dep_entries(i, &|d| self.entry_of(d));
        let deps: BTreeMap<String, Dep> = entries
            .iter()
            .map(|(n, e)| (n.clone(), Dep::of(e)))
            .collect();
        if !when::instance_runs(task, &inst.key, &deps) {
            let r = row(task, Status::NotTaken, None);
            if let Some(f) = self.br.fanouts.get_mut(&i) {
                f.lanes.settled();
            }
            self.instance_settled(i, &inst.key, with_name(r, &inst.name));
            return;
        }
        let mut inputs = self.br.fanouts[&i].base.clone();
        inst.apply(&mut inputs, task.join);
        if task.kind == TaskKind::Route {
            return self.start_route_instance(i, task, inst, &entries, inputs);
        }
        let mut inputs = Value::Object(inputs);
        let staging = self.staging(i);
        let deps: Vec<&str> = entries.keys().map(String::as_str).collect();
        taskfiles::mark_staged(&mut inputs, task, &deps, &staging);
        let mut t = task.clone();
        t.name = inst.name.clone();
        let sub = Some(Sub::Instance(inst.key));
        self.spawn_attempt(i, t, inputs, staging.sets, sub, route::Options::new());
    }

    /// One item of a mapped route (RFC-0001 notes §5, C-ROUTE-EACH), decided on its own: by its
    /// source's output as this instance receives it (keyed fields narrowed to the item), or by
    /// the decision model with the instance's inputs, `item` included, as its state.
    fn start_route_instance(
        &mut self,
        i: usize,
        task: &Task,
        inst: Instance,
        entries: &BTreeMap<String, Entry>,
        inputs: Map<String, Value>,
    ) {
        let spec = task.route.as_ref().expect("a route task has a route");
        if spec.min_confidence.is_some() {
            match model_options(task, entries, Some(&inst.key)) {
                Ok(options) => {
                    let mut t = task.clone();
                    t.name = inst.name.clone();
                    let sub = Some(Sub::Instance(inst.key));
                    self.spawn_attempt(i, t, Value::Object(inputs), Vec::new(), sub, options);
                }
                Err(e) => self.settle_route_instance(i, task, &inst, Err(e)),
            }
            return;
        }
        let source = spec.source.as_deref().unwrap_or_default();
        let mut entry = entries
            .get(source)
            .cloned()
            .unwrap_or_else(|| Entry::new(Status::Blocked, None, None, false));
        if let Some(seen) = inputs.get(source) {
            entry.output = Some(match task.join {
                Join::Settled => seen.get("output").cloned().unwrap_or(Value::Null),
                Join::All | Join::Passed => seen.clone(),
            });
        }
        let answers = route::from_source(&inst.name, spec, &entry).map(route::output);
        self.settle_route_instance(i, task, &inst, answers);
    }

    /// An instance decided without a dispatch: its lane is free again and its row is logged.
    fn settle_route_instance(
        &mut self,
        i: usize,
        task: &Task,
        inst: &Instance,
        decided: Result<Value, GraphError>,
    ) {
        let mut r = match decided {
            Ok(output) => TaskResult {
                output: Some(output),
                ..row(task, Status::Pass, None)
            },
            Err(e) => row(task, Status::Fail, Some(e.note())),
        };
        r.attempts = 1;
        if let Some(f) = self.br.fanouts.get_mut(&i) {
            f.lanes.settled();
        }
        self.instance_settled(i, &inst.key, with_name(r, &inst.name));
    }

    /// Logs an instance's row (its spend counts now) and keeps it for the fold.
    fn instance_settled(&mut self, i: usize, key: &str, r: TaskResult) {
        self.log_sub(&r);
        if let Some(f) = self.br.fanouts.get_mut(&i) {
            f.settled.insert(key.to_string(), r);
        }
    }

    /// A rerun reuses an instance or round row: copied into the log as it is (marked with the run
    /// that produced it) and kept for its node's fold. Its spend is reported with its node's
    /// row, apart from the ceilings (RFC-0002:C-PLAYBOOK-RERUN).
    pub(super) fn reuse_sub(&mut self, r: TaskResult) {
        self.observer.task_settled(&r);
        self.sub_rows.push(r.task.clone());
        self.writer
            .push(&crucible_plan::wire::Event::TaskResult(r.clone()));
        self.br.fold_sub(r);
    }

    /// Writes a sub-row (an instance or a round): on the log and in the spend, but it changes no
    /// task's state and never gates the verdict (RFC-0002:C-REVISE-LOOP).
    fn log_sub(&mut self, r: &TaskResult) {
        self.add_spend(r.cost_usd);
        self.observer.task_settled(r);
        self.sub_rows.push(r.task.clone());
        self.writer
            .push(&crucible_plan::wire::Event::TaskResult(r.clone()));
    }

    /// Every instance settled: the node's own row, folded (RFC-0002:C-SETTLED-JOIN).
    fn fold(&mut self, i: usize) {
        let Some(mut f) = self.br.fanouts.remove(&i) else {
            return;
        };
        let rows: Vec<TaskResult> = f.order.iter().filter_map(|k| f.settled.remove(k)).collect();
        let entry = fanout::fold(
            f.order
                .iter()
                .cloned()
                .zip(rows.iter().map(entry_of_row))
                .collect(),
        );
        let mut r = row(self.task(i), entry.status, entry.note.clone());
        r.output = entry.output.clone();
        r.attempts = rows.iter().map(|r| r.attempts).sum();
        r.cost_usd = rows.iter().map(|r| r.cost_usd).sum();
        r.secs = rows.iter().map(|r| r.secs).sum();
        r.files = entry.files;
        self.br.folds.insert(i, entry);
        self.settle_row(i, r);
    }

    /// An instance or a round came back.
    pub(super) fn sub_done(&mut self, i: usize, sub: Sub, report: Report) {
        self.attempt_ended(i, &report);
        match sub {
            Sub::Instance(key) => {
                if let Some(f) = self.br.fanouts.get_mut(&i) {
                    f.lanes.settled();
                }
                if report.fault.is_some() {
                    // The engine's fault: the instance never settled (the run ends, see `done`).
                    return;
                }
                let name = fanout::instance_name(&self.task(i).name, &key);
                let r = self.attempt_row(i, name, report);
                self.instance_settled(i, &key, r);
            }
            Sub::Round => {
                let l = self.br.member_of[&i];
                self.br.loops[l].in_flight = false;
                if report.fault.is_some() {
                    // The engine's fault: the round never settled (the run ends, see `done`).
                    return;
                }
                let r = self.attempt_row(i, self.task(i).name.clone(), report);
                self.round_settled(l, r, true);
            }
        }
    }

    fn round_settled(&mut self, l: usize, mut r: TaskResult, dispatched: bool) {
        if !r.files {
            // RFC-0002:C-REVISE-LOOP: a round's set replaces the earlier round's, so a round
            // that published none leaves none behind.
            let j = self.br.index[r.task.as_str()];
            if let Err(e) = self.ctx.files.settled_without_set(self.task(j)) {
                let note = format!("cannot remove its earlier file set: {e}");
                r.note = Some(r.note.map_or(note.clone(), |n| format!("{n}; {note}")));
            }
        }
        let rows = match self.br.loops[l].run.as_mut() {
            Some(run) => run.settle(r, dispatched),
            None => return,
        };
        for r in &rows {
            self.log_sub(r);
        }
    }

    /// Whether task `d` settled and its row is durable.
    fn durably_settled(&self, d: usize) -> bool {
        self.state[d].row().is_some() && !self.pending.iter().any(|&(_, p)| p == d)
    }

    fn advance_loop(&mut self, l: usize) {
        let slot = &self.br.loops[l];
        if slot.over || slot.in_flight {
            return;
        }
        let stage = self.task(slot.members[0]).stage;
        if slot.run.is_none() {
            // Not started: a halt or a ceiling may already have settled the body without it, or
            // the loop ended before an interruption. One whose final rows were only partly
            // written (a kill between them) replays its folded rounds to write the rest.
            if slot.members.iter().all(|&m| self.state[m].row().is_some()) {
                self.br.loops[l].over = true;
                return;
            }
            let phase_open = match stage {
                Stage::Iteration => self.phase == super::Phase::Main,
                Stage::Epilogue => self.phase == super::Phase::Epilogue,
            };
            let gate = slot.outside.iter().all(|&d| self.durably_settled(d));
            if !phase_open || !gate || self.parked(stage) || self.closed_for(stage).is_some() {
                return;
            }
            let lp = self.br.loops[l].lp.clone();
            for m in self.br.loops[l].members.clone() {
                if self.state[m].row().is_none() {
                    self.state[m] = TaskState::Running;
                }
            }
            self.br.loops[l].run = Some(LoopRun::new(lp));
        }
        self.step_loop(l, stage);
    }

    /// Runs the loop's current round on until a body task dispatches, the loop waits for a lane,
    /// or the loop ends.
    fn step_loop(&mut self, l: usize, stage: Stage) {
        loop {
            if self.parked(stage) {
                return;
            }
            let run = self.br.loops[l].run.as_ref().expect("a started loop");
            let Some(name) = run.next_task().map(str::to_string) else {
                // The reviewer settled: ceilings are checked before every round, unless the log
                // of an interrupted run shows the next round began.
                let next = run.round() + 1;
                let began = (run.lp.body.iter())
                    .any(|t| self.br.folded.contains_key(&revise::round_name(t, next)));
                let (cost, wall) = (self.cost_exhausted && !began, self.wall && !began);
                let run = self.br.loops[l].run.as_mut().expect("a started loop");
                match run.end_round(cost, wall) {
                    Next::Round(_) => continue,
                    Next::End(_) => return self.end_loop(l),
                }
            };
            // A round row settled before an interruption: replayed through the round state
            // machine, already on the log (RFC-0002:C-PLAYBOOK-RESUME).
            if let Some(mut r) = self
                .br
                .folded
                .remove(&revise::round_name(&name, run.round()))
            {
                r.task = name;
                let run = self.br.loops[l].run.as_mut().expect("a started loop");
                run.settle(r, true);
                continue;
            }
            let j = self.br.index[name.as_str()];
            let task = self.task(j).clone();
            let view = {
                let outside = self.dep_entries(j, &|d| self.entry_of(d));
                run.deps_view(&outside)
            };
            let deps: BTreeMap<String, Dep> =
                view.iter().map(|(n, e)| (n.clone(), Dep::of(e))).collect();
            let decided = when::readiness(&task, &deps, &Halt::default());
            let decided = match (decided, self.closed_for(stage)) {
                // Once dispatch is closed, every body task not dispatched this round settles
                // blocked on why, as undispatched tasks outside a loop do.
                (_, Some((reason, culprit))) => Readiness::Blocked(reason, culprit),
                (Readiness::Dispatch, None) if task.can_spend() && self.cost_exhausted => {
                    Readiness::Blocked(BlockedReason::BudgetCeiling, None)
                }
                (Readiness::Dispatch, None)
                    if task.can_spend() && self.spent_now() >= self.adm.max_cost =>
                {
                    self.exhaust_cost();
                    Readiness::Blocked(BlockedReason::BudgetCeiling, None)
                }
                (d, _) => d,
            };
            match decided {
                Readiness::Dispatch => {
                    if !self.has_lane(own_lane(&task)) {
                        return;
                    }
                    let mut inputs = self.inputs_with(j, &|d| {
                        let name = &self.task(d).name;
                        view.get(name).cloned().or_else(|| self.entry_of(d))
                    });
                    let staging = self.round_staging(l, j, &name);
                    let deps: Vec<&str> = self.adm.graph.deps()[j]
                        .iter()
                        .map(|&d| self.task(d).name.as_str())
                        .collect();
                    taskfiles::mark_staged(&mut inputs, &task, &deps, &staging);
                    let run = self.br.loops[l].run.as_ref().expect("a started loop");
                    // RFC-0002:C-REVISE-LOOP: the flag says whether the reviewer's failing
                    // round's set was staged for this target.
                    let staged = staging.task_staged(&run.lp.reviewer);
                    if let (Some(rev), Value::Object(m)) =
                        (run.revision_for(&name, staged), &mut inputs)
                    {
                        m.insert(REVISION.to_string(), rev);
                    }
                    self.br.loops[l].in_flight = true;
                    let sub = Some(Sub::Round);
                    self.spawn_attempt(j, task, inputs, staging.sets, sub, route::Options::new());
                    return;
                }
                Readiness::Wait | Readiness::Unsettled => return,
                other => {
                    let r = self.undispatched_row(&task, other);
                    self.round_settled(l, r, false);
                }
            }
        }
    }

    /// The sets body task `j` (named `name`) receives this round: this round's body results
    /// over the settled results outside the body, and for a target from the second round on
    /// the reviewer's failing round's set under the reviewer's name (RFC-0002:C-REVISE-LOOP).
    fn round_staging(&self, l: usize, j: usize, name: &str) -> StagingPlan {
        let run = self.br.loops[l].run.as_ref().expect("a started loop");
        let revising = run.revision_for(name, false).is_some();
        let reviewer = &run.lp.reviewer;
        let entry = |d: usize| {
            let n = self.task(d).name.as_str();
            if !run.lp.contains(n) {
                return self.entry_of(d);
            }
            match run.settled_this_round(n) {
                Some(e) => Some(e.clone()),
                None if revising && n == reviewer => run.review().cloned(),
                None => None,
            }
        };
        let reviewer = revising.then_some(reviewer.as_str());
        self.ctx
            .files
            .staging(&self.tasks, self.adm.graph.deps(), &entry, j, reviewer)
    }

    /// The loop ended: one row under each body task's own name (RFC-0002:C-REVISE-LOOP). Their
    /// spend was counted as the round rows settled.
    fn end_loop(&mut self, l: usize) {
        self.br.loops[l].over = true;
        let finals = self.br.loops[l]
            .run
            .as_ref()
            .map(LoopRun::finish)
            .unwrap_or_default();
        for r in finals {
            let j = self.br.index[r.task.as_str()];
            if self.state[j].row().is_some() {
                continue; // its final row was written before an interruption
            }
            self.settle_row(j, r);
        }
    }
}

/// A route's output: every question answered from its source dependency (RFC-0001-NOTES §5).
/// Options read from a field need a decision model (the validator says so), so a source route
/// only ever answers declared labels.
/// The options of each dynamic choice of a model-decided route, read as it becomes ready.
fn model_options(
    task: &Task,
    entries: &BTreeMap<String, Entry>,
    item: Option<&str>,
) -> Result<route::Options, GraphError> {
    let spec = task.route.as_ref().expect("a route task has a route");
    spec.questions
        .iter()
        .filter(|(_, q)| q.options_from.is_some())
        .map(|(id, q)| {
            Ok((
                id.clone(),
                route::read_options(&task.name, id, q, entries, item)?,
            ))
        })
        .collect()
}

fn decide_route(task: &Task, entries: &BTreeMap<String, Entry>) -> Result<Value, GraphError> {
    let spec = task.route.as_ref().expect("a route task has a route");
    let source = spec.source.as_deref().unwrap_or_default();
    // Validation makes the source a dependency; one that left no entry gave no answer.
    let absent = Entry::new(Status::Blocked, None, None, false);
    let answers = route::from_source(&task.name, spec, entries.get(source).unwrap_or(&absent))?;
    Ok(route::output(answers))
}

//! The coordinator: one loop owns all run state. It decides readiness, admits dispatches
//! against the ceilings, and settles results; attempts run as tokio tasks and report back by
//! message. A settled row is written ahead: its effects on other tasks are applied only once the
//! log writer reports it durable.
//!
//! Per task the state machine is [`TaskState`]: waiting (dependencies unsettled) → ready →
//! running → settled, or waiting/ready → settled without dispatch (blocked, skipped, truncated),
//! or left unsettled (early completion, operator stop). Later features extend these transitions
//! rather than adding a second path: resume folds logged rows into `Settled` before the loop
//! starts (`Coord::settle` minus the log write); a `when` that is unsatisfied is one more
//! waiting → settled transition (`not_taken`) in `deps_settled`; fan-out and revise rounds are
//! sub-rows a node collects before its own `settle`; declared files hang off `Report`.

mod attempt;
mod branch;

use crate::admit::Admitted;
use crate::asks::AsksBudget;
use crate::files::{StagedSet, StagingPlan};
use crate::graph::{route, when, Entry};
use crate::history::History;
use crate::log::{self, Seq, Writer};
use crate::proc::Abort;
use crate::report::{self, ReportConfig};
use crate::rerun::{self, Parent};
use crate::resume::{self, Resumption};
use crate::taskfiles::{self, RunFiles, StagingRefused};
use crate::taskio::Graded;
use crate::{git, state, Launch, Observer, RunError, RunRequest, RunSummary};
use crucible_agent::harness::{self, Harness, HarnessKind};
use crucible_plan::wire::{
    AdmittedTask, Ask, AsksEmitted, Blocked, DecisionOpened, Event, PlanAdmitted, Repair, Resumed,
    SessionTurns, Shutdown, Start, TaskResult, GATE_TASK,
};
use crucible_plan::{
    canonical, duration, BlockedReason, Ceiling, Outcome, Stage, Status, Task, TaskKind, Verdict,
};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

enum Msg {
    /// Every log line up to this one is on disk.
    Durable(Seq),
    /// The session log could not be written: the run cannot go on honestly.
    LogFailed(String),
    /// An attempt (with its retries) finished.
    Done(usize, Report),
    /// What the attempt `u64` has spent so far, streamed while its agent turn runs, so the
    /// cost ceiling counts it before the attempt settles.
    Spending(u64, f64),
    /// A fan-out instance or a revise round of task `usize` finished (see `branch`).
    SubDone(usize, branch::Sub, Report),
    /// An attempt opened a runbook gate's decision request (issue 15): logged as it opens.
    GateOpened(DecisionOpened),
    /// A stage of a staged runbook task was done, or its gate decided (issue 15): logged.
    StageDone(crucible_plan::wire::RunbookStage),
    /// The attempt that logged those stages ended: logged, so none of them is folded again.
    StagesClosed(crucible_plan::wire::RunbookStagesClosed),
}

/// What a dispatched task came back with.
struct Report {
    graded: Graded,
    attempts: u32,
    cost_usd: f64,
    secs: f64,
    refused: Option<String>,
    transport: Option<String>,
    /// `Some(reason)` when the task declared early completion and it was accepted.
    completion: Option<Option<String>>,
    /// The operator stopped it: it never settled.
    stopped: bool,
    /// The run's wall-clock ceiling killed it.
    ceiling_killed: bool,
    /// The engine could not keep what the attempt did (its commit to the git memory failed):
    /// the engine's fault, not the task's, so the task does not settle and the run ends.
    fault: Option<String>,
    /// A set of declared files was published for it (RFC-0002:C-TASK-FILES).
    files: bool,
    /// Its inputs could not be staged: it settles blocked without running.
    staging_refused: Option<StagingRefused>,
    /// An agent's repair turns within the attempt.
    repairs: Vec<Repair>,
    /// What its turns did to its `session()`'s conversation.
    session: Option<SessionTurns>,
    /// What a passing attempt emitted for other runs (RFC-0002:C-ASKS).
    asks: Vec<Ask>,
    /// The attempt's key in the coordinator's in-flight spend.
    key: u64,
    /// Its log directory relative to the run's (`logs/<task>`), once a turn's output was kept.
    log: Option<String>,
    /// A runbook turn's ledger (issue 15).
    runbook: Option<crucible_plan::wire::RunbookLedger>,
}

impl Ctx {
    /// The sandbox an attempt of `task` runs `spawn` in (without a network in a named sandbox,
    /// within a runbook's bounds), or none when opted out (admission refuses both then).
    fn jail(
        &self,
        task: &Task,
        spawn: &crucible_agent::spawn::Spawn,
    ) -> Option<crate::sandbox::Jail> {
        let named = self.sandboxes.contains_key(&task.name);
        (self.sandbox.as_ref()).map(|sb| sb.jail(spawn, crate::sandbox::Bounds::of(task, named)))
    }
}

impl Report {
    /// Masks the values of declared secrets in everything the task's process wrote (issue 11).
    fn mask(&mut self, masker: &crate::taskenv::Masker) {
        if masker.is_empty() {
            return;
        }
        masker.opt(&mut self.graded.note);
        if let Some(out) = &mut self.graded.output {
            masker.json(out);
        }
        masker.opt(&mut self.transport);
        masker.opt(&mut self.refused);
    }

    fn empty() -> Report {
        Report {
            graded: Graded::fail("not run", None),
            attempts: 0,
            cost_usd: 0.0,
            secs: 0.0,
            refused: None,
            transport: None,
            completion: None,
            stopped: false,
            ceiling_killed: false,
            fault: None,
            files: false,
            staging_refused: None,
            repairs: Vec::new(),
            session: None,
            asks: Vec::new(),
            key: 0,
            log: None,
            runbook: None,
        }
    }
}

/// What runs a run's agent turns.
enum Agents {
    /// The command stand-in runs every turn, with the environment commands get.
    Command(Arc<dyn Harness>),
    /// Local harnesses by kind, each turn in a clean environment; none without agent tasks.
    Local(BTreeMap<HarnessKind, Arc<dyn Harness>>),
}

impl Agents {
    fn new(
        adm: &Admitted,
        run_dir: &std::path::Path,
        inference: &crucible_agent::inference::Inference,
        prices: &crucible_agent::prices::Prices,
    ) -> Result<Agents, RunError> {
        if let Some(agent_cmd) = adm.agent_cmd.clone() {
            return Ok(Agents::Command(Arc::new(harness::command::Command {
                agent_cmd,
            })));
        }
        let endpoint = inference.agent.clone();
        let key = (endpoint.as_ref())
            .and_then(|b| b.key_env.as_ref())
            .and_then(|k| std::env::var(k).ok());
        let mut local = BTreeMap::new();
        for (&kind, program) in &adm.harnesses {
            // Nothing of the operator's own configuration: each
            // harness's config, sessions and logs live in the run's directory.
            let home = run_dir.join("agents").join(kind.name());
            std::fs::create_dir_all(&home).map_err(state_err("agent home"))?;
            let setup = harness::Local {
                program: program.clone(),
                home,
                endpoint: endpoint.clone(),
                key: key.clone(),
                prices: prices.clone(),
            };
            let built = harness::local(kind, setup).map_err(state_err("agent home"))?;
            local.insert(kind, Arc::from(built));
        }
        Ok(Agents::Local(local))
    }
}

/// What every attempt shares, read-only.
struct Ctx {
    ws: PathBuf,
    /// The pack's directory (absolute): a skill's directory is below it.
    pack_dir: PathBuf,
    memory: Arc<git::Memory>,
    /// Isolated tasks' checkouts.
    checkouts: Arc<crate::checkout::Checkouts>,
    run_dir: PathBuf,
    max_secs: u64,
    run_deadline: Instant,
    /// What runs agent turns (admission requires it when the plan has agent tasks).
    agents: Agents,
    agent_env: Vec<(String, String)>,
    /// The sandbox layout every attempt runs in; `None` when opted out.
    sandbox: Option<crate::sandbox::Sandbox>,
    /// Each task in a named sandbox, by task name (admitted).
    sandboxes: std::collections::BTreeMap<String, crate::sandbox::Named>,
    /// The run's attempt process groups, which every attempt joins.
    groups: Arc<crate::proc::ProcessGroups>,
    /// The gate requests an interrupted run opened, by request route (issue 15): a resumed
    /// run's gate keeps the first open's times.
    gates_opened: HashMap<String, DecisionOpened>,
    /// The stages of staged runbook tasks whose turns are done, by set name, each stage's last
    /// record (issue 15): folded from an interrupted run's log, and kept as stages finish, so
    /// a resumed or retried attempt never runs a done stage's turn again.
    stages: Mutex<HashMap<String, Vec<crucible_plan::wire::RunbookStage>>>,
    /// The operator's bounds on evidence and notes.
    decision_bounds: crate::decision::Bounds,
    /// The launch variables every task receives (the base and `[env]`).
    task_env: crate::taskenv::TaskEnv,
    /// The run's declared secrets, masked in everything a task's process wrote.
    masker: crate::taskenv::Masker,
    /// Each turn's stdout and stderr, kept for the operator.
    logs: crate::tasklog::Logs,
    goal: Option<String>,
    /// The run's steering files (`steering`), for agent prompts, and their directory, which
    /// every task reads (`CRUCIBLE_STEERING_DIR`).
    steering: Vec<(String, String)>,
    steering_dir: Option<PathBuf>,
    /// `--harness` / `--model`: above every task's own setting.
    launch_harness: Option<String>,
    launch_model: Option<String>,
    /// `[agent]` defaults: below every task's own setting.
    default_harness: Option<String>,
    default_model: Option<String>,
    default_effort: Option<String>,
    run_id: String,
    /// Each `session()`'s conversation, by name: the harness's id a later turn resumes, and
    /// the session's turns so far.
    sessions: Mutex<HashMap<String, (String, u32)>>,
    tx: mpsc::UnboundedSender<Msg>,
    /// Set once the cost ceiling is reached: spending tasks stop retrying.
    spend_blocked: Arc<AtomicBool>,
    /// Declared files: the run's `files/` area, its size bound, and staging.
    files: Arc<RunFiles>,
    /// The decision model routes ask (admission checked it can be asked).
    decision: Option<crucible_agent::inference::Binding>,
    /// What the decision model's tokens cost (the run's price table, by its model).
    decision_price: crucible_agent::prices::Price,
    /// Where reports go and how large they may be.
    reports: ReportConfig,
    /// The run's bound on emitted asks and what it has emitted.
    asks: Arc<AsksBudget>,
    /// Who answers human-decided routes (admission requires one when such a route can run).
    decider: Option<Arc<dyn crate::decision::Decider>>,
}

/// One task's life: `Waiting` (a dependency is unsettled) → `Ready` → `Running` → `Settled`,
/// or `Waiting`/`Ready` → `Settled` without a dispatch (blocked, skipped, truncated). A task
/// still short of `Settled` when dispatch stops for good (early completion, operator stop)
/// never settles and gets no row. The settled rows are the run's results: what a resumed run
/// will fold its log back into.
enum TaskState {
    Waiting,
    Ready,
    Running,
    Settled(Box<TaskResult>),
}

impl TaskState {
    fn row(&self) -> Option<&TaskResult> {
        match self {
            TaskState::Settled(r) => Some(r),
            _ => None,
        }
    }

    fn undispatched(&self) -> bool {
        matches!(self, TaskState::Waiting | TaskState::Ready)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Main,
    Epilogue,
    Done,
}

struct Coord<'o> {
    tasks: Arc<Vec<Task>>,
    params: Value,
    /// The launch series' earlier runs, for tasks that read history.
    history: History,
    adm: Admitted,
    ctx: Arc<Ctx>,
    observer: &'o mut dyn Observer,
    writer: Writer,
    state: Vec<TaskState>,
    waiting: Vec<usize>,
    ready_shared: BTreeSet<usize>,
    ready_isolated: BTreeSet<usize>,
    shared_busy: bool,
    isolated_busy: usize,
    in_flight: usize,
    /// What each attempt in flight has streamed so far, by its key; the key last given.
    streaming: HashMap<u64, f64>,
    next_key: u64,
    jobs: usize,
    /// Settled rows whose effects wait for durability, in log order.
    pending: VecDeque<(Seq, usize)>,
    phase: Phase,
    /// The required main-graph task whose failure stopped dispatch.
    halted_by: Option<usize>,
    completion: Option<Option<String>>,
    stopped: bool,
    wall: bool,
    cost_exhausted: bool,
    truncated: bool,
    spent: f64,
    abort: watch::Sender<Abort>,
    main_end: Option<(Outcome, Option<Ceiling>, Option<String>, Verdict)>,
    log_failed: Option<String>,
    /// The first engine fault: dispatch closed, the run ends `error` naming it.
    fault: Option<String>,
    started: Instant,
    /// Fan-out nodes, route folds and revise loops in progress (RFC-0002:C-REVISE-LOOP).
    br: branch::Branches,
    /// Elapsed time before this process took the run over (a resumption), downtime included.
    prior_elapsed: Duration,
    /// Spend of rows a rerun reused: reported apart, never against the ceilings.
    reused_spent: f64,
    /// Instance and round rows settled or folded, by name (`RunSummary::sub_rows`).
    sub_rows: Vec<String>,
    /// Decision requests an interrupted run opened, by route (RFC-0002:C-HUMAN-DECISION): a
    /// resumed run reopens each with the same evidence and expiry.
    opened: HashMap<String, DecisionOpened>,
    /// Each human-decided route's request, built as it dispatches, with each pick's values.
    humans: HashMap<usize, (crate::decision::Request, BTreeMap<String, Vec<String>>)>,
    decision_bounds: crate::decision::Bounds,
}

fn refused<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> RunError + '_ {
    move |e| RunError::refused(format!("{context}: {e}"))
}

fn state_err<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> RunError + '_ {
    move |e| RunError::state(format!("{context}: {e}"))
}

pub async fn execute(
    mut req: RunRequest,
    adm: Admitted,
    observer: &mut dyn Observer,
    mut stop: mpsc::UnboundedReceiver<()>,
) -> Result<RunSummary, RunError> {
    let started = Instant::now();
    let mut prior_elapsed = Duration::ZERO;
    let ws = git::workspace_path(&req.manifest).map_err(refused("workspace"))?;
    let run_id = state::new_run_id();
    // Tasks run elsewhere (the workspace, a worktree): every path they are given is absolute.
    let ws = std::path::absolute(&ws).map_err(refused("workspace"))?;
    let state_dir = std::path::absolute(&req.state_dir).map_err(refused("state directory"))?;
    // Admission refused a state directory and a workspace that overlap.
    // Issue 11: every attempt in a sandbox unless the operator opted out; refused here,
    // before anything is touched, when it is wanted and missing.
    let sandbox_mode = crate::sandbox::mode(req.no_sandbox, req.manifest.manifest.sandbox.enabled)
        .map_err(RunError::refused)?;
    let before = crate::leftovers::Before::note(&state_dir, &ws);
    // One engine per state directory and workspace, from before either is touched to the end.
    let mut engine_lock = crate::lock::EngineLock::take(&state_dir)?;
    // A refusal from here until the run exists removes what this launch made.
    let mut leftovers = before.armed();
    crate::lock::check_workspace(&ws, &state_dir)?;
    // A crashed run may have left sealed (read-only) staged inputs behind; every launch
    // rebuilds the workspace, so clear them first.
    if ws.is_dir() {
        let _ = crate::files::unstage(&ws);
    }
    // RFC-0002:C-PLAYBOOK-RESUME / C-PLAYBOOK-RERUN: what the launch continues or reuses.
    let (mut resumed, mut parent) = (None, None);
    let read_ahead = req.read_ahead.take();
    match &req.launch {
        Launch::Fresh => {}
        Launch::Resume => match resume::reopen(&req, read_ahead, adm.max_cost, &ws, &state_dir)? {
            Resumption::Finished(summary) => return Ok(*summary),
            Resumption::Live(r) => resumed = Some(r),
        },
        Launch::Rerun { parent: p, select } => {
            parent = Some(rerun::load(&req.plan, &adm, &state_dir, p, select)?);
        }
    }
    let (run_id, run_dir, file, folded, folded_asks, (folded_opened, folded_stages)) =
        if let Some(r) = resumed.take() {
            let resume::Reopened {
                run_id,
                run_dir,
                log,
                mut file,
                elapsed,
            } = *r;
            // Elapsed time, downtime included, counts against the wall-clock ceiling. Kept apart
            // from `started`: a monotonic clock cannot reach back past a reboot.
            prior_elapsed = elapsed;
            let own = resume::own_spend(&req.plan, &log.rows);
            let line = Event::Resumed(Resumed {
                run: run_id.clone(),
                folded: log.rows.len() as u32,
                spent: own,
                elapsed_secs: elapsed.as_secs_f64(),
            });
            log::append_now(&mut file, &line).map_err(state_err("session log"))?;
            let kept = (log.opened, log.stages);
            (run_id, run_dir, file, log.rows, log.asks, kept)
        } else {
            // RFC-0002:C-RUN-HISTORY: a local series' earlier runs, read with the lock held so
            // none of them is still running.
            let history = match &req.series {
                Some(name) => crate::series::history(&state_dir, name, req.history.max_bytes())
                    .map_err(RunError::refused)?,
                None => req.history.clone(),
            };
            let run_dir =
                state::create_run_dir(&state_dir, &run_id).map_err(refused("state directory"))?;
            let memory = run_dir.join("memory");
            let base = {
                let (m, ws, memory) = (req.manifest.clone(), ws.clone(), memory.clone());
                tokio::task::spawn_blocking(move || git::setup(&m, &ws, &memory))
                    .await
                    .expect("workspace setup does not panic")
            };
            let base = match base {
                Ok(b) => b,
                Err(e) => {
                    // Nothing was dispatched: the refused run leaves no trace in the state directory.
                    let _ = std::fs::remove_dir_all(&run_dir);
                    return Err(RunError::refused(format!("workspace setup: {e}")));
                }
            };
            let base = match &parent {
                Some(p) => match replay_parent(&req, p, &ws).await {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&run_dir);
                        return Err(e);
                    }
                },
                None => base,
            };
            if let Err(e) = taskfiles::check_workspace(&req.plan.tasks, &ws) {
                let _ = std::fs::remove_dir_all(&run_dir);
                return Err(RunError::refused(e));
            }
            let plan_digest = canonical::plan_digest(&req.plan);
            let started_at = log::now_ts();
            let run_json = state::RunJson {
                run: run_id.clone(),
                pack: req.pack_digest.clone(),
                plan: plan_digest.clone(),
                variant: req.manifest.variant.clone(),
                params: req.plan.params.clone(),
                max_cost: adm.max_cost,
                max_secs: adm.max_secs as f64,
                base_commit: base.to_string(),
                parent: parent.as_ref().map(|p| p.id.clone()),
                series: req.series.clone(),
                started_at,
            };
            state::write_run_json(&run_dir, &run_json).map_err(state_err("run.json"))?;
            state::write_current(&state_dir, &run_id).map_err(state_err("state/current"))?;
            std::fs::create_dir_all(run_dir.join("inputs")).map_err(state_err("inputs"))?;
            history.save(&run_dir).map_err(state_err("history"))?;
            let mut file =
                log::open(&run_dir.join("session.jsonl")).map_err(state_err("session log"))?;
            let start = Event::Start(Start {
                run: run_id.clone(),
                gate: GATE_TASK.to_string(),
                pack: req.pack_digest.clone(),
                plan: plan_digest,
                variant: req.manifest.variant.clone(),
                params: req.plan.params.clone(),
                max_cost: adm.max_cost,
                max_secs: adm.max_secs as f64,
                parent: parent.as_ref().map(|p| p.id.clone()),
                series: req.series.clone(),
            });
            log::append_now(&mut file, &start).map_err(state_err("session log"))?;
            let digests = canonical::task_digests(&req.plan);
            let admitted = Event::PlanAdmitted(PlanAdmitted {
                plan_version: req.plan.version,
                history_record: req.plan.history_record.clone().unwrap_or_default(),
                tasks: req
                    .plan
                    .tasks
                    .iter()
                    .map(|t| AdmittedTask::from_task(t, digests.get(&t.name).map_or("", |d| d)))
                    .collect(),
            });
            log::append_now(&mut file, &admitted).map_err(state_err("session log"))?;
            (
                run_id,
                run_dir,
                file,
                Vec::new(),
                0,
                (Vec::new(), Vec::new()),
            )
        };
    leftovers.keep();
    engine_lock
        .claim(&run_id)
        .map_err(state_err("state directory lock"))?;
    let mut files = RunFiles::new(&run_dir, &req.plan.tasks, req.max_files_bytes);
    if let Some(p) = &parent {
        rerun::copy_sets(p, &files.dir)?;
    }
    files
        .take_over(&folded)
        .map_err(state_err("declared files"))?;
    let run_deadline = started + Duration::from_secs(adm.max_secs).saturating_sub(prior_elapsed);
    req.groups
        .record_in(&run_dir.join("groups"))
        .map_err(state_err("groups"))?;
    observer.run_started(&run_id, &run_dir);

    let (tx, mut rx) = mpsc::unbounded_channel();
    let durable_tx = tx.clone();
    let writer = Writer::start(file, move |seq| {
        let _ = durable_tx.send(match seq {
            Ok(seq) => Msg::Durable(seq),
            Err(e) => Msg::LogFailed(e),
        });
    });
    let agent = &req.manifest.manifest.agent;
    taskfiles::exclude_inputs(&run_dir.join("memory")).map_err(state_err("git memory"))?;
    let memory = Arc::new(git::Memory::open(&ws).map_err(state_err("git memory"))?);
    let prices = crate::admit::prices(&req.manifest);
    // Per-run steering, beside the pack (RFC-0002:C-PACK-BASE): read-only to every task.
    let steering_dir = (req.steering.as_deref())
        .map(std::path::absolute)
        .transpose()
        .map_err(refused("the steering directory"))?;
    let ctx = Arc::new(Ctx {
        ws,
        pack_dir: std::path::absolute(&req.manifest.dir).map_err(refused("pack directory"))?,
        memory,
        checkouts: Arc::new(crate::checkout::Checkouts::new(
            &run_dir,
            sandbox_mode == crate::sandbox::Mode::Namespaces,
        )),
        run_dir: run_dir.clone(),
        max_secs: adm.max_secs,
        run_deadline,
        agents: Agents::new(&adm, &run_dir, &req.inference, &prices)?,
        sandbox: match sandbox_mode {
            crate::sandbox::Mode::Namespaces => Some(
                crate::sandbox::Sandbox::new(
                    &req.manifest.manifest.sandbox.expose,
                    &req.manifest.dir,
                    &state_dir,
                    &run_dir,
                    &req.hidden,
                )
                .also_readable(steering_dir.as_deref()),
            ),
            crate::sandbox::Mode::Off(_) => None,
        },
        sandboxes: adm.sandboxes.clone(),
        groups: req.groups.clone(),
        gates_opened: (folded_opened.iter())
            .filter_map(|o| {
                let gate = o.gate.as_ref()?;
                Some((crate::runbook::gate_route(&o.task, gate), o.clone()))
            })
            .collect(),
        stages: Mutex::new(crate::runbook::fold_stages(folded_stages)),
        decision_bounds: req.decision_bounds,
        task_env: crate::taskenv::TaskEnv::from_launch(&req.manifest.manifest.env),
        masker: crate::taskenv::Masker::from_launch(&req.manifest.manifest.env, agent),
        logs: crate::tasklog::Logs::new(&run_dir),
        agent_env: agent
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        goal: adm.goal.clone(),
        steering: adm.steering.clone(),
        steering_dir: steering_dir.clone(),
        launch_harness: req.harness.clone(),
        launch_model: req.model.clone(),
        default_harness: agent.harness.clone(),
        default_model: agent.model.clone(),
        default_effort: agent.effort.clone(),
        run_id: run_id.clone(),
        // A resumed run's sessions continue the conversations its settled tasks left.
        sessions: Mutex::new(sessions_of(&folded)),
        tx,
        spend_blocked: Arc::new(AtomicBool::new(false)),
        files: Arc::new(files),
        decision: req.inference.decision.clone(),
        decision_price: prices.of(req.inference.decision.as_ref().map_or("", |b| &b.model)),
        reports: req.reports.clone(),
        asks: Arc::new(AsksBudget::new(req.max_asks, folded_asks)),
        decider: req.decider.clone(),
    });
    let n = req.plan.tasks.len();
    let br = branch::Branches::new(&req.plan, &adm);
    // The coordinator owns the plan's tasks from here: nothing else reads the plan.
    let plan = req.plan.into_plan();
    let (abort, _) = watch::channel(Abort::None);
    // RFC-0002:C-RUN-HISTORY: every task reads the history the run was started with (a new
    // run saved it above), so a resumed run gives each task the same history.
    let history = History::load(&run_dir, 0).map_err(state_err("history"))?;
    let mut c = Coord {
        params: serde_json::to_value(&plan.params).expect("params serialize"),
        tasks: Arc::new(plan.tasks),
        history,
        waiting: adm.graph.deps().iter().map(Vec::len).collect(),
        adm,
        ctx,
        observer,
        writer,
        state: (0..n).map(|_| TaskState::Waiting).collect(),
        ready_shared: BTreeSet::new(),
        ready_isolated: BTreeSet::new(),
        shared_busy: false,
        isolated_busy: 0,
        in_flight: 0,
        streaming: HashMap::new(),
        next_key: 0,
        jobs: req.jobs.max(1),
        pending: VecDeque::new(),
        phase: Phase::Main,
        halted_by: None,
        completion: None,
        stopped: false,
        wall: false,
        cost_exhausted: false,
        truncated: false,
        spent: 0.0,
        abort,
        main_end: None,
        log_failed: None,
        fault: None,
        started,
        br,
        prior_elapsed,
        reused_spent: 0.0,
        sub_rows: Vec::new(),
        opened: folded_opened
            .into_iter()
            .filter(|o| o.gate.is_none())
            .map(|o| (o.task.clone(), o))
            .collect(),
        humans: HashMap::new(),
        decision_bounds: req.decision_bounds,
    };
    c.fold_log(folded);
    if let Some(p) = parent {
        // Reused rows settle first, as live rows do, so dependents are fed through `durable`.
        let mut nodes = Vec::new();
        for row in p.reused {
            match c.index_of(&row.task) {
                Some(i) => {
                    nodes.push(i);
                    c.settle(i, row);
                }
                None => c.reuse_sub(row),
            }
        }
        // A reused mapped node feeds its consumers its fold, as a folded one does.
        for i in nodes {
            c.refold(i);
        }
    }
    c.admission_rows();
    c.seed(Stage::Iteration);
    // A stop that arrived during workspace setup ends the run before its first dispatch.
    if stop.try_recv().is_ok() {
        c.on_stop();
    }

    let tick_every = c.observer.tick_interval();
    let mut ticker = tokio::time::interval(tick_every.unwrap_or(Duration::from_secs(3600)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        // The ceiling may fall between two events (or during setup): never dispatch past it.
        if !c.wall && !c.stopped && Instant::now() >= run_deadline {
            c.on_wall();
        }
        c.dispatch();
        if c.in_flight == 0 && c.log_failed.is_some() {
            let e = c.log_failed.take().unwrap_or_default();
            return Err(RunError::state(format!("session log: {e}")));
        }
        if c.in_flight == 0 && c.pending.is_empty() {
            if !c.advance_phase() {
                break;
            }
            continue;
        }
        tokio::select! {
            Some(msg) = rx.recv() => match msg {
                Msg::Durable(seq) => c.durable(seq),
                Msg::LogFailed(e) => {
                    // Nothing more can be written ahead: kill what runs and give up.
                    c.log_failed = Some(e);
                    c.on_stop();
                }
                Msg::Spending(key, usd) => c.spending(key, usd),
                Msg::Done(i, report) => c.done(i, report),
                Msg::SubDone(i, sub, report) => c.sub_done(i, sub, report),
                Msg::GateOpened(o) => {
                    c.writer.push(&Event::DecisionOpened(o));
                }
                Msg::StageDone(st) => {
                    c.writer.push(&Event::RunbookStage(st));
                }
                Msg::StagesClosed(closed) => {
                    c.writer.push(&Event::RunbookStagesClosed(closed));
                }
            },
            Some(()) = stop.recv(), if !c.stopped => c.on_stop(),
            _ = tokio::time::sleep_until(run_deadline), if !c.wall && !c.stopped => c.on_wall(),
            _ = ticker.tick(), if tick_every.is_some() => {
                let elapsed = c.started.elapsed() + c.prior_elapsed;
                let spent = c.spent_now();
                c.observer.tick(spent, elapsed);
            }
        }
    }
    let summary = c.finish();
    free_later(req.manifest);
    summary
}

/// Drops `value` on a thread of its own: a large run's plan, graph and manifest take tens of
/// milliseconds to free, which the report of the run's end need not wait for.
fn free_later<T: Send + 'static>(value: T) {
    // A thread that cannot start drops the closure, and the value with it, here.
    let _ = std::thread::Builder::new()
        .name("free".into())
        .spawn(move || drop(value));
}

impl Coord<'_> {
    fn task(&self, i: usize) -> &Task {
        &self.tasks[i]
    }

    /// The plan task a row settles; `None` for an instance's or a round's row.
    fn index_of(&self, name: &str) -> Option<usize> {
        // The graph's index, not a walk over the tasks: folding a log calls this per row.
        self.adm.graph.index(name)
    }

    /// Adds a settled row's spend: a reused row's apart, never against the ceilings
    /// (RFC-0002:C-PLAYBOOK-RERUN); any other row's against the cost ceiling.
    fn account(&mut self, row: &TaskResult) {
        if row.reused_from.is_some() {
            self.reused_spent += row.cost_usd;
            return;
        }
        self.add_spend(row.cost_usd);
    }

    /// RFC-0002:C-PLAYBOOK-RESUME: takes an interrupted run's logged rows as terminal, through
    /// the transitions `settle` and `durable` make live, minus the log write: every row first,
    /// then what each implies (spend, early completion, a required failure halting dispatch),
    /// then its dependents' counts. Applying effects only once all rows are in keeps a halt from
    /// blocking a task whose own row is later in the log.
    fn fold_log(&mut self, rows: Vec<TaskResult>) {
        let mut order = Vec::with_capacity(rows.len());
        for row in rows {
            let by_cost = row.blocked.as_ref().map(|b| b.reason);
            if by_cost == Some(BlockedReason::BudgetCeiling) {
                // The ceiling refused a dispatch before the interruption: it stays refused.
                self.exhaust_cost();
            }
            let Some(i) = self.index_of(&row.task) else {
                // An instance or round row: its spend counts now, as it did live.
                self.account(&row);
                self.sub_rows.push(row.task.clone());
                self.br.fold_sub(row);
                continue;
            };
            if !self.br.spent_in_subs(i, &self.tasks[i]) {
                self.account(&row);
            }
            if self.state[i].row().is_none() {
                order.push(i);
            }
            self.state[i] = TaskState::Settled(Box::new(row));
        }
        let tasks = Arc::clone(&self.tasks);
        for &i in &order {
            let t = &tasks[i];
            let row = self.state[i].row().expect("folded");
            let main = t.stage == Stage::Iteration;
            let halts = main && t.required && halting(row);
            let mut report = Report::empty();
            report.graded = Graded {
                status: row.status,
                note: row.note.clone(),
                output: row.output.clone(),
            };
            attempt::declared_completion(t, main, &mut report);
            if let (Some(reason), None) = (report.completion, &self.completion) {
                self.completion = Some(reason);
            }
            if halts && self.halted_by.is_none() {
                self.halt(i);
            }
        }
        for &i in &order {
            self.refold(i);
        }
        for i in order {
            for &j in &self.adm.graph.dependents()[i] {
                self.waiting[j] -= 1;
            }
        }
    }

    /// Truncation and capability skips, settled before any dispatch (RFC-0002:C-PLAYBOOK-CAPS).
    fn admission_rows(&mut self) {
        if let Some(&first) = self.adm.truncating.first() {
            self.truncated = true;
            let culprit = self.task(first).name.clone();
            for i in 0..self.tasks.len() {
                let t = self.task(i);
                if self.state[i].row().is_some() {
                    continue; // folded from the log of an interrupted run
                }
                if self.adm.truncating.contains(&i) {
                    let note = format!(
                        "needs `{}`, which this run does not provide: the plan is truncated",
                        t.needs
                    );
                    let row = row(t, Status::Truncated, Some(note));
                    self.settle(i, row);
                } else {
                    let b = blocked(
                        t,
                        BlockedReason::Truncated,
                        Some(&culprit),
                        format!("the plan is truncated: required task {culprit} cannot run here"),
                    );
                    self.settle(i, b);
                }
            }
            return;
        }
        for (i, why) in self.adm.cap_skipped.clone() {
            if self.state[i].row().is_some() {
                continue;
            }
            let r = row(self.task(i), Status::Skipped, Some(why));
            self.settle(i, r);
        }
    }

    /// Makes every unsettled task of `stage` with no unsettled dependency ready.
    fn seed(&mut self, stage: Stage) {
        for i in 0..self.tasks.len() {
            let waiting = matches!(self.state[i], TaskState::Waiting);
            if self.task(i).stage == stage && waiting && self.waiting[i] == 0 {
                self.deps_settled(i);
            }
        }
    }

    fn dispatch_closed(&self) -> bool {
        self.stopped
            || self.fault.is_some()
            || self.wall
            || (self.phase == Phase::Main
                && (self.completion.is_some() || self.halted_by.is_some()))
            || self.phase == Phase::Done
    }

    fn dispatch(&mut self) {
        // Fan-out lanes and revise rounds settle what dispatch can no longer reach themselves.
        self.advance_branches();
        if self.dispatch_closed() {
            return;
        }
        while !self.shared_busy {
            let Some(i) = self.ready_shared.pop_first() else {
                break;
            };
            self.try_start(i);
        }
        while self.isolated_busy < self.jobs {
            let Some(i) = self.ready_isolated.pop_first() else {
                break;
            };
            self.try_start(i);
        }
    }

    fn try_start(&mut self, i: usize) {
        if !matches!(self.state[i], TaskState::Ready) {
            return;
        }
        // RFC-0002:C-PLAYBOOK-BUDGET: checked before every dispatch of a task that can spend.
        if self.task(i).can_spend()
            && (self.cost_exhausted || self.spent_now() >= self.adm.max_cost)
        {
            self.exhaust_cost();
            let b = blocked(
                self.task(i),
                BlockedReason::BudgetCeiling,
                None,
                "budget ceiling reached".into(),
            );
            self.settle(i, b);
            return;
        }
        self.start(i);
    }

    fn exhaust_cost(&mut self) {
        self.cost_exhausted = true;
        self.ctx.spend_blocked.store(true, Ordering::SeqCst);
    }

    fn start(&mut self, i: usize) {
        let task = self.task(i).clone();
        if task.kind == TaskKind::Report {
            let context = self.report_context(&task);
            self.state[i] = TaskState::Running;
            self.spawn_attempt(i, task, context, Vec::new(), None, route::Options::new());
            return;
        }
        let staging = self.staging(i);
        let mut inputs = self.inputs(i);
        let deps: Vec<&str> = self.adm.graph.deps()[i]
            .iter()
            .map(|&d| self.task(d).name.as_str())
            .collect();
        taskfiles::mark_staged(&mut inputs, &task, &deps, &staging);
        if task.route.as_ref().is_some_and(|r| r.human) {
            // RFC-0002:C-DECISION-EVIDENCE: evidence the route cannot have fails it before any
            // request opens.
            if let Err(note) = self.open_decision(i, &task, &staging) {
                let mut r = row(&task, Status::Fail, Some(note));
                r.attempts = 1;
                self.settle(i, r);
                return;
            }
        }
        self.state[i] = TaskState::Running;
        let options = self.take_route_options(i);
        self.spawn_attempt(i, task, inputs, staging.sets, None, options);
    }

    /// What a report renders (RFC-0002:C-REPORTS): the verdict the main graph settled, the
    /// spend, pass and failure counts, the first main-graph tasks' statuses, the run, and its
    /// selected task as [`report::selected`] sees it.
    fn report_context(&self, task: &Task) -> Value {
        let verdict = self.main_end.as_ref().map(|e| e.3);
        let main: Vec<&TaskResult> = (self.tasks.iter().zip(&self.state))
            .filter(|(t, _)| t.stage == Stage::Iteration)
            .filter_map(|(_, st)| st.row())
            .collect();
        let count = |f: &dyn Fn(Status) -> bool| main.iter().filter(|r| f(r.status)).count();
        let tasks: Vec<Value> = main
            .iter()
            .take(report::MAX_TEMPLATE_TASKS)
            .map(|r| json!({"name": r.task, "status": r.status.to_string()}))
            .collect();
        let selected = task.report.as_ref().and_then(|r| r.result.as_deref());
        let result = selected.and_then(|name| {
            let j = self.index_of(name)?;
            let row = self.state[j].row();
            Some(match row {
                Some(r) => report::selected(self.task(j), r.status, r.output.as_ref()),
                // It never settled (the run stopped first): no status to show.
                None => json!({"task": name, "status": Value::Null}),
            })
        });
        json!({
            "verdict": verdict.map(|v| v.to_string()),
            "spent_usd": self.spent,
            "passed": count(&|s| s == Status::Pass),
            "failed": count(&|s| matches!(s, Status::Fail | Status::Transport)),
            "tasks": tasks,
            "run": self.ctx.run_id,
            "result": result,
        })
    }

    /// The declared-file sets task `i` receives, from the settled rows as they stand now
    /// (RFC-0002:C-TASK-FILES, C-SETTLED-JOIN).
    fn staging(&self, i: usize) -> StagingPlan {
        self.ctx.files.staging(
            &self.tasks,
            self.adm.graph.deps(),
            &|j| self.entry_of(j),
            i,
            None,
        )
    }

    /// Runs `task` (task `i` itself, or one instance or round of it when `sub` says which) on
    /// its lane, staged with `sets`; the report comes back as a message.
    fn spawn_attempt(
        &mut self,
        i: usize,
        task: Task,
        inputs: Value,
        sets: Vec<StagedSet>,
        sub: Option<branch::Sub>,
        options: route::Options,
    ) {
        self.in_flight += 1;
        self.next_key += 1;
        let key = self.next_key;
        if own_lane(&task) {
            self.isolated_busy += 1;
        } else {
            self.shared_busy = true;
        }
        self.observer.task_started(&task.name);
        let ctx = self.ctx.clone();
        let abort = self.abort.subscribe();
        // An instance's set lives under its node's name with its key escaped, never under its
        // raw name, which may hold a separator (RFC-0002:C-TASK-FILES).
        let set_name = match &sub {
            Some(branch::Sub::Instance(key)) => {
                crate::files::dir_name(&self.task(i).name, Some(key))
            }
            _ => crate::files::dir_name(&task.name, None),
        };
        let human = match sub {
            None => self.humans.remove(&i),
            Some(_) => None,
        };
        tokio::spawn(async move {
            let (tx, masker) = (ctx.tx.clone(), ctx.masker.clone());
            let run = tokio::spawn(async move {
                if let Some((req, offered)) = human {
                    attempt::decide_by_person(&ctx, &task, req, offered, abort).await
                } else if task.kind == TaskKind::Route {
                    attempt::decide_by_model(&ctx, &task, inputs, &sets, &options, abort).await
                } else if task.kind == TaskKind::Report {
                    attempt::deliver_report(&ctx, &task, inputs).await
                } else {
                    let ctl = attempt::Control { abort, key };
                    attempt::run(&ctx, i, &task, &set_name, inputs, sets, ctl).await
                }
            });
            // A panic in the attempt runner must still settle the task, or the run would wait
            // for it forever.
            let mut report = run.await.unwrap_or_else(|e| Report {
                graded: Graded::fail(format!("internal error in the attempt runner: {e}"), None),
                ..Report::empty()
            });
            // Before anything the task wrote reaches a row, the log or the terminal.
            report.mask(&masker);
            report.key = key;
            let _ = tx.send(match sub {
                None => Msg::Done(i, report),
                Some(sub) => Msg::SubDone(i, sub, report),
            });
        });
    }

    /// A human-decided route's request (RFC-0002:C-HUMAN-DECISION, C-DECISION-EVIDENCE): each
    /// pick's values, the evidence as the route's join and staging give it, its digest, and its
    /// expiry, logged as it opens. A resumed run reopens a request it logged with the evidence
    /// and expiry it opened with, so neither a restart nor a resume extends it.
    fn open_decision(
        &mut self,
        i: usize,
        task: &Task,
        staging: &StagingPlan,
    ) -> Result<(), String> {
        use crate::decision;
        let spec = task.route.as_ref().expect("a route task has a route");
        let entries = self.dep_entries_of(i);
        let mut offered = BTreeMap::new();
        for (id, q) in &spec.questions {
            if q.kind == crucible_plan::QuestionKind::Pick {
                let values =
                    route::pick_values(&task.name, id, q, &entries).map_err(|e| e.note())?;
                offered.insert(id.clone(), values);
            }
        }
        let dir = self.ctx.run_dir.join("decisions");
        let file = dir.join(format!("{}.json", crate::files::dir_name(&task.name, None)));
        let folded = self.opened.get(&task.name).cloned();
        let stored = folded.as_ref().and_then(|o| {
            let ev: Value = serde_json::from_slice(&std::fs::read(&file).ok()?).ok()?;
            let digest = canonical::sha256(canonical::to_string(&ev).as_bytes());
            (digest == o.digest).then_some((ev, digest))
        });
        let (evidence, digest) = match stored {
            Some(held) => held,
            None => {
                let inputs = entries
                    .into_iter()
                    .filter(|(_, e)| when::input_value(task.join, e).is_some())
                    .collect();
                let gated = (self.tasks.iter())
                    .filter(|t| t.when.as_ref().is_some_and(|w| w.route == task.name))
                    .collect();
                let parts = decision::Parts {
                    inputs,
                    sets: &staging.sets,
                    spent_usd: self.spent_now(),
                    elapsed_secs: (self.started.elapsed() + self.prior_elapsed).as_secs_f64(),
                    max_cost: self.adm.max_cost,
                    max_secs: self.adm.max_secs,
                    gated,
                    picks: &offered,
                    review: spec.review.as_deref(),
                };
                let (ev, digest) = decision::evidence(&parts, self.decision_bounds.evidence_bytes)?;
                let text = canonical::to_string(&ev);
                std::fs::create_dir_all(&dir)
                    .and_then(|()| std::fs::write(&file, text))
                    .map_err(|e| format!("cannot keep the evidence: {e}"))?;
                (ev, digest)
            }
        };
        // The first open's times hold, even should the evidence have to be built again (its
        // kept copy lost): a resume never extends the request.
        let (opened_at, expires_at) = match &folded {
            Some(o) => (o.opened_at.clone(), o.expires_at.clone()),
            None => {
                let now = std::time::SystemTime::now();
                // With no timeout declared, the ceiling is the timeout.
                let timeout = task.timeout_secs.unwrap_or(self.adm.max_secs);
                let expires = now + Duration::from_secs(timeout);
                (decision::rfc3339(now), decision::rfc3339(expires))
            }
        };
        if folded.as_ref().is_none_or(|o| o.digest != digest) {
            self.writer.push(&Event::DecisionOpened(DecisionOpened {
                task: task.name.clone(),
                gate: None,
                digest: digest.clone(),
                opened_at: opened_at.clone(),
                expires_at: expires_at.clone(),
                via: (self.ctx.decider.as_ref())
                    .map_or("", |d| d.via())
                    .to_string(),
            }));
        }
        let req = decision::Request {
            run: self.ctx.run_id.clone(),
            route: task.name.clone(),
            questions: decision::questions(task, &offered),
            evidence,
            digest,
            opened_at,
            expires_at,
            max_note_bytes: self.decision_bounds.note_bytes,
        };
        self.humans.insert(i, (req, offered));
        Ok(())
    }

    /// The inputs JSON a task receives (RFC-0002:C-SETTLED-JOIN, C-PLAYBOOK-PARAMS).
    fn inputs(&self, i: usize) -> Value {
        self.inputs_with(i, &|d| self.entry_of(d))
    }

    /// [`Coord::inputs`] with each dependency's entry from `entry` (a revise round reads this
    /// round's body results).
    fn inputs_with(&self, i: usize, entry: &dyn Fn(usize) -> Option<Entry>) -> Value {
        let t = self.task(i);
        let mut m = self.dep_inputs(i, entry);
        // Reserved inputs are written after the entries, never wrapped in one. No model reads
        // `params` (RFC-0002:C-PLAYBOOK-PARAMS): neither an agent nor a decision model.
        if t.kind != TaskKind::Agent && !t.can_spend() {
            m.insert("params".into(), self.params.clone());
        }
        if t.history > 0 {
            m.insert("history".into(), self.history.input(t.history));
        }
        if t.stage == Stage::Epilogue {
            let exit = self
                .main_end
                .as_ref()
                .map(|e| e.0.as_str())
                .unwrap_or(Outcome::Finished.as_str());
            let mut tasks = Map::new();
            for (j, st) in self.state.iter().enumerate() {
                if let (Some(r), Stage::Iteration) = (st.row(), self.task(j).stage) {
                    let entry = self.entry_of(j).map(|e| e.to_value());
                    tasks.insert(r.task.clone(), entry.unwrap_or(Value::Null));
                }
            }
            let mut outcome = Map::new();
            outcome.insert("exit".into(), Value::from(exit));
            outcome.insert("tasks".into(), Value::Object(tasks));
            m.insert("outcome".into(), Value::Object(outcome));
        }
        Value::Object(m)
    }

    /// Records a settled row: in memory now, on the log through the writer, effects on
    /// dependents once durable.
    fn settle(&mut self, i: usize, row: TaskResult) {
        self.account(&row);
        self.settle_row(i, row);
    }

    /// RFC-0002:C-PLAYBOOK-BUDGET: spend that streamed in from an attempt still running counts
    /// against the cost ceiling at once.
    fn spending(&mut self, key: u64, usd: f64) {
        self.streaming.insert(key, usd);
        if self.spent_now() >= self.adm.max_cost && usd > 0.0 {
            self.exhaust_cost();
        }
    }

    /// The run's spend: settled rows and what attempts in flight have streamed.
    fn spent_now(&self) -> f64 {
        self.spent + self.streaming.values().sum::<f64>()
    }

    fn add_spend(&mut self, cost_usd: f64) {
        self.spent += cost_usd;
        if cost_usd > 0.0 && self.spent >= self.adm.max_cost {
            // An attempt carried the total to or past the ceiling.
            self.exhaust_cost();
        }
    }

    /// [`Coord::settle`] without counting the row's spend: for a row whose sub-rows (instances,
    /// rounds) already counted it.
    fn settle_row(&mut self, i: usize, mut row: TaskResult) {
        if !row.files {
            // RFC-0002:C-SETTLED-JOIN: a row that vouches for no set leaves none behind.
            if let Err(e) = self.ctx.files.settled_without_set(self.task(i)) {
                let note = format!("cannot remove its earlier file set: {e}");
                row.note = Some(row.note.map_or(note.clone(), |n| format!("{n}; {note}")));
            }
        }
        self.observer.task_settled(&row);
        let seq = self.writer.push(&Event::TaskResult(row.clone()));
        let halts =
            self.task(i).stage == Stage::Iteration && self.task(i).required && halting(&row);
        self.state[i] = TaskState::Settled(Box::new(row));
        self.pending.push_back((seq, i));
        // After a stop, rows of the attempts it killed say only that: dispatch already ended,
        // and what was never dispatched stays unsettled rather than blocked by them.
        if halts && self.halted_by.is_none() && !self.truncated && !self.stopped {
            self.halt(i);
        }
    }

    /// A required main-graph task settled other than passing: dispatch stops and every main
    /// task not yet dispatched settles blocked, naming it (RFC-0002:C-SETTLED-JOIN). After an
    /// accepted early completion they stay unsettled instead (RFC-0002:C-PLAYBOOK-LANE).
    fn halt(&mut self, culprit: usize) {
        self.halted_by = Some(culprit);
        if self.completion.is_some() {
            return;
        }
        let name = self.task(culprit).name.clone();
        for j in 0..self.tasks.len() {
            if self.task(j).stage == Stage::Iteration && self.state[j].undispatched() {
                let b = blocked(
                    self.task(j),
                    BlockedReason::RequiredTaskFailed,
                    Some(&name),
                    format!("required task {name} failed"),
                );
                self.settle(j, b);
            }
        }
    }

    fn durable(&mut self, seq: Seq) {
        while let Some(&(s, i)) = self.pending.front() {
            if s > seq {
                break;
            }
            self.pending.pop_front();
            for j in self.adm.graph.dependents()[i].clone() {
                self.waiting[j] -= 1;
                if self.waiting[j] == 0 && matches!(self.state[j], TaskState::Waiting) {
                    self.deps_settled(j);
                }
            }
        }
    }

    /// Every dependency of `i` is terminal: its join decides (RFC-0002:C-SETTLED-JOIN).
    fn deps_settled(&mut self, i: usize) {
        let t = self.task(i);
        let stage_open = match t.stage {
            Stage::Iteration => self.phase == Phase::Main,
            Stage::Epilogue => self.phase == Phase::Epilogue,
        };
        if !stage_open || self.stopped || self.fault.is_some() {
            return;
        }
        // Joins, `when`, fan-out, routes and loop bodies (RFC-0002:C-SETTLED-JOIN).
        self.decide(i);
    }

    fn make_ready(&mut self, i: usize) {
        self.state[i] = TaskState::Ready;
        if own_lane(self.task(i)) {
            self.ready_isolated.insert(i);
        } else {
            self.ready_shared.insert(i);
        }
    }

    fn done(&mut self, i: usize, report: Report) {
        self.attempt_ended(i, &report);
        if report.fault.is_some() {
            return;
        }
        let r = self.attempt_row(i, self.task(i).name.clone(), report);
        self.settle(i, r);
    }

    /// The row an attempt of task `i` settles as, under `name` (the task's, an instance's):
    /// blocked when its inputs could not be staged, else what the attempt graded.
    fn attempt_row(&mut self, i: usize, name: String, mut report: Report) -> TaskResult {
        if !report.asks.is_empty() {
            // RFC-0002:C-ASKS: on the log, just before the row of the task that emitted them.
            let asks = std::mem::take(&mut report.asks);
            let task = name.clone();
            self.writer
                .push(&Event::AsksEmitted(AsksEmitted { task, asks }));
        }
        match report.staging_refused {
            Some(s) => {
                let mut b = blocked(
                    self.task(i),
                    BlockedReason::StagingRefused,
                    s.task.as_deref(),
                    s.note,
                );
                b.task = name;
                b
            }
            None => report_row(name, report),
        }
    }

    /// Frees the lane an attempt of task `i` held and applies what its report says about the
    /// run. Every attempt then settles, one killed by an operator stop included: it ran and
    /// spent, so it gets a row (failed, "stopped by the operator"), never "never dispatched"
    /// (issue 11 item 6). Its changes are discarded like any failure's.
    fn attempt_ended(&mut self, i: usize, report: &Report) {
        self.in_flight -= 1;
        // Its row (or its sub-row) counts what it spent from here on.
        self.streaming.remove(&report.key);
        if own_lane(self.task(i)) {
            self.isolated_busy -= 1;
        } else {
            self.shared_busy = false;
        }
        // The attempt saw the ceiling fall before the coordinator's own timer did: the ceiling
        // comes first, so what it left undispatched is blocked by the ceiling, not by this
        // task's failure.
        if report.ceiling_killed && !self.wall && !self.stopped {
            self.on_wall();
        }
        if let Some(reason) = report.completion.clone() {
            if self.completion.is_none() && !self.stopped && !self.wall {
                self.completion = Some(reason);
            }
        }
        // An engine fault closes dispatch; what is in flight settles on its own (each is
        // bounded by its deadline) and what was not dispatched stays unsettled. The attempt
        // writes no row, so its spend counts here.
        if let Some(fault) = &report.fault {
            self.add_spend(report.cost_usd);
            self.fault.get_or_insert_with(|| fault.clone());
        }
    }

    fn on_stop(&mut self) {
        self.stopped = true;
        let _ = self.abort.send(Abort::Stop);
    }

    /// RFC-0002:C-PLAYBOOK-BUDGET: the wall-clock ceiling kills every attempt in flight and
    /// blocks everything not yet dispatched, epilogue included.
    fn on_wall(&mut self) {
        self.wall = true;
        let _ = self.abort.send(Abort::WallClock);
        for j in 0..self.tasks.len() {
            // Main tasks left undispatched by an early completion stay unsettled.
            let completed_main =
                self.completion.is_some() && self.task(j).stage == Stage::Iteration;
            if self.state[j].undispatched() && !completed_main {
                let b = blocked(
                    self.task(j),
                    BlockedReason::WallClockCeiling,
                    None,
                    "wall-clock ceiling reached".into(),
                );
                self.settle(j, b);
            }
        }
    }

    /// The current phase ran out of work. Returns false when the run is over.
    fn advance_phase(&mut self) -> bool {
        match self.phase {
            Phase::Main => {
                self.main_end = Some(self.main_outcome());
                self.ready_shared.clear();
                self.ready_isolated.clear();
                self.phase = Phase::Epilogue;
                // RFC-0002:C-PLAYBOOK-LANE: never after an operator stop or the wall-clock
                // ceiling; the truncated graph already blocked them.
                if !self.stopped && !self.wall && !self.truncated && self.fault.is_none() {
                    self.seed(Stage::Epilogue);
                }
                true
            }
            Phase::Epilogue => {
                self.phase = Phase::Done;
                false
            }
            Phase::Done => false,
        }
    }

    /// How the main graph ended and the verdict it determined (RFC-0002:C-PLAYBOOK-LANE).
    fn main_outcome(&self) -> (Outcome, Option<Ceiling>, Option<String>, Verdict) {
        let failed_required = self.tasks.iter().zip(&self.state).find(|(t, st)| {
            t.stage == Stage::Iteration && t.required && st.row().is_some_and(invalidating)
        });
        let invalid = self.stopped
            || self.fault.is_some()
            || self.wall
            || self.cost_exhausted
            || self.truncated
            || failed_required.is_some();
        let verdict = if invalid {
            Verdict::Invalid
        } else {
            Verdict::Valid
        };
        let (outcome, ceiling, reason) = if let Some(fault) = &self.fault {
            (Outcome::Error, None, Some(format!("engine fault: {fault}")))
        } else if self.stopped {
            (
                Outcome::Stopped,
                None,
                Some("stopped by the operator".into()),
            )
        } else if self.wall {
            (
                Outcome::Budget,
                Some(Ceiling::WallClock),
                Some(format!(
                    "the wall-clock ceiling of {} was reached",
                    duration::format(self.adm.max_secs)
                )),
            )
        } else if self.cost_exhausted {
            (
                Outcome::Budget,
                Some(Ceiling::Cost),
                Some(format!(
                    "the cost ceiling of ${:.2} was reached",
                    self.adm.max_cost
                )),
            )
        } else if let Some(reason) = &self.completion {
            (Outcome::Complete, None, reason.clone())
        } else if self.truncated {
            (
                Outcome::Error,
                None,
                Some("the plan is truncated: a required task cannot run here".into()),
            )
        } else if let Some((t, _)) = failed_required {
            (
                Outcome::Error,
                None,
                Some(format!("required task {} did not pass", t.name)),
            )
        } else {
            (Outcome::Finished, None, None)
        };
        (outcome, ceiling, reason, verdict)
    }

    fn finish(self) -> Result<RunSummary, RunError> {
        let (mut outcome, mut ceiling, mut reason, verdict) =
            self.main_end.clone().unwrap_or_else(|| self.main_outcome());
        // A stop or the wall clock during the epilogue says how dispatch ended; the verdict
        // stays the main graph's (RFC-0002:C-PLAYBOOK-BUDGET).
        if let Some(fault) = &self.fault {
            // The engine's fault names the run's end whenever it came, the epilogue's included.
            (outcome, ceiling, reason) =
                (Outcome::Error, None, Some(format!("engine fault: {fault}")));
        } else if outcome != Outcome::Stopped && self.stopped {
            (outcome, ceiling, reason) = (
                Outcome::Stopped,
                None,
                Some("stopped by the operator".into()),
            );
        } else if outcome != Outcome::Budget && self.wall {
            (outcome, ceiling, reason) = (
                Outcome::Budget,
                Some(Ceiling::WallClock),
                Some(format!(
                    "the wall-clock ceiling of {} was reached",
                    duration::format(self.adm.max_secs)
                )),
            );
        }
        // Disposable worktrees whose removal had not finished yet, and their layers.
        let _ = std::fs::remove_dir_all(self.ctx.run_dir.join("worktrees"));
        let _ = std::fs::remove_dir_all(self.ctx.checkouts.root());
        self.ctx.memory.finish().map_err(state_err("git memory"))?;
        let elapsed = (self.started.elapsed() + self.prior_elapsed).as_secs_f64();
        let spent = self.spent;
        let mut file = self.writer.finish().map_err(state_err("session log"))?;
        let shutdown = Event::Shutdown(Shutdown {
            outcome,
            ceiling,
            reason: reason.clone(),
            verdict,
            spent_usd: spent,
            elapsed_secs: elapsed,
        });
        log::append_now(&mut file, &shutdown).map_err(state_err("session log"))?;
        let summary = RunSummary {
            run_id: self.ctx.run_id.clone(),
            run_dir: self.ctx.run_dir.clone(),
            outcome,
            ceiling,
            reason,
            verdict,
            spent_usd: spent,
            reused_usd: self.reused_spent,
            max_cost: self.adm.max_cost,
            elapsed_secs: elapsed,
            max_secs: self.adm.max_secs,
            rows: self
                .tasks
                .iter()
                .zip(self.state)
                .map(|(t, st)| {
                    let row = match st {
                        TaskState::Settled(r) => Some(*r),
                        _ => None,
                    };
                    (t.name.clone(), row)
                })
                .collect(),
            sub_rows: self.sub_rows,
        };
        free_later((self.tasks, self.adm, self.br, self.ctx));
        Ok(summary)
    }
}

/// RFC-0002:C-PLAYBOOK-RERUN: replays the reused tasks' commits onto the parent's start; any
/// failure refuses the rerun. Returns the rerun's base (its start commit).
async fn replay_parent(
    req: &RunRequest,
    p: &Parent,
    ws: &std::path::Path,
) -> Result<git2::Oid, RunError> {
    let start = req
        .manifest
        .manifest
        .repo
        .is_some()
        .then(|| p.base_commit.clone());
    let names: Vec<String> = p.reused.iter().map(|r| r.task.clone()).collect();
    let (ws, memory) = (ws.to_path_buf(), p.memory.clone());
    let replayed =
        tokio::task::spawn_blocking(move || git::replay(&ws, &memory, start.as_deref(), &names))
            .await
            .expect("replay does not panic");
    replayed.map_err(|e| {
        RunError::refused(match e {
            git::ReplayError::StartUnavailable(c) => format!(
                "cannot rerun from run {}: its start commit {c} is unavailable",
                p.id
            ),
            git::ReplayError::Conflict(m) => format!(
                "cannot rerun from run {}: replaying its commits failed: {m}",
                p.id
            ),
            git::ReplayError::Git(g) => format!("cannot rerun from run {}: {g}", p.id),
        })
    })
}

/// Whether a required main-graph row stops dispatch: any settlement other than passing, except
/// a block by the cost ceiling (non-spending work must still run under that ceiling,
/// RFC-0002:C-PLAYBOOK-BUDGET) and a capability skip (which leaves the verdict alone,
/// RFC-0002:C-PLAYBOOK-CAPS).
fn halting(r: &TaskResult) -> bool {
    match r.status {
        Status::Blocked => r
            .blocked
            .as_ref()
            .is_none_or(|b| b.reason != BlockedReason::BudgetCeiling),
        _ => invalidating(r),
    }
}

/// Whether a required main-graph row makes the verdict invalid: the run is valid only when
/// every required task passed. A skip the task declared itself counts (it did not pass); a
/// capability skip, which never dispatched, does not.
fn invalidating(r: &TaskResult) -> bool {
    match r.status {
        Status::Fail | Status::Transport | Status::Blocked | Status::Truncated => true,
        Status::Skipped => r.attempts > 0,
        Status::Pass | Status::NotTaken => false,
    }
}

/// Each session's conversation and turn count as `rows` (in log order) last left them.
fn sessions_of(rows: &[TaskResult]) -> HashMap<String, (String, u32)> {
    (rows.iter())
        .filter_map(|r| r.session.as_ref())
        .map(|s| (s.name.clone(), (s.id.clone(), s.turns)))
        .collect()
}

/// The row a dispatched attempt's report settles as, under `name`.
fn report_row(name: String, report: Report) -> TaskResult {
    TaskResult {
        task: name,
        status: report.graded.status,
        note: report.graded.note,
        output: report.graded.output,
        attempts: report.attempts,
        cost_usd: report.cost_usd,
        secs: report.secs,
        score: None,
        files: report.files,
        blocked: None,
        reused_from: None,
        refused: report.refused,
        transport: report.transport,
        repairs: report.repairs,
        session: report.session,
        log: report.log,
        runbook: report.runbook.map(Box::new),
    }
}

fn row(t: &Task, status: Status, note: Option<String>) -> TaskResult {
    TaskResult {
        note,
        ..TaskResult::new(t.name.clone(), status)
    }
}

fn blocked(t: &Task, reason: BlockedReason, culprit: Option<&str>, note: String) -> TaskResult {
    let mut r = row(t, Status::Blocked, Some(note));
    r.blocked = Some(Blocked {
        reason,
        task: culprit.map(str::to_string),
    });
    r
}

/// Whether a task takes an isolated lane: it runs in its own checkout, or touches no
/// workspace at all (a route a decision model decides waits on the network, not the workspace).
pub(super) fn own_lane(t: &Task) -> bool {
    t.isolated || matches!(t.kind, TaskKind::Route | TaskKind::Report)
}

//! The playbook executor: admission, dispatch, settlement, git memory, the session log and both
//! ceilings (RFC-0002:C-PLAYBOOK-LANE, C-PLAYBOOK-CAPS, C-PLAYBOOK-BUDGET, C-SETTLED-JOIN).
//!
//! [`run`] takes a compiled, validated plan and the manifest it came with, refuses before any dispatch
//! what it cannot run honestly ([`RunError`] of kind `Refused`), and otherwise runs the graph
//! once and returns the verdict. One coordinator owns all run state (see `coord`).

mod admit;
pub mod asks;
mod checkout;
mod coord;
pub mod decision;
pub mod files;
mod git;
pub mod graph;
pub mod history;
mod leftovers;
pub mod link;
mod lock;
mod log;
mod proc;
pub mod report;
mod rerun;
mod resume;
pub mod runbook;
pub mod sandbox;
pub mod series;
pub mod state;
pub mod steering;
pub mod taskenv;
mod taskfiles;
mod taskio;
mod tasklog;

use crucible_pack::LoadedManifest;
use crucible_plan::wire::TaskResult;
use crucible_plan::{Ceiling, Outcome, ValidatedPlan, Verdict};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use admit::{admission, prices, substrate_caps, Admission, Substrate};
pub use log::now_ts;
pub use proc::ProcessGroups;
pub use resume::ReadAhead;
pub use taskio::stderr_tail;

/// Everything one run needs.
pub struct RunRequest {
    pub plan: ValidatedPlan,
    pub manifest: LoadedManifest,
    /// The pack's `tree1:` digest.
    pub pack_digest: String,
    pub state_dir: PathBuf,
    /// Both ceilings are required; `None` is refused before dispatch.
    pub max_cost: Option<f64>,
    pub max_secs: Option<u64>,
    /// Capabilities the substrate provides (`--cap`).
    pub caps: Vec<String>,
    /// Isolated tasks in flight at once.
    pub jobs: usize,
    /// `--agent-cmd`: overrides `[agent].agent_cmd` and selects the command backend.
    pub agent_cmd: Option<String>,
    /// `--harness` / `--model`: launch-wide agent settings.
    pub harness: Option<String>,
    pub model: Option<String>,
    /// The run-total bound on captured declared files, in bytes (RFC-0002:C-TASK-FILES).
    pub max_files_bytes: u64,
    /// A new run, a resumption of the most recent one, or a rerun of a finished one.
    pub launch: Launch,
    /// A resumption's session log, read while the plan was compiled (`None`: read it then).
    pub read_ahead: Option<ReadAhead>,
    /// The model bindings of `CRUCIBLE_INFERENCE`; a decision binding is what a route a model
    /// decides asks.
    pub inference: crucible_agent::inference::Inference,
    /// The launch series' earlier runs (`CRUCIBLE_HISTORY`); a resumed run keeps its own.
    pub history: history::History,
    /// `--series NAME`: the run belongs to a local launch series kept in the state directory,
    /// whose earlier runs become its history (in place of `history`).
    pub series: Option<String>,
    /// The operator's report bounds, Slack webhook and run link.
    pub reports: report::ReportConfig,
    /// The most asks the run may emit (RFC-0002:C-ASKS).
    pub max_asks: u32,
    /// `--no-sandbox`: the operator's opt-out of the sandbox.
    pub no_sandbox: bool,
    /// Host directories hidden from every task besides the pack and the state directory: a
    /// controller's own state (its tokens, its store, other teams' packs and runs), which holds
    /// this run's directories but must not be readable through the sandbox's read-only host.
    pub hidden: Vec<PathBuf>,
    /// The run's attempt process groups: the caller keeps a handle to kill them all at once.
    pub groups: std::sync::Arc<ProcessGroups>,
    /// Who answers human-decided routes and runbook gates (RFC-0002:C-HUMAN-DECISION): a
    /// controller, or the CLI's terminal; with none, a run with the `human` capability and a
    /// human route is refused, as is a run with a runbook gate.
    pub decider: Option<std::sync::Arc<dyn decision::Decider>>,
    /// The operator's bounds on evidence and notes.
    pub decision_bounds: decision::Bounds,
    /// The run's steering directory (`steering`): per-run input beside the pack, never in it;
    /// every task reads it read-only, agent prompts carry it marked as external input.
    pub steering: Option<PathBuf>,
}

/// How a run starts (RFC-0002:C-PLAYBOOK-RESUME, C-PLAYBOOK-RERUN).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Launch {
    #[default]
    Fresh,
    /// Continue the run `state/current` names from its session log.
    Resume,
    /// A new run reusing `parent`'s results outside the rerun set that `select` starts.
    Rerun { parent: String, select: Vec<String> },
}

/// What a caller sees while a run goes (the CLI's live view or plain lines).
pub trait Observer: Send {
    fn run_started(&mut self, _run_id: &str, _run_dir: &Path) {}
    fn task_started(&mut self, _task: &str) {}
    fn task_settled(&mut self, _row: &TaskResult) {}
    /// How often [`Observer::tick`] should be called while tasks run; `None` for never.
    fn tick_interval(&self) -> Option<Duration> {
        None
    }
    fn tick(&mut self, _spent_usd: f64, _elapsed: Duration) {}
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub run_id: String,
    pub run_dir: PathBuf,
    pub outcome: Outcome,
    pub ceiling: Option<Ceiling>,
    pub reason: Option<String>,
    pub verdict: Verdict,
    pub spent_usd: f64,
    /// Spend of rows a rerun reused: reported apart, never against the ceilings.
    pub reused_usd: f64,
    pub max_cost: f64,
    pub elapsed_secs: f64,
    pub max_secs: u64,
    /// One entry per task in declaration order: its row, or `None` when it never settled.
    pub rows: Vec<(String, Option<TaskResult>)>,
    /// The names of the instance and round rows settled (`task[key]`, `task[round-N]`), in
    /// the order they settled: what a summary counts as parts of their task's row, without
    /// reading the log again.
    pub sub_rows: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct RunError {
    pub kind: RunErrorKind,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunErrorKind {
    /// Refused before any dispatch: nothing ran, nothing was spent (exit 1).
    Refused,
    /// The run started but its state could not be written; its verdict is not valid.
    State,
}

impl RunError {
    pub(crate) fn refused(message: impl Into<String>) -> RunError {
        RunError {
            kind: RunErrorKind::Refused,
            message: message.into(),
        }
    }
    pub(crate) fn state(message: impl Into<String>) -> RunError {
        RunError {
            kind: RunErrorKind::State,
            message: message.into(),
        }
    }
}

/// What [`run`] refuses before any dispatch (both ceilings, then [`admission`]), decided
/// without running anything: the controller checks a launch with it before accepting it, and
/// [`run`] decides the same again at dispatch.
pub fn check_launch(req: &RunRequest) -> Result<(), RunError> {
    admit::admit(req).map(drop)
}

/// Runs the plan once. `stop` delivers operator stop requests (SIGINT/SIGTERM).
pub async fn run(
    req: RunRequest,
    observer: &mut dyn Observer,
    stop: tokio::sync::mpsc::UnboundedReceiver<()>,
) -> Result<RunSummary, RunError> {
    let admitted = admit::admit(&req)?;
    coord::execute(req, admitted, observer, stop).await
}

//! The command line, exactly as ARCHITECTURE.md fixes it.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "crucible",
    version,
    about = "Run playbooks: static agent workflows, once, under ceilings."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Validate manifest, pack and graph without running; print every bound, ceiling rule and
    /// deadline in force, and the egress and credentials the pack would get.
    Check(CheckArgs),
    /// Compile, inspect and run plans.
    #[command(subcommand)]
    Plan(Box<PlanCommand>),
    /// List the runs of a pack (or a state directory), or show one with `runs show RUN`.
    Runs(RunsArgs),
    /// Print the kept stdout and stderr of a run's tasks (all of them, or one).
    Logs(LogsArgs),
    /// Pack utilities.
    #[command(subcommand)]
    Pack(PackCommand),
}

#[derive(Subcommand, Debug)]
pub enum PlanCommand {
    /// Print the compiled plan (canonical JSON is byte-stable for the same inputs).
    Compile(CompileArgs),
    /// Print the params block as a JSON Schema, without evaluating the source.
    Params(ParamsArgs),
    /// Tasks, edges, truncation verdict, ceilings and deadlines, or mermaid source.
    Show(ShowArgs),
    /// Run a playbook once.
    Run(RunArgs),
    /// A new run that reuses the parent's results outside the selection.
    Rerun(RerunArgs),
}

#[derive(Subcommand, Debug)]
pub enum PackCommand {
    /// Print the pack's `tree1:` digest.
    Digest(DigestArgs),
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[arg(long, default_value = "crucible.toml")]
    pub manifest: PathBuf,
    /// A parameter value (`name=value`) or launch setting (`task.model=…`).
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    /// A capability the substrate provides (repeatable).
    #[arg(long = "cap", value_name = "CAP")]
    pub caps: Vec<String>,
    /// The run-total bound on captured declared files to report (as for `plan run`).
    #[arg(long = "max-files-bytes", value_name = "SIZE")]
    pub max_files_bytes: Option<String>,
    /// The agent stand-in `plan run --agent-cmd` would be given (admission reads it).
    #[arg(long = "agent-cmd")]
    pub agent_cmd: Option<String>,
    /// The `--harness` `plan run` would be given.
    #[arg(long)]
    pub harness: Option<String>,
    /// The `--max-time` `plan run` would be given: a task timeout above it is a finding.
    #[arg(long = "max-time", value_name = "DUR")]
    pub max_time: Option<String>,
    /// The `--state-dir` `plan run` would be given (default: `state` beside the manifest).
    #[arg(long = "state-dir")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    Json,
    Toml,
}

#[derive(Args, Debug)]
pub struct CompileArgs {
    #[arg(long)]
    pub file: PathBuf,
    /// Checks launch settings against this manifest's [agent.overrides] and applies its defaults.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    #[arg(long, value_enum, default_value = "json")]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct ParamsArgs {
    #[arg(long)]
    pub file: PathBuf,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["manifest", "file"])))]
pub struct ShowArgs {
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    #[arg(long)]
    pub file: Option<PathBuf>,
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    #[arg(long = "cap", value_name = "CAP")]
    pub caps: Vec<String>,
    /// The agent stand-in `plan run --agent-cmd` would be given (admission reads it).
    #[arg(long = "agent-cmd")]
    pub agent_cmd: Option<String>,
    /// Print mermaid source instead of the table.
    #[arg(long)]
    pub mermaid: bool,
    /// Draw the graph instead of the table: `svg` prints an SVG document.
    #[arg(long, value_enum, conflicts_with = "mermaid")]
    pub format: Option<PictureFormat>,
    /// With --format: colour each task by its status in this run (a run id, or `latest`) of
    /// the state directory beside the manifest.
    #[arg(value_name = "RUN", requires_all = ["format", "manifest"])]
    pub run: Option<String>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum PictureFormat {
    Svg,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[arg(long, default_value = "crucible.toml")]
    pub manifest: PathBuf,
    /// The cost ceiling in USD (required).
    #[arg(long = "max-cost", value_name = "USD")]
    pub max_cost: Option<f64>,
    /// The wall-clock ceiling, as 90s, 10m or 2h (required).
    #[arg(long = "max-time", value_name = "DUR")]
    pub max_time: Option<String>,
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    #[arg(long = "cap", value_name = "CAP")]
    pub caps: Vec<String>,
    /// Default: `<manifest dir>/state`.
    #[arg(long = "state-dir")]
    pub state_dir: Option<PathBuf>,
    /// Continue the most recent run from its session log.
    #[arg(long)]
    pub resume: bool,
    /// Isolated tasks run concurrently up to this many (default: CPU count).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run tasks unsandboxed, as the engine's own user (the default runs every attempt under
    /// bubblewrap; docs/security.md).
    #[arg(long = "no-sandbox")]
    pub no_sandbox: bool,
    /// Run agent turns through this command instead of a harness.
    #[arg(long = "agent-cmd")]
    pub agent_cmd: Option<String>,
    /// Iterations of the graph: a playbook runs exactly once, so anything above 1 is refused
    /// rather than ignored (RFC-0002:C-PLAYBOOK-LANE).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub iterations: u32,
    #[arg(long)]
    pub harness: Option<String>,
    #[arg(long)]
    pub model: Option<String>,
    /// The run-total bound on captured declared files, as 200M or 1G (default:
    /// $CRUCIBLE_FILES_MAX_BYTES, else 1G).
    #[arg(long = "max-files-bytes", value_name = "SIZE")]
    pub max_files_bytes: Option<String>,
}

#[derive(Args, Debug)]
pub struct RerunArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// The finished run to reuse results from: a run id, a unique prefix of one, or `latest`.
    #[arg(long)]
    pub parent: String,
    /// A main-graph task to run again, with everything downstream (repeatable). Without it,
    /// the rerun runs again what the parent did not pass (and the epilogue).
    #[arg(long = "select")]
    pub select: Vec<String>,
}

/// Where a command finds runs: `--state-dir`, else `state` beside the manifest, as `plan run`
/// writes them.
#[derive(Args, Debug)]
pub struct StateAt {
    /// The manifest whose runs to read (they are in `state/` beside it).
    #[arg(long, default_value = "crucible.toml", global = true)]
    pub manifest: PathBuf,
    /// The state directory to read instead (default: `state` beside the manifest).
    #[arg(long = "state-dir", global = true)]
    pub state_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub command: Option<RunsCommand>,
    #[command(flatten)]
    pub at: StateAt,
}

#[derive(Subcommand, Debug)]
pub enum RunsCommand {
    /// One run: every task's status, instance or round, attempts, duration, spend, note and
    /// log; the ceilings and the outcome.
    Show(RunShowArgs),
}

#[derive(Args, Debug)]
pub struct RunShowArgs {
    /// A run id, a unique prefix of one, or `latest`.
    pub run: String,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// A run id, a unique prefix of one, or `latest`.
    pub run: String,
    /// Only this task (its instances and rounds included).
    pub task: Option<String>,
    /// On a running run, go on printing each task's log as it settles, until the run ends.
    #[arg(long)]
    pub follow: bool,
    #[command(flatten)]
    pub at: StateAt,
}

#[derive(Args, Debug)]
pub struct DigestArgs {
    pub dir: PathBuf,
}

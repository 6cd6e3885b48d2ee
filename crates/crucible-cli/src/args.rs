//! The command line, exactly as ARCHITECTURE.md fixes it.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

const HELP_FOOTER: &str = "\
Examples:
  crucible init mypack
  crucible check --manifest examples/playbook/crucible.toml
  crucible plan run --manifest examples/playbook/crucible.toml --max-cost 1 --max-time 5m
  crucible runs show latest
  crucible logs latest TASK

Exit codes: 0 ok (a run's verdict is valid); 1 findings, or refused before any dispatch;
2 a bad command line; 3 a run whose verdict is not valid.";

const RUN_FOOTER: &str = "\
Both ceilings are required. Durations: 90s, 10m, 1.5m, 2h, 1h30m.

Examples:
  crucible plan run --max-cost 1 --max-time 5m
  crucible plan run --manifest pack/crucible.toml --max-cost 0.5 --max-time 1h30m --param topic=slag
  crucible plan run --max-cost 1 --max-time 5m --resume

Exit codes: 0 the verdict is valid; 3 the run ended with any other verdict; 1 refused before
any dispatch (compile error, missing ceiling, refused setting, bad resume); 2 a bad command line.";

const RERUN_FOOTER: &str = "\
Examples:
  crucible plan rerun --parent latest --max-cost 1 --max-time 5m
  crucible plan rerun --parent 01a2 --select build --max-cost 1 --max-time 5m

Exit codes: as `plan run`: 0 valid; 3 any other verdict; 1 refused; 2 a bad command line.";

#[derive(Parser, Debug)]
#[command(
    name = "crucible",
    version,
    about = "Run playbooks: static agent workflows, once, under ceilings.",
    after_help = HELP_FOOTER
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write a starter pack (manifest, graph, prompt, a stand-in agent) into DIR, which must be
    /// empty or absent; `plan run` runs it valid at once.
    Init(InitArgs),
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
    /// Runbook bundles: a `runbook.json` contract around a Markdown procedure.
    #[command(subcommand)]
    Runbook(RunbookCommand),
    /// Run the controller: a team's packs behind an HTTP API (docs/controller.md).
    #[command(after_help = SERVE_FOOTER)]
    Serve(ServeArgs),
    /// Talk to a controller (`crucible serve`).
    Remote(RemoteArgs),
    /// For the controller only: a launch's plan, compiled as `plan run` compiles it, as JSON.
    #[command(name = "__launch-plan", hide = true)]
    LaunchPlan(LaunchPlanArgs),
}

#[derive(Args, Debug)]
pub struct LaunchPlanArgs {
    /// The delivered pack's manifest.
    #[arg(long)]
    pub manifest: PathBuf,
    /// A parameter value (`name=value`) or launch setting; repeatable.
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
}

const SERVE_FOOTER: &str = "\
On first start it creates the `admin` user and writes its token to STATE_DIR/admin.token
(mode 0600); `crucible remote` on the same machine reads it from there.

Examples:
  crucible serve
  crucible serve --addr 127.0.0.1:9000 --database postgres://crucible@localhost/crucible";

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = crucible_controller::DEFAULT_ADDR)]
    pub addr: std::net::SocketAddr,
    /// Where the database (by default), the pack trees and admin.token live
    /// (default: $XDG_STATE_HOME/crucible/controller).
    #[arg(long = "state-dir")]
    pub state_dir: Option<PathBuf>,
    /// A `postgres://` URL to store in PostgreSQL instead of STATE_DIR/controller.db.
    #[arg(long)]
    pub database: Option<String>,
    /// The delivery budget: the largest gzipped pack archive, in bytes.
    #[arg(long = "delivery-budget", value_name = "BYTES", default_value_t = crucible_controller::DEFAULT_DELIVERY_BUDGET)]
    pub delivery_budget: u64,
    /// The largest pack upload, in bytes.
    #[arg(long = "max-upload", value_name = "BYTES", default_value_t = crucible_controller::DEFAULT_MAX_UPLOAD)]
    pub max_upload: u64,
    /// The bound on the encoded history one task of a series run receives, e.g. 64KiB
    /// (default: CRUCIBLE_HISTORY_MAX_BYTES, else 64 KiB); `GET /v1/settings` shows it.
    #[arg(long = "history-max-bytes", value_name = "SIZE", value_parser = size)]
    pub history_max_bytes: Option<u64>,
    /// The URL clients reach this controller at, for the run links a series history carries
    /// (default: http:// and the bound address).
    #[arg(long = "public-url", value_name = "URL")]
    pub public_url: Option<String>,
    /// Tests only: a scheduler clock standing at this RFC 3339 time, moved by `POST /v1/clock`,
    /// and no background scheduling.
    #[arg(long = "test-clock", value_name = "TIME", hide = true)]
    pub test_clock: Option<String>,
    /// Publish every registered, imported and draft-graduated pack to this OCI repository
    /// (`http[s]://HOST[:PORT]/NAME`, docs/controller.md); none by default.
    #[arg(long, value_name = "URL")]
    pub registry: Option<String>,
    /// A file holding `USER:PASSWORD` for the registry (Basic authentication).
    #[arg(
        long = "registry-credentials",
        value_name = "FILE",
        requires = "registry"
    )]
    pub registry_credentials: Option<PathBuf>,
    /// A TOML file of Kubernetes dispatch targets (`[[target]]`, docs/kubernetes.md).
    #[arg(long, value_name = "FILE")]
    pub targets: Option<PathBuf>,
    /// A workflow (a pack name) an ask a run emits may start without a person; repeatable.
    /// Every other valid ask is held for an approver.
    #[arg(long = "ask-allow", value_name = "WORKFLOW")]
    pub ask_allow: Vec<String>,
    /// Asks admitted per team in any hour; past it, asks are held for an approver.
    #[arg(long = "asks-per-hour", value_name = "N", default_value_t = 10)]
    pub asks_per_hour: u32,
    /// How long after an ask's admission its key may be admitted again (default: never).
    #[arg(long = "ask-repeat-after", value_name = "DUR")]
    pub ask_repeat_after: Option<String>,
    /// The cost ceiling (USD) of every run an admitted ask starts.
    #[arg(long = "ask-max-cost", value_name = "USD", default_value_t = 1.0)]
    pub ask_max_cost: f64,
    /// The wall-clock ceiling of every run an admitted ask starts.
    #[arg(long = "ask-max-time", value_name = "DUR", default_value = "10m")]
    pub ask_max_time: String,
}

#[derive(Args, Debug)]
pub struct RemoteArgs {
    /// The controller (default: the local one).
    #[arg(long, default_value = "http://127.0.0.1:8870")]
    pub server: String,
    /// Where to find admin.token when CRUCIBLE_TOKEN is not set (default: `crucible serve`'s).
    #[arg(long = "state-dir")]
    pub state_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: RemoteCommand,
}

#[derive(Subcommand, Debug)]
pub enum RemoteCommand {
    /// Packs on the controller.
    #[command(subcommand)]
    Pack(RemotePackCommand),
    /// Drafts on the controller: versions, optionally on a base pack.
    #[command(subcommand)]
    Draft(RemoteDraftCommand),
    /// Launch a run of a pack digest, or of `draft:NAME` (its latest version that compiles).
    #[command(after_help = REMOTE_LAUNCH_FOOTER)]
    Launch(RemoteLaunchArgs),
    /// Print the Kubernetes objects a launch on a target would create, as YAML, creating nothing.
    Render(RemoteRenderArgs),
    /// The runs of your teams, newest first, or one with `runs show RUN`.
    Runs(RemoteRunsArgs),
    /// Print the kept stdout and stderr of a run's tasks (all of them, or one).
    Logs(RemoteLogsArgs),
    /// Stop a running run: its attempts are killed and it ends `stopped`.
    Stop(RemoteRunArg),
    /// Standing launches: a launch fired on a schedule or by hand, its runs a series.
    #[command(subcommand)]
    Standing(RemoteStandingCommand),
    /// Dispatch targets: `local` and the Kubernetes targets, and their registry trust.
    #[command(subcommand)]
    Target(RemoteTargetCommand),
}

#[derive(Subcommand, Debug)]
pub enum RemoteTargetCommand {
    /// The targets: name, kind, whether registry-trusted and who decided it.
    List,
    /// Mark a Kubernetes target registry-trusted (platform admins; audited).
    Trust(TargetArg),
    /// Remove the mark: the target is not registry-trusted.
    Untrust(TargetArg),
}

#[derive(Args, Debug)]
pub struct TargetArg {
    /// The target's name, as `remote target list` prints it.
    pub name: String,
}

#[derive(Subcommand, Debug)]
pub enum RemoteStandingCommand {
    /// Create one, checked as its launch would be; prints its id.
    #[command(after_help = STANDING_CREATE_FOOTER)]
    Create(Box<StandingCreateArgs>),
    /// The standing launches of your teams.
    List,
    /// One standing launch and its firings, newest first.
    Show(StandingArg),
    /// Fire it now (under the scheduler's policies); prints the firing.
    Fire(StandingArg),
    /// Stop its schedule firing.
    Pause(StandingArg),
    /// Let its schedule fire again from its next time.
    Resume(StandingArg),
    /// Delete it: it fires no more; its runs are kept.
    Delete(StandingArg),
}

const STANDING_CREATE_FOOTER: &str = "\
Examples:
  crucible remote standing create nightly tree1:3f… --max-cost 1 --max-time 10m \\
      --schedule '0 3 * * *' --timezone Europe/Paris --daily-max-cost 2
  crucible remote standing create triage draft:triage --max-cost 0.5 --max-time 5m";

#[derive(Args, Debug)]
pub struct StandingCreateArgs {
    /// Its name in the team.
    pub name: String,
    #[command(flatten)]
    pub launch: LaunchSpec,
    /// A five-field cron expression (minute hour day-of-month month day-of-week); none: fired
    /// by hand only.
    #[arg(long)]
    pub schedule: Option<String>,
    /// The schedule's IANA time zone (default UTC).
    #[arg(long)]
    pub timezone: Option<String>,
    /// The series' spend cap per calendar day, in USD.
    #[arg(long = "daily-max-cost", value_name = "USD", value_parser = cost)]
    pub daily_max_cost: Option<f64>,
}

#[derive(Args, Debug)]
pub struct StandingArg {
    /// The standing launch's id, as `remote standing list` prints it.
    pub id: String,
}

const REMOTE_LAUNCH_FOOTER: &str = "\
Both ceilings are required; the controller refuses what `plan run` would, before any dispatch.

Examples:
  crucible remote launch tree1:3f… --max-cost 1 --max-time 5m --param topic=slag
  crucible remote launch draft:triage --max-cost 0.5 --max-time 10m --follow
  crucible remote launch tree1:3f… --max-cost 1 --max-time 5m --steer focus.md

Exit codes: 0 launched (with --follow: the verdict is valid); 3 with --follow, the run ended
with any other verdict; 1 refused, with the controller's reason; 2 a bad command line.";

#[derive(Args, Debug)]
pub struct RemoteLaunchArgs {
    #[command(flatten)]
    pub spec: LaunchSpec,
    /// Stream the run's rows as they settle and exit as `plan run` does.
    #[arg(long)]
    pub follow: bool,
    /// A steering file for this run only (UTF-8 text, repeatable; at most 8 files and 64 KiB):
    /// delivered beside the pack, never in it, read-only to every task, and in agent prompts
    /// only as marked external input.
    #[arg(long = "steer", value_name = "FILE")]
    pub steer: Vec<PathBuf>,
}

/// What a launch names and sets: `remote launch`'s and `remote standing create`'s.
#[derive(Args, Debug)]
pub struct LaunchSpec {
    /// A pack digest (`tree1:…`) or `draft:NAME`.
    pub pack: String,
    /// Required: the cost ceiling in USD.
    #[arg(long = "max-cost", value_name = "USD", value_parser = cost)]
    pub max_cost: Option<f64>,
    /// Required: the wall-clock ceiling, as 90s, 10m, 1.5m, 2h or 1h30m.
    #[arg(long = "max-time", value_name = "DUR", value_parser = duration)]
    pub max_time: Option<u64>,
    /// A parameter value (`name=value`) or launch setting (`task.model=…`); repeatable.
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    /// A capability the run provides (repeatable).
    #[arg(long = "cap", value_name = "CAP")]
    pub caps: Vec<String>,
    /// The run's team (may be left out when you can edit in exactly one).
    #[arg(long)]
    pub team: Option<String>,
    /// Where the run executes: `local` (the default: the controller itself) or a Kubernetes
    /// target's name (`GET /v1/settings` lists them; docs/kubernetes.md).
    #[arg(long)]
    pub target: Option<String>,
}

#[derive(Args, Debug)]
pub struct RemoteRenderArgs {
    /// A pack digest (`tree1:…`) or `draft:NAME`.
    pub pack: String,
    /// The Kubernetes target's name (`GET /v1/settings` lists them).
    #[arg(long)]
    pub target: String,
    /// The cost ceiling in USD.
    #[arg(long = "max-cost", value_name = "USD")]
    pub max_cost: f64,
    /// The wall-clock ceiling (`90s`, `10m`, `1h30m`).
    #[arg(long = "max-time", value_name = "DUR")]
    pub max_time: String,
    /// A parameter value (`name=value`), or a launch setting (`task.model=…`); repeatable.
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    /// The team (may be left out when you can edit in exactly one).
    #[arg(long)]
    pub team: Option<String>,
    /// A steering file, as `remote launch --steer` gives one (repeatable): rendered as the
    /// run's own ConfigMap beside the pack's.
    #[arg(long = "steer", value_name = "FILE")]
    pub steer: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct RemoteRunsArgs {
    #[command(subcommand)]
    pub command: Option<RemoteRunsCommand>,
}

#[derive(Subcommand, Debug)]
pub enum RemoteRunsCommand {
    /// One run: its launch, every settled row, the outcome, verdict and spend.
    Show(RemoteRunArg),
}

#[derive(Args, Debug)]
pub struct RemoteRunArg {
    /// The run's id, as `remote launch` and `remote runs` print it.
    pub run: String,
}

#[derive(Args, Debug)]
pub struct RemoteLogsArgs {
    /// The run's id.
    pub run: String,
    /// Only this task (its instances and rounds included).
    pub task: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum RemoteDraftCommand {
    /// Save a directory as the draft's next version (on a base: the directory is the overlay);
    /// prints the version's digest.
    Save(DraftSaveArgs),
}

#[derive(Args, Debug)]
pub struct DraftSaveArgs {
    /// The draft's name (created on its first save).
    pub name: String,
    /// The directory: the whole pack, or with --base the files placed over the base's.
    pub dir: PathBuf,
    /// The digest of a pack revision you can read, to save over.
    #[arg(long)]
    pub base: Option<String>,
    /// The team (may be left out when you can edit in exactly one).
    #[arg(long)]
    pub team: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum RemotePackCommand {
    /// Register a pack directory (a new revision when the name exists); prints its digest.
    Push(PushArgs),
    /// The packs you can read that record a digest: revisions, provenance, publication state.
    Show(PackShowArgs),
    /// Share your team's pack recording a digest with another team, read-only: its members
    /// read every revision and may launch it (admins of the pack's team).
    Share(PackShareArgs),
    /// Stop sharing it with that team: the pack is not found to it again.
    Unshare(PackShareArgs),
}

#[derive(Args, Debug)]
pub struct PackShareArgs {
    /// A digest (`tree1:…`) one of your team's packs records, current or prior.
    pub digest: String,
    /// The team to share it with (or stop sharing it with).
    #[arg(long)]
    pub team: String,
    /// The pack's id, when more than one of your teams' packs records the digest.
    #[arg(long)]
    pub pack: Option<String>,
}

#[derive(Args, Debug)]
pub struct PackShowArgs {
    /// The pack digest (`tree1:…`).
    pub digest: String,
}

#[derive(Args, Debug)]
pub struct PushArgs {
    /// The pack directory.
    pub dir: PathBuf,
    /// The pack's name (default: the directory's name).
    #[arg(long)]
    pub name: Option<String>,
    /// The team (may be left out when you can edit in exactly one).
    #[arg(long)]
    pub team: Option<String>,
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
    #[command(after_help = RUN_FOOTER)]
    Run(RunArgs),
    /// A new run that reuses the parent's results outside the selection.
    #[command(after_help = RERUN_FOOTER)]
    Rerun(RerunArgs),
}

#[derive(Subcommand, Debug)]
pub enum PackCommand {
    /// Print the pack's `tree1:` digest.
    Digest(DigestArgs),
}

#[derive(Subcommand, Debug)]
pub enum RunbookCommand {
    /// Check a bundle's runbook.json, procedure and skill dependencies; print every error and
    /// warning.
    Validate(RunbookDirArgs),
    /// Validate and seal a bundle: print its release (content digest, files, sealed skill
    /// dependencies) as JSON; with --store, also write it there read-only.
    Seal(SealArgs),
    /// Make a runbook bundle from a skill directory: SKILL.md stays the procedure, support files
    /// are copied, and the contract is the least one (explicit, filesystem.read): review it.
    FromSkill(ConvertArgs),
    /// Export a runbook bundle as a skill: the procedure becomes SKILL.md, support files are
    /// copied, runbook.json is left out.
    ToSkill(ConvertArgs),
    /// Say which automatic runbook applies here, and why each candidate was or was not chosen:
    /// exactly one valid, applicable `auto` release must remain after personal releases shadow
    /// team releases of the same name.
    Select(SelectArgs),
}

#[derive(Args, Debug)]
pub struct SelectArgs {
    /// Team bundles: each a bundle directory, or a directory of bundles.
    pub team: Vec<PathBuf>,
    /// A personal bundle, or directory of bundles (repeatable); it takes precedence.
    #[arg(long = "personal", value_name = "DIR")]
    pub personal: Vec<PathBuf>,
    /// The working directory applicability is judged for.
    #[arg(long, default_value = ".")]
    pub cwd: PathBuf,
}

#[derive(Args, Debug)]
pub struct SealArgs {
    /// The runbook bundle directory (holding runbook.json).
    pub dir: PathBuf,
    /// A release store: the release is written to STORE/<name>/<digest>/.
    #[arg(long, value_name = "STORE")]
    pub store: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The directory to convert.
    pub from: PathBuf,
    /// The new directory to write (it must not exist, or be empty).
    pub dest: PathBuf,
}

#[derive(Args, Debug)]
pub struct RunbookDirArgs {
    /// The runbook bundle directory (holding runbook.json).
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Where to write the pack: an empty or absent directory.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The pack's manifest.
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
    /// The workflow source (`workflow.star`) to compile.
    #[arg(long)]
    pub file: PathBuf,
    /// Checks launch settings against this manifest's [agent.overrides] and applies its defaults.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// A parameter value (`name=value`) or launch setting (`task.model=…`).
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    /// The output format.
    #[arg(long, value_enum, default_value = "json")]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct ParamsArgs {
    /// The workflow source whose params block to print.
    #[arg(long)]
    pub file: PathBuf,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["manifest", "file"])))]
pub struct ShowArgs {
    /// The pack's manifest: compile its graph with its defaults.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// A workflow source to show without a manifest.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// A parameter value (`name=value`) or launch setting (`task.model=…`).
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    /// A capability the substrate provides (repeatable).
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
    /// The pack's manifest; the run's state goes in `state/` beside it.
    #[arg(long, default_value = "crucible.toml")]
    pub manifest: PathBuf,
    /// Required: the cost ceiling in USD (0 for a run that may spend nothing).
    #[arg(long = "max-cost", value_name = "USD", value_parser = cost)]
    pub max_cost: Option<f64>,
    /// Required: the wall-clock ceiling, as 90s, 10m, 1.5m, 2h or 1h30m.
    #[arg(long = "max-time", value_name = "DUR", value_parser = duration)]
    pub max_time: Option<u64>,
    /// A parameter value (`name=value`) or launch setting (`task.model=…`); repeatable.
    #[arg(long = "param", value_name = "K=V")]
    pub params: Vec<String>,
    /// A capability the substrate provides (repeatable).
    #[arg(long = "cap", value_name = "CAP")]
    pub caps: Vec<String>,
    /// Default: `<manifest dir>/state`.
    #[arg(long = "state-dir")]
    pub state_dir: Option<PathBuf>,
    /// Continue the most recent run from its session log.
    #[arg(long)]
    pub resume: bool,
    /// The run's steering files, as a controller delivers them beside the pack (a dispatched
    /// run's pod, docs/kubernetes.md): read-only to every task (`CRUCIBLE_STEERING_DIR`).
    #[arg(long = "steering-dir", value_name = "DIR")]
    pub steering_dir: Option<PathBuf>,
    /// Launch the run in the local series NAME, kept in the state directory: the series'
    /// earlier runs are the history its tasks read (for a crontab line; docs/series.md).
    #[arg(long, value_name = "NAME", value_parser = series, conflicts_with = "resume")]
    pub series: Option<String>,
    /// Isolated tasks run concurrently up to this many, at least 1 (default: CPU count).
    #[arg(long, value_parser = jobs)]
    pub jobs: Option<usize>,
    /// Run tasks unsandboxed, as the engine's own user (the default runs every attempt in its
    /// own namespaces; docs/security.md).
    #[arg(long = "no-sandbox")]
    pub no_sandbox: bool,
    /// Run agent turns through this command instead of a harness.
    #[arg(long = "agent-cmd")]
    pub agent_cmd: Option<String>,
    /// Iterations of the graph: a playbook runs exactly once, so anything above 1 is refused
    /// rather than ignored (RFC-0002:C-PLAYBOOK-LANE).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub iterations: u32,
    /// The harness agent turns run on (claude, codex, pi), above every task's own.
    #[arg(long)]
    pub harness: Option<String>,
    /// The model agent turns use, above every task's own.
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
    /// The pack directory.
    pub dir: PathBuf,
}

// Values of the launch flags, parsed by clap so that a bad one always exits 2 with clap's
// wording: `error: invalid value 'X' for '--flag <V>': <why>`.

fn cost(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|c| c.is_finite() && *c >= 0.0)
        .ok_or_else(|| {
            format!("`{text}` is not a cost: give a non-negative number of USD, as 2 or 0.5")
        })
}

fn duration(text: &str) -> Result<u64, String> {
    crucible_plan::duration::parse(text)
}

fn series(text: &str) -> Result<String, String> {
    crucible_engine::series::check_name(text).map(|()| text.to_string())
}

fn size(text: &str) -> Result<u64, String> {
    crucible_engine::files::parse_size(text).map_err(|e| e.to_string())
}

fn jobs(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("`{text}` is not a number of jobs: give a whole number, 1 or more"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every flag and argument of every subcommand says what it is for.
    #[test]
    fn every_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && arg.get_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "crucible", &mut missing);
        assert!(missing.is_empty(), "no help: {missing:?}");
    }
}

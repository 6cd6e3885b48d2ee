//! `plan run`, `plan rerun`, `runs`.

use crate::args::{RerunArgs, RunArgs, RunsArgs};
use anyhow::{anyhow, bail, Context, Result};
use crucible_engine::{Observer, RunErrorKind, RunRequest, RunSummary};
use crucible_pack::LoadedManifest;
use crucible_plan::wire::TaskResult;
use crucible_plan::{Plan, TaskKind, Verdict};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Exit code of a run whose verdict is not valid (ARCHITECTURE.md, CLI).
const EXIT_INVALID: u8 = 3;

pub fn plan_run(args: &RunArgs) -> Result<ExitCode> {
    if args.resume {
        bail!("--resume is not available yet in this engine");
    }
    // Absolute paths: tasks run in the workspace, and every path handed to them must hold there.
    let manifest_path = std::path::absolute(&args.manifest)
        .with_context(|| format!("{}", args.manifest.display()))?;
    let mut manifest = crucible_pack::load(&manifest_path)?;
    manifest.workflow_type()?;
    let mut plan = load_plan(&manifest)?;
    apply_launch_settings(&mut plan, &mut manifest, &args.params)?;
    // The operator's own flags are not pack-limited, but they must still parse.
    if let Some(m) = args.model.as_deref().filter(|m| !is_model_name(m)) {
        bail!("--model {m:?} is not a model name");
    }
    let harness = args.harness.as_deref().map(str::to_ascii_lowercase);
    if let Some(h) = harness.as_deref().filter(|h| !HARNESSES.contains(h)) {
        bail!(
            "--harness {h:?} is not a harness ({})",
            HARNESSES.join(", ")
        );
    }
    let max_secs = match &args.max_time {
        Some(t) => Some(crucible_plan::duration::parse(t).map_err(|e| anyhow!("--max-time: {e}"))?),
        None => None,
    };
    let state_dir = match &args.state_dir {
        Some(d) => std::path::absolute(d).with_context(|| format!("{}", d.display()))?,
        None => manifest.dir.join("state"),
    };
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let pack_digest = pack_digest(&manifest, &state_dir)?;
    let req = RunRequest {
        plan,
        manifest,
        pack_digest,
        state_dir,
        max_cost: args.max_cost,
        max_secs,
        caps: args.caps.clone(),
        jobs,
        agent_cmd: args.agent_cmd.clone(),
        harness,
        model: args.model.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let live = std::io::stdout().is_terminal();
    let mut observer: Box<dyn Observer> = if live {
        Box::new(Live::new(args.max_cost, max_secs))
    } else {
        Box::new(Plain)
    };
    let result = runtime.block_on(async {
        let (stop_tx, stop_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(watch_signals(stop_tx));
        crucible_engine::run(req, observer.as_mut(), stop_rx).await
    });
    drop(observer);
    match result {
        Ok(summary) => {
            print_summary(&summary);
            Ok(if summary.verdict == Verdict::Valid {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_INVALID)
            })
        }
        Err(e) if e.kind == RunErrorKind::Refused => Err(anyhow!("refused: {e}")),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// SIGINT or SIGTERM: the first asks the engine to stop (attempts killed, `stopped` shutdown);
/// a second kills every attempt's group and exits at once.
async fn watch_signals(stop: tokio::sync::mpsc::UnboundedSender<()>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    let mut seen = 0;
    loop {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        seen += 1;
        if seen == 1 {
            eprintln!("stopping: killing attempts in flight (signal again to exit at once)");
            let _ = stop.send(());
        } else {
            crucible_engine::kill_all_now();
            eprintln!("second signal: exiting now");
            std::process::exit(i32::from(EXIT_INVALID));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// LEAD: MERGE POINT. The `[workflow].file` compile path (crucible-dsl) goes here.
// ---------------------------------------------------------------------------------------------
/// The plan a run executes: today only the manifest's inline `[[workflow.task]]` tables.
fn load_plan(manifest: &LoadedManifest) -> Result<Plan> {
    let wf = manifest
        .manifest
        .workflow
        .as_ref()
        .ok_or_else(|| anyhow!("{}: no [workflow] table", manifest.path.display()))?;
    if let Some(file) = &wf.file {
        bail!(
            "[workflow].file = {file:?}: compiling workflow.star needs the compiler, which this build does not have yet; use inline [[workflow.task]] tables"
        );
    }
    manifest.inline_plan()?.ok_or_else(|| {
        anyhow!(
            "{}: [workflow] has no tasks: add [[workflow.task]] tables or a file",
            manifest.path.display()
        )
    })
}

/// The settings a model name may be written with (RFC-0002:C-PLAYBOOK-PARAMS).
fn is_model_name(m: &str) -> bool {
    (1..=200).contains(&m.chars().count())
        && !m.starts_with('-')
        && m.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:/@[]".contains(c))
}

const HARNESSES: &[&str] = &["claude", "codex", "opencode", "pi", "hermes"];
const EFFORTS: &[&str] = &["minimal", "low", "medium", "high"];

/// Checks and applies dotted `--param` launch settings before any dispatch
/// (RFC-0002:C-PLAYBOOK-PARAMS, run-time half): `<task>.<setting>`, `*.<setting>` and
/// `repo.ref`, each allowed by `[agent.overrides]`. Undotted names are parameters, which an
/// inline plan binds in `[workflow.params]` and the compiler binds from the params block.
fn apply_launch_settings(
    plan: &mut Plan,
    manifest: &mut LoadedManifest,
    params: &[String],
) -> Result<()> {
    let overrides = manifest.manifest.agent.overrides.clone();
    let mut sessions: HashMap<&str, usize> = HashMap::new();
    for t in &plan.tasks {
        if let Some(s) = &t.session {
            *sessions.entry(s.as_str()).or_default() += 1;
        }
    }
    let shared_session: Vec<String> = plan
        .tasks
        .iter()
        .filter(|t| t.session.as_deref().is_some_and(|s| sessions[s] > 1))
        .map(|t| t.name.clone())
        .collect();
    let mut per_task: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut wide: BTreeMap<String, String> = BTreeMap::new();
    for p in params {
        let (name, value) = p
            .split_once('=')
            .ok_or_else(|| anyhow!("--param {p:?}: write name=value"))?;
        let Some((target, setting)) = name.rsplit_once('.') else {
            bail!("--param {name}: an inline plan declares no parameters; bind values in [workflow.params]");
        };
        if target == "repo" && setting == "ref" {
            if !overrides.git_ref {
                bail!("--param repo.ref: [agent.overrides] does not allow `ref`");
            }
            let repo = manifest
                .manifest
                .repo
                .as_mut()
                .ok_or_else(|| anyhow!("--param repo.ref: the manifest has no [repo]"))?;
            if value.is_empty() || value.starts_with('-') || value.contains(char::is_whitespace) {
                bail!("--param repo.ref: {value:?} is not a git ref");
            }
            repo.git_ref = Some(value.to_string());
            continue;
        }
        let allowed = match setting {
            "model" => overrides.model,
            "harness" => overrides.harness,
            "effort" => overrides.effort,
            _ => bail!(
                "--param {name}: `{setting}` is not a launch setting (model, harness, effort)"
            ),
        };
        if !allowed {
            bail!("--param {name}: [agent.overrides] does not allow `{setting}`");
        }
        let value = match setting {
            "harness" | "effort" => {
                let v = value.to_ascii_lowercase();
                let known = if setting == "harness" {
                    HARNESSES
                } else {
                    EFFORTS
                };
                if !known.contains(&v.as_str()) {
                    bail!(
                        "--param {name}: {value:?} is not a {setting} ({})",
                        known.join(", ")
                    );
                }
                v
            }
            _ => {
                if !is_model_name(value) {
                    bail!("--param {name}: {value:?} is not a model name");
                }
                if !overrides.models.is_empty() && !overrides.models.iter().any(|m| m == value) {
                    bail!("--param {name}: {value:?} is not one of [agent.overrides].models");
                }
                value.to_string()
            }
        };
        if target == "*" {
            wide.insert(setting.to_string(), value);
            continue;
        }
        let Some(task) = plan.task(target) else {
            bail!("--param {name}: there is no task `{target}`");
        };
        if task.kind != TaskKind::Agent {
            bail!("--param {name}: task `{target}` runs no agent");
        }
        if shared_session.iter().any(|s| s == target) {
            bail!("--param {name}: task `{target}` shares a session, which runs under one agent config");
        }
        per_task.insert((target.to_string(), setting.to_string()), value);
    }
    for t in plan.tasks.iter_mut().filter(|t| t.kind == TaskKind::Agent) {
        for setting in ["model", "harness", "effort"] {
            let v = per_task
                .get(&(t.name.clone(), setting.to_string()))
                .or_else(|| wide.get(setting));
            if let Some(v) = v {
                let slot = match setting {
                    "model" => &mut t.model,
                    "harness" => &mut t.harness,
                    _ => &mut t.effort,
                };
                *slot = Some(v.clone());
            }
        }
    }
    Ok(())
}

// LEAD: replace with `crucible_pack::files::tree1_digest` once the pack helper lands.
/// A stand-in `tree1:` digest of the pack: SHA-256 over every regular file below the manifest
/// directory (sorted paths, each with its content's SHA-256), leaving out `.git`, the workspace
/// and the state directory, which the run itself writes.
fn pack_digest(manifest: &LoadedManifest, state_dir: &Path) -> Result<String> {
    let root = &manifest.dir;
    let skip: Vec<PathBuf> = [
        root.join(".git"),
        root.join(&manifest.manifest.workspace.dir),
        state_dir.to_path_buf(),
    ]
    .into_iter()
    .map(|p| p.canonicalize().unwrap_or(p))
    .collect();
    let mut files = Vec::new();
    let mut stack = vec![root.canonicalize().context("pack directory")?];
    let base = stack[0].clone();
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))? {
            let e = e?;
            let path = e.path();
            let ty = e.file_type()?;
            if skip.contains(&path) {
                continue;
            }
            if ty.is_dir() {
                stack.push(path);
            } else if ty.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        let rel = f.strip_prefix(&base).expect("below the pack");
        let content = std::fs::read(&f).with_context(|| format!("{}", f.display()))?;
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0]);
        h.update(Sha256::digest(&content));
    }
    Ok(format!("tree1:{}", hex::encode(h.finalize())))
}

pub fn plan_rerun(_: &RerunArgs) -> Result<ExitCode> {
    bail!("`crucible plan rerun` is not available yet")
}

pub fn runs(args: &RunsArgs) -> Result<ExitCode> {
    let runs = crucible_engine::state::list_runs(&args.state_dir)
        .with_context(|| format!("cannot read {}", args.state_dir.display()))?;
    if runs.is_empty() {
        println!("no runs in {}", args.state_dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<36}  {:<24}  {:<9}  {:<8}  spent",
        "run", "started", "outcome", "verdict"
    );
    for r in runs {
        println!(
            "{:<36}  {:<24}  {:<9}  {:<8}  {}",
            r.id,
            r.started_at,
            r.outcome.as_deref().unwrap_or("-"),
            r.verdict.as_deref().unwrap_or("-"),
            r.spent_usd.map_or("-".to_string(), |s| format!("${s:.2}")),
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn row_line(name: &str, row: Option<&TaskResult>) -> String {
    let Some(r) = row else {
        return format!("{name} unsettled (never dispatched)");
    };
    let mut line = format!(
        "{} {} attempts={} cost=${:.2} secs={:.2}",
        r.task, r.status, r.attempts, r.cost_usd, r.secs
    );
    if let Some(note) = &r.note {
        line.push_str(&format!(" note: {note}"));
    }
    if let Some(refused) = &r.refused {
        line.push_str(&format!(" refused: {refused}"));
    }
    line
}

fn print_summary(s: &RunSummary) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out);
    for (name, row) in &s.rows {
        let _ = writeln!(out, "{}", row_line(name, row.as_ref()));
    }
    let mut outcome = format!("outcome: {}", s.outcome);
    if let Some(c) = s.ceiling {
        outcome.push_str(&format!(" ({c})"));
    }
    if let Some(r) = &s.reason {
        outcome.push_str(&format!(": {r}"));
    }
    let _ = writeln!(out, "{outcome}");
    let _ = writeln!(
        out,
        "spent ${:.2} of ${:.2}, {:.1}s of {}",
        s.spent_usd,
        s.max_cost,
        s.elapsed_secs,
        crucible_plan::duration::format(s.max_secs)
    );
    let _ = writeln!(out, "run: {}", s.run_id);
    let _ = writeln!(out, "verdict: {}", s.verdict);
}

/// Plain, stable lines for a pipe or a file.
struct Plain;

impl Observer for Plain {
    fn run_started(&mut self, run_id: &str, _: &Path) {
        println!("run {run_id}");
    }
    fn task_started(&mut self, task: &str) {
        println!("started {task}");
    }
    fn task_settled(&mut self, row: &TaskResult) {
        println!("settled {} {}", row.task, row.status);
    }
}

/// The terminal view: settled rows scroll above; below, one line per running task with its
/// elapsed time and a footer with spend and time against the ceilings.
struct Live {
    running: Vec<(String, Instant)>,
    drawn: usize,
    max_cost: Option<f64>,
    max_secs: Option<u64>,
    spent: f64,
    started: Instant,
}

impl Live {
    fn new(max_cost: Option<f64>, max_secs: Option<u64>) -> Live {
        Live {
            running: Vec::new(),
            drawn: 0,
            max_cost,
            max_secs,
            spent: 0.0,
            started: Instant::now(),
        }
    }

    fn clear(&mut self, out: &mut impl Write) {
        if self.drawn > 0 {
            let _ = write!(out, "\x1b[{}A\x1b[J", self.drawn);
        }
        self.drawn = 0;
    }

    fn draw(&mut self, out: &mut impl Write) {
        // Lines are cut to the terminal's width: a wrapped line would break the redraw.
        let width = terminal_width().saturating_sub(1).max(20);
        for (name, since) in &self.running {
            let line = format!("  ▶ {name}  {:.1}s", since.elapsed().as_secs_f64());
            let _ = writeln!(out, "{}", cut(&line, width));
        }
        let footer = format!(
            "  spent ${:.2} of ${:.2} · {:.1}s of {}",
            self.spent,
            self.max_cost.unwrap_or(0.0),
            self.started.elapsed().as_secs_f64(),
            self.max_secs
                .map_or("-".to_string(), crucible_plan::duration::format)
        );
        let _ = writeln!(out, "{}", cut(&footer, width));
        self.drawn = self.running.len() + 1;
        let _ = out.flush();
    }
}

fn cut(line: &str, width: usize) -> String {
    line.chars().take(width).collect()
}

/// The terminal's column count, or 80 when it cannot be read.
fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills a winsize struct we own.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above; stdout is a terminal whenever this view is in use.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        80
    }
}

impl Observer for Live {
    fn run_started(&mut self, run_id: &str, _: &Path) {
        println!("run {run_id}");
    }
    fn task_started(&mut self, task: &str) {
        self.running.push((task.to_string(), Instant::now()));
        let mut out = std::io::stdout().lock();
        self.clear(&mut out);
        self.draw(&mut out);
    }
    fn task_settled(&mut self, row: &TaskResult) {
        self.running.retain(|(n, _)| n != &row.task);
        self.spent += row.cost_usd;
        let mut out = std::io::stdout().lock();
        self.clear(&mut out);
        let _ = writeln!(out, "{}", row_line(&row.task, Some(row)));
        self.draw(&mut out);
    }
    fn tick_interval(&self) -> Option<Duration> {
        Some(Duration::from_millis(250))
    }
    fn tick(&mut self, spent: f64, _: Duration) {
        self.spent = spent;
        let mut out = std::io::stdout().lock();
        self.clear(&mut out);
        self.draw(&mut out);
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        self.clear(&mut out);
    }
}

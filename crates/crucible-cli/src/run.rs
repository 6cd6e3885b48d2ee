//! `plan run` and `plan rerun`.

use crate::args::{RerunArgs, RunArgs};
use crate::live::{colour, Live, Plain};
use anyhow::{anyhow, bail, Context, Result};
use crucible_agent::inference::{self, Inference, INFERENCE_ENV};
use crucible_dsl::settings;
use crucible_engine::asks;
use crucible_engine::files::parse_size;
use crucible_engine::history::{
    History, DEFAULT_HISTORY_MAX_BYTES, HISTORY_ENV, HISTORY_MAX_BYTES_ENV,
};
use crucible_engine::report::{self, ReportConfig};
use crucible_engine::{Launch, Observer, ReadAhead, RunErrorKind, RunRequest, RunSummary};
use crucible_plan::terminal::{escape, escape_lines};
use crucible_plan::wire::TaskResult;
use crucible_plan::Verdict;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

/// Exit code of a run whose verdict is not valid (ARCHITECTURE.md, CLI).
pub(crate) const EXIT_INVALID: u8 = 3;

pub fn plan_run(args: &RunArgs) -> Result<ExitCode> {
    let launch = if args.resume {
        Launch::Resume
    } else {
        Launch::Fresh
    };
    launch_run(args, launch)
}

/// `plan rerun`: a new run reusing the parent's results outside the rerun set.
pub fn plan_rerun(args: &RerunArgs) -> Result<ExitCode> {
    if args.run.resume {
        bail!("--resume continues the most recent run; `plan rerun` starts a new one");
    }
    let launch = Launch::Rerun {
        parent: args.parent.clone(),
        select: args.select.clone(),
    };
    launch_run(&args.run, launch)
}

fn launch_run(args: &RunArgs, launch: Launch) -> Result<ExitCode> {
    if args.iterations != 1 {
        bail!(
            "--iterations {}: a playbook runs its graph exactly once (RFC-0002:C-PLAYBOOK-LANE); nothing was dispatched",
            args.iterations
        );
    }
    // Absolute paths: tasks run in the workspace, and every path handed to them must hold there.
    let manifest_path = std::path::absolute(&args.manifest)
        .with_context(|| format!("{}", args.manifest.display()))?;
    // The pack's directory is the manifest's (`crucible_pack::load`).
    let state_dir = match &args.state_dir {
        Some(d) => std::path::absolute(d).with_context(|| format!("{}", d.display()))?,
        None => manifest_path.with_file_name("state"),
    };
    let read_ahead = matches!(launch, Launch::Resume).then(|| ReadAhead::start(&state_dir));
    let mut manifest = crucible_pack::load(&manifest_path)?;
    manifest.workflow_type()?;
    for n in manifest.not_applied() {
        eprintln!("warning: not applied: {}", escape(&n));
    }
    let plan = match crate::compile::manifest_plan(&manifest, &args.params)? {
        Ok(compiled) => {
            if let Some(r) = compiled.repo_ref {
                manifest.set_repo_ref(r).map_err(|e| anyhow!(e))?;
            }
            compiled.plan
        }
        Err(diags) => {
            eprintln!("{}", escape_lines(&diags.to_string()));
            bail!("{} compile error(s): nothing was dispatched", diags.0.len());
        }
    };
    // The operator's own flags are not pack-limited, but they must still parse.
    if let Some(m) = args
        .model
        .as_deref()
        .filter(|m| !settings::is_model_name(m))
    {
        bail!("--model {m:?} is not a model name");
    }
    let harness = args.harness.as_deref().map(str::to_ascii_lowercase);
    if let Some(h) = harness
        .as_deref()
        .filter(|h| !settings::HARNESSES.contains(h))
    {
        bail!(
            "--harness {h:?} is not a harness ({})",
            settings::HARNESSES.join(", ")
        );
    }
    let max_secs = args.max_time;
    // The parent may be named as any run id is: `latest`, or a unique prefix.
    let launch = match launch {
        Launch::Rerun { parent, select } => Launch::Rerun {
            parent: crate::inspect::resolve(&state_dir, &parent)
                .map(|(id, _)| id)
                .with_context(|| format!("cannot rerun from run {}", escape(&parent)))?,
            select,
        },
        other => other,
    };
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let max_files_bytes = crate::compile::files_bound(args.max_files_bytes.as_deref())?;
    let inference = inference_bindings()?;
    let history = launch_history()?;
    if args.series.is_some() {
        if std::env::var_os(HISTORY_ENV).is_some() {
            bail!("--series and {HISTORY_ENV} both supply the run's history: give one");
        }
        if matches!(launch, Launch::Rerun { .. }) {
            bail!("a rerun belongs to no series: drop --series");
        }
    }
    let reports = report_config()?;
    let max_asks = asks_bound()?;
    let link = crucible_engine::link::Link::from_env().map_err(|e| anyhow!(e))?;
    let mut caps = crucible_engine::substrate_caps(&args.caps, &inference);
    // A run recorded by a controller has the `human` capability, as the controller's own runs
    // do: its routes are answered by the controller's approvers.
    if link.is_some() && !caps.iter().any(|c| c == "human") {
        caps.push("human".into());
    }
    let pack_digest = crucible_pack::files::tree1_digest(&manifest.dir)
        .map_err(|e| anyhow!("pack {}: {e}", manifest.dir.display()))?;
    // The live view's done/total: the plan's own tasks (instances and rounds are parts of one).
    let total = plan.tasks.len();
    let req = RunRequest {
        plan,
        manifest,
        pack_digest,
        state_dir,
        max_cost: args.max_cost,
        max_secs,
        caps,
        jobs,
        agent_cmd: args.agent_cmd.clone(),
        harness,
        model: args.model.clone(),
        max_files_bytes,
        launch,
        read_ahead,
        inference,
        history,
        series: args.series.clone(),
        reports,
        max_asks,
        no_sandbox: args.no_sandbox,
        hidden: Vec::new(),
        groups: Default::default(),
        decider: crate::decide::decider()?,
        decision_bounds: crate::decide::bounds()?,
        // Steering is the controller's (`crucible remote launch --steer`): delivered beside
        // the pack, handed here by a dispatched run's pod (docs/kubernetes.md).
        steering: args.steering_dir.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let live = std::io::stdout().is_terminal();
    let inner: Box<dyn Observer> = if live {
        Box::new(Live::new(args.max_cost, max_secs, total, colour()))
    } else {
        Box::new(Plain)
    };
    let mut observer = Reporting {
        inner,
        link,
        reporter: None,
    };
    let groups = req.groups.clone();
    let (stop_tx, stop_rx) = tokio::sync::mpsc::unbounded_channel();
    if observer.link.is_some() {
        // A stop on the controller the run is linked to stops it as SIGTERM does.
        crucible_engine::link::stop_to(stop_tx.clone());
    }
    let result = runtime.block_on(async {
        tokio::spawn(watch_signals(stop_tx, groups));
        crucible_engine::run(req, &mut observer, stop_rx).await
    });
    let reporter = observer.reporter.take();
    drop(observer);
    let code = exit_of(result);
    // What the controller does not hold yet is reported for a grace after the run ended,
    // then given up: the run's outcome is already decided and its log kept here.
    if let Some(r) = reporter {
        r.finish(REPORT_GRACE);
    }
    code
}

/// How long a linked run's last session log lines are reported for after the run ended.
const REPORT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The observer of a run, and the reporter of its session log to the controller it is linked
/// to, started once the engine names its run (`crucible_engine::link`).
struct Reporting {
    inner: Box<dyn Observer>,
    link: Option<crucible_engine::link::Link>,
    reporter: Option<crucible_engine::link::Reporter>,
}

impl Reporting {
    fn wake(&self) {
        if let Some(r) = &self.reporter {
            r.wake();
        }
    }
}

impl Observer for Reporting {
    fn run_started(&mut self, run_id: &str, run_dir: &std::path::Path) {
        self.inner.run_started(run_id, run_dir);
        if let Some(link) = self.link.take() {
            self.reporter = Some(crucible_engine::link::Reporter::start(
                link,
                run_id.to_string(),
                run_dir.join("session.jsonl"),
            ));
        }
    }
    fn task_started(&mut self, task: &str) {
        self.inner.task_started(task);
        self.wake();
    }
    fn task_settled(&mut self, row: &crucible_plan::wire::TaskResult) {
        self.inner.task_settled(row);
        self.wake();
    }
    fn tick_interval(&self) -> Option<std::time::Duration> {
        self.inner.tick_interval()
    }
    fn tick(&mut self, spent_usd: f64, elapsed: std::time::Duration) {
        self.inner.tick(spent_usd, elapsed);
    }
}

/// The exit of a run, its summary printed.
fn exit_of(result: Result<RunSummary, crucible_engine::RunError>) -> Result<ExitCode> {
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
            eprintln!("error: {}", escape_lines(&e.to_string()));
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}

/// SIGINT or SIGTERM: the first asks the engine to stop (attempts killed, `stopped` shutdown);
/// a second kills every attempt's group of the run and exits at once.
async fn watch_signals(
    stop: tokio::sync::mpsc::UnboundedSender<()>,
    groups: std::sync::Arc<crucible_engine::ProcessGroups>,
) {
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
            groups.kill_all_now();
            eprintln!("second signal: exiting now");
            std::process::exit(i32::from(EXIT_INVALID));
        }
    }
}

/// One settled row as a line of the summary and the live view: the task name (an `over` item
/// key is a task's output), note and refusal are a task's text, so each is escaped.
/// The note is shown without a stderr tail that the row's log excerpt prints.
pub(crate) fn row_line(
    name: &str,
    row: Option<&TaskResult>,
    parts: &crate::inspect::Parts,
    run_dir: &Path,
) -> String {
    let Some(r) = row else {
        // Never dispatched, or its attempt ended in an engine fault (the outcome names it).
        return format!("{} unsettled", escape(name));
    };
    let mut line = format!(
        "{} {} {}attempts={} cost=${:.2} secs={:.2}",
        escape(&r.task),
        r.status,
        parts.label(&r.task),
        r.attempts,
        r.cost_usd,
        r.secs
    );
    if let Some(note) = crate::inspect::shown_note(run_dir, r) {
        line.push_str(&format!(" note: {}", escape(&note)));
    }
    if let Some(refused) = &r.refused {
        line.push_str(&format!(" refused: {}", escape(refused)));
    }
    if let Some(from) = &r.reused_from {
        line.push_str(&format!(" (reused from run {})", escape(from)));
    }
    line
}

fn print_summary(s: &RunSummary) {
    // One write for the whole summary, not one per row: a run may have 100,000 rows.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let _ = writeln!(out);
    let mut parts = crate::inspect::Parts::default();
    for row in &s.sub_rows {
        parts.add(row);
    }
    for (name, row) in &s.rows {
        let _ = writeln!(out, "{}", row_line(name, row.as_ref(), &parts, &s.run_dir));
        if let Some(r) = row.as_ref().filter(|r| !r.status.is_pass()) {
            for line in crate::inspect::failure_excerpt(&s.run_dir, r) {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    let _ = writeln!(
        out,
        "{}",
        crate::inspect::outcome_line(&s.outcome, s.ceiling, s.reason.as_deref())
    );
    let _ = writeln!(
        out,
        "spent ${:.2} of ${:.2}, {:.1}s of {}",
        s.spent_usd,
        s.max_cost,
        s.elapsed_secs,
        crucible_plan::duration::format(s.max_secs)
    );
    if s.reused_usd > 0.0 {
        let _ = writeln!(
            out,
            "reused ${:.2} of the parent's spend (not counted against the ceilings)",
            s.reused_usd
        );
    }
    if s.verdict != Verdict::Valid {
        let _ = writeln!(
            out,
            "next: `crucible runs show latest` and `crucible logs latest TASK` say what happened; \
             `crucible plan rerun --parent latest --max-cost USD --max-time DUR` runs again what did not pass"
        );
    }
    let _ = writeln!(
        out,
        "session log: {}",
        escape(&s.run_dir.join("session.jsonl").display().to_string())
    );
    let _ = writeln!(out, "run: {}", escape(&s.run_id));
    let _ = writeln!(out, "verdict: {}", s.verdict);
}

/// The model bindings in `CRUCIBLE_INFERENCE`, refused before any work when malformed.
pub(crate) fn inference_bindings() -> Result<Inference> {
    from_env(INFERENCE_ENV, Inference::default, inference::parse)
}

/// The bound on the history one task receives: `CRUCIBLE_HISTORY_MAX_BYTES`, or 64 KiB.
pub(crate) fn history_bound() -> Result<u64> {
    from_env(
        HISTORY_MAX_BYTES_ENV,
        || DEFAULT_HISTORY_MAX_BYTES,
        parse_size,
    )
}

/// The launch series' earlier runs in `CRUCIBLE_HISTORY`, refused before any work when
/// malformed; none when the run belongs to no series.
pub(crate) fn launch_history() -> Result<History> {
    let bound = history_bound()?;
    from_env(
        HISTORY_ENV,
        || History::none(bound),
        |t| History::parse(t, bound),
    )
}

/// What the operator configured for reports (RFC-0002:C-REPORTS): the result and body bounds,
/// the Slack webhook and the run link, from the environment the controller sets.
pub(crate) fn report_config() -> Result<ReportConfig> {
    let text = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty());
    ReportConfig {
        result_max_bytes: from_env(
            report::RESULT_MAX_BYTES_ENV,
            || report::DEFAULT_RESULT_MAX_BYTES,
            parse_size,
        )?,
        body_max_bytes: from_env(
            report::BODY_MAX_BYTES_ENV,
            || report::BODY_MAX_BYTES_CEILING,
            parse_size,
        )?,
        slack_webhook: text(report::SLACK_WEBHOOK_ENV),
        run_url: text(report::RUN_URL_ENV),
    }
    .checked()
    .map_err(|e| anyhow!(e))
}

/// The most asks one run may emit (RFC-0002:C-ASKS): `CRUCIBLE_MAX_ASKS`, or 100.
pub(crate) fn asks_bound() -> Result<u32> {
    from_env(
        asks::MAX_ASKS_ENV,
        || asks::DEFAULT_MAX_ASKS,
        |t| {
            t.trim()
                .parse()
                .map_err(|_| format!("{t:?} is not a whole number"))
        },
    )
}

/// The operator's setting in `var` read by `parse`, or `default()` where it is unset; an error
/// names the variable.
fn from_env<T, E: std::fmt::Display>(
    var: &str,
    default: impl FnOnce() -> T,
    parse: impl FnOnce(&str) -> std::result::Result<T, E>,
) -> Result<T> {
    match std::env::var(var) {
        Ok(text) => parse(&text).map_err(|e| anyhow!("{var}: {e}")),
        Err(std::env::VarError::NotPresent) => Ok(default()),
        Err(e) => bail!("{var}: {e}"),
    }
}

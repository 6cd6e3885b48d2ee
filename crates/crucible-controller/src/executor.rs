//! The local executor (issue 12): every accepted run on the embedded engine, each on its own
//! tokio task with its own process groups, observer and stop handle (ARCHITECTURE.md,
//! "Embeddable"), many in one process.
//!
//! A run is recorded `running` before it is dispatched and recorded ended (`finished`,
//! `refused`, `failed`) when its engine returns. A controller that starts resumes each run still
//! recorded `running`, once (RFC-0002:C-PLAYBOOK-RESUME): the engine folds what settled from the
//! session log and never dispatches it again, and a run whose engine had already written its
//! shutdown is only recorded. Nothing else dispatches a recorded run, so no run starts twice.

use crate::db::now_ms;
use crate::launches::{prepare, LaunchRequest, Refusal};
use crate::App;
use anyhow::{Context, Result};
use crucible_engine::history::History;
use crucible_engine::{Launch, Observer, RunError, RunErrorKind, RunRequest, RunSummary};
use sqlx::AnyPool;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc};

/// A live event besides the session log's own lines: its SSE event name and JSON data.
pub type LiveEvent = (&'static str, String);

/// The runs this controller is executing now.
#[derive(Default)]
pub struct Executor {
    live: Mutex<HashMap<String, Live>>,
}

/// One executing run's handles.
struct Live {
    stop: mpsc::UnboundedSender<()>,
    events: broadcast::Sender<LiveEvent>,
    running: InFlight,
}

/// The rows of a run started and not yet settled (`task`, `task[key]`, `task[round-n]`).
type InFlight = Arc<Mutex<BTreeSet<String>>>;

/// The run's observer: what the session log does not carry (a task starting) goes to the
/// run's event stream, and the rows in flight are kept for the run's page.
struct Relay {
    events: broadcast::Sender<LiveEvent>,
    running: InFlight,
}

impl Observer for Relay {
    fn task_started(&mut self, task: &str) {
        self.running
            .lock()
            .expect("rows in flight")
            .insert(task.to_string());
        let data = serde_json::json!({ "task": task }).to_string();
        // No subscriber is not an error: the stream is for whoever is watching.
        let _ = self.events.send(("task_started", data));
    }

    fn task_settled(&mut self, row: &crucible_plan::wire::TaskResult) {
        self.running
            .lock()
            .expect("rows in flight")
            .remove(&row.task);
    }
}

/// How a run's engine ended, as recorded: what its shutdown said (the engine's summary, or for
/// a run executed elsewhere the shutdown line it reported, `link`), or why it never ran.
pub(crate) enum Ended {
    Ran {
        outcome: String,
        verdict: String,
        reason: Option<String>,
    },
    Refused(String),
    Failed(String),
}

impl From<&crucible_plan::wire::Shutdown> for Ended {
    /// A shutdown line a run's engine wrote: what its summary would have said.
    fn from(s: &crucible_plan::wire::Shutdown) -> Ended {
        Ended::Ran {
            outcome: s.outcome.to_string(),
            verdict: s.verdict.to_string(),
            reason: s.reason.clone(),
        }
    }
}

impl From<Result<RunSummary, RunError>> for Ended {
    fn from(r: Result<RunSummary, RunError>) -> Ended {
        match r {
            Ok(s) => Ended::Ran {
                outcome: s.outcome.to_string(),
                verdict: s.verdict.to_string(),
                reason: s.reason,
            },
            Err(e) => match e.kind {
                RunErrorKind::Refused => Ended::Refused(e.message),
                RunErrorKind::State => Ended::Failed(e.message),
            },
        }
    }
}

impl Executor {
    /// Runs `req` on its own task; the run (already recorded `running`) is recorded ended when
    /// its engine returns, even when the engine panicked.
    pub fn dispatch(&self, app: App, id: String, req: RunRequest) {
        let (stop, stop_rx) = mpsc::unbounded_channel();
        let (events, _) = broadcast::channel(1024);
        let running = InFlight::default();
        let relay = Relay {
            events: events.clone(),
            running: running.clone(),
        };
        self.live.lock().expect("live runs").insert(
            id.clone(),
            Live {
                stop,
                events,
                running,
            },
        );
        let engine = tokio::spawn(async move {
            let mut relay = relay;
            crucible_engine::run(req, &mut relay, stop_rx).await
        });
        tokio::spawn(async move {
            let ended = match engine.await {
                Ok(result) => Ended::from(result),
                Err(e) => Ended::Failed(format!("the engine failed: {e}")),
            };
            finish(&app, &id, &ended).await;
            app.executor.live.lock().expect("live runs").remove(&id);
        });
    }

    /// Asks a live run to stop (its attempts are killed and it ends `stopped`); false when the
    /// run is not executing here.
    pub fn stop(&self, id: &str) -> bool {
        let live = self.live.lock().expect("live runs");
        live.get(id).is_some_and(|l| l.stop.send(()).is_ok())
    }

    /// The live events of an executing run; `None` once it has ended.
    pub fn subscribe(&self, id: &str) -> Option<broadcast::Receiver<LiveEvent>> {
        let live = self.live.lock().expect("live runs");
        live.get(id).map(|l| l.events.subscribe())
    }

    /// The rows of an executing run started and not settled, by name; none once it ended.
    pub fn running(&self, id: &str) -> Vec<String> {
        let live = self.live.lock().expect("live runs");
        live.get(id).map_or_else(Vec::new, |l| {
            l.running
                .lock()
                .expect("rows in flight")
                .iter()
                .cloned()
                .collect()
        })
    }

    pub fn is_live(&self, id: &str) -> bool {
        self.live.lock().expect("live runs").contains_key(id)
    }
}

/// A run's engine ended (here, or elsewhere and reported its shutdown, `link`): what it asked is
/// received, then it is recorded ended.
pub(crate) async fn finish(app: &App, id: &str, ended: &Ended) {
    // RFC-0002:C-ASKS: what the run proposed is decided before it is recorded ended, so a
    // controller that dies between the two decides it on resumption (once: an ask is recorded
    // per run and position, and decided only while proposed).
    if let Err(e) = crate::asks::receive_from_run(app, id).await {
        eprintln!("controller: the asks of run {id}: {e:#}");
    }
    // The end must be recorded, or the run would read `running` until a restart: a busy store
    // (every connection taken) is waited out, not given up on.
    let mut pause = std::time::Duration::from_millis(100);
    while let Err(e) = record_end(&app.db, id, ended).await {
        eprintln!("controller: recording the end of run {id} (retrying): {e:#}");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_secs(5));
    }
}

/// Records the run ended; a run already recorded ended keeps its first end.
pub(crate) async fn record_end(db: &AnyPool, id: &str, ended: &Ended) -> Result<()> {
    let (state, outcome, verdict, reason) = match ended {
        Ended::Ran {
            outcome,
            verdict,
            reason,
        } => (
            "finished",
            Some(outcome.clone()),
            Some(verdict.clone()),
            reason.clone(),
        ),
        Ended::Refused(why) => ("refused", None, None, Some(why.clone())),
        Ended::Failed(why) => ("failed", None, None, Some(why.clone())),
    };
    sqlx::query(
        "UPDATE runs SET state = $1, outcome = $2, verdict = $3, reason = $4, ended_at = $5 \
         WHERE id = $6 AND state = 'running'",
    )
    .bind(state)
    .bind(outcome)
    .bind(verdict)
    .bind(reason)
    .bind(now_ms())
    .bind(id)
    .execute(db)
    .await?;
    Ok(())
}

/// At start: removes run directories no run records (a launch the controller died accepting),
/// then resumes every run recorded `running` on this executor (not a Kubernetes target's:
/// `dispatch`), each once.
pub async fn resume_all(app: &App) -> Result<()> {
    for entry in std::fs::read_dir(app.runs_dir())? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let recorded: Option<String> = sqlx::query_scalar("SELECT id FROM runs WHERE id = $1")
            .bind(&name)
            .fetch_optional(&app.db)
            .await?;
        if recorded.is_none() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let rows: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
        "SELECT id, digest, request, series_id FROM runs \
         WHERE state = 'running' AND executor = 'local' ORDER BY id",
    )
    .fetch_all(&app.db)
    .await?;
    for (id, digest, request, series) in rows {
        let launch: LaunchRequest = serde_json::from_str(&request)
            .with_context(|| format!("the recorded launch of run {id}"))?;
        let run_dir = app.runs_dir().join(&id);
        sqlx::query("UPDATE runs SET dispatches = dispatches + 1 WHERE id = $1")
            .bind(&id)
            .execute(&app.db)
            .await?;
        let mode = resumption(&run_dir);
        // RFC-0002:C-RUN-HISTORY: a resumed run gives every task the history it was started
        // with, which its engine kept in its run directory (`history.json`) and reads back; a
        // series run whose engine never started gets its series' history as of now.
        let history = match (&series, &mode) {
            (Some(series), Launch::Fresh) => crate::scheduler::series_history(app, series)
                .await
                .map_err(|e| anyhow::anyhow!("the history of run {id}'s series: {e}"))?,
            _ => History::none(app.config.engine.history_max_bytes),
        };
        match prepare(app, &run_dir, &digest, &launch, mode, history).await {
            Ok(req) => app.executor.dispatch(app.clone(), id, req),
            Err(refusal) => {
                let why = match refusal {
                    Refusal::Compile(why) => format!("compile: {why}"),
                    Refusal::Other(e) => e.to_string(),
                };
                let why = format!("cannot resume after a restart: {why}");
                record_end(&app.db, &id, &Ended::Refused(why)).await?;
            }
        }
    }
    Ok(())
}

/// How a run recorded `running` goes on: the engine's run, when it had started one (its state
/// names it), resumed; otherwise the launch was accepted and never reached its engine, and
/// starts now.
fn resumption(run_dir: &Path) -> Launch {
    match crucible_engine::state::current(&run_dir.join("state")) {
        Some(_) => Launch::Resume,
        None => Launch::Fresh,
    }
}

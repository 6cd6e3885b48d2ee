//! Runs (issue 12): list, show (rows, outcome, verdict, spend), the session log, task logs,
//! stop, and a live event stream (SSE). Everything is scoped to the run's team: a run the
//! caller may not read is answered exactly as one that does not exist, the event stream
//! included. What a run did is read from its engine's own files (the session log and the task
//! logs under `runs/<id>/state/`), so a run reads the same live, ended, or after a restart.

use crate::error::{ApiError, ApiResult};
use crate::identity::{Caller, Role};
use crate::App;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use crucible_plan::wire::{Event, TaskResult};
use serde_json::{json, Value};
use sqlx::Row;
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast::error::RecvError;

/// One run as recorded.
struct Recorded {
    id: String,
    team_id: String,
    team: String,
    launched_by: String,
    digest: String,
    source: String,
    request: Value,
    state: String,
    outcome: Option<String>,
    verdict: Option<String>,
    reason: Option<String>,
    dispatches: i64,
    created_at: i64,
    ended_at: Option<i64>,
    series: Option<String>,
    /// `local` or `remote` (`link`).
    executor: String,
}

const SELECT: &str = "SELECT r.id, r.team_id, t.name AS team, u.name AS launched_by, r.digest, \
     r.source, r.request, r.state, r.outcome, r.verdict, r.reason, r.dispatches, r.created_at, \
     r.ended_at, r.series_id, r.executor FROM runs r JOIN subjects t ON t.id = r.team_id \
     JOIN subjects u ON u.id = r.subject_id";

impl Recorded {
    fn of(r: &sqlx::any::AnyRow) -> ApiResult<Recorded> {
        let request: String = r.try_get("request")?;
        Ok(Recorded {
            id: r.try_get("id")?,
            team_id: r.try_get("team_id")?,
            team: r.try_get("team")?,
            launched_by: r.try_get("launched_by")?,
            digest: r.try_get("digest")?,
            source: r.try_get("source")?,
            request: serde_json::from_str(&request).map_err(anyhow::Error::from)?,
            state: r.try_get("state")?,
            outcome: r.try_get("outcome")?,
            verdict: r.try_get("verdict")?,
            reason: r.try_get("reason")?,
            dispatches: r.try_get("dispatches")?,
            created_at: r.try_get("created_at")?,
            ended_at: r.try_get("ended_at")?,
            series: r.try_get("series_id")?,
            executor: r.try_get("executor")?,
        })
    }

    /// What a listing shows of the run.
    fn summary(&self) -> Value {
        json!({
            "id": self.id,
            "team": self.team,
            "launched_by": self.launched_by,
            "digest": self.digest,
            "source": self.source,
            // Where it runs: `local`, or the Kubernetes target it was dispatched to.
            "target": self.request["target"].as_str().unwrap_or("local"),
            "state": self.state,
            "outcome": self.outcome,
            "verdict": self.verdict,
            "reason": self.reason,
            "created_at_ms": self.created_at,
            "ended_at_ms": self.ended_at,
            "series": self.series,
            "executor": self.executor,
        })
    }

    /// Whether its engine may still write to its session log: a local run while this
    /// controller executes it, a remote one while it is recorded running.
    fn live(&self, app: &App) -> bool {
        match self.executor.as_str() {
            crate::link::REMOTE => self.state == "running",
            _ => app.executor.is_live(&self.id),
        }
    }
}

/// The run, when the caller may read it; otherwise not found, exactly as a missing run.
async fn readable(app: &App, caller: &Caller, id: &str) -> ApiResult<Recorded> {
    let not_found = || ApiError::NotFound(format!("run `{}`", id.escape_debug()));
    let row = sqlx::query(&format!("{SELECT} WHERE r.id = $1"))
        .bind(id)
        .fetch_optional(&app.db)
        .await?
        .ok_or_else(not_found)?;
    let run = Recorded::of(&row)?;
    caller.role_in(&run.team_id).ok_or_else(not_found)?;
    Ok(run)
}

/// The team (its id and name) of a run the caller may read; otherwise not found, exactly as a
/// missing run.
pub(crate) async fn readable_team(
    app: &App,
    caller: &Caller,
    id: &str,
) -> ApiResult<(String, String)> {
    let run = readable(app, caller, id).await?;
    Ok((run.team_id, run.team))
}

/// The engine's directory of the run, once its engine has started it.
pub(crate) fn engine_dir(app: &App, id: &str) -> Option<PathBuf> {
    let state = app.runs_dir().join(id).join("state");
    let engine_run = crucible_engine::state::current(&state)?;
    crucible_engine::state::run_dir(&state, &engine_run).ok()
}

/// `GET /v1/runs`: the runs of the caller's teams, newest first, each with its launch as
/// accepted and its spend so far (from the spend cache: an unchanged log is not read again).
pub async fn list(State(app): State<App>, caller: Caller) -> ApiResult<Json<Value>> {
    let rows = sqlx::query(&format!(
        "{SELECT} JOIN memberships m ON m.team_id = r.team_id WHERE m.user_id = $1 \
         ORDER BY r.id DESC"
    ))
    .bind(&caller.id)
    .fetch_all(&app.db)
    .await?;
    let mut runs = Vec::with_capacity(rows.len());
    for r in &rows {
        let run = Recorded::of(r)?;
        let mut summary = run.summary();
        summary["request"] = run.request.clone();
        summary["spent_usd"] = json!(spent_usd(&app, &run.id));
        runs.push(summary);
    }
    Ok(Json(json!({ "runs": runs })))
}

/// `GET /v1/runs/{id}`: the run as recorded, with what its session log says so far: every
/// settled row, the outcome and verdict once it shut down, and its spend.
pub async fn show(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let run = readable(&app, &caller, &id).await?;
    let dir = engine_dir(&app, &id);
    let lines = match &dir {
        Some(d) => crucible_engine::state::read_log(d),
        None => Vec::new(),
    };
    let rows: Vec<&TaskResult> = lines
        .iter()
        .filter_map(|l| match &l.event {
            Event::TaskResult(r) => Some(r),
            _ => None,
        })
        .collect();
    let shutdown = lines.iter().rev().find_map(|l| match &l.event {
        Event::Shutdown(s) => Some(s),
        _ => None,
    });
    let spent = spent_of(&lines);
    let mut out = run.summary();
    out["request"] = run.request.clone();
    out["dispatches"] = json!(run.dispatches);
    out["live"] = json!(run.live(&app));
    out["running"] = json!(app.executor.running(&id));
    out["engine_run"] = json!(dir
        .as_deref()
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned()));
    out["rows"] = json!(rows);
    out["spent_usd"] = json!(spent);
    out["shutdown"] = json!(shutdown);
    Ok(Json(out))
}

/// What a run spent as its session log says: the shutdown's figure, else (still running, or
/// ended without one) the sum of its settled rows.
fn spent_of(lines: &[crucible_plan::wire::Line]) -> f64 {
    let shutdown = lines.iter().rev().find_map(|l| match &l.event {
        Event::Shutdown(s) => Some(s.spent_usd),
        _ => None,
    });
    shutdown.unwrap_or_else(|| {
        lines
            .iter()
            .map(|l| match &l.event {
                Event::TaskResult(r) => r.cost_usd,
                _ => 0.0,
            })
            .sum()
    })
}

/// What run `id` spent so far (zero before its engine started), read through the app's
/// [`SpendCache`].
pub(crate) fn spent_usd(app: &App, id: &str) -> f64 {
    match engine_dir(app, id) {
        Some(d) => app.spend.spent(&d),
        None => 0.0,
    }
}

/// What each engine run's session log says it spent, kept with the log's length and
/// modification time when it was read: a log that has not changed is not read again. The runs
/// page lists up to a hundred runs every two seconds, and the scheduler sums a series' spend at
/// each firing; a log only grows while its run goes, and not at all after.
#[derive(Default)]
pub struct SpendCache(std::sync::Mutex<HashMap<PathBuf, (u64, SystemTime, f64)>>);

impl SpendCache {
    /// The spend of the engine run whose directory is `dir`.
    pub fn spent(&self, dir: &std::path::Path) -> f64 {
        let log = dir.join("session.jsonl");
        let stamp = std::fs::metadata(&log)
            .ok()
            .map(|m| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
        let Some((len, at)) = stamp else {
            return 0.0;
        };
        if let Some(&(l, t, spent)) = self.0.lock().expect("spend cache").get(&log) {
            if (l, t) == (len, at) {
                return spent;
            }
        }
        // Stamped before the read: a line appended during it changes the stamp, so the next
        // call reads again rather than keep a stale figure.
        let spent = spent_of(&crucible_engine::state::read_log(dir));
        self.0
            .lock()
            .expect("spend cache")
            .insert(log, (len, at, spent));
        spent
    }
}

/// `GET /v1/runs/{id}/log`: the run's session log, as the engine wrote it (JSON lines).
pub async fn session_log(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    readable(&app, &caller, &id).await?;
    let text = match engine_dir(&app, &id) {
        Some(d) => std::fs::read(d.join("session.jsonl")).unwrap_or_default(),
        None => Vec::new(),
    };
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], text))
}

/// `GET /v1/runs/{id}/logs`: every settled row's kept stdout and stderr.
pub async fn task_logs(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    readable(&app, &caller, &id).await?;
    Ok(Json(json!({ "rows": row_logs(&app, &id, None) })))
}

/// `GET /v1/runs/{id}/logs/{task}`: one task's (its instances' and rounds' too).
pub async fn task_logs_of(
    State(app): State<App>,
    caller: Caller,
    Path((id, task)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    readable(&app, &caller, &id).await?;
    let rows = row_logs(&app, &id, Some(&task));
    if rows.is_empty() {
        return Err(ApiError::NotFound(format!(
            "a settled row of task `{}` in this run",
            task.escape_debug()
        )));
    }
    Ok(Json(json!({ "rows": rows })))
}

/// Whether a row settles `task`: the task itself, or one of its instances or rounds
/// (`task[key]`, `task[round-n]`).
fn row_of(row: &str, task: &str) -> bool {
    row == task || row.split_once('[').is_some_and(|(base, _)| base == task)
}

/// The kept log files of the settled rows (of `task`, when named), each row with its files in
/// name order, read as text (the engine bounded them when it kept them).
fn row_logs(app: &App, id: &str, task: Option<&str>) -> Vec<Value> {
    let Some(dir) = engine_dir(app, id) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in crucible_engine::state::read_log(&dir) {
        let Event::TaskResult(row) = line.event else {
            continue;
        };
        if task.is_some_and(|t| !row_of(&row.task, t)) {
            continue;
        }
        let mut files: Vec<PathBuf> = row
            .log
            .as_ref()
            .and_then(|rel| std::fs::read_dir(dir.join(rel)).ok())
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        let files: Vec<Value> = files
            .iter()
            .map(|f| {
                json!({
                    "file": f.file_name().map(|n| n.to_string_lossy().into_owned()),
                    "text": String::from_utf8_lossy(&std::fs::read(f).unwrap_or_default()),
                })
            })
            .collect();
        out.push(json!({ "task": row.task, "status": row.status, "files": files }));
    }
    out
}

/// `POST /v1/runs/{id}/stop` (editors of the run's team): asks the executing run to stop; its
/// attempts are killed and it ends with the outcome `stopped`.
pub async fn stop(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let run = readable(&app, &caller, &id).await?;
    if caller.role_in(&run.team_id) < Some(Role::Editor) {
        return Err(ApiError::Forbidden(format!(
            "stopping a run needs the editor role in team `{}`",
            run.team
        )));
    }
    let stopped = match run.executor.as_str() {
        crate::link::REMOTE => {
            // A run dispatched to a Kubernetes target: its Job goes first, its pods with it.
            crate::dispatch::delete_job(&app, &id).await?;
            crate::link::stop(&app, &caller, &id).await?
        }
        _ => app.executor.stop(&id),
    };
    if !stopped {
        return Err(ApiError::Refused(format!(
            "the run is not running: it is {}",
            run.state
        )));
    }
    Ok(Json(json!({ "id": id, "stopping": true })))
}

/// How often the event stream looks for new session log lines.
const POLL: Duration = Duration::from_millis(100);

/// An event stream's position: the log read so far and the live events to come.
struct Tail {
    app: App,
    id: String,
    log: Option<PathBuf>,
    offset: u64,
    /// A line read only in part, completed by the next read.
    partial: Vec<u8>,
    live: Option<tokio::sync::broadcast::Receiver<crate::executor::LiveEvent>>,
    queued: VecDeque<Bytes>,
    ended: bool,
    /// The run's executor: a remote run is live while it is recorded running.
    executor: String,
}

fn frame(event: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

impl Tail {
    /// Queues every complete line the session log gained, each as an event named by its kind.
    fn read_log(&mut self) {
        if self.log.is_none() {
            self.log = engine_dir(&self.app, &self.id).map(|d| d.join("session.jsonl"));
        }
        let Some(path) = &self.log else {
            return;
        };
        let Ok(mut f) = std::fs::File::open(path) else {
            return;
        };
        let mut fresh = Vec::new();
        if f.seek(SeekFrom::Start(self.offset)).is_err() || f.read_to_end(&mut fresh).is_err() {
            return;
        }
        self.offset += fresh.len() as u64;
        self.partial.extend_from_slice(&fresh);
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..end]);
            let kind = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["kind"].as_str().map(str::to_string))
                .unwrap_or_else(|| "line".into());
            self.queued.push_back(frame(&kind, &text));
        }
    }

    /// Whether the run's engine may still write to its log.
    async fn live(&self) -> bool {
        if self.executor != crate::link::REMOTE {
            return self.app.executor.is_live(&self.id);
        }
        let state: Option<String> = sqlx::query_scalar("SELECT state FROM runs WHERE id = $1")
            .bind(&self.id)
            .fetch_optional(&self.app.db)
            .await
            .ok()
            .flatten();
        // A store that cannot be read is not taken for an end.
        state.is_none_or(|s| s == "running")
    }

    /// The next frame: a log line, a live event, or, once the run has ended and its log is
    /// read to the end, the `end` event with the run's recorded state; `None` after that.
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(f) = self.queued.pop_front() {
                return Some(f);
            }
            if self.ended {
                return None;
            }
            if !self.live().await {
                // The engine is done writing: read the rest, then say how it ended.
                self.read_log();
                self.ended = true;
                let state: Option<(String, Option<String>, Option<String>)> =
                    sqlx::query_as("SELECT state, verdict, reason FROM runs WHERE id = $1")
                        .bind(&self.id)
                        .fetch_optional(&self.app.db)
                        .await
                        .ok()
                        .flatten();
                let (state, verdict, reason) = state.unwrap_or_default();
                let data = json!({ "state": state, "verdict": verdict, "reason": reason });
                self.queued.push_back(frame("end", &data.to_string()));
                continue;
            }
            self.read_log();
            if !self.queued.is_empty() {
                continue;
            }
            let got = match &mut self.live {
                Some(rx) => tokio::select! {
                    got = rx.recv() => Some(got),
                    _ = tokio::time::sleep(POLL) => None,
                },
                None => {
                    tokio::time::sleep(POLL).await;
                    None
                }
            };
            match got {
                Some(Ok((event, data))) => self.queued.push_back(frame(event, &data)),
                // Closed: the run ended, which the next turn finds.
                Some(Err(RecvError::Closed)) => self.live = None,
                // Lagged: the log still has every row.
                Some(Err(RecvError::Lagged(_))) | None => {}
            }
        }
    }
}

/// `GET /v1/runs/{id}/events`: the run's events as server-sent events, only to a caller that
/// may read the run: every session log line from the start (named by its kind: `start`,
/// `plan_admitted`, `task_result`, `resumed`, `shutdown`, …), `task_started` as tasks start, and
/// a last `end` event with the state the run was recorded in.
pub async fn events(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let run = readable(&app, &caller, &id).await?;
    let tail = Tail {
        executor: run.executor,
        live: app.executor.subscribe(&id),
        app,
        id,
        log: None,
        offset: 0,
        partial: Vec::new(),
        queued: VecDeque::new(),
        ended: false,
    };
    let stream = futures_util::stream::unfold(tail, |mut tail| async move {
        let next = tail.next().await?;
        Some((Ok::<_, std::convert::Infallible>(next), tail))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::vocab::{Outcome, Verdict};
    use crucible_plan::wire::{encode, Shutdown};

    fn shutdown_line(spent_usd: f64) -> String {
        let event = Event::Shutdown(Shutdown {
            outcome: Outcome::Finished,
            ceiling: None,
            reason: None,
            verdict: Verdict::Valid,
            spent_usd,
            elapsed_secs: 1.0,
        });
        encode(&event, "2026-12-01T00:00:00Z") + "\n"
    }

    // Issue 14: the runs page does not re-read an unchanged log. Rewritten with the same length
    // and modification time, the log is not read again (the cached figure stands); once it
    // grows, it is.
    #[test]
    fn an_unchanged_session_log_is_not_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("session.jsonl");
        let cache = SpendCache::default();
        assert_eq!(cache.spent(dir.path()), 0.0, "no log yet");
        std::fs::write(&log, shutdown_line(1.25)).unwrap();
        let at = std::fs::metadata(&log).unwrap().modified().unwrap();
        assert_eq!(cache.spent(dir.path()), 1.25);
        let same_length = shutdown_line(9.75);
        assert_eq!(same_length.len(), shutdown_line(1.25).len());
        std::fs::write(&log, &same_length).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&log)
            .unwrap()
            .set_modified(at)
            .unwrap();
        assert_eq!(cache.spent(dir.path()), 1.25, "read again though unchanged");
        std::fs::write(&log, same_length.clone() + &shutdown_line(9.75)).unwrap();
        assert_eq!(cache.spent(dir.path()), 9.75, "a grown log is read");
    }
}

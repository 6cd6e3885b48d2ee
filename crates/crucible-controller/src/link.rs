//! Engines outside the controller (issue 14's remote engine, issue 17's Kubernetes Jobs): a run
//! recorded with the executor `remote` is executed by an engine elsewhere, which reaches this
//! controller only by requests it initiates, authenticated by the run's token. Whoever
//! dispatches such a run records it (`POST /v1/remote-runs`, or a dispatcher in this crate
//! through [`record_remote_run`]) and mints its token ([`mint_run_token`]), which the engine is
//! handed as `CRUCIBLE_RUN_TOKEN` with `CRUCIBLE_CONTROLLER_URL` and `CRUCIBLE_CONTROLLER_RUN`.
//!
//! A run token is random, shown once, stored only as its SHA-256 (as an API token is), and
//! scoped to its one run: it is no API token (it reads no pack, run or team), it opens, polls
//! and withdraws only its run's decision requests and reports only its run's session log, and
//! it is refused once the run is recorded ended.

use crate::db::{new_id, now_ms};
use crate::error::{ApiError, ApiResult};
use crate::identity::{bearer, hash_token, new_token, Caller};
use crate::launches::{candidates, LaunchRequest};
use crate::packs::editable_team;
use crate::{audit, App};
use anyhow::Context;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::Json;
use serde_json::{json, Value};
use sqlx::AnyPool;

/// The `runs.executor` of a run this controller executes on its embedded engine.
pub const LOCAL: &str = "local";
/// The `runs.executor` of a run an engine elsewhere executes: never dispatched nor resumed here.
pub const REMOTE: &str = "remote";

/// The environment a remote engine is given (docs/controller.md), as the engine reads it.
pub use crucible_engine::link::{CONTROLLER_RUN_ENV, CONTROLLER_URL_ENV, RUN_TOKEN_ENV};

/// Mints a token for run `run_id`, which must be recorded `running` with the executor `remote`
/// (a local run's engine needs none; an ended run's token would be dead). Only its SHA-256 is
/// stored; the token is returned once, for the dispatcher to hand to the run's engine. A run may
/// hold several (each dispatch of a rescheduled pod may mint its own); all die with the run.
pub async fn mint_run_token(db: &AnyPool, run_id: &str) -> anyhow::Result<String> {
    let executor: Option<(String, String)> =
        sqlx::query_as("SELECT executor, state FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(db)
            .await?;
    match executor {
        Some((e, s)) if e == REMOTE && s == "running" => {}
        Some((e, s)) => anyhow::bail!(
            "run {run_id} is {s} with the executor {e}: a run token is minted only for a running remote run"
        ),
        None => anyhow::bail!("run {run_id} is not recorded"),
    }
    let token = new_token()?;
    sqlx::query("INSERT INTO run_tokens (hash, run_id, created_at) VALUES ($1, $2, $3)")
        .bind(hash_token(&token))
        .bind(run_id)
        .bind(now_ms())
        .execute(db)
        .await
        .with_context(|| format!("recording a token for run {run_id}"))?;
    Ok(token)
}

/// What a dispatcher records for a remote run.
pub struct RemoteRun<'a> {
    pub team_id: &'a str,
    /// The subject the run is launched by (its `launched_by`).
    pub subject_id: &'a str,
    /// The pack digest the run is delivered (kept stored while the run records it).
    pub digest: &'a str,
    /// How the launch named it (`pack`, `draft:NAME version N`).
    pub source: &'a str,
    /// The launch as accepted, shown with the run.
    pub request: &'a LaunchRequest,
}

/// Records a remote run, `running`, with its audit row, and mints its token: the run's id and
/// the token. The run is shown through the run endpoints as any run is; what it did comes from
/// the session log its engine reports.
pub async fn record_remote_run(
    db: &AnyPool,
    run: &RemoteRun<'_>,
) -> anyhow::Result<(String, String)> {
    let id = new_id();
    let mut tx = db.begin().await?;
    sqlx::query(
        "INSERT INTO runs (id, team_id, subject_id, digest, source, request, state, dispatches, \
         created_at, executor) VALUES ($1, $2, $3, $4, $5, $6, 'running', 1, $7, $8)",
    )
    .bind(&id)
    .bind(run.team_id)
    .bind(run.subject_id)
    .bind(run.digest)
    .bind(run.source)
    .bind(serde_json::to_string(run.request)?)
    .bind(now_ms())
    .bind(REMOTE)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        run.subject_id,
        "run.remote",
        &format!("run:{id}"),
        &format!("{} ({})", run.digest, run.source),
    )
    .await?;
    tx.commit().await?;
    let token = mint_run_token(db, &id).await?;
    Ok((id, token))
}

/// `POST /v1/remote-runs` (editors): records a run an engine outside the controller executes
/// (the launch's `pack` one of the team's digests or `draft:NAME`, its newest version), and
/// answers its id, its token (once) and the environment its engine is given. Nothing is
/// compiled or delivered here: the engine that runs it admits it as `plan run` does.
pub async fn create(
    State(app): State<App>,
    caller: Caller,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let req = LaunchRequest::parse(&body, "launch")?;
    let (_, team_id) = editable_team(&caller, req.team.clone(), "recording a remote run")?;
    req.compile_params()?;
    req.max_secs()?;
    let (digest, source) = candidates(&app, &team_id, &req.pack, None)
        .await?
        .into_iter()
        .next()
        .expect("candidates are never empty");
    let (id, token) = record_remote_run(
        &app.db,
        &RemoteRun {
            team_id: &team_id,
            subject_id: &caller.id,
            digest: &digest,
            source: &source,
            request: &req,
        },
    )
    .await?;
    Ok(Json(json!({
        "id": id,
        "digest": digest,
        "source": source,
        "token": token,
        "env": {
            CONTROLLER_URL_ENV: app.base_url.as_ref(),
            CONTROLLER_RUN_ENV: id,
            RUN_TOKEN_ENV: token,
        },
    })))
}

/// The engine of a remote run, authenticated by its run token: only while the run is recorded
/// `running`. The token of a run recorded `stopped` is answered 410 `{"error", "stopped": true}`,
/// which tells its engine to stop as on SIGTERM; any other bearer (an API token, another run's
/// token, a dead one) is refused as unauthenticated.
#[derive(Clone, Debug)]
pub struct RunCaller {
    /// The controller's id of the run.
    pub run: String,
    pub team_id: String,
}

impl RunCaller {
    /// Refuses a request about a run other than the token's own.
    pub fn only(&self, run: &str) -> ApiResult<()> {
        if run == self.run {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "this run token is scoped to run {}, not to run `{}`",
                self.run,
                run.escape_debug()
            )))
        }
    }
}

impl FromRequestParts<App> for RunCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> ApiResult<RunCaller> {
        let token = bearer(parts)?;
        let row: Option<(String, String)> = sqlx::query_as(
            "SELECT r.id, r.team_id FROM run_tokens t JOIN runs r ON r.id = t.run_id \
             WHERE t.hash = $1 AND r.state = 'running' AND r.executor = $2",
        )
        .bind(hash_token(token.trim()))
        .bind(REMOTE)
        .fetch_optional(&app.db)
        .await?;
        if let Some((run, team_id)) = row {
            return Ok(RunCaller { run, team_id });
        }
        // The token of a run recorded stopped: its engine is told so, and stops.
        let stopped: Option<String> = sqlx::query_scalar(
            "SELECT r.id FROM run_tokens t JOIN runs r ON r.id = t.run_id \
             WHERE t.hash = $1 AND r.executor = $2 AND r.state <> 'running' AND r.outcome = 'stopped'",
        )
        .bind(hash_token(token.trim()))
        .bind(REMOTE)
        .fetch_optional(&app.db)
        .await?;
        Err(match stopped {
            Some(run) => ApiError::Stopped(format!(
                "run {run} was stopped on the controller: stop the engine"
            )),
            None => ApiError::Unauthenticated,
        })
    }
}

/// `GET /v1/runs/{id}/report` (the run's token): how many session log lines of the run the
/// controller holds, which the engine reports from.
pub async fn acknowledged(
    State(app): State<App>,
    engine: RunCaller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    engine.only(&id)?;
    let (engine_run, lines) = held(&app, &id);
    Ok(Json(json!({
        "run": id,
        "engine_run": engine_run,
        "acknowledged": lines,
    })))
}

/// The engine run whose log the controller holds for run `id`, and how many complete lines.
fn held(app: &App, id: &str) -> (Option<String>, u64) {
    match crate::runs::engine_dir(app, id) {
        Some(dir) => {
            let lines = std::fs::File::open(dir.join("session.jsonl"))
                .and_then(|f| held_lines(&dir.join("session.jsonl"), &f))
                .map_or(0, |h| h.lines);
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            (name, lines)
        }
        None => (None, 0),
    }
}

/// Stops a remote run on the controller (`POST /v1/runs/{id}/stop` on one, editors): it is
/// recorded ended (`stopped`), so its engine can open no more decisions nor report more lines,
/// and its next report or decisions exchange (the reporter looks at least every few seconds) is
/// answered "stopped", on which the engine stops as on SIGTERM. A dispatcher may also end it
/// (a Job is deleted).
pub(crate) async fn stop(app: &App, caller: &Caller, id: &str) -> ApiResult<bool> {
    let done = sqlx::query(
        "UPDATE runs SET state = 'finished', outcome = 'stopped', reason = $1, ended_at = $2 \
         WHERE id = $3 AND executor = $4 AND state = 'running'",
    )
    .bind("stopped on the controller")
    .bind(now_ms())
    .bind(id)
    .bind(REMOTE)
    .execute(&app.db)
    .await?;
    if done.rows_affected() == 1 {
        crate::decisions::withdraw_all(&app.db, id).await?;
        let mut tx = app.db.begin().await?;
        audit::record(
            &mut tx,
            &caller.id,
            "run.stop",
            &format!("run:{id}"),
            "remote",
        )
        .await?;
        tx.commit().await?;
    }
    Ok(done.rows_affected() == 1)
}

/// The most lines one report may carry.
const MAX_REPORT_LINES: usize = 1000;
/// The most bytes one report may carry.
const MAX_REPORT_BYTES: usize = 8 << 20;

/// Held while a report is appended: one run's lines never interleave, and two engines (a pod
/// and its replacement) cannot both append at one position.
static APPENDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A report as the engine sends it: lines of its session log from line `from` (0-based).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Report {
    engine_run: String,
    from: u64,
    lines: Vec<String>,
}

/// `POST /v1/runs/{id}/report` (the run's token): the engine reports lines of its session log
/// from line `from`. Each line is decoded by the session log's own decoder before anything is
/// kept; lines the controller already holds (a report whose answer was lost, sent again) must
/// be the same and are not kept twice; a report starting past what is held is refused, naming
/// it. The lines are kept where a local run's engine writes its log, so every run endpoint reads
/// a remote run as it reads a local one; once a shutdown line is held, the run is recorded ended
/// from it, as a local run is from its engine's summary. Answers `{run, engine_run,
/// acknowledged}`.
pub async fn report(
    State(app): State<App>,
    engine: RunCaller,
    Path(id): Path<String>,
    body: axum::body::Body,
) -> ApiResult<Json<Value>> {
    engine.only(&id)?;
    let bytes = axum::body::to_bytes(body, MAX_REPORT_BYTES)
        .await
        .map_err(|e| {
            ApiError::TooLarge(format!(
                "the report (at most {MAX_REPORT_BYTES} bytes): {e}"
            ))
        })?;
    let report: Report = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("the report is not well-formed: {e}")))?;
    if report.lines.len() > MAX_REPORT_LINES {
        return Err(ApiError::TooLarge(format!(
            "a report carries at most {MAX_REPORT_LINES} lines"
        )));
    }
    if !crucible_engine::state::is_run_id(&report.engine_run) {
        return Err(ApiError::BadRequest("`engine_run` is not a run id".into()));
    }
    if report.lines.iter().any(|l| l.contains(['\n', '\r'])) {
        return Err(ApiError::BadRequest(
            "a reported line holds a line break".into(),
        ));
    }
    let mut text = report.lines.join("\n");
    text.push('\n');
    let decoded = crucible_plan::wire::decode_log(if report.lines.is_empty() { "" } else { &text })
        .map_err(|e| {
            ApiError::Refused(format!("a reported line is not a session log line: {e}"))
        })?;
    let shutdown = decoded.iter().rev().find_map(|l| match &l.event {
        crucible_plan::wire::Event::Shutdown(s) => Some(s.clone()),
        _ => None,
    });
    let state = app.runs_dir().join(&id).join("state");
    let acknowledged = {
        let _held = APPENDING.lock().await;
        let engine_run = report.engine_run.clone();
        tokio::task::spawn_blocking(move || append(&state, &engine_run, report.from, &report.lines))
            .await
            .map_err(anyhow::Error::from)??
    };
    if let Some(s) = &shutdown {
        crate::executor::finish(&app, &id, &crate::executor::Ended::from(s)).await;
    }
    Ok(Json(json!({
        "run": id,
        "engine_run": report.engine_run,
        "acknowledged": acknowledged,
    })))
}

/// Appends `lines` (line `from` on) to the session log of engine run `engine_run` under the
/// run's `state`, skipping those already held (which must be identical), and syncs it: the
/// number of lines held after. Only one engine run's log is held per run.
fn append(
    state: &std::path::Path,
    engine_run: &str,
    from: u64,
    lines: &[String],
) -> ApiResult<u64> {
    use std::io::{Seek, Write};
    if let Some(held) = crucible_engine::state::current(state) {
        if held != engine_run {
            return Err(ApiError::Refused(format!(
                "the controller holds the log of engine run {held}, not of {engine_run}"
            )));
        }
    }
    let dir =
        crucible_engine::state::create_run_dir(state, engine_run).map_err(anyhow::Error::from)?;
    let path = dir.join("session.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(anyhow::Error::from)?;
    let Held {
        lines: count,
        bytes,
    } = held_lines(&path, &f).map_err(anyhow::Error::from)?;
    // A line a controller that died mid-append left unfinished is not held.
    if f.metadata().map_err(anyhow::Error::from)?.len() != bytes {
        f.set_len(bytes).map_err(anyhow::Error::from)?;
        remember(
            &path,
            Held {
                lines: count,
                bytes,
            },
        );
    }
    if from > count {
        return Err(ApiError::Refused(format!(
            "the controller holds {count} lines of the log: report from line {count}"
        )));
    }
    let overlap = ((count - from) as usize).min(lines.len());
    if overlap > 0 {
        let held = last_lines(&mut f, bytes, count - from).map_err(anyhow::Error::from)?;
        for (i, line) in lines[..overlap].iter().enumerate() {
            if held[i] != line.as_bytes() {
                return Err(ApiError::Refused(format!(
                    "line {} differs from the one the controller holds",
                    from as usize + i
                )));
            }
        }
    }
    let fresh = &lines[overlap..];
    if !fresh.is_empty() {
        f.seek(std::io::SeekFrom::Start(bytes))
            .map_err(anyhow::Error::from)?;
        let mut out = Vec::new();
        for l in fresh {
            out.extend_from_slice(l.as_bytes());
            out.push(b'\n');
        }
        f.write_all(&out).map_err(anyhow::Error::from)?;
        f.sync_all().map_err(anyhow::Error::from)?;
        remember(
            &path,
            Held {
                lines: count + fresh.len() as u64,
                bytes: bytes + out.len() as u64,
            },
        );
    }
    if crucible_engine::state::current(state).is_none() {
        crucible_engine::state::write_current(state, engine_run).map_err(anyhow::Error::from)?;
    }
    Ok(count + fresh.len() as u64)
}

/// How much of a run's reported log the controller holds: complete lines, and the bytes they
/// take (a half-written line after them is not held).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Held {
    lines: u64,
    bytes: u64,
}

/// What each reported log (by its path) was last known to hold, so a report costs in proportion
/// to its own lines, not to the log: trusted only while the file's length is what it recorded,
/// so anything else (a restart, a half-written line, a failed write) counts the file afresh.
static KNOWN: std::sync::Mutex<Option<std::collections::HashMap<std::path::PathBuf, Held>>> =
    std::sync::Mutex::new(None);

fn remember(path: &std::path::Path, held: Held) {
    KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(Default::default)
        .insert(path.to_path_buf(), held);
}

/// What the log at `path` (open as `f`) holds: as last known when its length agrees, else
/// counted from the file, once.
fn held_lines(path: &std::path::Path, f: &std::fs::File) -> std::io::Result<Held> {
    let len = f.metadata()?.len();
    let known = KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(path).copied());
    if let Some(h) = known.filter(|h| h.bytes == len) {
        return Ok(h);
    }
    let mut r = std::io::BufReader::new(f);
    let (mut lines, mut bytes, mut at) = (0u64, 0u64, 0u64);
    loop {
        let buf = std::io::BufRead::fill_buf(&mut r)?;
        if buf.is_empty() {
            break;
        }
        for (i, b) in buf.iter().enumerate() {
            if *b == b'\n' {
                lines += 1;
                bytes = at + i as u64 + 1;
            }
        }
        let n = buf.len();
        at += n as u64;
        std::io::BufRead::consume(&mut r, n);
    }
    let held = Held { lines, bytes };
    if bytes == len {
        remember(path, held);
    }
    Ok(held)
}

/// The last `n` complete lines of the first `end` bytes of `f` (which end in a line break),
/// read backwards from `end`: in proportion to those lines, not to the file.
fn last_lines(f: &mut std::fs::File, end: u64, n: u64) -> std::io::Result<Vec<Vec<u8>>> {
    use std::io::{Read, Seek};
    const CHUNK: u64 = 64 << 10;
    let mut tail: Vec<u8> = Vec::new();
    let mut at = end;
    // The lines' start: after the (n+1)-th line break from the end, or the file's start.
    while at > 0 && tail.iter().filter(|b| **b == b'\n').count() as u64 <= n {
        let take = CHUNK.min(at);
        at -= take;
        let mut chunk = vec![0u8; take as usize];
        f.seek(std::io::SeekFrom::Start(at))?;
        f.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&tail);
        tail = chunk;
    }
    let mut lines: Vec<Vec<u8>> = tail.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    lines.pop(); // after the last line break
    let skip = lines.len().saturating_sub(n as usize);
    Ok(lines.split_off(skip))
}

/// At start: a remote run whose held log ends in a shutdown and that is still recorded
/// `running` (the controller died between keeping the line and recording the end) is recorded
/// ended from it.
pub async fn settle_all(app: &App) -> anyhow::Result<()> {
    let running: Vec<String> =
        sqlx::query_scalar("SELECT id FROM runs WHERE state = 'running' AND executor = $1")
            .bind(REMOTE)
            .fetch_all(&app.db)
            .await?;
    for id in running {
        let Some(dir) = crate::runs::engine_dir(app, &id) else {
            continue;
        };
        let shutdown = crucible_engine::state::read_log(&dir)
            .into_iter()
            .rev()
            .find_map(|l| match l.event {
                crucible_plan::wire::Event::Shutdown(s) => Some(s),
                _ => None,
            });
        if let Some(s) = shutdown {
            crate::executor::finish(app, &id, &crate::executor::Ended::from(&s)).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "0a1b2c3d-0000-4000-8000-000000000001";

    fn log(state: &std::path::Path) -> String {
        std::fs::read_to_string(state.join("runs").join(RUN).join("session.jsonl")).unwrap()
    }

    fn forget() {
        *KNOWN.lock().unwrap() = None;
    }

    // A log of many batches: each appended where the last ended, lines sent again acknowledged
    // and not kept twice (a differing one refused), and the same after the controller forgot
    // what it knew (a restart) or a half-written line was left behind.
    #[test]
    fn a_log_of_many_batches_is_appended_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let line = |i: usize| format!("{{\"line\":{i}}}");
        let mut expected = String::new();
        let mut at = 0u64;
        for batch in 0..300 {
            let size = 1 + batch % 7;
            let lines: Vec<String> = (at as usize..at as usize + size).map(line).collect();
            // Every fifth batch repeats the batch before it in front (its answer was lost).
            let (from, sent) = if batch % 5 == 4 && at >= 3 {
                let again: Vec<String> = (at as usize - 3..at as usize).map(line).collect();
                (at - 3, [again, lines.clone()].concat())
            } else {
                (at, lines.clone())
            };
            if batch == 150 {
                forget();
            }
            let n = append(state, RUN, from, &sent).unwrap();
            for l in &lines {
                expected.push_str(l);
                expected.push('\n');
            }
            at += size as u64;
            assert_eq!(n, at, "batch {batch}");
        }
        assert_eq!(log(state), expected);

        // A held line sent different, or a report past what is held: refused, nothing kept.
        let err = append(state, RUN, at - 2, &[line(at as usize - 2), "{}".into()]).unwrap_err();
        assert!(
            err.to_string().contains(&format!("line {}", at - 1)),
            "{err}"
        );
        let err = append(state, RUN, at + 1, &[line(0)]).unwrap_err();
        assert!(
            err.to_string().contains(&format!("report from line {at}")),
            "{err}"
        );
        assert_eq!(log(state), expected);

        // A half-written line left by a controller that died is not held, and is cut off.
        let path = state.join("runs").join(RUN).join("session.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"{\"half").unwrap();
        forget();
        assert_eq!(append(state, RUN, at, &[]).unwrap(), at);
        assert_eq!(
            append(state, RUN, at, &[line(at as usize)]).unwrap(),
            at + 1
        );
        expected.push_str(&line(at as usize));
        expected.push('\n');
        assert_eq!(log(state), expected);

        // Another engine run's log is refused.
        let other = "0a1b2c3d-0000-4000-8000-000000000002";
        assert!(append(state, other, 0, &[line(0)]).is_err());
    }

    #[test]
    fn the_last_lines_are_read_back_from_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let long = "x".repeat(100_000);
        let text = format!("a\n{long}\nb\nc\n");
        std::fs::write(&path, &text).unwrap();
        let mut f = std::fs::File::open(&path).unwrap();
        let end = text.len() as u64;
        let got = |f: &mut std::fs::File, n| last_lines(f, end, n).unwrap();
        assert_eq!(got(&mut f, 1), vec![b"c".to_vec()]);
        assert_eq!(
            got(&mut f, 3),
            vec![long.as_bytes().to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        assert_eq!(got(&mut f, 4).len(), 4);
        assert_eq!(got(&mut f, 4)[0], b"a".to_vec());
    }
}

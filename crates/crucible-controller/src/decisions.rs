//! Human decisions on the controller (issue 14; RFC-0002:C-HUMAN-DECISION, C-DECISION-EVIDENCE):
//! every run it executes has the `human` capability, and its engine opens and polls its requests
//! in this store ([`StoreDecider`]): the engine initiates every exchange, the store never reaches
//! into the run. A person answers through the API: the open requests they may answer
//! (`GET /v1/decisions`), one request with its evidence, and the answer, accepted only from a
//! subject with the approver role (or admin) in the run's team, only while the request is open,
//! only naming its evidence digest and giving each question exactly its options; the first
//! accepted answer is final, an identical repeat by the same subject is acknowledged without
//! effect, anything else is refused with the reason.

use crate::db::now_ms;
use crate::error::{ApiError, ApiResult};
use crate::identity::{Caller, Role};
use crate::link::RunCaller;
use crate::{audit, App};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use crucible_engine::decision::{self, Answer, DecideError, Decider, Polled, Request, State as Q};
use serde::Deserialize;
use serde_json::{json, Value};
use sqlx::{AnyPool, Row};
use std::time::{Duration, SystemTime};

/// How often a run's engine looks at its open request.
const POLL: Duration = Duration::from_millis(250);

/// A run's way to its requests in this store.
pub struct StoreDecider {
    db: AnyPool,
    /// The controller's id of the run.
    run: String,
    runtime: tokio::runtime::Handle,
}

impl StoreDecider {
    pub fn new(db: AnyPool, run: String) -> StoreDecider {
        StoreDecider {
            db,
            run,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    fn polled(&self, route: &str) -> Result<Polled, DecideError> {
        let found = self
            .runtime
            .block_on(fetch(&self.db, &self.run, route))
            .map_err(|e| DecideError::Transport(format!("the store cannot be read: {e}")))?;
        let held = found.ok_or_else(|| {
            DecideError::Refused(format!("the store holds no request for route `{route}`"))
        })?;
        Ok(held.polled())
    }
}

impl Decider for StoreDecider {
    fn via(&self) -> &'static str {
        "controller"
    }

    fn describe(&self) -> String {
        "this controller's approvers".into()
    }

    /// Records the request unless the run and route already have one, then reads it back: an
    /// open for a pair that has one returns that one, its expiry and any answer untouched.
    fn open(&self, req: &Request) -> Result<Polled, DecideError> {
        match self
            .runtime
            .block_on(open_request(&self.db, &self.run, req))
        {
            Ok((held, _)) => Ok(held.polled()),
            Err(Opening::Bad(why)) => Err(DecideError::Refused(why)),
            Err(Opening::Store(e)) => Err(DecideError::Transport(format!(
                "the store cannot be written: {e}"
            ))),
        }
    }

    fn poll(&self, req: &Request, until: SystemTime) -> Result<Polled, DecideError> {
        let wait = until
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .min(POLL);
        std::thread::sleep(wait);
        self.polled(&req.route)
    }

    /// A stop withdraws the request, so every later answer is refused.
    fn close(&self, req: &Request, withdraw: bool) {
        if withdraw {
            let _ = self
                .runtime
                .block_on(withdraw_request(&self.db, &self.run, &req.route));
        }
    }
}

/// Why a request was not opened.
enum Opening {
    /// The request itself is refused.
    Bad(String),
    Store(sqlx::Error),
}

impl From<sqlx::Error> for Opening {
    fn from(e: sqlx::Error) -> Opening {
        Opening::Store(e)
    }
}

/// The one way a run's request is opened, for a run executed here ([`StoreDecider`]) and for
/// one executed elsewhere (`POST /v1/decisions`): recorded unless the run and route already have
/// one, then read back with whether it is new. An open for a pair that has one returns that one
/// unchanged (its digest, expiry from the first open, state and answer).
async fn open_request(db: &AnyPool, run: &str, req: &Request) -> Result<(Held, bool), Opening> {
    let expires = decision::parse_time(&req.expires_at)
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .ok_or_else(|| Opening::Bad("the request's expiry does not parse".into()))?;
    let body = serde_json::to_string(req).expect("a request serializes");
    let done = sqlx::query(
        "INSERT INTO decisions (run_id, route, request, digest, expires_ms, state, \
         created_at) VALUES ($1, $2, $3, $4, $5, 'open', $6) \
         ON CONFLICT (run_id, route) DO NOTHING",
    )
    .bind(run)
    .bind(&req.route)
    .bind(body)
    .bind(&req.digest)
    .bind(expires)
    .bind(now_ms())
    .execute(db)
    .await?;
    let held = fetch(db, run, &req.route).await?.ok_or_else(|| {
        Opening::Bad(format!(
            "the store holds no request for route `{}`",
            req.route.escape_debug()
        ))
    })?;
    Ok((held, done.rows_affected() == 1))
}

/// Withdraws the run's open request for `route` (its run stopped): every later answer is refused.
async fn withdraw_request(db: &AnyPool, run: &str, route: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE decisions SET state = 'withdrawn' \
         WHERE run_id = $1 AND route = $2 AND state = 'open'",
    )
    .bind(run)
    .bind(route)
    .execute(db)
    .await?;
    Ok(())
}

/// One request as stored.
struct Held {
    run_id: String,
    request: Request,
    expires_ms: i64,
    state: String,
    answer: Option<Answer>,
    answered_by: Option<String>,
}

impl Held {
    fn of(r: &sqlx::any::AnyRow) -> Result<Held, sqlx::Error> {
        let text = |c: &str| r.try_get::<String, _>(c);
        let decode = |e: serde_json::Error| sqlx::Error::Decode(Box::new(e));
        let answer: Option<String> = r.try_get("answer")?;
        Ok(Held {
            run_id: text("run_id")?,
            request: serde_json::from_str(&text("request")?).map_err(decode)?,
            expires_ms: r.try_get("expires_ms")?,
            state: text("state")?,
            answer: match answer {
                Some(a) => Some(serde_json::from_str(&a).map_err(decode)?),
                None => None,
            },
            answered_by: r.try_get("answered_by")?,
        })
    }

    /// `open`, `answered`, `withdrawn`, or `expired` for an open request past its expiry.
    fn state(&self) -> &str {
        match self.state.as_str() {
            "open" if now_ms() >= self.expires_ms => "expired",
            s => s,
        }
    }

    fn polled(&self) -> Polled {
        let state = match (self.state(), &self.answer) {
            ("answered", Some(a)) => Q::Answered(a.clone()),
            ("expired", _) => Q::Expired,
            ("withdrawn", _) => Q::Withdrawn,
            _ => Q::Open,
        };
        Polled {
            state,
            digest: self.request.digest.clone(),
            expires_at: self.request.expires_at.clone(),
        }
    }

    /// The request's record as the polling protocol answers it (docs/decisions.md): the run is
    /// the controller's id of it.
    fn record(&self) -> Value {
        json!({
            "run": self.run_id,
            "route": self.request.route,
            "digest": self.request.digest,
            "opened_at": self.request.opened_at,
            "expires_at": self.request.expires_at,
            "state": self.state(),
            "answer": self.answer,
        })
    }

    /// The request as the API shows it: its questions and evidence, its state and answer.
    fn to_value(&self) -> Value {
        json!({
            "run": self.run_id,
            "route": self.request.route,
            "questions": self.request.questions,
            "evidence": self.request.evidence,
            "digest": self.request.digest,
            "opened_at": self.request.opened_at,
            "expires_at": self.request.expires_at,
            "max_note_bytes": self.request.max_note_bytes,
            "state": self.state(),
            "answer": self.answer,
        })
    }
}

const SELECT: &str = "SELECT run_id, request, expires_ms, state, answer, answered_by \
     FROM decisions";

async fn fetch(db: &AnyPool, run: &str, route: &str) -> Result<Option<Held>, sqlx::Error> {
    let row = sqlx::query(&format!("{SELECT} WHERE run_id = $1 AND route = $2"))
        .bind(run)
        .bind(route)
        .fetch_optional(db)
        .await?;
    row.as_ref().map(Held::of).transpose()
}

/// Each request of a run, by route, with its state (`open`, `answered`, `withdrawn`, or
/// `expired`), oldest first: for the web UI's run page, which has checked the run is readable.
pub(crate) async fn of_run(db: &AnyPool, run: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "{SELECT} WHERE run_id = $1 ORDER BY created_at, route"
    ))
    .bind(run)
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| Held::of(r).map(|h| (h.request.route.clone(), h.state().to_string())))
        .collect()
}

/// The request of a run the caller may read; otherwise not found, exactly as a missing one.
async fn readable(
    app: &App,
    caller: &Caller,
    run: &str,
    route: &str,
) -> ApiResult<(Held, (String, String))> {
    let team = crate::runs::readable_team(app, caller, run).await?;
    let held = fetch(&app.db, run, route).await?.ok_or_else(|| {
        ApiError::NotFound(format!(
            "a decision request for route `{}`",
            route.escape_debug()
        ))
    })?;
    Ok((held, team))
}

/// `GET /v1/decisions`: the open requests the caller may answer (approver or admin in the run's
/// team), oldest first.
pub async fn list(State(app): State<App>, caller: Caller) -> ApiResult<Json<Value>> {
    let rows = sqlx::query(
        "SELECT d.run_id, d.request, d.expires_ms, d.state, d.answer, d.answered_by \
         FROM decisions d JOIN runs r ON r.id = d.run_id \
         JOIN memberships m ON m.team_id = r.team_id \
         WHERE m.user_id = $1 AND m.role IN ('approver', 'admin') AND d.state = 'open' \
         AND d.expires_ms > $2 ORDER BY d.created_at, d.route",
    )
    .bind(&caller.id)
    .bind(now_ms())
    .fetch_all(&app.db)
    .await?;
    let mut open = Vec::with_capacity(rows.len());
    for r in &rows {
        let held = Held::of(r)?;
        open.push(json!({
            "run": held.run_id,
            "route": held.request.route,
            "digest": held.request.digest,
            "expires_at": held.request.expires_at,
            "questions": held.request.questions,
        }));
    }
    Ok(Json(json!({ "decisions": open })))
}

/// `GET /v1/runs/{id}/decisions/{route}`: one request, its evidence, state and answer, to anyone
/// who may read the run.
pub async fn show(
    State(app): State<App>,
    caller: Caller,
    Path((run, route)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let (held, _) = readable(&app, &caller, &run, &route).await?;
    Ok(Json(held.to_value()))
}

/// An answer as a person posts it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Posted {
    pub digest: String,
    pub answers: std::collections::BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub note: Option<String>,
}

/// `POST /v1/runs/{id}/decisions/{route}/answer`: `{"digest", "answers", "note"}`.
pub async fn answer(
    State(app): State<App>,
    caller: Caller,
    Path((run, route)): Path<(String, String)>,
    Json(posted): Json<Posted>,
) -> ApiResult<Json<Value>> {
    let (held, (team_id, team)) = readable(&app, &caller, &run, &route).await?;
    if caller.role_in(&team_id) < Some(Role::Approver) {
        return Err(ApiError::Forbidden(format!(
            "answering a decision needs the approver role in team `{team}`"
        )));
    }
    let given = Answer {
        principal: format!("user:{}", caller.name),
        time: decision::rfc3339(SystemTime::now()),
        digest: posted.digest,
        note: posted.note,
        answers: posted.answers,
    };
    match held.state() {
        "answered" => {
            let first = held
                .answer
                .as_ref()
                .expect("an answered request has its answer");
            let same = held.answered_by.as_deref() == Some(caller.id.as_str())
                && first.digest == given.digest
                && first.answers == given.answers
                && first.note == given.note;
            return match same {
                true => Ok(Json(
                    json!({ "acknowledged": true, "request": held.to_value() }),
                )),
                false => Err(ApiError::Refused(
                    "the request was already answered: the first accepted answer is final".into(),
                )),
            };
        }
        "withdrawn" => {
            return Err(ApiError::Refused(
                "the request was withdrawn: its run stopped".into(),
            ))
        }
        "expired" => {
            return Err(ApiError::Refused(format!(
                "the request expired at {}",
                held.request.expires_at
            )))
        }
        _ => {}
    }
    decision::check_answer(&held.request, &held.request.digest, &given)
        .map_err(ApiError::Refused)?;
    let mut tx = app.db.begin().await?;
    let done = sqlx::query(
        "UPDATE decisions SET state = 'answered', answer = $1, answered_by = $2 \
         WHERE run_id = $3 AND route = $4 AND state = 'open' AND expires_ms > $5",
    )
    .bind(serde_json::to_string(&given).expect("an answer serializes"))
    .bind(&caller.id)
    .bind(&run)
    .bind(&route)
    .bind(now_ms())
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() != 1 {
        // Another answer, a stop or the expiry came first.
        return Err(ApiError::Refused(
            "the request is no longer open: answer again to be told why".into(),
        ));
    }
    let target = format!("decision:{run}/{route}");
    audit::record(
        &mut tx,
        &caller.id,
        "decision.answer",
        &target,
        &given.digest,
    )
    .await?;
    tx.commit().await?;
    let held = fetch(&app.db, &run, &route)
        .await?
        .expect("the request just answered");
    Ok(Json(
        json!({ "acknowledged": false, "request": held.to_value() }),
    ))
}

/// How large an engine's request may be: its evidence within the operator's bound, and room for
/// its questions.
fn request_limit(app: &App) -> usize {
    let evidence = app.config.engine.decision_bounds.evidence_bytes;
    usize::try_from(evidence.saturating_mul(2).saturating_add(1 << 20)).unwrap_or(usize::MAX)
}

/// `POST /v1/decisions` (a remote run's token; docs/decisions.md, the controller's polling
/// protocol): the run's engine opens its request for a route, through the same store and rules
/// as a run executed here. The evidence must be within this controller's bound and its digest
/// the one its canonical encoding gives: approvers are shown that evidence and answer naming
/// that digest. A new request answers 201, the pair's existing one 200, unchanged.
pub async fn open(
    State(app): State<App>,
    engine: RunCaller,
    body: axum::body::Body,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let bytes = axum::body::to_bytes(body, request_limit(&app))
        .await
        .map_err(|e| ApiError::TooLarge(format!("the decision request: {e}")))?;
    let req: Request = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::BadRequest(format!("the decision request is not well-formed: {e}"))
    })?;
    let route_ok = !req.route.is_empty()
        && req.route.len() <= 200
        && !req.route.contains(['/', '?', '#'])
        && !req.route.chars().any(char::is_control);
    if !route_ok || req.questions.is_empty() {
        return Err(ApiError::BadRequest(
            "the decision request names no route it can be found under, or asks nothing".into(),
        ));
    }
    let (_, digest) = decision::seal(
        &req.evidence,
        app.config.engine.decision_bounds.evidence_bytes,
    )
    .map_err(ApiError::Refused)?;
    if digest != req.digest {
        return Err(ApiError::Refused(format!(
            "the request names the digest {:?}, and its evidence's is {digest:?}",
            req.digest
        )));
    }
    let (held, new) = match open_request(&app.db, &engine.run, &req).await {
        Ok(opened) => opened,
        Err(Opening::Bad(why)) => return Err(ApiError::Refused(why)),
        Err(Opening::Store(e)) => return Err(e.into()),
    };
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(held.record())))
}

/// The request of the token's run for `route`.
async fn of_engine(app: &App, engine: &RunCaller, run: &str, route: &str) -> ApiResult<Held> {
    engine.only(run)?;
    fetch(&app.db, run, route).await?.ok_or_else(|| {
        ApiError::NotFound(format!(
            "a decision request for route `{}`",
            route.escape_debug()
        ))
    })
}

/// `GET /v1/decisions/{run}/{route}` (the run's token): the engine polls its request.
pub async fn poll(
    State(app): State<App>,
    engine: RunCaller,
    Path((run, route)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(of_engine(&app, &engine, &run, &route).await?.record()))
}

/// `DELETE /v1/decisions/{run}/{route}` (the run's token): the engine withdraws its open
/// request (its run stopped); an answered or expired one is left as it is.
pub async fn withdraw(
    State(app): State<App>,
    engine: RunCaller,
    Path((run, route)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    of_engine(&app, &engine, &run, &route).await?;
    withdraw_request(&app.db, &run, &route).await?;
    Ok(Json(of_engine(&app, &engine, &run, &route).await?.record()))
}

/// Withdraws every open request of a run (a remote run stopped on the controller).
pub(crate) async fn withdraw_all(db: &AnyPool, run: &str) -> sqlx::Result<()> {
    sqlx::query("UPDATE decisions SET state = 'withdrawn' WHERE run_id = $1 AND state = 'open'")
        .bind(run)
        .execute(db)
        .await?;
    Ok(())
}

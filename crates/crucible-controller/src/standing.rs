//! Standing launches (issue 13): a team's launch kept to be fired again, on a schedule (a
//! five-field cron expression in an IANA time zone) or by hand. It names a pack digest (pinned)
//! or `draft:NAME`, resolved at each firing to the draft's latest saved version that compiles
//! and never stored as a digest here (RFC-0002:C-PACK-BASE: each launch it creates records the
//! digest it ran). Every firing is an ordinary launch through the one admission path of
//! `POST /v1/launches`; the runs it starts are its launch series (RFC-0002:C-RUN-HISTORY), and
//! each is handed the series' history (`scheduler`).
//!
//! Scoped as packs are: a standing launch belongs to a team; its viewers read it, its editors
//! create, pause, resume, fire and delete it; to anyone else it does not exist. Every change
//! is audited.

use crate::audit;
use crate::clock::rfc3339;
use crate::db::{new_id, now_ms};
use crate::error::{ApiError, ApiResult};
use crate::identity::{check_name, Caller, Role};
use crate::launches::LaunchRequest;
use crate::packs::editable_team;
use crate::scheduler::{self, Schedule, Trigger};
use crate::App;
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sqlx::Row;

/// A standing launch as stored.
pub struct Standing {
    pub id: String,
    pub team_id: String,
    pub team: String,
    /// Who created it: a scheduled firing acts for them.
    pub subject_id: String,
    pub owner: String,
    pub name: String,
    /// The launch every firing makes; its `pack` is a digest or `draft:NAME`.
    pub request: LaunchRequest,
    pub cron: Option<String>,
    pub timezone: String,
    /// The daily spend cap in USD.
    pub daily_max_cost: Option<f64>,
    pub paused: bool,
    pub cursor_at: i64,
    pub created_at: i64,
}

const SELECT: &str = "SELECT s.id, s.team_id, t.name AS team, s.subject_id, u.name AS owner, \
     s.name, s.pack, s.request, s.cron, s.timezone, s.daily_max_cost, s.paused, s.cursor_at, \
     s.created_at FROM standing s JOIN subjects t ON t.id = s.team_id \
     JOIN subjects u ON u.id = s.subject_id";

/// Micro-USD, the stored unit of the daily cap (the schema keeps to TEXT and BIGINT).
const MICRO: f64 = 1e6;

impl Standing {
    fn of(r: &sqlx::any::AnyRow) -> ApiResult<Standing> {
        let request: String = r.try_get("request")?;
        let mut request: LaunchRequest =
            serde_json::from_str(&request).map_err(anyhow::Error::from)?;
        request.pack = r.try_get("pack")?;
        let cap: Option<i64> = r.try_get("daily_max_cost")?;
        Ok(Standing {
            id: r.try_get("id")?,
            team_id: r.try_get("team_id")?,
            team: r.try_get("team")?,
            subject_id: r.try_get("subject_id")?,
            owner: r.try_get("owner")?,
            name: r.try_get("name")?,
            request,
            cron: r.try_get("cron")?,
            timezone: r.try_get("timezone")?,
            daily_max_cost: cap.map(|c| c as f64 / MICRO),
            paused: r.try_get::<i64, _>("paused")? != 0,
            cursor_at: r.try_get("cursor_at")?,
            created_at: r.try_get("created_at")?,
        })
    }

    /// Its schedule, when it has one.
    pub fn schedule(&self) -> ApiResult<Option<Schedule>> {
        self.cron
            .as_deref()
            .map(|c| {
                Schedule::parse(c, &self.timezone)
                    .map_err(|e| ApiError::Internal(anyhow::anyhow!("a stored schedule: {e}")))
            })
            .transpose()
    }

    fn to_json(&self, app: &App) -> ApiResult<Value> {
        let next = match (self.schedule()?, self.paused) {
            (Some(s), false) => scheduler::upcoming(&s, self.cursor_at.max(app.clock.now_ms()), 1)
                .into_iter()
                .next(),
            _ => None,
        };
        Ok(json!({
            "id": self.id,
            "name": self.name,
            "team": self.team,
            "owner": self.owner,
            "pack": self.request.pack,
            "params": self.request.params,
            "settings": self.request.settings,
            "caps": self.request.caps,
            "max_cost": self.request.max_cost,
            "max_time": self.request.max_time,
            "schedule": self.cron,
            "timezone": self.timezone,
            "daily_max_cost": self.daily_max_cost,
            "paused": self.paused,
            "next_at": next,
            "created_at_ms": self.created_at,
        }))
    }
}

/// Every standing launch with a schedule, for a scheduler pass.
pub(crate) async fn scheduled(app: &App) -> ApiResult<Vec<Standing>> {
    let rows = sqlx::query(&format!(
        "{SELECT} WHERE s.deleted_at IS NULL AND s.cron IS NOT NULL ORDER BY s.id"
    ))
    .fetch_all(&app.db)
    .await?;
    rows.iter().map(Standing::of).collect()
}

/// The standing launch, when the caller may read it; otherwise not found, exactly as a
/// missing (or deleted) one.
async fn readable(app: &App, caller: &Caller, id: &str) -> ApiResult<Standing> {
    let not_found = || ApiError::NotFound(format!("standing launch `{}`", id.escape_debug()));
    let row = sqlx::query(&format!(
        "{SELECT} WHERE s.id = $1 AND s.deleted_at IS NULL"
    ))
    .bind(id)
    .fetch_optional(&app.db)
    .await?
    .ok_or_else(not_found)?;
    let s = Standing::of(&row)?;
    caller.role_in(&s.team_id).ok_or_else(not_found)?;
    Ok(s)
}

/// The standing launch, when the caller may change it (the editor role in its team).
async fn editable(app: &App, caller: &Caller, id: &str, what: &str) -> ApiResult<Standing> {
    let s = readable(app, caller, id).await?;
    if caller.role_in(&s.team_id) < Some(Role::Editor) {
        return Err(ApiError::Forbidden(format!(
            "{what} needs the editor role in team `{}`",
            s.team
        )));
    }
    Ok(s)
}

/// `POST /v1/standing`'s body: a launch's fields (`LaunchRequest`), a name, and how it fires.
struct NewStanding {
    name: String,
    launch: LaunchRequest,
    /// A five-field cron expression; none: fired by hand only.
    schedule: Option<String>,
    /// The schedule's IANA time zone (default `UTC`).
    timezone: Option<String>,
    /// The series' spend cap per calendar day, in USD.
    daily_max_cost: Option<f64>,
}

impl NewStanding {
    fn parse(body: &[u8]) -> ApiResult<NewStanding> {
        let bad = |e: String| {
            ApiError::BadRequest(format!("the standing launch is not well-formed: {e}"))
        };
        let mut v: Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
        let obj = v
            .as_object_mut()
            .ok_or_else(|| bad("not a JSON object".into()))?;
        let mut text = |key: &str| -> ApiResult<Option<String>> {
            match obj.remove(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s)),
                Some(other) => Err(bad(format!("`{key}` is not a string: {other}"))),
            }
        };
        let name = text("name")?.ok_or_else(|| bad("`name` is required".into()))?;
        let schedule = text("schedule")?;
        let timezone = text("timezone")?;
        let daily_max_cost = match obj.remove("daily_max_cost") {
            None | Some(Value::Null) => None,
            Some(n) => Some(
                n.as_f64()
                    .ok_or_else(|| bad(format!("`daily_max_cost` is not a number: {n}")))?,
            ),
        };
        let launch = serde_json::from_value(v).map_err(|e| bad(e.to_string()))?;
        Ok(NewStanding {
            name,
            launch,
            schedule,
            timezone,
            daily_max_cost,
        })
    }
}

/// `POST /v1/standing` (editors): a new standing launch, checked first exactly as a launch of
/// it would be (delivered, compiled and admitted, nothing recorded): what its firings would be
/// refused for is refused now.
pub async fn create(
    State(app): State<App>,
    caller: Caller,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let new = NewStanding::parse(&body)?;
    let (team, team_id) = editable_team(
        &caller,
        new.launch.team.clone(),
        "creating a standing launch",
    )?;
    check_name(&new.name)?;
    let timezone = new.timezone.clone().unwrap_or_else(|| "UTC".into());
    if let Some(cron) = &new.schedule {
        Schedule::parse(cron, &timezone).map_err(ApiError::BadRequest)?;
    } else {
        Schedule::parse("0 0 * * *", &timezone).map_err(ApiError::BadRequest)?;
    }
    let cap = match new.daily_max_cost {
        Some(c) if !(c.is_finite() && c > 0.0) => {
            return Err(ApiError::BadRequest(format!(
                "daily_max_cost must be a positive number of USD, not {c}"
            )))
        }
        Some(c) => Some((c * MICRO).round() as i64),
        None => None,
    };
    crate::launches::check(&app, &team_id, &new.launch).await?;
    let id = new_id();
    let now = now_ms();
    let mut tx = app.db.begin().await?;
    sqlx::query(
        "INSERT INTO standing (id, team_id, subject_id, name, pack, request, cron, timezone, \
         daily_max_cost, paused, cursor_at, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, $10, $11)",
    )
    .bind(&id)
    .bind(&team_id)
    .bind(&caller.id)
    .bind(&new.name)
    .bind(&new.launch.pack)
    .bind(serde_json::to_string(&new.launch).map_err(anyhow::Error::from)?)
    .bind(&new.schedule)
    .bind(&timezone)
    .bind(cap)
    // The schedule starts now: no time before the standing launch existed is due.
    .bind(app.clock.now_ms())
    .bind(now)
    .execute(&mut *tx)
    .await
    .map_err(|e| match e.as_database_error() {
        Some(d) if d.is_unique_violation() => ApiError::Refused(format!(
            "team `{team}` already has a standing launch named `{}`",
            new.name
        )),
        _ => e.into(),
    })?;
    audit::record(
        &mut tx,
        &caller.id,
        "standing.create",
        &format!("standing:{team}/{}", new.name),
        &format!(
            "{} schedule {} ({timezone})",
            new.launch.pack,
            new.schedule.as_deref().unwrap_or("none")
        ),
    )
    .await?;
    tx.commit().await?;
    let s = readable(&app, &caller, &id).await?;
    Ok(Json(s.to_json(&app)?))
}

/// `GET /v1/standing`: the standing launches of the caller's teams.
pub async fn list(State(app): State<App>, caller: Caller) -> ApiResult<Json<Value>> {
    let rows = sqlx::query(&format!(
        "{SELECT} JOIN memberships m ON m.team_id = s.team_id \
         WHERE m.user_id = $1 AND s.deleted_at IS NULL ORDER BY t.name, s.name"
    ))
    .bind(&caller.id)
    .fetch_all(&app.db)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        out.push(Standing::of(r)?.to_json(&app)?);
    }
    Ok(Json(json!({ "standing": out })))
}

/// `GET /v1/standing/{id}`: one, with its firings, newest first (launched, skipped or refused,
/// each with its run or its reason).
pub async fn show(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let s = readable(&app, &caller, &id).await?;
    let mut out = s.to_json(&app)?;
    let rows = sqlx::query(
        "SELECT id, at, trigger_kind, scheduled_for, missed, result, run_id, reason \
         FROM firings WHERE standing_id = $1 ORDER BY id DESC LIMIT 200",
    )
    .bind(&s.id)
    .fetch_all(&app.db)
    .await?;
    let mut firings = Vec::with_capacity(rows.len());
    for r in &rows {
        let id: String = r.try_get("id")?;
        let run: Option<String> = r.try_get("run_id")?;
        let reason: Option<String> = r.try_get("reason")?;
        let trigger: String = r.try_get("trigger_kind")?;
        let result: String = r.try_get("result")?;
        firings.push(scheduler::firing_json(
            &id,
            &s.id,
            r.try_get("at")?,
            &trigger,
            r.try_get("scheduled_for")?,
            r.try_get("missed")?,
            &result,
            run.as_deref(),
            reason.as_deref(),
        ));
    }
    out["firings"] = json!(firings);
    Ok(Json(out))
}

/// `GET /v1/standing/{id}/history`: the series history its next run would be handed now
/// (RFC-0002:C-RUN-HISTORY), with the bound each task's share of it is held to.
pub async fn history(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let s = readable(&app, &caller, &id).await?;
    let records = scheduler::series_records(&app, &s.id).await?;
    Ok(Json(json!({
        "records": records,
        "max_records": crucible_plan::ceilings::MAX_HISTORY,
        "max_bytes": app.config.engine.history_max_bytes,
    })))
}

/// Sets `paused`, audited.
async fn set_paused(app: &App, caller: &Caller, id: &str, paused: bool) -> ApiResult<Value> {
    let what = if paused { "pausing" } else { "resuming" };
    let s = editable(app, caller, id, &format!("{what} a standing launch")).await?;
    let mut tx = app.db.begin().await?;
    sqlx::query("UPDATE standing SET paused = $1 WHERE id = $2")
        .bind(i64::from(paused))
        .bind(&s.id)
        .execute(&mut *tx)
        .await?;
    audit::record(
        &mut tx,
        &caller.id,
        if paused {
            "standing.pause"
        } else {
            "standing.resume"
        },
        &format!("standing:{}/{}", s.team, s.name),
        "",
    )
    .await?;
    tx.commit().await?;
    readable(app, caller, id).await?.to_json(app)
}

/// `POST /v1/standing/{id}/pause` (editors): its schedule stops firing; the times it is paused
/// over are never fired, not even after it resumes.
pub async fn pause(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    set_paused(&app, &caller, &id, true).await.map(Json)
}

/// `POST /v1/standing/{id}/resume` (editors): its schedule fires again from its next time.
pub async fn resume(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    set_paused(&app, &caller, &id, false).await.map(Json)
}

/// `POST /v1/standing/{id}/fire` (editors): fires it now, paused or not, under every policy a
/// scheduled firing is under; answers the firing (`launched` with its run, `skipped` or
/// `refused` with why).
pub async fn fire(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let s = editable(&app, &caller, &id, "firing a standing launch").await?;
    let mut tx = app.db.begin().await?;
    audit::record(
        &mut tx,
        &caller.id,
        "standing.fire",
        &format!("standing:{}/{}", s.team, s.name),
        "",
    )
    .await?;
    tx.commit().await?;
    scheduler::fire(&app, &s, Trigger::Manual, Some(&caller.id))
        .await
        .map(Json)
}

/// `DELETE /v1/standing/{id}` (editors): it fires no more and is no longer listed; its runs,
/// a running one included, are kept and go on.
pub async fn delete(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let s = editable(&app, &caller, &id, "deleting a standing launch").await?;
    let mut tx = app.db.begin().await?;
    sqlx::query("UPDATE standing SET deleted_at = $1 WHERE id = $2")
        .bind(now_ms())
        .bind(&s.id)
        .execute(&mut *tx)
        .await?;
    audit::record(
        &mut tx,
        &caller.id,
        "standing.delete",
        &format!("standing:{}/{}", s.team, s.name),
        "",
    )
    .await?;
    tx.commit().await?;
    Ok(Json(json!({ "id": s.id, "deleted": true })))
}

#[derive(Deserialize)]
struct SetClock {
    /// The time to set, RFC 3339 in UTC.
    now: String,
}

/// `POST /v1/clock` (platform administrators; only on a controller started with the hidden
/// `--test-clock`, for tests): sets the scheduler's clock and runs one scheduler pass before
/// answering, with the firings it recorded.
pub async fn set_clock(
    State(app): State<App>,
    caller: Caller,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    if !app.clock.is_test() {
        return Err(ApiError::NotFound(
            "the test clock (this controller runs on the system clock)".into(),
        ));
    }
    if !caller.is_platform_admin() {
        return Err(ApiError::Forbidden(
            "setting the test clock is for the platform team `platform`".into(),
        ));
    }
    let req: SetClock = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("the clock request: {e}")))?;
    let ms = crate::clock::parse_rfc3339(&req.now).map_err(ApiError::BadRequest)?;
    app.clock.set(ms);
    let firings = scheduler::pass(&app).await?;
    Ok(Json(json!({ "now": rfc3339(ms), "firings": firings })))
}

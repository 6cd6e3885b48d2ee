//! Asks, the receiving side (RFC-0002:C-ASKS): the asks a run emitted (its session log's
//! `asks_emitted` lines) are recorded as proposed, then each is decided, in emission order:
//!
//! 1. **rejected** when its workflow names no pack of the run's team, or its parameters do not
//!    satisfy that pack's declared schema (the params block, read without evaluating it);
//! 2. **duplicate** when an ask of the team with the same key is held, or was admitted (within
//!    `--ask-repeat-after`, when the operator set it): a key is the emitter's name for an item,
//!    so a repeat is recognized without reading the ask;
//! 3. **held** for a person when the operator's policy does not admit it on its own: its
//!    workflow is not on the allow-list (`--ask-allow`), or the team's admissions in the last
//!    hour reached `--asks-per-hour`. An approver of the team admits or dismisses it;
//! 4. otherwise **admitted**: launched as a new run of the pack's current revision with those
//!    parameters, under the operator's ceilings (`--ask-max-cost`, `--ask-max-time`), checked
//!    as every launch is; a launch refused there leaves the ask **refused** with the reason.
//!
//! What was proposed (key, workflow, parameters, run and task) and what was decided (state,
//! reason, the run it launched, who decided) are both kept and read at `GET /v1/asks`.
//! Deciding is serialized in the controller (one lock), so two runs emitting one key at once
//! still admit it once. An ask is marked admitted before its run is launched (the run's id
//! recorded once it is), so no crash can launch it twice.

use crate::audit;
use crate::db::{new_id, now_ms};
use crate::error::{ApiError, ApiResult};
use crate::identity::{Caller, Role};
use crate::launches::{LaunchRequest, Launcher};
use crate::App;
use anyhow::Context;
use axum::extract::{Path, Query, State};
use axum::Json;
use crucible_engine::history::History;
use crucible_plan::wire::Event;
use serde::Deserialize;
use serde_json::{json, Value};
use sqlx::Row;
use std::collections::BTreeMap;

/// The operator's policy for admitting asks (flags of `crucible serve`), discoverable at
/// `GET /v1/settings`.
#[derive(Clone, Debug)]
pub struct AskPolicy {
    /// Workflows (pack names) an ask may start without a person; every other valid ask is held.
    pub allow: Vec<String>,
    /// Admissions per team in any hour; past it, a valid ask is held.
    pub per_hour: u32,
    /// How long after its admission a key may be admitted again; `None`: never.
    pub repeat_after_secs: Option<u64>,
    /// The ceilings every run an ask starts gets: the launcher's, never the emitter's.
    pub max_cost: f64,
    pub max_time: String,
}

impl AskPolicy {
    pub fn describe(&self) -> Value {
        json!({
            "allow": self.allow,
            "per_hour": self.per_hour,
            "repeat_after_secs": self.repeat_after_secs,
            "max_cost": self.max_cost,
            "max_time": self.max_time,
        })
    }
}

/// One recorded ask to decide.
struct Proposed {
    id: String,
    key: String,
    workflow: String,
    params: BTreeMap<String, Value>,
}

/// The run an ask came from: its team and the subject that launched it.
struct Origin {
    team_id: String,
    team: String,
    subject: String,
}

/// Records every ask the run's session log holds (once: a resumed run's are not recorded
/// again) and decides each one not yet decided.
pub async fn receive_from_run(app: &App, run: &str) -> anyhow::Result<()> {
    let Some(dir) = crate::runs::engine_dir(app, run) else {
        return Ok(());
    };
    let mut emitted = Vec::new();
    for line in crucible_engine::state::read_log(&dir) {
        if let Event::AsksEmitted(e) = line.event {
            emitted.extend(e.asks.into_iter().map(|a| (e.task.clone(), a)));
        }
    }
    if emitted.is_empty() {
        return Ok(());
    }
    let _serial = app.asks.lock().await;
    let origin = origin_of(app, run).await?;
    for (seq, (task, ask)) in emitted.iter().enumerate() {
        sqlx::query(
            "INSERT INTO asks (id, team_id, run_id, task, seq, ask_key, workflow, params, state, \
             created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'proposed', $9) \
             ON CONFLICT (run_id, seq) DO NOTHING",
        )
        .bind(new_id())
        .bind(&origin.team_id)
        .bind(run)
        .bind(task)
        .bind(seq as i64)
        .bind(&ask.key)
        .bind(&ask.workflow)
        .bind(serde_json::to_string(&ask.params)?)
        .bind(now_ms())
        .execute(&app.db)
        .await?;
    }
    let rows = sqlx::query(
        "SELECT id, ask_key, workflow, params FROM asks WHERE run_id = $1 AND state = 'proposed' \
         ORDER BY seq",
    )
    .bind(run)
    .fetch_all(&app.db)
    .await?;
    for r in rows {
        let ask = Proposed {
            id: r.try_get("id")?,
            key: r.try_get("ask_key")?,
            workflow: r.try_get("workflow")?,
            params: serde_json::from_str(&r.try_get::<String, _>("params")?)?,
        };
        decide(app, &origin, &ask)
            .await
            .with_context(|| format!("deciding ask {}", ask.id))?;
    }
    Ok(())
}

async fn origin_of(app: &App, run: &str) -> anyhow::Result<Origin> {
    let r = sqlx::query(
        "SELECT r.team_id, s.name AS team, r.subject_id FROM runs r \
         JOIN subjects s ON s.id = r.team_id WHERE r.id = $1",
    )
    .bind(run)
    .fetch_one(&app.db)
    .await?;
    Ok(Origin {
        team_id: r.try_get("team_id")?,
        team: r.try_get("team")?,
        subject: r.try_get("subject_id")?,
    })
}

/// Sets a decided ask's state and why.
async fn settle(
    app: &App,
    id: &str,
    state: &str,
    reason: Option<String>,
    duplicate_of: Option<String>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE asks SET state = $1, reason = $2, duplicate_of = $3, decided_at = $4 WHERE id = $5",
    )
    .bind(state)
    .bind(reason)
    .bind(duplicate_of)
    .bind(now_ms())
    .bind(id)
    .execute(&app.db)
    .await?;
    Ok(())
}

/// The current digest of the team's pack the ask names, and the ask's parameters as the
/// launch takes them, or why the ask is rejected.
async fn validate(
    app: &App,
    team_id: &str,
    ask: &Proposed,
) -> ApiResult<Result<(String, BTreeMap<String, String>), String>> {
    let digest: Option<String> =
        sqlx::query_scalar("SELECT current_digest FROM packs WHERE team_id = $1 AND name = $2")
            .bind(team_id)
            .bind(&ask.workflow)
            .fetch_optional(&app.db)
            .await?;
    let Some(digest) = digest else {
        return Ok(Err(format!(
            "the workflow `{}` is not a pack of the team",
            ask.workflow.escape_debug()
        )));
    };
    let _trees = app.trees_in_use().await;
    let root = crate::trees::tree_dir(&app.trees_dir(), &digest)
        .ok_or_else(|| anyhow::anyhow!("a recorded digest is malformed: {digest}"))?;
    let params = ask.params.clone();
    let checked = tokio::task::spawn_blocking(move || schema_check(&root, &params))
        .await
        .map_err(anyhow::Error::from)?;
    Ok(checked.map(|p| (digest, p)))
}

/// RFC-0002:C-ASKS: the values against the workflow's declared schema, the params block of the
/// pack's workflow source (a manifest with inline tasks declares no parameters).
fn schema_check(
    root: &std::path::Path,
    params: &BTreeMap<String, Value>,
) -> Result<BTreeMap<String, String>, String> {
    let manifest = crucible_pack::load(&root.join("crucible.toml")).map_err(|e| e.to_string())?;
    let file = manifest
        .manifest
        .workflow
        .as_ref()
        .and_then(|w| w.file.clone());
    let pairs = match file {
        Some(file) => crucible_dsl::check_supplied(root, &file, params)?,
        None => match params.keys().next() {
            Some(name) => {
                return Err(format!(
                    "`{name}` is not a declared parameter: the workflow declares none"
                ))
            }
            None => Vec::new(),
        },
    };
    Ok(pairs.into_iter().collect())
}

/// Decides one proposed ask (under the asks lock).
async fn decide(app: &App, origin: &Origin, ask: &Proposed) -> ApiResult<()> {
    let (digest, params) = match validate(app, &origin.team_id, ask).await? {
        Ok(ok) => ok,
        Err(why) => return Ok(settle(app, &ask.id, "rejected", Some(why), None).await?),
    };
    let policy = &app.config.asks;
    let cutoff = match policy.repeat_after_secs {
        Some(secs) => now_ms() - (secs as i64).saturating_mul(1000),
        None => i64::MIN,
    };
    let first: Option<String> = sqlx::query_scalar(
        "SELECT id FROM asks WHERE team_id = $1 AND ask_key = $2 AND id <> $3 \
         AND (state = 'held' OR (state = 'admitted' AND decided_at >= $4)) \
         ORDER BY created_at LIMIT 1",
    )
    .bind(&origin.team_id)
    .bind(&ask.key)
    .bind(&ask.id)
    .bind(cutoff)
    .fetch_optional(&app.db)
    .await?;
    if let Some(first) = first {
        let why = "an ask with this key is already admitted or held".to_string();
        return Ok(settle(app, &ask.id, "duplicate", Some(why), Some(first)).await?);
    }
    if !policy.allow.contains(&ask.workflow) {
        let why = format!(
            "the workflow `{}` is not on the operator's allow-list: held for an approver",
            ask.workflow.escape_debug()
        );
        return Ok(settle(app, &ask.id, "held", Some(why), None).await?);
    }
    let admitted: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM asks WHERE team_id = $1 AND state = 'admitted' AND decided_at >= $2",
    )
    .bind(&origin.team_id)
    .bind(now_ms() - 3_600_000)
    .fetch_one(&app.db)
    .await?;
    if admitted >= i64::from(policy.per_hour) {
        let why = format!(
            "the team's asks admitted in the last hour reached the operator's limit of {}: held \
             for an approver",
            policy.per_hour
        );
        return Ok(settle(app, &ask.id, "held", Some(why), None).await?);
    }
    admit(app, origin, &origin.subject, ask, digest, params, None).await
}

/// Launches the ask as a new run under the operator's ceilings, recording it admitted first
/// (by `decided_by`, a person, or the policy when `None`) and its run once launched; a refused
/// launch leaves it refused.
async fn admit(
    app: &App,
    origin: &Origin,
    launcher: &str,
    ask: &Proposed,
    digest: String,
    params: BTreeMap<String, String>,
    decided_by: Option<&str>,
) -> ApiResult<()> {
    sqlx::query(
        "UPDATE asks SET state = 'admitted', reason = NULL, decided_by = $1, decided_at = $2 \
         WHERE id = $3",
    )
    .bind(decided_by)
    .bind(now_ms())
    .bind(&ask.id)
    .execute(&app.db)
    .await?;
    let policy = &app.config.asks;
    let req = LaunchRequest {
        pack: digest,
        team: None,
        params,
        settings: BTreeMap::new(),
        caps: Vec::new(),
        max_cost: Some(policy.max_cost),
        max_time: Some(policy.max_time.clone()),
        target: None,
        // An ask's run is steered by nothing but its parameters.
        steering: BTreeMap::new(),
    };
    let source = format!("ask `{}` ({})", ask.key.escape_debug(), ask.id);
    let by = Launcher {
        subject: launcher,
        team_id: &origin.team_id,
        team: &origin.team,
        series: None,
        source: Some(&source),
    };
    let history = History::none(app.config.engine.history_max_bytes);
    let (sql, value) = match crate::launches::admit(app, &by, &req, history).await {
        Ok(run) => (
            "UPDATE asks SET launched_run = $1 WHERE id = $2",
            run["id"].as_str().unwrap_or_default().to_string(),
        ),
        Err(e) => (
            "UPDATE asks SET state = 'refused', reason = $1 WHERE id = $2",
            e.to_string(),
        ),
    };
    sqlx::query(sql)
        .bind(value)
        .bind(&ask.id)
        .execute(&app.db)
        .await?;
    Ok(())
}

#[derive(Deserialize)]
pub struct ListQuery {
    /// Only the asks one run emitted.
    run: Option<String>,
    /// Only the asks in one state (`held`, …).
    state: Option<String>,
}

/// `GET /v1/asks[?run=ID][&state=S]`: the asks of the caller's teams, oldest first, each as
/// proposed (`run`, `task`, `key`, `workflow`, `params`) and as decided (`state`, `reason`,
/// `duplicate_of`, `launched_run`, `decided_by`).
pub async fn list(
    State(app): State<App>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let rows = sqlx::query(
        "SELECT a.id, s.name AS team, a.run_id, a.task, a.ask_key, a.workflow, a.params, \
         a.state, a.reason, a.duplicate_of, a.launched_run, d.name AS decided_by, a.created_at, \
         a.decided_at FROM asks a JOIN memberships m ON m.team_id = a.team_id \
         JOIN subjects s ON s.id = a.team_id LEFT JOIN subjects d ON d.id = a.decided_by \
         WHERE m.user_id = $1 AND ($2 = '' OR a.run_id = $2) AND ($3 = '' OR a.state = $3) \
         ORDER BY a.run_id, a.seq",
    )
    .bind(&caller.id)
    .bind(q.run.unwrap_or_default())
    .bind(q.state.unwrap_or_default())
    .fetch_all(&app.db)
    .await?;
    let mut asks = Vec::with_capacity(rows.len());
    for r in rows {
        let params: Value = serde_json::from_str(&r.try_get::<String, _>("params")?)
            .map_err(anyhow::Error::from)?;
        asks.push(json!({
            "id": r.try_get::<String, _>("id")?,
            "team": r.try_get::<String, _>("team")?,
            "run": r.try_get::<String, _>("run_id")?,
            "task": r.try_get::<String, _>("task")?,
            "key": r.try_get::<String, _>("ask_key")?,
            "workflow": r.try_get::<String, _>("workflow")?,
            "params": params,
            "state": r.try_get::<String, _>("state")?,
            "reason": r.try_get::<Option<String>, _>("reason")?,
            "duplicate_of": r.try_get::<Option<String>, _>("duplicate_of")?,
            "launched_run": r.try_get::<Option<String>, _>("launched_run")?,
            "decided_by": r.try_get::<Option<String>, _>("decided_by")?,
            "at_ms": r.try_get::<i64, _>("created_at")?,
            "decided_at_ms": r.try_get::<Option<i64>, _>("decided_at")?,
        }));
    }
    Ok(Json(json!({ "asks": asks })))
}

/// A held ask of a team the caller approves in, or not found (alike for a missing ask and
/// one of another team); a held ask only.
async fn held(app: &App, caller: &Caller, id: &str, what: &str) -> ApiResult<(Origin, Proposed)> {
    let not_found = || ApiError::NotFound(format!("ask `{}`", id.escape_debug()));
    let r = sqlx::query(
        "SELECT a.team_id, s.name AS team, a.run_id, a.ask_key, a.workflow, a.params, a.state \
         FROM asks a JOIN subjects s ON s.id = a.team_id WHERE a.id = $1",
    )
    .bind(id)
    .fetch_optional(&app.db)
    .await?
    .ok_or_else(not_found)?;
    let team_id: String = r.try_get("team_id")?;
    caller.role_in(&team_id).ok_or_else(not_found)?;
    let team: String = r.try_get("team")?;
    caller.team_for(&team, Role::Approver, what)?;
    let state: String = r.try_get("state")?;
    if state != "held" {
        return Err(ApiError::Refused(format!(
            "the ask is {state}, not held: only a held ask is decided by a person"
        )));
    }
    let run: String = r.try_get("run_id")?;
    let subject: String = sqlx::query_scalar("SELECT subject_id FROM runs WHERE id = $1")
        .bind(&run)
        .fetch_one(&app.db)
        .await?;
    let ask = Proposed {
        id: id.to_string(),
        key: r.try_get("ask_key")?,
        workflow: r.try_get("workflow")?,
        params: serde_json::from_str(&r.try_get::<String, _>("params")?)
            .map_err(anyhow::Error::from)?,
    };
    Ok((
        Origin {
            team_id,
            team,
            subject,
        },
        ask,
    ))
}

/// `POST /v1/asks/{id}/admit` (approvers): a held ask launched as the policy would have, by
/// this person: its parameters checked again against the pack's current revision.
pub async fn admit_held(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let _serial = app.asks.lock().await;
    let (origin, ask) = held(&app, &caller, &id, "admitting an ask").await?;
    let (digest, params) = match validate(&app, &origin.team_id, &ask).await? {
        Ok(ok) => ok,
        Err(why) => return Err(ApiError::Refused(why)),
    };
    admit(
        &app,
        &origin,
        &caller.id,
        &ask,
        digest,
        params,
        Some(&caller.id),
    )
    .await?;
    let mut tx = app.db.begin().await?;
    audit::record(
        &mut tx,
        &caller.id,
        "ask.admit",
        &format!("ask:{}/{id}", origin.team),
        &ask.key,
    )
    .await?;
    tx.commit().await?;
    let (state, run, reason): (String, Option<String>, Option<String>) =
        sqlx::query_as("SELECT state, launched_run, reason FROM asks WHERE id = $1")
            .bind(&id)
            .fetch_one(&app.db)
            .await?;
    Ok(Json(
        json!({ "id": id, "state": state, "launched_run": run, "reason": reason }),
    ))
}

/// `POST /v1/asks/{id}/dismiss` (approvers): a held ask declined. Its key is free again: a
/// later ask with it is decided afresh.
pub async fn dismiss(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let _serial = app.asks.lock().await;
    let (origin, ask) = held(&app, &caller, &id, "dismissing an ask").await?;
    let mut tx = app.db.begin().await?;
    sqlx::query(
        "UPDATE asks SET state = 'dismissed', decided_by = $1, decided_at = $2 WHERE id = $3",
    )
    .bind(&caller.id)
    .bind(now_ms())
    .bind(&id)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &caller.id,
        "ask.dismiss",
        &format!("ask:{}/{id}", origin.team),
        &ask.key,
    )
    .await?;
    tx.commit().await?;
    Ok(Json(json!({ "id": id, "state": "dismissed" })))
}

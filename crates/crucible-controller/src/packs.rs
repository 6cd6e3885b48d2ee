//! Registered packs (RFC-0002:C-PACK-BASE): `POST /v1/packs` takes an uncompressed tar,
//! streamed to a spool file under a size limit (a larger upload is refused as soon as it is
//! declared or crosses the limit, never buffered), and records the tree it stores as the
//! pack's current revision; every prior revision stays recorded, and so stays stored.
//! Reading is scoped to the pack's team: a pack the caller cannot read is "not found".

use crate::audit;
use crate::db::{new_id, now_ms};
use crate::error::{ApiError, ApiResult};
use crate::identity::{check_name, Caller, Role};
use crate::trees::{ingest_tar, tree_dir, write_delivery, Ingested};
use crate::App;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;
use axum::Json;
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::{json, Value};
use sqlx::Row;
use std::path::PathBuf;
use tokio::io::AsyncWriteExt;

#[derive(Deserialize)]
pub struct PushQuery {
    /// The pack's name in its team.
    name: String,
    /// The team; may be left out by a caller who can edit in exactly one team.
    team: Option<String>,
}

/// `POST /v1/packs?name=N[&team=T]`, body an uncompressed tar of the pack's files.
pub async fn push(
    State(app): State<App>,
    caller: Caller,
    Query(q): Query<PushQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<Value>> {
    let (team, team_id) = editable_team(&caller, q.team, "registering a pack")?;
    check_name(&q.name)?;
    let ingested = receive(&app, &headers, body, None).await?;

    let mut tx = app.db.begin().await?;
    let existing =
        sqlx::query("SELECT id, current_digest FROM packs WHERE team_id = $1 AND name = $2")
            .bind(&team_id)
            .bind(&q.name)
            .fetch_optional(&mut *tx)
            .await?;
    let (pack_id, seq, changed) = match existing {
        None => {
            let id = new_id();
            sqlx::query(
                "INSERT INTO packs (id, team_id, name, current_digest, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&id)
            .bind(&team_id)
            .bind(&q.name)
            .bind(&ingested.digest)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(raced)?;
            (id, 1, true)
        }
        Some(row) => {
            let id: String = row.try_get("id")?;
            let current: String = row.try_get("current_digest")?;
            let last: i64 =
                sqlx::query_scalar("SELECT MAX(seq) FROM pack_revisions WHERE pack_id = $1")
                    .bind(&id)
                    .fetch_one(&mut *tx)
                    .await?;
            if current == ingested.digest {
                (id, last, false)
            } else {
                sqlx::query("UPDATE packs SET current_digest = $1 WHERE id = $2")
                    .bind(&ingested.digest)
                    .bind(&id)
                    .execute(&mut *tx)
                    .await?;
                (id, last + 1, true)
            }
        }
    };
    if changed {
        sqlx::query(
            "INSERT INTO pack_revisions \
             (pack_id, seq, digest, delivered_bytes, ignored, subject_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&pack_id)
        .bind(seq)
        .bind(&ingested.digest)
        .bind(ingested.delivered_bytes as i64)
        .bind(serde_json::to_string(&ingested.ignored).map_err(anyhow::Error::from)?)
        .bind(&caller.id)
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .map_err(raced)?;
        audit::record(
            &mut tx,
            &caller.id,
            "pack.register",
            &format!("pack:{team}/{}", q.name),
            &ingested.digest,
        )
        .await?;
    }
    tx.commit().await.map_err(raced)?;
    Ok(Json(json!({
        "id": pack_id,
        "team": team,
        "name": q.name,
        "digest": ingested.digest,
        "revision": seq,
        "changed": changed,
        "ignored": ingested.ignored,
        "delivered_bytes": ingested.delivered_bytes,
    })))
}

/// Streams an upload to a spool file under the size limit (refused as soon as it is declared
/// or read past it, never buffered whole), then ingests it, over `base` when given.
pub(crate) async fn receive(
    app: &App,
    headers: &HeaderMap,
    mut body: Body,
    base: Option<PathBuf>,
) -> ApiResult<Ingested> {
    let limit = app.config.max_upload_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > limit) {
        return Err(too_large(n, limit));
    }
    let spool = tempfile::NamedTempFile::new_in(app.tmp_dir()).map_err(anyhow::Error::from)?;
    let mut out = tokio::fs::File::from_std(spool.reopen().map_err(anyhow::Error::from)?);
    let mut seen = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::BadRequest(format!("reading the upload: {e}")))?;
        if let Ok(data) = frame.into_data() {
            seen += data.len() as u64;
            if seen > limit {
                return Err(too_large(seen, limit));
            }
            out.write_all(&data).await.map_err(anyhow::Error::from)?;
        }
    }
    out.flush().await.map_err(anyhow::Error::from)?;
    drop(out);
    let (trees, staging, budget) = (
        app.trees_dir(),
        app.tmp_dir(),
        app.config.delivery_budget_bytes,
    );
    tokio::task::spawn_blocking(move || {
        ingest_tar(&trees, &staging, spool.path(), budget, base.as_deref())
    })
    .await
    .map_err(anyhow::Error::from)?
}

/// The team a change goes to, by name, or the caller's only editable team; with its id.
pub(crate) fn editable_team(
    caller: &Caller,
    team: Option<String>,
    what: &str,
) -> ApiResult<(String, String)> {
    let team = match team {
        Some(t) => t,
        None => only_team(caller)?,
    };
    let id = caller.team_for(&team, Role::Editor, what)?;
    Ok((team, id))
}

fn too_large(n: u64, limit: u64) -> ApiError {
    ApiError::TooLarge(format!(
        "the upload is over the limit of {limit} bytes (at least {n} bytes)"
    ))
}

/// Two registrations of one pack racing: the loser's transaction is refused whole.
pub(crate) fn raced(e: sqlx::Error) -> ApiError {
    match e.as_database_error() {
        Some(d) if d.is_unique_violation() => ApiError::Refused(
            "the pack changed while this registration was stored: push again".into(),
        ),
        _ => e.into(),
    }
}

fn only_team(caller: &Caller) -> ApiResult<String> {
    let mut editable = caller.teams.iter().filter(|m| m.role >= Role::Editor);
    match (editable.next(), editable.next()) {
        (Some(m), None) => Ok(m.team.clone()),
        _ => Err(ApiError::BadRequest(
            "name the pack's team (`team=`): you can edit in more than one team, or none".into(),
        )),
    }
}

/// `GET /v1/packs`: the packs of the caller's teams.
pub async fn list(State(app): State<App>, caller: Caller) -> ApiResult<Json<Value>> {
    let rows = crate::db::in_subjects_teams(&app.db, &caller.id, "packs", "current_digest").await?;
    let mut packs = Vec::with_capacity(rows.len());
    for r in rows {
        packs.push(json!({
            "id": r.try_get::<String, _>("id")?,
            "team": r.try_get::<String, _>("team")?,
            "name": r.try_get::<String, _>("name")?,
            "digest": r.try_get::<String, _>("current_digest")?,
        }));
    }
    Ok(Json(json!({ "packs": packs })))
}

/// The pack's team and current digest, when the caller may read it; otherwise not found.
async fn readable(app: &App, caller: &Caller, id: &str) -> ApiResult<(String, String, String)> {
    let not_found = || ApiError::NotFound(format!("pack `{}`", id.escape_debug()));
    let row = sqlx::query(
        "SELECT p.team_id, s.name AS team, p.name, p.current_digest FROM packs p \
         JOIN subjects s ON s.id = p.team_id WHERE p.id = $1",
    )
    .bind(id)
    .fetch_optional(&app.db)
    .await?
    .ok_or_else(not_found)?;
    let team_id: String = row.try_get("team_id")?;
    caller.role_in(&team_id).ok_or_else(not_found)?;
    Ok((
        row.try_get("team")?,
        row.try_get("name")?,
        row.try_get("current_digest")?,
    ))
}

/// `GET /v1/packs/{id}`: the pack and every revision, current last.
pub async fn show(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let (team, name, digest) = readable(&app, &caller, &id).await?;
    let rows = sqlx::query(
        "SELECT seq, digest, delivered_bytes, ignored, created_at FROM pack_revisions \
         WHERE pack_id = $1 ORDER BY seq",
    )
    .bind(&id)
    .fetch_all(&app.db)
    .await?;
    let mut revisions = Vec::with_capacity(rows.len());
    for r in rows {
        let ignored: Value = serde_json::from_str(&r.try_get::<String, _>("ignored")?)
            .map_err(anyhow::Error::from)?;
        revisions.push(json!({
            "revision": r.try_get::<i64, _>("seq")?,
            "digest": r.try_get::<String, _>("digest")?,
            "delivered_bytes": r.try_get::<i64, _>("delivered_bytes")?,
            "ignored": ignored,
            "at_ms": r.try_get::<i64, _>("created_at")?,
        }));
    }
    Ok(Json(json!({
        "id": id, "team": team, "name": name, "digest": digest, "revisions": revisions,
    })))
}

#[derive(Deserialize)]
pub struct ArchiveQuery {
    /// One of the pack's revisions; the current one when left out.
    digest: Option<String>,
}

/// `GET /v1/packs/{id}/archive[?digest=D]`: the gzipped tar a run of that revision is
/// delivered, every file mode 0755.
pub async fn archive(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<ArchiveQuery>,
) -> ApiResult<impl IntoResponse> {
    let (_, _, current) = readable(&app, &caller, &id).await?;
    let digest = q.digest.unwrap_or(current);
    let held: Option<i64> =
        sqlx::query_scalar("SELECT seq FROM pack_revisions WHERE pack_id = $1 AND digest = $2")
            .bind(&id)
            .bind(&digest)
            .fetch_optional(&app.db)
            .await?;
    let dir = held
        .and_then(|_| tree_dir(&app.trees_dir(), &digest))
        .ok_or_else(|| {
            ApiError::NotFound(format!("revision `{}` of this pack", digest.escape_debug()))
        })?;
    let bytes = tokio::task::spawn_blocking(move || write_delivery(&dir, Vec::new()))
        .await
        .map_err(anyhow::Error::from)??;
    Ok(([(header::CONTENT_TYPE, "application/gzip")], bytes))
}

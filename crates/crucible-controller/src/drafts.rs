//! Drafts (RFC-0002:C-PACK-BASE): a team's named line of saved versions, each a stored tree.
//! A version may name a base, a pack revision the caller may read: availability is decided
//! before anything else that depends on the base, and refused in one wording whether the base
//! is missing or unreadable. The upload is then an overlay, flattened over the base's stored
//! tree (`trees::ingest_tar`), and the version records its provenance.

use crate::audit;
use crate::db::{new_id, now_ms};
use crate::error::{ApiError, ApiResult};
use crate::identity::{check_name, Caller, Role};
use crate::packs::{editable_team, raced, receive, record_revision, Origin, Revision, Upload};
use crate::trees::{tree_dir, OverlayPath};
use crate::App;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sqlx::Row;

#[derive(Deserialize)]
pub struct SaveQuery {
    name: String,
    team: Option<String>,
    /// The base's digest, when the upload is an overlay.
    base: Option<String>,
}

/// The only refusal an unusable base gets: it names the digest as given and cannot tell a
/// missing base from one the caller may not read.
fn unavailable(base: &str) -> ApiError {
    ApiError::Refused(format!(
        "the base `{}` is not available",
        base.escape_debug()
    ))
}

/// Whether a registered pack the caller may read (its team's, or shared with it) has `digest`
/// as its current or a prior revision.
async fn available(app: &App, caller: &Caller, digest: &str) -> ApiResult<bool> {
    let hit: Option<String> = sqlx::query_scalar(&format!(
        "SELECT r.digest FROM pack_revisions r JOIN packs p ON p.id = r.pack_id \
         WHERE {} AND r.digest = $2 LIMIT 1",
        crate::packs::readable_by("$1")
    ))
    .bind(&caller.id)
    .bind(digest)
    .fetch_optional(&app.db)
    .await?;
    Ok(hit.is_some())
}

/// `POST /v1/drafts?name=N[&team=T][&base=DIGEST]`, body an uncompressed tar: saves the next
/// version of the team's draft `N` (created on its first save).
pub async fn save(
    State(app): State<App>,
    caller: Caller,
    Query(q): Query<SaveQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<Value>> {
    let (team, team_id) = editable_team(&caller, q.team, "saving a draft")?;
    check_name(&q.name)?;
    // The base's tree and the stored version's are held from here until recorded.
    let _trees = app.trees_in_use().await;
    // Availability first: no other check that depends on the base may answer before it.
    let base_dir = match &q.base {
        None => None,
        Some(base) => {
            if !available(&app, &caller, base).await? {
                return Err(unavailable(base));
            }
            Some(tree_dir(&app.trees_dir(), base).ok_or_else(|| unavailable(base))?)
        }
    };
    let upload = Upload {
        base: base_dir,
        ..Upload::default()
    };
    let ingested = receive(&app, &headers, body, upload).await?;
    let overlay_paths = match &ingested.overlay {
        Some(o) => Some(serde_json::to_string(&o.paths).map_err(anyhow::Error::from)?),
        None => None,
    };

    let mut tx = app.db.begin().await?;
    sqlx::query(
        "INSERT INTO drafts (id, team_id, name, latest, created_at) VALUES ($1, $2, $3, 0, $4) \
         ON CONFLICT (team_id, name) DO NOTHING",
    )
    .bind(new_id())
    .bind(&team_id)
    .bind(&q.name)
    .bind(now_ms())
    .execute(&mut *tx)
    .await
    .map_err(raced)?;
    let id: String = sqlx::query_scalar("SELECT id FROM drafts WHERE team_id = $1 AND name = $2")
        .bind(&team_id)
        .bind(&q.name)
        .fetch_one(&mut *tx)
        .await?;
    let version: i64 =
        sqlx::query_scalar("UPDATE drafts SET latest = latest + 1 WHERE id = $1 RETURNING latest")
            .bind(&id)
            .fetch_one(&mut *tx)
            .await
            .map_err(raced)?;
    sqlx::query(
        "INSERT INTO draft_versions (draft_id, version, digest, base_digest, overlay_digest, \
         overlay_paths, delivered_bytes, ignored, subject_id, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(&id)
    .bind(version)
    .bind(&ingested.digest)
    .bind(q.base.clone())
    .bind(ingested.overlay.as_ref().map(|o| o.digest.clone()))
    .bind(overlay_paths)
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
        "draft.save",
        &format!("draft:{team}/{}", q.name),
        &format!("version {version}: {}", ingested.digest),
    )
    .await?;
    tx.commit().await.map_err(raced)?;
    let base = match (&q.base, ingested.overlay) {
        (Some(base), Some(o)) => Some(Provenance {
            base: base.clone(),
            overlay_digest: o.digest,
            overlay_paths: o.paths,
        }),
        _ => None,
    };
    let mut answer = version_json(&app, &caller, version, &ingested.digest, base).await?;
    answer["id"] = json!(id);
    answer["team"] = json!(team);
    answer["name"] = json!(q.name);
    answer["ignored"] = json!(ingested.ignored);
    answer["delivered_bytes"] = json!(ingested.delivered_bytes);
    Ok(Json(answer))
}

/// A version saved on a base: what it was made of. A pack revision published from that
/// version carries the same (RFC-0002:C-PACK-BASE).
pub(crate) struct Provenance {
    base: String,
    overlay_digest: String,
    overlay_paths: Vec<OverlayPath>,
}

impl Provenance {
    /// From a row's `base_digest`, `overlay_digest` and `overlay_paths` columns: none when the
    /// row names no base.
    pub(crate) fn from_row(r: &sqlx::any::AnyRow) -> ApiResult<Option<Provenance>> {
        let Some(base) = r.try_get::<Option<String>, _>("base_digest")? else {
            return Ok(None);
        };
        let paths: Option<String> = r.try_get("overlay_paths")?;
        Ok(Some(Provenance {
            base,
            overlay_digest: r
                .try_get::<Option<String>, _>("overlay_digest")?
                .unwrap_or_default(),
            overlay_paths: serde_json::from_str(&paths.unwrap_or_default())
                .map_err(anyhow::Error::from)?,
        }))
    }

    /// The columns it is stored in: base digest, overlay digest, overlay paths as JSON.
    fn columns(&self) -> ApiResult<(String, String, String)> {
        let paths = serde_json::to_string(&self.overlay_paths).map_err(anyhow::Error::from)?;
        Ok((self.base.clone(), self.overlay_digest.clone(), paths))
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "base_digest": self.base,
            "overlay_digest": self.overlay_digest,
            "overlay_paths": self.overlay_paths,
        })
    }
}

/// A version as the API returns it: its digest and, on a base, the provenance and the
/// readable packs that hold the base as a prior revision, each with its current revision.
async fn version_json(
    app: &App,
    caller: &Caller,
    version: i64,
    digest: &str,
    provenance: Option<Provenance>,
) -> ApiResult<Value> {
    let Some(p) = provenance else {
        return Ok(json!({ "version": version, "digest": digest, "provenance": null }));
    };
    let rows = sqlx::query(&format!(
        "SELECT DISTINCT p.id, s.name AS team, p.name, p.current_digest FROM pack_revisions r \
         JOIN packs p ON p.id = r.pack_id JOIN subjects s ON s.id = p.team_id \
         WHERE {} AND r.digest = $2 AND p.current_digest <> $2 ORDER BY p.id",
        crate::packs::readable_by("$1")
    ))
    .bind(&caller.id)
    .bind(&p.base)
    .fetch_all(&app.db)
    .await?;
    let mut moved_on = Vec::with_capacity(rows.len());
    for r in rows {
        moved_on.push(json!({
            "id": r.try_get::<String, _>("id")?,
            "team": r.try_get::<String, _>("team")?,
            "name": r.try_get::<String, _>("name")?,
            "current_digest": r.try_get::<String, _>("current_digest")?,
        }));
    }
    Ok(json!({
        "version": version,
        "digest": digest,
        "provenance": p.to_json(),
        "base_moved_on": moved_on,
    }))
}

/// `GET /v1/drafts`: the drafts of the caller's teams.
pub async fn list(State(app): State<App>, caller: Caller) -> ApiResult<Json<Value>> {
    let rows = crate::db::in_subjects_teams(&app.db, &caller.id, "drafts", "latest").await?;
    let mut drafts = Vec::with_capacity(rows.len());
    for r in rows {
        drafts.push(json!({
            "id": r.try_get::<String, _>("id")?,
            "team": r.try_get::<String, _>("team")?,
            "name": r.try_get::<String, _>("name")?,
            "latest": r.try_get::<i64, _>("latest")?,
        }));
    }
    Ok(Json(json!({ "drafts": drafts })))
}

/// `GET /v1/drafts/{id}`: the draft and every version, oldest first; not found when the
/// caller may not read it.
pub async fn show(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let (team, name) = readable(&app, &caller, &id).await?;
    let rows = sqlx::query(
        "SELECT version, digest, base_digest, overlay_digest, overlay_paths FROM draft_versions \
         WHERE draft_id = $1 ORDER BY version",
    )
    .bind(&id)
    .fetch_all(&app.db)
    .await?;
    let mut versions = Vec::with_capacity(rows.len());
    for r in rows {
        let provenance = Provenance::from_row(&r)?;
        let digest: String = r.try_get("digest")?;
        versions
            .push(version_json(&app, &caller, r.try_get("version")?, &digest, provenance).await?);
    }
    Ok(Json(json!({
        "id": id,
        "team": team,
        "name": name,
        "versions": versions,
    })))
}

/// The draft's team and name, when the caller may read it; otherwise not found, alike for a
/// missing draft and one of another team.
pub(crate) async fn readable(app: &App, caller: &Caller, id: &str) -> ApiResult<(String, String)> {
    let not_found = || ApiError::NotFound(format!("draft `{}`", id.escape_debug()));
    let row = sqlx::query(
        "SELECT d.team_id, s.name AS team, d.name FROM drafts d \
         JOIN subjects s ON s.id = d.team_id WHERE d.id = $1",
    )
    .bind(id)
    .fetch_optional(&app.db)
    .await?
    .ok_or_else(not_found)?;
    caller
        .role_in(&row.try_get::<String, _>("team_id")?)
        .ok_or_else(not_found)?;
    Ok((row.try_get("team")?, row.try_get("name")?))
}

/// `DELETE /v1/drafts/{id}` (editors): the draft and every version. Their stored trees are
/// collected at once unless something else (a pack revision, another draft, a run) records
/// them.
pub async fn delete(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let (team, name) = readable(&app, &caller, &id).await?;
    let answer = crate::collect::delete(
        &app,
        &caller,
        crate::collect::Owned::Draft,
        &id,
        (&team, &name),
    )
    .await?;
    Ok(Json(answer))
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Publish {
    /// The version to publish; the latest when left out.
    version: Option<i64>,
    /// The pack's name in the draft's team; the draft's name when left out.
    name: Option<String>,
}

/// `POST /v1/drafts/{id}/publish` `{"version"?, "name"?}` (editors): registers a draft version
/// (the latest by default) as a revision of the team's pack `name` (the draft's name by
/// default). The revision is the version's stored tree under its digest, refused over the
/// delivery budget in force now, and carries the version's provenance when it was saved on a
/// base (RFC-0002:C-PACK-BASE).
pub async fn publish(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let p: Publish = if body.is_empty() {
        Publish::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadRequest(format!("the publish is not well-formed: {e}")))?
    };
    let (team, draft) = readable(&app, &caller, &id).await?;
    let team_id = caller.team_for(&team, Role::Editor, "publishing a draft")?;
    let name = p.name.unwrap_or_else(|| draft.clone());
    check_name(&name)?;
    let _trees = app.trees_in_use().await;
    let row = sqlx::query(
        "SELECT version, digest, base_digest, overlay_digest, overlay_paths, delivered_bytes, \
         ignored FROM draft_versions WHERE draft_id = $1 AND ($2 < 0 OR version = $2) \
         ORDER BY version DESC LIMIT 1",
    )
    .bind(&id)
    .bind(p.version.unwrap_or(-1))
    .fetch_optional(&app.db)
    .await?
    .ok_or_else(|| {
        ApiError::NotFound(format!(
            "version {} of draft `{draft}`",
            p.version.unwrap_or_default()
        ))
    })?;
    let version: i64 = row.try_get("version")?;
    let delivered_bytes = row.try_get::<i64, _>("delivered_bytes")? as u64;
    crate::trees::within_budget(delivered_bytes, app.config.delivery_budget_bytes)?;
    let provenance = Provenance::from_row(&row)?;
    let revision = Revision {
        digest: row.try_get("digest")?,
        delivered_bytes,
        ignored: serde_json::from_str(&row.try_get::<String, _>("ignored")?)
            .map_err(anyhow::Error::from)?,
        origin: Origin::Draft,
        source: Some(format!("draft:{draft} version {version}")),
        provenance: provenance.as_ref().map(Provenance::columns).transpose()?,
    };
    let mut answer = record_revision(&app, &caller, (&team, &team_id), &name, &revision).await?;
    answer["source"] = json!(revision.source);
    answer["provenance"] = provenance.map_or(Value::Null, |p| p.to_json());
    Ok(Json(answer))
}

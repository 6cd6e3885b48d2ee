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
    let _trees = app.trees_in_use().await;
    let ingested = receive(&app, &headers, body, Upload::default()).await?;
    let revision = Revision::of(&ingested, Origin::Registered);
    let answer = record_revision(&app, &caller, (&team, &team_id), &q.name, &revision).await?;
    Ok(Json(answer))
}

#[derive(Deserialize)]
pub struct ImportQuery {
    name: String,
    team: Option<String>,
    /// The digest the archive is expected to hold: refused, storing nothing, when it differs.
    digest: Option<String>,
}

/// `POST /v1/packs/import?name=N[&team=T][&digest=D]`, body a gzipped tar: the delivery
/// archive another controller serves (`GET /v1/packs/{id}/archive`) or an export of one.
/// Checked by every rule a registration is, against the budget in force, and recorded as an
/// imported revision, which never names a base (RFC-0002:C-PACK-BASE).
pub async fn import(
    State(app): State<App>,
    caller: Caller,
    Query(q): Query<ImportQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<Value>> {
    let (team, team_id) = editable_team(&caller, q.team, "importing a pack")?;
    check_name(&q.name)?;
    let _trees = app.trees_in_use().await;
    let upload = Upload {
        gzip: true,
        expect: q.digest,
        ..Upload::default()
    };
    let ingested = receive(&app, &headers, body, upload).await?;
    let revision = Revision::of(&ingested, Origin::Imported);
    let answer = record_revision(&app, &caller, (&team, &team_id), &q.name, &revision).await?;
    Ok(Json(answer))
}

/// How a pack revision came to be (`pack_revisions.origin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Uploaded as a tree (`POST /v1/packs`, `crucible remote pack push`).
    Registered,
    /// Another controller's delivery archive (`POST /v1/packs/import`).
    Imported,
    /// Published from a draft version (`POST /v1/drafts/{id}/publish`).
    Draft,
}

impl Origin {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Origin::Registered => "registered",
            Origin::Imported => "imported",
            Origin::Draft => "draft",
        }
    }
}

/// A revision to record: its tree and, for one published from a draft version saved on a
/// base, that version's provenance (`base_digest`, `overlay_digest`, `overlay_paths` JSON).
pub(crate) struct Revision {
    pub digest: String,
    pub delivered_bytes: u64,
    pub ignored: Vec<String>,
    pub origin: Origin,
    /// For a published draft: `draft:NAME version N`.
    pub source: Option<String>,
    pub provenance: Option<(String, String, String)>,
}

impl Revision {
    fn of(ingested: &Ingested, origin: Origin) -> Revision {
        Revision {
            digest: ingested.digest.clone(),
            delivered_bytes: ingested.delivered_bytes,
            ignored: ingested.ignored.clone(),
            origin,
            source: None,
            provenance: None,
        }
    }
}

/// Records `rev` as the team's pack `name`: a new pack, or a new current revision when the
/// tree differs from the current one (`changed: false` when it does not), with its audit row,
/// in one transaction. The caller holds the tree store (`App::trees_in_use`).
pub(crate) async fn record_revision(
    app: &App,
    caller: &Caller,
    (team, team_id): (&str, &str),
    name: &str,
    rev: &Revision,
) -> ApiResult<Value> {
    let mut tx = app.db.begin().await?;
    let existing =
        sqlx::query("SELECT id, current_digest FROM packs WHERE team_id = $1 AND name = $2")
            .bind(team_id)
            .bind(name)
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
            .bind(team_id)
            .bind(name)
            .bind(&rev.digest)
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
            if current == rev.digest {
                (id, last, false)
            } else {
                sqlx::query("UPDATE packs SET current_digest = $1 WHERE id = $2")
                    .bind(&rev.digest)
                    .bind(&id)
                    .execute(&mut *tx)
                    .await?;
                (id, last + 1, true)
            }
        }
    };
    if changed {
        let (base, overlay, paths) = match &rev.provenance {
            Some((b, o, p)) => (Some(b.clone()), Some(o.clone()), Some(p.clone())),
            None => (None, None, None),
        };
        sqlx::query(
            "INSERT INTO pack_revisions (pack_id, seq, digest, delivered_bytes, ignored, \
             subject_id, created_at, origin, source, base_digest, overlay_digest, overlay_paths) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&pack_id)
        .bind(seq)
        .bind(&rev.digest)
        .bind(rev.delivered_bytes as i64)
        .bind(serde_json::to_string(&rev.ignored).map_err(anyhow::Error::from)?)
        .bind(&caller.id)
        .bind(now_ms())
        .bind(rev.origin.as_str())
        .bind(rev.source.clone())
        .bind(base)
        .bind(overlay)
        .bind(paths)
        .execute(&mut *tx)
        .await
        .map_err(raced)?;
        let action = match rev.origin {
            Origin::Registered => "pack.register",
            Origin::Imported => "pack.import",
            Origin::Draft => "pack.publish",
        };
        let detail = match &rev.source {
            Some(src) => format!("{} (from {src})", rev.digest),
            None => rev.digest.clone(),
        };
        audit::record(
            &mut tx,
            &caller.id,
            action,
            &format!("pack:{team}/{name}"),
            &detail,
        )
        .await?;
    }
    tx.commit().await.map_err(raced)?;
    app.publication_due(); // RFC-0002:C-PACK-PUBLISH (publish.rs)
    Ok(json!({
        "id": pack_id,
        "team": team,
        "name": name,
        "digest": rev.digest,
        "revision": seq,
        "changed": changed,
        "origin": rev.origin.as_str(),
        "ignored": rev.ignored,
        "delivered_bytes": rev.delivered_bytes,
    }))
}

/// How an upload is read: a tar, or (an import) a gzipped one, checked against the digest it
/// is expected to hold; over a stored base tree (a draft's overlay) or whole.
#[derive(Default)]
pub(crate) struct Upload {
    pub base: Option<PathBuf>,
    pub gzip: bool,
    pub expect: Option<String>,
}

/// Streams an upload to a spool file under the size limit (refused as soon as it is declared
/// or read past it, never buffered whole), then ingests it, over `base` when given.
pub(crate) async fn receive(
    app: &App,
    headers: &HeaderMap,
    mut body: Body,
    upload: Upload,
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
        let spooled = spool.path();
        let unzipped;
        let tar = if upload.gzip {
            unzipped = crate::trees::gunzip_bounded(spooled, &staging, limit)?;
            unzipped.path()
        } else {
            spooled
        };
        ingest_tar(
            &trees,
            &staging,
            tar,
            budget,
            upload.base.as_deref(),
            upload.expect.as_deref(),
        )
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
pub(crate) async fn readable(
    app: &App,
    caller: &Caller,
    id: &str,
) -> ApiResult<(String, String, String)> {
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
        "SELECT seq, digest, delivered_bytes, ignored, created_at, origin, source, base_digest, \
         overlay_digest, overlay_paths FROM pack_revisions WHERE pack_id = $1 ORDER BY seq",
    )
    .bind(&id)
    .fetch_all(&app.db)
    .await?;
    let mut revisions = Vec::with_capacity(rows.len());
    for r in rows {
        let ignored: Value = serde_json::from_str(&r.try_get::<String, _>("ignored")?)
            .map_err(anyhow::Error::from)?;
        let digest: String = r.try_get("digest")?;
        revisions.push(json!({
            "revision": r.try_get::<i64, _>("seq")?,
            "publication": crate::publish::state_json(&app.db, &digest).await?,
            "digest": digest,
            "delivered_bytes": r.try_get::<i64, _>("delivered_bytes")?,
            "ignored": ignored,
            "at_ms": r.try_get::<i64, _>("created_at")?,
            "origin": r.try_get::<String, _>("origin")?,
            "source": r.try_get::<Option<String>, _>("source")?,
            "provenance": crate::drafts::Provenance::from_row(&r)?.map(|p| p.to_json()),
        }));
    }
    Ok(Json(json!({
        "id": id, "team": team, "name": name, "digest": digest, "revisions": revisions,
    })))
}

/// `DELETE /v1/packs/{id}` (editors): the pack and every revision. Its stored trees are
/// collected at once unless something else (a draft version, another pack, a run) records
/// them; runs of it keep their recorded digest and their delivered tree.
pub async fn delete(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let (team, name, _) = readable(&app, &caller, &id).await?;
    let answer = crate::collect::delete(
        &app,
        &caller,
        crate::collect::Owned::Pack,
        &id,
        (&team, &name),
    )
    .await?;
    Ok(Json(answer))
}

/// `?digest=D`, naming one of a pack's revisions: its archive's, its publication's.
#[derive(Deserialize)]
pub struct RevisionQuery {
    /// One of the pack's revisions; the current one when left out.
    digest: Option<String>,
}

impl RevisionQuery {
    /// The revision of pack `id` it names (`current` when it names none); not found when the
    /// pack has no such revision.
    pub(crate) async fn revision(self, app: &App, id: &str, current: String) -> ApiResult<String> {
        let digest = self.digest.unwrap_or(current);
        let held: Option<i64> =
            sqlx::query_scalar("SELECT seq FROM pack_revisions WHERE pack_id = $1 AND digest = $2")
                .bind(id)
                .bind(&digest)
                .fetch_optional(&app.db)
                .await?;
        match held {
            Some(_) => Ok(digest),
            None => Err(ApiError::NotFound(format!(
                "revision `{}` of this pack",
                digest.escape_debug()
            ))),
        }
    }
}

/// `GET /v1/packs/{id}/archive[?digest=D]`: the gzipped tar a run of that revision is
/// delivered, every file mode 0755.
pub async fn archive(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<RevisionQuery>,
) -> ApiResult<impl IntoResponse> {
    let (_, _, current) = readable(&app, &caller, &id).await?;
    let _trees = app.trees_in_use().await;
    let digest = q.revision(&app, &id, current).await?;
    let dir = tree_dir(&app.trees_dir(), &digest).ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!(
            "a held revision's digest `{digest}` is malformed"
        ))
    })?;
    let bytes = tokio::task::spawn_blocking(move || write_delivery(&dir, Vec::new()))
        .await
        .map_err(anyhow::Error::from)??;
    Ok(([(header::CONTENT_TYPE, "application/gzip")], bytes))
}

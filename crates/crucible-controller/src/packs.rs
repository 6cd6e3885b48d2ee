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

/// The SQL condition "subject `$n` may read pack `p`": the pack is its team's, or was shared
/// with a team of the subject's (`pack_shares`). Every query that reads packs for a subject
/// goes through it, so a share widens each of them alike and an unshare narrows them alike.
pub(crate) fn readable_by(subject: &str) -> String {
    format!(
        "(p.team_id IN (SELECT rm.team_id FROM memberships rm WHERE rm.user_id = {subject}) \
         OR p.id IN (SELECT rs.pack_id FROM pack_shares rs JOIN memberships rm \
         ON rm.team_id = rs.team_id WHERE rm.user_id = {subject}))"
    )
}

/// The SQL condition "team `$n` may launch pack `p`": its own, or shared with it.
pub(crate) fn launchable_by(team: &str) -> String {
    format!(
        "(p.team_id = {team} OR p.id IN (SELECT ls.pack_id FROM pack_shares ls \
         WHERE ls.team_id = {team}))"
    )
}

/// `GET /v1/packs`: the packs of the caller's teams and those shared with them (`shared`).
pub async fn list(State(app): State<App>, caller: Caller) -> ApiResult<Json<Value>> {
    let rows = sqlx::query(&format!(
        "SELECT p.id, p.team_id, s.name AS team, p.name, p.current_digest FROM packs p \
         JOIN subjects s ON s.id = p.team_id WHERE {} ORDER BY s.name, p.name",
        readable_by("$1")
    ))
    .bind(&caller.id)
    .fetch_all(&app.db)
    .await?;
    let mut packs = Vec::with_capacity(rows.len());
    for r in rows {
        let team_id: String = r.try_get("team_id")?;
        packs.push(json!({
            "id": r.try_get::<String, _>("id")?,
            "team": r.try_get::<String, _>("team")?,
            "name": r.try_get::<String, _>("name")?,
            "digest": r.try_get::<String, _>("current_digest")?,
            "shared": caller.role_in(&team_id).is_none(),
        }));
    }
    Ok(Json(json!({ "packs": packs })))
}

/// A pack the caller may read: its team, name and current digest, and whether the caller reads
/// it as a member of its team (`owned`) or only through a share.
pub(crate) struct Readable {
    pub team: String,
    pub name: String,
    pub current: String,
    pub owned: bool,
}

impl Readable {
    /// Refuses a change to a pack the caller reads only through a share: a shared pack is
    /// read-only to the teams it was shared with.
    pub(crate) fn owned_for(&self, what: &str) -> ApiResult<()> {
        if self.owned {
            return Ok(());
        }
        Err(ApiError::Forbidden(format!(
            "the pack is team `{}`'s, shared with your team to read and launch: {what} is for its own team",
            self.team
        )))
    }
}

/// The pack when the caller may read it (its team's, or shared with one of the caller's
/// teams); otherwise not found, exactly as a missing one.
pub(crate) async fn readable(app: &App, caller: &Caller, id: &str) -> ApiResult<Readable> {
    let not_found = || ApiError::NotFound(format!("pack `{}`", id.escape_debug()));
    let row = sqlx::query(&format!(
        "SELECT p.team_id, s.name AS team, p.name, p.current_digest FROM packs p \
         JOIN subjects s ON s.id = p.team_id WHERE p.id = $1 AND {}",
        readable_by("$2")
    ))
    .bind(id)
    .bind(&caller.id)
    .fetch_optional(&app.db)
    .await?
    .ok_or_else(not_found)?;
    let team_id: String = row.try_get("team_id")?;
    Ok(Readable {
        team: row.try_get("team")?,
        name: row.try_get("name")?,
        current: row.try_get("current_digest")?,
        owned: caller.role_in(&team_id).is_some(),
    })
}

/// `GET /v1/packs/{id}`: the pack and every revision, current last.
pub async fn show(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let pack = readable(&app, &caller, &id).await?;
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
    // Which teams it is shared with is its own team's business only.
    let shared_with = if pack.owned {
        json!(shared_with(&app, &id).await?)
    } else {
        Value::Null
    };
    Ok(Json(json!({
        "id": id, "team": pack.team, "name": pack.name, "digest": pack.current,
        "revisions": revisions, "shared": !pack.owned, "shared_with": shared_with,
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
    let pack = readable(&app, &caller, &id).await?;
    pack.owned_for("deleting it")?;
    let answer = crate::collect::delete(
        &app,
        &caller,
        crate::collect::Owned::Pack,
        &id,
        (&pack.team, &pack.name),
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
    let pack = readable(&app, &caller, &id).await?;
    let _trees = app.trees_in_use().await;
    let digest = q.revision(&app, &id, pack.current).await?;
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

/// The teams pack `id` is shared with, by name.
async fn shared_with(app: &App, id: &str) -> ApiResult<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT s.name FROM pack_shares sh JOIN subjects s ON s.id = sh.team_id \
         WHERE sh.pack_id = $1 ORDER BY s.name",
    )
    .bind(id)
    .fetch_all(&app.db)
    .await?)
}

#[derive(Deserialize)]
pub struct ShareBody {
    /// The team the pack is shared with.
    team: String,
}

/// The pack `id` for a share or an unshare by the caller (an admin of its own team), and the
/// id of the team named `team` (not the pack's own).
async fn share_target(
    app: &App,
    caller: &Caller,
    id: &str,
    team: &str,
    what: &str,
) -> ApiResult<(Readable, String)> {
    let pack = readable(app, caller, id).await?;
    pack.owned_for(what)?;
    let own = caller.team_for(&pack.team, Role::Admin, what)?;
    let other: Option<String> =
        sqlx::query_scalar("SELECT id FROM subjects WHERE name = $1 AND kind = 'team'")
            .bind(team)
            .fetch_optional(&app.db)
            .await?;
    let other =
        other.ok_or_else(|| ApiError::NotFound(format!("team `{}`", team.escape_debug())))?;
    if other == own {
        return Err(ApiError::Refused(format!(
            "the pack is team `{team}`'s own: it is shared with other teams"
        )));
    }
    Ok((pack, other))
}

/// `POST /v1/packs/{id}/shares` `{"team"}` (admins of the pack's team): the team's members read
/// the pack, every revision, and may launch it; `changed: false` when it already was shared.
pub async fn share(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<ShareBody>,
) -> ApiResult<Json<Value>> {
    let (pack, team_id) = share_target(&app, &caller, &id, &body.team, "sharing it").await?;
    let mut tx = app.db.begin().await?;
    let done = sqlx::query(
        "INSERT INTO pack_shares (pack_id, team_id, subject_id, created_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (pack_id, team_id) DO NOTHING",
    )
    .bind(&id)
    .bind(&team_id)
    .bind(&caller.id)
    .bind(now_ms())
    .execute(&mut *tx)
    .await?;
    let changed = done.rows_affected() > 0;
    if changed {
        let target = format!("pack:{}/{}", pack.team, pack.name);
        let detail = format!("team:{}", body.team);
        audit::record(&mut tx, &caller.id, "pack.share", &target, &detail).await?;
    }
    tx.commit().await?;
    Ok(Json(json!({
        "id": id, "team": body.team, "changed": changed,
        "shared_with": shared_with(&app, &id).await?,
    })))
}

/// `DELETE /v1/packs/{id}/shares/{team}` (admins of the pack's team): the team reads the pack no
/// more, and cannot tell it from a missing one; its runs of it stay its runs. `changed: false`
/// when it was not shared.
pub async fn unshare(
    State(app): State<App>,
    caller: Caller,
    Path((id, team)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let (pack, team_id) = share_target(&app, &caller, &id, &team, "unsharing it").await?;
    let mut tx = app.db.begin().await?;
    let done = sqlx::query("DELETE FROM pack_shares WHERE pack_id = $1 AND team_id = $2")
        .bind(&id)
        .bind(&team_id)
        .execute(&mut *tx)
        .await?;
    let changed = done.rows_affected() > 0;
    if changed {
        let target = format!("pack:{}/{}", pack.team, pack.name);
        audit::record(
            &mut tx,
            &caller.id,
            "pack.unshare",
            &target,
            &format!("team:{team}"),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(Json(json!({
        "id": id, "team": team, "changed": changed,
        "shared_with": shared_with(&app, &id).await?,
    })))
}

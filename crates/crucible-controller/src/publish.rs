//! OCI publication (RFC-0002:C-PACK-PUBLISH): with `crucible serve --registry URL`, every
//! registered, imported and draft-graduated pack revision is pushed to that one repository
//! under the tag `tree1-<hex>`, by a background worker, so a registration never waits on (or
//! fails by) the registry. With no registry configured nothing here runs.
//!
//! The artifact is the OCI empty config and gzipped tar layers whose bytes are a function of
//! the files alone (`LAYER_ENCODING`): byte-ordered entries, mode 0755, owner 0, time 0, gzip
//! level 6 with a zero header time and "unknown" OS, so one pack gives one manifest digest on
//! any store. A pack saved on a base goes as two layers (the base's files, then the overlay's)
//! while the base's tree is held, and as one after. The tag is never moved: a HEAD comes first,
//! and an existing tag is recorded as this pack's publication when its manifest names this
//! pack's digest, and refused as a permanent conflict otherwise.
//!
//! The state is kept per digest (`publications`): a revision whose digest has no row is
//! unpublished; pending while tried, with the last transient error; published with the
//! manifest digest; failed with the last permanent error, tried again only when an editor of a
//! pack recording it asks (`POST /v1/packs/{id}/publication`).

use crate::error::{ApiError, ApiResult};
use crate::identity::{Caller, Role};
use crate::oci::{self, Failure, Repository};
use crate::trees::{tree_dir, write_tar, OverlayPath};
use crate::App;
use anyhow::Context;
use axum::extract::{Path, Query, State};
use axum::Json;
use crucible_pack::files::pack_files;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sqlx::{AnyPool, Row};
use std::collections::BTreeMap;
use std::time::Duration;

/// The layer encoding version, carried as a manifest annotation: a change to how layer bytes
/// are made (tar header format, compressor, level) is a new version.
pub const LAYER_ENCODING: &str = "1";

/// The artifact type of a published pack.
pub const ARTIFACT_TYPE: &str = "application/vnd.dev.crucible.pack.v1";

/// The first and the longest wait between tries of a transient failure.
const FIRST_BACKOFF_MS: i64 = 500;
const MAX_BACKOFF_MS: i64 = 5 * 60 * 1000;

/// `crucible serve --registry URL [--registry-credentials FILE]`.
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    /// The repository: `http[s]://HOST[:PORT]/NAME`.
    pub url: String,
    /// `USER:PASSWORD`, read from the credentials file at start.
    pub credentials: Option<String>,
}

impl RegistryConfig {
    /// What a publication row records as its registry: the URL without a trailing slash.
    fn key(&self) -> String {
        self.url.trim_end_matches('/').to_string()
    }
}

/// The worker's doorbell: rung when a revision is recorded or a retry asked for.
#[derive(Default)]
pub struct Publisher {
    wake: tokio::sync::Notify,
}

impl App {
    /// Something may now need publishing: wake the worker (nothing when none runs).
    pub(crate) fn publication_due(&self) {
        self.publisher.wake.notify_one();
    }
}

/// At start: resets every state made against another registry (or, with none configured,
/// every state) to unpublished, then starts the worker when a registry is configured.
pub async fn start(app: &App) -> anyhow::Result<()> {
    let Some(registry) = app.config.registry.clone() else {
        sqlx::query("DELETE FROM publications")
            .execute(&app.db)
            .await?;
        return Ok(());
    };
    let key = registry.key();
    sqlx::query("DELETE FROM publications WHERE registry <> $1")
        .bind(&key)
        .execute(&app.db)
        .await?;
    let repo = Repository::new(&key, registry.credentials.as_deref())
        .context("the pack registry (--registry)")?;
    let app = app.clone();
    tokio::spawn(async move {
        loop {
            let next = match round(&app, &repo, &key).await {
                Ok(next) => next,
                Err(e) => {
                    eprintln!("controller: publishing packs: {e:#}");
                    Some(crate::db::now_ms() + 5000)
                }
            };
            let wait = next.map_or(3_600_000, |t| (t - crate::db::now_ms()).max(0));
            tokio::select! {
                _ = app.publisher.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(wait as u64)) => {}
            }
        }
    });
    Ok(())
}

/// A digest to publish, with the base its layers may share.
struct Due {
    digest: String,
    base: Option<(String, Vec<OverlayPath>)>,
    attempts: i64,
}

/// Tries every digest that is due; the time the next pending one is due, if any.
async fn round(app: &App, repo: &Repository, registry: &str) -> anyhow::Result<Option<i64>> {
    let rows = sqlx::query(
        "SELECT r.digest, r.base_digest, r.overlay_paths, p.attempts, p.next_attempt_at \
         FROM pack_revisions r LEFT JOIN publications p ON p.digest = r.digest \
         WHERE p.digest IS NULL OR p.state = 'pending' ORDER BY r.created_at, r.seq",
    )
    .fetch_all(&app.db)
    .await?;
    let now = crate::db::now_ms();
    let mut due: BTreeMap<String, Due> = BTreeMap::new();
    let mut next: Option<i64> = None;
    for r in rows {
        let digest: String = r.try_get("digest")?;
        let at: Option<i64> = r.try_get("next_attempt_at")?;
        if let Some(at) = at.filter(|at| *at > now) {
            next = Some(next.map_or(at, |n| n.min(at)));
            continue;
        }
        let base = match r.try_get::<Option<String>, _>("base_digest")? {
            Some(b) => {
                let paths: Option<String> = r.try_get("overlay_paths")?;
                Some((b, serde_json::from_str(&paths.unwrap_or_default())?))
            }
            None => None,
        };
        let entry = due.entry(digest.clone()).or_insert(Due {
            digest,
            base: None,
            attempts: r.try_get::<Option<i64>, _>("attempts")?.unwrap_or(0),
        });
        // The first revision naming a base gives the layout (a registered one names none).
        if entry.base.is_none() {
            entry.base = base;
        }
    }
    for d in due.into_values() {
        let outcome = publish_one(app, repo, &d).await;
        if let Some(at) = record(app, registry, &d, outcome).await? {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
    }
    Ok(next)
}

/// What a publication made.
struct Published {
    manifest: String,
    layers: usize,
    /// For a pack on a base: whether the base's files are the first layer.
    base_layer_shared: Option<bool>,
}

/// Records an attempt's outcome; for a transient failure, when the next try is due.
async fn record(
    app: &App,
    registry: &str,
    d: &Due,
    outcome: oci::Result<Published>,
) -> anyhow::Result<Option<i64>> {
    let now = crate::db::now_ms();
    let (state, published, error, attempts, next) = match &outcome {
        Ok(p) => ("published", Some(p), None, 0, now),
        Err(Failure::Transient(m)) => {
            let attempts = d.attempts + 1;
            let wait = (FIRST_BACKOFF_MS << (attempts - 1).min(20)).min(MAX_BACKOFF_MS);
            ("pending", None, Some(m.as_str()), attempts, now + wait)
        }
        Err(Failure::Permanent(m)) => ("failed", None, Some(m.as_str()), d.attempts + 1, now),
    };
    sqlx::query(
        "INSERT INTO publications (digest, registry, state, manifest_digest, layers, \
         base_layer_shared, last_error, attempts, next_attempt_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (digest) DO UPDATE SET \
         registry = $2, state = $3, manifest_digest = $4, layers = $5, base_layer_shared = $6, \
         last_error = $7, attempts = $8, next_attempt_at = $9, updated_at = $10",
    )
    .bind(&d.digest)
    .bind(registry)
    .bind(state)
    .bind(published.map(|p| p.manifest.clone()))
    .bind(published.map(|p| p.layers as i64))
    .bind(published.and_then(|p| p.base_layer_shared).map(i64::from))
    .bind(error)
    .bind(attempts)
    .bind(next)
    .bind(now)
    .execute(&app.db)
    .await?;
    Ok((state == "pending").then_some(next))
}

/// The OCI manifest, serialized in this field order (a struct, not a map, so the bytes and
/// with them the manifest digest do not depend on a JSON map's ordering).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    media_type: String,
    #[serde(default)]
    artifact_type: Option<String>,
    config: Descriptor,
    layers: Vec<Descriptor>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<String>,
}

impl Descriptor {
    fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.into(),
            digest: oci::sha256(bytes),
            size: bytes.len() as u64,
            data: None,
        }
    }
}

/// The tag a digest is published under: `tree1-<hex>`.
pub fn tag_of(digest: &str) -> String {
    digest.replacen("tree1:", "tree1-", 1)
}

/// One gzipped tar layer of `files` under `root`: bytes fixed by the files and
/// `LAYER_ENCODING` alone.
pub fn layer(root: &std::path::Path, files: &[String]) -> std::io::Result<Vec<u8>> {
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), flate2::Compression::new(6));
    write_tar(root, files, gz)?.finish()
}

/// Publishes one digest, or records the tag that already names it.
async fn publish_one(app: &App, repo: &Repository, d: &Due) -> oci::Result<Published> {
    let blocking = |f: Box<dyn FnOnce() -> oci::Result<Published> + Send>| async move {
        tokio::task::spawn_blocking(f)
            .await
            .unwrap_or_else(|e| Err(Failure::Transient(format!("publishing: {e}"))))
    };
    // Layers are made while the tree store is held, so neither tree is collected meanwhile;
    // they are made before the tag is looked at, to compare with what an existing tag holds.
    let _trees = app.trees_in_use().await;
    let trees = app.trees_dir();
    let tree = tree_dir(&trees, &d.digest)
        .filter(|t| t.is_dir())
        .ok_or_else(|| Failure::Permanent(format!("the stored tree of {} is gone", d.digest)))?;
    let held = crate::db::recorded_digests(&app.db)
        .await
        .map_err(|e| Failure::Transient(format!("reading the recorded digests: {e}")))?;
    let overlay: Option<Vec<String>> = d
        .base
        .as_ref()
        .map(|(_, paths)| paths.iter().map(|p| p.path.clone()).collect());
    let base_dir = d
        .base
        .as_ref()
        .and_then(|(base, _)| tree_dir(&trees, base).filter(|b| held.contains(base) && b.is_dir()));
    let (r, pack_digest) = (repo.clone(), d.digest.clone());
    blocking(Box::new(move || {
        let local = |e: std::io::Error| Failure::Transient(format!("reading the stored tree: {e}"));
        let listed = |root: &std::path::Path| {
            pack_files(root)
                .map(|l| l.files)
                .map_err(|e| Failure::Permanent(format!("the stored tree: {e}")))
        };
        let whole = || layer(&tree, &listed(&tree)?).map_err(local);
        let layers = match (&base_dir, &overlay) {
            (Some(base_dir), Some(overlay)) => vec![
                layer(base_dir, &listed(base_dir)?).map_err(local)?,
                layer(&tree, overlay).map_err(local)?,
            ],
            _ => vec![whole()?],
        };
        let tag = tag_of(&pack_digest);
        let forms = Forms {
            now: &layers,
            whole: &whole,
            overlay: overlay
                .as_ref()
                .map(|o| layer(&tree, o).map_err(local))
                .transpose()?,
        };
        if let Some(p) = existing(&r, &tag, &pack_digest, &forms)? {
            return Ok(p);
        }
        let mut config = Descriptor::of(oci::EMPTY_CONFIG_TYPE, oci::EMPTY_CONFIG);
        config.data = Some("e30=".into());
        let manifest = Manifest {
            schema_version: 2,
            media_type: oci::MANIFEST_TYPE.into(),
            artifact_type: Some(ARTIFACT_TYPE.into()),
            config,
            layers: layers
                .iter()
                .map(|l| Descriptor::of(oci::LAYER_TYPE, l))
                .collect(),
            annotations: BTreeMap::from([
                ("dev.crucible.layer.encoding".into(), LAYER_ENCODING.into()),
                ("dev.crucible.pack.digest".into(), pack_digest.clone()),
                ("dev.crucible.pack.kind".into(), "playbook".into()),
            ]),
        };
        let bytes = serde_json::to_vec(&manifest).expect("a manifest serializes");
        r.put_blob(oci::EMPTY_CONFIG)?;
        for l in &layers {
            r.put_blob(l)?;
        }
        let digest = r.put_manifest(&tag, &bytes)?;
        Ok(Published {
            manifest: digest,
            layers: layers.len(),
            base_layer_shared: overlay.is_some().then_some(base_dir.is_some()),
        })
    }))
    .await
}

/// The layers this pack is published as: `now` (two, base and overlay, while a base is held;
/// else one), the one-layer form (made on demand), and for a pack on a base its overlay layer.
struct Forms<'a> {
    now: &'a [Vec<u8>],
    whole: &'a dyn Fn() -> oci::Result<Vec<u8>>,
    overlay: Option<Vec<u8>>,
}

/// The publication the tag already records, when it exists and is this pack's: its manifest
/// names this digest, has the empty config, and its layers are the ones this pack is published
/// as (compared by digest: layer bytes are a function of the files). A tag naming anything
/// else is a permanent conflict. `None` when the tag does not exist yet.
///
/// A two-layer manifest of a pack whose base is no longer held cannot have its base layer
/// made again: its overlay layer is compared, and its base layer taken as the base's.
fn existing(
    repo: &Repository,
    tag: &str,
    digest: &str,
    forms: &Forms,
) -> oci::Result<Option<Published>> {
    let Some(manifest) = repo.manifest_digest(tag)? else {
        return Ok(None);
    };
    let bytes = repo.manifest(&manifest)?;
    let conflict = |why: &str| {
        Failure::Permanent(format!(
            "the tag {tag} already names manifest {manifest}, {why}: the tag is never moved"
        ))
    };
    let parsed: Manifest =
        serde_json::from_slice(&bytes).map_err(|_| conflict("which is not an OCI manifest"))?;
    if parsed
        .annotations
        .get("dev.crucible.pack.digest")
        .map(String::as_str)
        != Some(digest)
    {
        return Err(conflict("which is not this pack's"));
    }
    let theirs: Vec<&str> = parsed.layers.iter().map(|l| l.digest.as_str()).collect();
    let digests = |ls: &[Vec<u8>]| ls.iter().map(|l| oci::sha256(l)).collect::<Vec<_>>();
    let same = |ours: Vec<String>| theirs.iter().copied().eq(ours.iter().map(String::as_str));
    let layers_match = parsed.config.digest == oci::sha256(oci::EMPTY_CONFIG)
        && parsed
            .layers
            .iter()
            .all(|l| l.media_type == oci::LAYER_TYPE)
        && (same(digests(forms.now))
            || match (theirs.len(), &forms.overlay) {
                (1, _) => same(digests(&[(forms.whole)()?])),
                (2, Some(overlay)) if forms.now.len() == 1 => theirs[1] == oci::sha256(overlay),
                _ => false,
            });
    if !layers_match {
        return Err(conflict(
            "which claims this pack but whose layers are not this pack's",
        ));
    }
    Ok(Some(Published {
        manifest,
        layers: parsed.layers.len(),
        base_layer_shared: forms.overlay.is_some().then_some(parsed.layers.len() == 2),
    }))
}

/// A digest's publication state as the API returns it.
pub(crate) async fn state_json(db: &AnyPool, digest: &str) -> ApiResult<Value> {
    let row = sqlx::query(
        "SELECT state, manifest_digest, layers, base_layer_shared, last_error, attempts, \
         updated_at FROM publications WHERE digest = $1",
    )
    .bind(digest)
    .fetch_optional(db)
    .await?;
    let Some(r) = row else {
        return Ok(json!({ "state": "unpublished" }));
    };
    Ok(json!({
        "state": r.try_get::<String, _>("state")?,
        "manifest_digest": r.try_get::<Option<String>, _>("manifest_digest")?,
        "tag": tag_of(digest),
        "layers": r.try_get::<Option<i64>, _>("layers")?,
        "base_layer_shared": r.try_get::<Option<i64>, _>("base_layer_shared")?.map(|b| b != 0),
        "last_error": r.try_get::<Option<String>, _>("last_error")?,
        "attempts": r.try_get::<i64, _>("attempts")?,
        "at_ms": r.try_get::<i64, _>("updated_at")?,
    }))
}

/// `POST /v1/packs/{id}/publication[?digest=D]` (editors of the pack's team): publish the
/// revision again now: a failed (permanent) publication is tried once more, a pending one at
/// once; a published one is left as it is.
pub async fn retry(
    State(app): State<App>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<crate::packs::RevisionQuery>,
) -> ApiResult<Json<Value>> {
    let pack = crate::packs::readable(&app, &caller, &id).await?;
    pack.owned_for("retrying its publication")?;
    let (team, name) = (&pack.team, &pack.name);
    caller.team_for(team, Role::Editor, "retrying a publication")?;
    let digest = q.revision(&app, &id, pack.current).await?;
    if app.config.registry.is_none() {
        return Err(ApiError::Refused(
            "no pack registry is configured (crucible serve --registry)".into(),
        ));
    }
    let mut tx = app.db.begin().await?;
    sqlx::query(
        "UPDATE publications SET state = 'pending', attempts = 0, next_attempt_at = $1 \
         WHERE digest = $2 AND state <> 'published'",
    )
    .bind(crate::db::now_ms())
    .bind(&digest)
    .execute(&mut *tx)
    .await?;
    let target = format!("pack:{team}/{name}");
    crate::audit::record(
        &mut tx,
        &caller.id,
        "pack.publication.retry",
        &target,
        &digest,
    )
    .await?;
    tx.commit().await?;
    app.publication_due();
    Ok(Json(json!({
        "digest": digest,
        "publication": state_json(&app.db, &digest).await?,
    })))
}

/// `GET /v1/digests/{digest}`: the digest's publication state and every pack the caller may
/// read that records it, each as `GET /v1/packs/{id}` shows it.
pub async fn by_digest(
    State(app): State<App>,
    caller: Caller,
    Path(digest): Path<String>,
) -> ApiResult<Json<Value>> {
    let ids: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT DISTINCT p.id FROM packs p JOIN pack_revisions r ON r.pack_id = p.id \
         WHERE r.digest = $1 AND {} ORDER BY p.id",
        crate::packs::readable_by("$2")
    ))
    .bind(&digest)
    .bind(&caller.id)
    .fetch_all(&app.db)
    .await?;
    if ids.is_empty() {
        return Err(ApiError::NotFound(format!(
            "pack `{}`",
            digest.escape_debug()
        )));
    }
    let mut packs = Vec::with_capacity(ids.len());
    for id in ids {
        let Json(shown) = crate::packs::show(State(app.clone()), caller.clone(), Path(id)).await?;
        packs.push(shown);
    }
    Ok(Json(json!({
        "digest": digest,
        "publication": state_json(&app.db, &digest).await?,
        "packs": packs,
    })))
}

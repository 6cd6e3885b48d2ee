//! Collection of stored pack trees (RFC-0002:C-PACK-BASE): a tree under `trees/<hex>` is kept
//! while anything records its digest (`db::TREE_HOLDERS`: a pack revision, a draft version, a
//! launch's run, and whatever a later table adds there) and removed once nothing does. It runs
//! at start, after every delete, and every hour (a tree whose recording transaction failed is
//! held by nothing).
//!
//! A tree being stored is never collected mid-use: every request that stores, reads or records
//! a tree holds `App::trees` shared from its start until its recording transaction committed
//! (or it gave up), and collection holds it exclusively while it reads
//! what is recorded and removes what is not. One controller owns a state directory, so this
//! in-process lock covers every writer.

use crate::audit;
use crate::db;
use crate::error::ApiResult;
use crate::identity::{Caller, Role};
use crate::App;
use anyhow::{Context, Result};
use std::sync::Arc;
use tokio::sync::{OwnedRwLockReadGuard, RwLock};

/// How often collection runs besides at start and after deletes.
const PERIOD: std::time::Duration = std::time::Duration::from_secs(3600);

/// The store's lock: shared by every use of a tree, exclusive for collection.
pub type TreesLock = Arc<RwLock<()>>;

/// A request's hold on the tree store: no tree is collected while it lives.
pub type TreesInUse = OwnedRwLockReadGuard<()>;

impl App {
    /// Holds the tree store against collection until the guard is dropped.
    pub async fn trees_in_use(&self) -> TreesInUse {
        self.trees.clone().read_owned().await
    }
}

/// Removes every stored tree nothing records; the digests removed, in byte order. It waits for
/// a moment when no request holds the store rather than queueing for it, so a request never
/// waits on a collection that waits on another request.
pub async fn collect(app: &App) -> Result<Vec<String>> {
    let _exclusive = loop {
        match app.trees.try_write() {
            Ok(guard) => break guard,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    };
    let recorded = db::recorded_digests(&app.db)
        .await
        .context("reading the recorded digests")?;
    let trees = app.trees_dir();
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(&trees).context("listing the tree store")? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let digest = format!("tree1:{name}");
        // Only what the store itself names (64 hex) is ever removed.
        if crate::trees::tree_dir(&trees, &digest).is_none() || recorded.contains(&digest) {
            continue;
        }
        std::fs::remove_dir_all(entry.path())
            .with_context(|| format!("removing the stored tree {digest}"))?;
        removed.push(digest);
    }
    removed.sort();
    Ok(removed)
}

/// Collection every hour for as long as the controller runs.
pub fn every_period(app: App) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PERIOD);
        tick.tick().await; // the first tick is now: start already collected
        loop {
            tick.tick().await;
            if let Err(e) = collect(&app).await {
                eprintln!("controller: collecting stored trees: {e:#}");
            }
        }
    });
}

/// What a delete removes: a pack with its revisions, or a draft with its versions.
#[derive(Clone, Copy)]
pub(crate) enum Owned {
    Pack,
    Draft,
}

/// Deletes the pack or draft `id` of `team` (the caller must be an editor there) with its
/// revisions or versions and an audit row, in one transaction, then collects the trees
/// nothing records any more. The caller has already found `id` readable.
pub(crate) async fn delete(
    app: &App,
    caller: &Caller,
    what: Owned,
    id: &str,
    (team, name): (&str, &str),
) -> ApiResult<serde_json::Value> {
    let (kind, table, children, column) = match what {
        Owned::Pack => ("pack", "packs", "pack_revisions", "pack_id"),
        Owned::Draft => ("draft", "drafts", "draft_versions", "draft_id"),
    };
    caller.team_for(team, Role::Editor, &format!("deleting a {kind}"))?;
    let mut tx = app.db.begin().await?;
    if let Owned::Pack = what {
        // A deleted pack is shared with no one (it was its team's to share).
        sqlx::query("DELETE FROM pack_shares WHERE pack_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query(&format!("DELETE FROM {children} WHERE {column} = $1"))
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(&format!("DELETE FROM {table} WHERE id = $1"))
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let target = format!("{kind}:{team}/{name}");
    audit::record(&mut tx, &caller.id, &format!("{kind}.delete"), &target, id).await?;
    tx.commit().await?;
    collect(app).await?;
    Ok(serde_json::json!({ "deleted": id }))
}

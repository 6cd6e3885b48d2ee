//! The controller's store: one `sqlx` `Any` pool over SQLite (a file under the state
//! directory, the default) or PostgreSQL (by URL), and the migrations that shape it. Queries
//! are runtime strings with `$n` placeholders, which both backends accept.

use anyhow::{Context, Result};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::AnyPool;
use std::borrow::Cow;
use std::path::Path;

/// The migrations, in order, compiled into the binary so a fresh database needs no files.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (2, "drafts", include_str!("../migrations/0002_drafts.sql")),
    (3, "runs", include_str!("../migrations/0003_runs.sql")),
    (
        4,
        "standing",
        include_str!("../migrations/0004_standing.sql"),
    ),
    (
        5,
        "pack_origins",
        include_str!("../migrations/0005_pack_origins.sql"),
    ),
    (
        6,
        "decisions",
        include_str!("../migrations/0006_decisions.sql"),
    ),
    (7, "asks", include_str!("../migrations/0007_asks.sql")),
    (
        10,
        "publications",
        include_str!("../migrations/0010_publications.sql"),
    ),
    (
        11,
        "run_tokens",
        include_str!("../migrations/0011_run_tokens.sql"),
    ),
    (
        12,
        "dispatch",
        include_str!("../migrations/0012_dispatch.sql"),
    ),
    (
        13,
        "pack_shares",
        include_str!("../migrations/0013_pack_shares.sql"),
    ),
    (
        14,
        "target_trust",
        include_str!("../migrations/0014_target_trust.sql"),
    ),
];

/// Every column that records a pack tree's digest (RFC-0002:C-PACK-BASE): a stored tree is
/// kept while any of these holds its digest and collected after (`collect`). A pack records
/// its current and every prior revision in `pack_revisions`; a draft each version in
/// `draft_versions`; a launch the digest its run was delivered in `runs`. Provenance digests
/// (a version's base and overlay) keep no tree and are not listed. A new table that records a
/// digest (standing launches) is added here, and nowhere else.
pub const TREE_HOLDERS: &[(&str, &str)] = &[
    ("pack_revisions", "digest"),
    ("draft_versions", "digest"),
    ("runs", "digest"),
    // A pinned standing launch's digest (`draft:NAME` names no tree); a deleted one keeps its
    // row, and so its tree, for the runs that name it.
    ("standing", "pack"),
];

/// Every digest some row of `TREE_HOLDERS` records.
pub async fn recorded_digests(db: &AnyPool) -> sqlx::Result<std::collections::HashSet<String>> {
    let sql = TREE_HOLDERS
        .iter()
        .map(|(table, column)| format!("SELECT {column} AS digest FROM {table}"))
        .collect::<Vec<_>>()
        .join(" UNION ");
    let digests: Vec<String> = sqlx::query_scalar(&sql).fetch_all(db).await?;
    Ok(digests.into_iter().collect())
}

/// The rows of a team-owned table (`packs`, `drafts`) in the teams `subject` belongs to, by
/// team and name: `id`, `team`, `name` and the table's column `extra`. Both names are ours,
/// never a caller's.
pub async fn in_subjects_teams(
    db: &AnyPool,
    subject: &str,
    table: &str,
    extra: &str,
) -> sqlx::Result<Vec<AnyRow>> {
    sqlx::query(&format!(
        "SELECT t.id, s.name AS team, t.name, t.{extra} FROM {table} t \
         JOIN memberships m ON m.team_id = t.team_id JOIN subjects s ON s.id = t.team_id \
         WHERE m.user_id = $1 ORDER BY s.name, t.name"
    ))
    .bind(subject)
    .fetch_all(db)
    .await
}

/// Which database a controller stores into, for the start-up line (never the URL: it may
/// carry a password).
pub fn describe(url: &str) -> &'static str {
    if url.starts_with("postgres") {
        "postgresql"
    } else {
        "sqlite"
    }
}

/// The default database: `controller.db` in the state directory, created when missing.
pub fn default_url(state_dir: &Path) -> String {
    format!(
        "sqlite://{}?mode=rwc",
        state_dir.join("controller.db").display()
    )
}

/// Connects and brings the schema up to date.
pub async fn open(url: &str) -> Result<AnyPool> {
    sqlx::any::install_default_drivers();
    let pool = AnyPoolOptions::new()
        .max_connections(if describe(url) == "sqlite" { 1 } else { 8 })
        .connect(url)
        .await
        .with_context(|| format!("connecting to the {} database", describe(url)))?;
    let migrations: Vec<Migration> = MIGRATIONS
        .iter()
        .map(|(version, name, sql)| {
            Migration::new(
                *version,
                Cow::Borrowed(*name),
                MigrationType::Simple,
                Cow::Borrowed(*sql),
                false,
            )
        })
        .collect();
    let migrator = Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    };
    migrator
        .run(&pool)
        .await
        .context("migrating the controller database")?;
    Ok(pool)
}

/// Unix milliseconds, the schema's time unit.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A new time-ordered identifier.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

//! Subjects, teams, roles and API tokens (issue 12): who a request is, which teams it reads,
//! what it may change. Tokens are random, shown once, and stored only as their SHA-256. The
//! first start creates the `admin` user in the `platform` team (the platform administrators) and
//! writes its token to `STATE_DIR/admin.token`, mode 0600.

use crate::audit;
use crate::db::{new_id, now_ms};
use crate::error::{ApiError, ApiResult};
use crate::App;
use anyhow::Context;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::Json;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::AnyPool;
use sqlx::Row;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

/// The team whose members administer the controller itself.
pub const PLATFORM_TEAM: &str = "platform";

/// A member's role in a team, weakest first: each includes what the ones before it allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Editor,
    Approver,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Editor => "editor",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        [Role::Viewer, Role::Editor, Role::Approver, Role::Admin]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// One team the caller belongs to.
#[derive(Clone, Debug, Serialize)]
pub struct Membership {
    pub team_id: String,
    pub team: String,
    pub role: Role,
}

/// The authenticated subject of a request and its teams.
#[derive(Clone, Debug, Serialize)]
pub struct Caller {
    pub id: String,
    pub name: String,
    pub teams: Vec<Membership>,
}

impl Caller {
    /// The caller's role in a team, when it is a member: `None` means the team is not
    /// readable, and must be refused as not found.
    pub fn role_in(&self, team_id: &str) -> Option<Role> {
        self.teams
            .iter()
            .find(|m| m.team_id == team_id)
            .map(|m| m.role)
    }

    pub fn is_platform_admin(&self) -> bool {
        self.teams
            .iter()
            .any(|m| m.team == PLATFORM_TEAM && m.role == Role::Admin)
    }

    /// Resolves a team by name for a change needing `need`: a team the caller is not in is
    /// "not found", exactly as a missing one.
    pub fn team_for(&self, team: &str, need: Role, what: &str) -> ApiResult<String> {
        let m = self
            .teams
            .iter()
            .find(|m| m.team == team)
            .ok_or_else(|| ApiError::NotFound(format!("team `{team}`")))?;
        if m.role < need {
            return Err(ApiError::Forbidden(format!(
                "your role in team `{team}` is {}: {what} needs {}",
                m.role.as_str(),
                need.as_str()
            )));
        }
        Ok(m.team_id.clone())
    }
}

pub(crate) fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A new random token (256 bits from the kernel).
pub(crate) fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        filled +=
            rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty())
                .context("reading random bytes for a token")?;
    }
    Ok(format!("cru_{}", hex::encode(bytes)))
}

/// The token a request presents as `Authorization: Bearer …`, for a person or a run alike.
pub(crate) fn bearer(parts: &Parts) -> ApiResult<&str> {
    parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(ApiError::Unauthenticated)
}

impl FromRequestParts<App> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> ApiResult<Caller> {
        let token = bearer(parts)?;
        let row = sqlx::query(
            "SELECT s.id, s.name FROM tokens t JOIN subjects s ON s.id = t.subject_id \
             WHERE t.hash = $1",
        )
        .bind(hash_token(token.trim()))
        .fetch_optional(&app.db)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
        let id: String = row.try_get("id")?;
        let rows = sqlx::query(
            "SELECT m.team_id, s.name, m.role FROM memberships m \
             JOIN subjects s ON s.id = m.team_id WHERE m.user_id = $1 ORDER BY s.name",
        )
        .bind(&id)
        .fetch_all(&app.db)
        .await?;
        let mut teams = Vec::with_capacity(rows.len());
        for r in rows {
            let role: String = r.try_get("role")?;
            teams.push(Membership {
                team_id: r.try_get("team_id")?,
                team: r.try_get("name")?,
                role: Role::parse(&role)
                    .ok_or_else(|| anyhow::anyhow!("stored role `{role}` is unknown"))?,
            });
        }
        Ok(Caller {
            id,
            name: row.try_get("name")?,
            teams,
        })
    }
}

/// On a database with no subjects: the platform team, its admin user and that user's token,
/// written to `token_file` (mode 0600). Returns whether it bootstrapped.
pub async fn bootstrap(db: &AnyPool, token_file: &std::path::Path) -> anyhow::Result<bool> {
    let mut tx = db.begin().await?;
    let any: Option<String> = sqlx::query_scalar("SELECT id FROM subjects LIMIT 1")
        .fetch_optional(&mut *tx)
        .await?;
    if any.is_some() {
        return Ok(false);
    }
    let team = insert_subject(&mut tx, PLATFORM_TEAM, "team").await?;
    let user = insert_subject(&mut tx, "admin", "user").await?;
    add_member(&mut tx, &team, &user, Role::Admin).await?;
    let token = issue_token(&mut tx, &user).await?;
    audit::record(&mut tx, &user, "bootstrap", "subject:admin", "first start").await?;
    // The file first: a token in the database that nobody holds would lock the operator out.
    let _ = std::fs::remove_file(token_file);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(token_file)
        .with_context(|| format!("writing {}", token_file.display()))?;
    writeln!(f, "{token}")?;
    f.sync_all()?;
    tx.commit().await?;
    Ok(true)
}

type Tx<'a> = sqlx::Transaction<'a, sqlx::Any>;

async fn insert_subject(tx: &mut Tx<'_>, name: &str, kind: &str) -> sqlx::Result<String> {
    let id = new_id();
    sqlx::query("INSERT INTO subjects (id, name, kind, created_at) VALUES ($1, $2, $3, $4)")
        .bind(&id)
        .bind(name)
        .bind(kind)
        .bind(now_ms())
        .execute(&mut **tx)
        .await?;
    Ok(id)
}

async fn add_member(tx: &mut Tx<'_>, team: &str, user: &str, role: Role) -> anyhow::Result<()> {
    sqlx::query("INSERT INTO memberships (team_id, user_id, role) VALUES ($1, $2, $3)")
        .bind(team)
        .bind(user)
        .bind(role.as_str())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn issue_token(tx: &mut Tx<'_>, subject: &str) -> anyhow::Result<String> {
    let token = new_token()?;
    sqlx::query("INSERT INTO tokens (hash, subject_id, created_at) VALUES ($1, $2, $3)")
        .bind(hash_token(&token))
        .bind(subject)
        .bind(now_ms())
        .execute(&mut **tx)
        .await?;
    Ok(token)
}

/// A subject or team name: short, printable, no path or URL syntax.
pub(crate) fn check_name(name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!(
            "the name `{}` is refused: use 1 to 64 of A-Z a-z 0-9 - _ .",
            name.escape_debug()
        )))
    }
}

/// `GET /v1/whoami`.
pub async fn whoami(caller: Caller) -> Json<Caller> {
    Json(caller)
}

#[derive(Deserialize)]
pub struct NewTeam {
    name: String,
}

/// `POST /v1/teams` (platform administrators): a new team, the caller its admin.
pub async fn create_team(
    State(app): State<App>,
    caller: Caller,
    Json(req): Json<NewTeam>,
) -> ApiResult<Json<serde_json::Value>> {
    if !caller.is_platform_admin() {
        return Err(ApiError::Forbidden(
            "creating a team needs the admin role in the platform team `platform`".into(),
        ));
    }
    let mut tx = app.db.begin().await?;
    let id = new_named_subject(&mut tx, &req.name, "team").await?;
    add_member(&mut tx, &id, &caller.id, Role::Admin).await?;
    audit::record(
        &mut tx,
        &caller.id,
        "team.create",
        &format!("team:{}", req.name),
        "",
    )
    .await?;
    tx.commit().await?;
    Ok(Json(serde_json::json!({ "id": id, "name": req.name })))
}

/// A new subject under a name no subject has: users and teams share one namespace, and the
/// unique index decides between two requests racing for one name.
async fn new_named_subject(tx: &mut Tx<'_>, name: &str, kind: &str) -> ApiResult<String> {
    check_name(name)?;
    insert_subject(tx, name, kind)
        .await
        .map_err(|e| match e.as_database_error() {
            Some(d) if d.is_unique_violation() => {
                ApiError::Refused(format!("the name `{name}` is taken"))
            }
            _ => e.into(),
        })
}

#[derive(Deserialize)]
pub struct NewMember {
    name: String,
    role: Role,
}

/// `POST /v1/teams/{team}/members` (the team's admins): a new user in the team with a role,
/// and that user's token, returned once.
pub async fn add_user(
    State(app): State<App>,
    caller: Caller,
    Path(team): Path<String>,
    Json(req): Json<NewMember>,
) -> ApiResult<Json<serde_json::Value>> {
    let team_id = caller.team_for(&team, Role::Admin, "adding a member")?;
    let mut tx = app.db.begin().await?;
    let user = new_named_subject(&mut tx, &req.name, "user").await?;
    add_member(&mut tx, &team_id, &user, req.role).await?;
    let token = issue_token(&mut tx, &user).await?;
    audit::record(
        &mut tx,
        &caller.id,
        "member.add",
        &format!("team:{team}"),
        &format!("{} as {}", req.name, req.role.as_str()),
    )
    .await?;
    tx.commit().await?;
    Ok(Json(serde_json::json!({
        "id": user, "name": req.name, "team": team, "role": req.role, "token": token
    })))
}

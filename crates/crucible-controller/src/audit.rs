//! The audit log: one row per change, written in the change's own transaction so a change
//! and its record commit or fail together. Readable by platform administrators.

use crate::db::{new_id, now_ms};
use crate::error::{ApiError, ApiResult};
use crate::identity::Caller;
use crate::App;
use axum::extract::State;
use axum::Json;
use sqlx::Row;

pub async fn record(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    subject: &str,
    action: &str,
    target: &str,
    detail: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO audit (id, at, subject_id, action, target, detail) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(new_id())
    .bind(now_ms())
    .bind(subject)
    .bind(action)
    .bind(target)
    .bind(detail)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// `GET /v1/audit`: every change, oldest first, with the name of its subject.
pub async fn list(State(app): State<App>, caller: Caller) -> ApiResult<Json<serde_json::Value>> {
    if !caller.is_platform_admin() {
        return Err(ApiError::Forbidden(
            "the audit log is read by the platform team `platform`".into(),
        ));
    }
    let rows = sqlx::query(
        "SELECT a.at, s.name, a.action, a.target, a.detail FROM audit a \
         JOIN subjects s ON s.id = a.subject_id ORDER BY a.id",
    )
    .fetch_all(&app.db)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(serde_json::json!({
            "at_ms": r.try_get::<i64, _>("at")?,
            "subject": r.try_get::<String, _>("name")?,
            "action": r.try_get::<String, _>("action")?,
            "target": r.try_get::<String, _>("target")?,
            "detail": r.try_get::<String, _>("detail")?,
        }));
    }
    Ok(Json(serde_json::json!({ "entries": out })))
}

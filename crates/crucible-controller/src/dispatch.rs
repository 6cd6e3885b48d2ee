//! Kubernetes dispatch (issue 17): a launch that names a Kubernetes target is admitted as every
//! launch is (`launches::admit`: compiled and checked, the delivery budget checked before
//! anything is created), recorded `running` with its target, and then driven here, on its own
//! task, through three phases:
//!
//! 1. **Create** the run's objects in the target's namespace through the Kubernetes API
//!    (`kubeapi`): the Secret holding the run's token, the pack's ConfigMap (or nothing, for an
//!    image volume), the state claim, the Job; in that order, each carrying the run's id
//!    (`kube::RUN_ANNOTATION`); a launch with steering adds its steering ConfigMap after the
//!    pack's. An object already there under its name is success only when it
//!    is this run's (a dispatch a crash interrupted, tried again). Once all exist the run records
//!    `dispatched_at`, and nothing creates them again: a restarted controller only watches.
//!    Network errors, 429 and 5xx are retried with backoff; any other refusal ends the run
//!    `failed`, naming it.
//! 2. **Watch** the Job (polled) while the run is `running`: a Job that failed, or that is gone,
//!    without the run's terminal report ends the run `failed`; a Job that completed without one
//!    does after a grace for the report to arrive.
//! 3. **Clean up** once the run is terminal (by its report, a failure recorded here, or `stop`,
//!    which deletes the Job first, `delete_job`):
//!    the Job (its pods in the background), the Secret, the ConfigMaps and, last, the state claim
//!    (kept while the run could still resume from it); then `cleaned_at`.
//!
//! A controller that starts drives every target run still `running` or not cleaned up.

use crate::db::now_ms;
use crate::error::{ApiError, ApiResult};
use crate::kube::{self, Kind, Object, RunIdentity, Target, KINDS, RUN_ANNOTATION};
use crate::kubeapi::{Client, Failure};
use crate::launches::LaunchRequest;
use crate::App;
use anyhow::Context;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How often a dispatched run's Job is looked at.
const POLL: Duration = Duration::from_secs(2);

/// The longest wait between two tries of a dispatch that failed transiently.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How long a Job that completed has for its run's terminal report to arrive before the run is
/// recorded failed: the engine's report is asynchronous and never blocks its run.
const REPORT_GRACE: Duration = Duration::from_secs(60);

/// Drives run `id` on `target` (already recorded, `running` or ended) on its own task.
pub(crate) fn start(app: App, id: String, target: Target) {
    tokio::spawn(async move {
        if let Err(e) = drive(&app, &id, &target).await {
            eprintln!("controller: run {id} on target {}: {e:#}", target.name);
        }
    });
}

/// At start: drives every run on a Kubernetes target that is still `running` (watched, or
/// dispatched when it never was) or ended without its objects cleaned up. A run whose target
/// is no longer configured ends `failed`.
pub async fn resume_all(app: &App) -> anyhow::Result<()> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT id, target, state FROM runs WHERE target IS NOT NULL \
         AND (state = 'running' OR cleaned_at IS NULL) ORDER BY id",
    )
    .fetch_all(&app.db)
    .await?;
    for (id, name, state) in rows {
        match app.config.targets.iter().find(|t| t.name == name) {
            Some(t) => start(app.clone(), id, t.clone()),
            None if state == "running" => {
                let why = format!("the target `{name}` is no longer configured");
                fail(app, &id, &why).await?;
            }
            None => {}
        }
    }
    Ok(())
}

/// Whether the run is still recorded `running`.
async fn running(app: &App, id: &str) -> anyhow::Result<bool> {
    let state: Option<String> = sqlx::query_scalar("SELECT state FROM runs WHERE id = $1")
        .bind(id)
        .fetch_optional(&app.db)
        .await?;
    Ok(state.as_deref() == Some("running"))
}

/// Records the run failed, unless something (its own report, a stop) recorded it ended first.
async fn fail(app: &App, id: &str, why: &str) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE runs SET state = 'failed', reason = $1, ended_at = $2 \
         WHERE id = $3 AND state = 'running'",
    )
    .bind(why)
    .bind(now_ms())
    .bind(id)
    .execute(&app.db)
    .await?;
    Ok(())
}

/// Runs a blocking call to the API server off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(Failure::Permanent(format!("the API call panicked: {e}"))))
}

/// The three phases, each resumable.
async fn drive(app: &App, id: &str, target: &Target) -> anyhow::Result<()> {
    let mut pause = POLL;
    loop {
        if !running(app, id).await? {
            break;
        }
        let dispatched: Option<i64> =
            sqlx::query_scalar("SELECT dispatched_at FROM runs WHERE id = $1")
                .bind(id)
                .fetch_one(&app.db)
                .await?;
        if dispatched.is_some() {
            watch(app, id, target).await?;
            break;
        }
        match create(app, id, target).await {
            Ok(()) => {
                sqlx::query("UPDATE runs SET dispatched_at = $1 WHERE id = $2")
                    .bind(now_ms())
                    .bind(id)
                    .execute(&app.db)
                    .await?;
            }
            Err(Failure::Transient(why)) => {
                eprintln!(
                    "controller: dispatching run {id} to target {} (trying again in {}s): {why}",
                    target.name,
                    pause.as_secs()
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_BACKOFF);
            }
            Err(Failure::Permanent(why)) => {
                let why = format!("dispatching to target `{}`: {why}", target.name);
                fail(app, id, &why).await?;
            }
        }
    }
    clean_up(app, id, target).await
}

/// The run's objects, from its recorded launch; `token` is `None` when its Secret exists.
async fn run_objects(
    app: &App,
    id: &str,
    target: &Target,
    token: Option<&str>,
) -> ApiResult<Vec<Object>> {
    let (digest, request): (String, String) =
        sqlx::query_as("SELECT digest, request FROM runs WHERE id = $1")
            .bind(id)
            .fetch_one(&app.db)
            .await?;
    let launch: LaunchRequest =
        serde_json::from_str(&request).map_err(|e| anyhow::anyhow!("the recorded launch: {e}"))?;
    let params = launch.compile_params()?;
    let steering = launch.steering_files()?;
    let secs = launch.max_secs()?.unwrap_or_default();
    let cost = launch.max_cost.unwrap_or_default();
    let controller_url = target.controller_url.as_deref().unwrap_or_default();
    let delivery = {
        let _trees = app.trees_in_use().await;
        kube::delivery(app, target, &digest).await?
    };
    let run = RunIdentity {
        id,
        controller_url,
        token: token.unwrap_or_default(),
    };
    let mut objects = kube::objects(
        target,
        &digest,
        &params,
        cost,
        secs,
        delivery,
        &steering,
        id,
        Some(&run),
    );
    if token.is_none() {
        objects.retain(|o| !matches!(o, Object::Secret(_)));
    }
    Ok(objects)
}

fn client(target: &Target) -> Result<Client, Failure> {
    target
        .client()
        .map_err(|e| Failure::Permanent(format!("{e:#}")))
}

/// Whether an object the API server holds is this run's.
fn ours(id: &str) -> impl Fn(&Value) -> bool + Clone + Send + 'static {
    let id = id.to_string();
    move |v: &Value| v["metadata"]["annotations"][RUN_ANNOTATION] == id.as_str()
}

/// Phase 1: creates every object of the run that is not there yet.
async fn create(app: &App, id: &str, target: &Target) -> Result<(), Failure> {
    let client = std::sync::Arc::new(client(target)?);
    // The token is stored hashed: one whose Secret is already there is not minted again.
    let secret = format!(
        "{}/{}",
        kube::collection(Kind::Secret, &target.namespace),
        secret_name(app, id).await.map_err(permanent)?
    );
    let c = client.clone();
    let existing = blocking(move || c.get(&secret)).await?;
    let token = match existing {
        Some(s) if ours(id)(&s) => None,
        // Another's: creating ours below refuses it, naming it.
        _ => Some(run_token(app, id).await.map_err(permanent)?),
    };
    let objects = run_objects(app, id, target, token.as_deref())
        .await
        .map_err(|e| match e {
            ApiError::Refused(why) => Failure::Permanent(why),
            other => Failure::Permanent(other.to_string()),
        })?;
    let mut calls = Vec::new();
    for o in &objects {
        let body = o
            .json()
            .map_err(|e| Failure::Permanent(format!("encoding {}: {e}", o.name())))?;
        calls.push((o.collection(&target.namespace), body));
    }
    let ours = ours(id);
    blocking(move || {
        for (collection, body) in calls {
            client.create(&collection, &body, &ours)?;
        }
        Ok(())
    })
    .await
}

/// A token for the run's engine (the remote engine link): stored hashed, scoped to the run,
/// dead once it ends.
async fn run_token(app: &App, id: &str) -> anyhow::Result<String> {
    crate::link::mint_run_token(&app.db, id).await
}

fn permanent(e: impl std::fmt::Display) -> Failure {
    Failure::Permanent(e.to_string())
}

/// The name of the run's objects of `kind`.
async fn name_of(app: &App, id: &str, kind: Kind) -> anyhow::Result<String> {
    let digest: String = sqlx::query_scalar("SELECT digest FROM runs WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await?;
    Ok(kube::object_name(kind, &digest, id))
}

async fn secret_name(app: &App, id: &str) -> anyhow::Result<String> {
    name_of(app, id, Kind::Secret).await
}

/// What the Job's status says.
enum JobState {
    Active,
    Complete,
    Failed(String),
    Gone,
}

fn job_state(job: Option<Value>) -> JobState {
    let Some(job) = job else {
        return JobState::Gone;
    };
    let conditions = job["status"]["conditions"].as_array().cloned();
    for c in conditions.unwrap_or_default() {
        if c["status"] != "True" {
            continue;
        }
        match c["type"].as_str() {
            Some("Failed") => {
                return JobState::Failed(format!(
                    "{}: {}",
                    c["reason"].as_str().unwrap_or("Failed"),
                    c["message"].as_str().unwrap_or_default()
                ))
            }
            Some("Complete") => return JobState::Complete,
            _ => {}
        }
    }
    JobState::Active
}

/// Phase 2: polls the Job until the run is terminal, recording it failed when its Job failed,
/// went away, or completed without a report within the grace.
async fn watch(app: &App, id: &str, target: &Target) -> anyhow::Result<()> {
    let path = format!(
        "{}/{}",
        kube::collection(Kind::Job, &target.namespace),
        name_of(app, id, Kind::Job).await?
    );
    let mut completed: Option<Instant> = None;
    while running(app, id).await? {
        let seen = match client(target) {
            Ok(c) => {
                let path = path.clone();
                blocking(move || c.get(&path)).await
            }
            Err(e) => Err(e),
        };
        match seen.map(job_state) {
            Ok(JobState::Active) => {}
            Ok(JobState::Failed(why)) => {
                let why = format!(
                    "the Job on target `{}` failed ({why}) without the run reporting its end",
                    target.name
                );
                fail(app, id, &why).await?;
            }
            Ok(JobState::Gone) => {
                let why = format!(
                    "the Job on target `{}` was deleted before the run reported its end",
                    target.name
                );
                fail(app, id, &why).await?;
            }
            Ok(JobState::Complete) => {
                let since = *completed.get_or_insert_with(Instant::now);
                if since.elapsed() >= REPORT_GRACE {
                    let why = format!(
                        "the Job on target `{}` completed but the run never reported its end",
                        target.name
                    );
                    fail(app, id, &why).await?;
                }
            }
            Err(e) => eprintln!("controller: watching run {id}'s Job: {e}"),
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Phase 3: deletes the run's objects, the state claim last; records `cleaned_at` when all are
/// gone. Transient failures are tried again with backoff; a permanent one is left for the next
/// start to try again.
async fn clean_up(app: &App, id: &str, target: &Target) -> anyhow::Result<()> {
    let mut paths = Vec::new();
    for kind in KINDS {
        paths.push(format!(
            "{}/{}",
            kube::collection(kind, &target.namespace),
            name_of(app, id, kind).await?
        ));
    }
    let mut pause = POLL;
    loop {
        let paths = paths.clone();
        let done = match client(target) {
            Ok(c) => {
                blocking(move || {
                    for p in &paths {
                        c.delete(p)?;
                    }
                    Ok(())
                })
                .await
            }
            Err(e) => Err(e),
        };
        match done {
            Ok(()) => break,
            Err(Failure::Transient(why)) => {
                eprintln!("controller: cleaning up run {id} (trying again): {why}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_BACKOFF);
            }
            Err(Failure::Permanent(why)) => {
                anyhow::bail!("cleaning up its objects (tried again at the next start): {why}")
            }
        }
    }
    sqlx::query("UPDATE runs SET cleaned_at = $1 WHERE id = $2")
        .bind(now_ms())
        .bind(id)
        .execute(&app.db)
        .await
        .context("recording the clean-up")?;
    Ok(())
}

/// The first half of `stop` for a run on a Kubernetes target: deletes its Job (its pods in
/// the background); `link::stop` then records the run stopped, and its driver cleans up the
/// rest. Nothing for a run on no target.
pub(crate) async fn delete_job(app: &App, id: &str) -> ApiResult<()> {
    let name: Option<Option<String>> =
        sqlx::query_scalar("SELECT target FROM runs WHERE id = $1 AND state = 'running'")
            .bind(id)
            .fetch_optional(&app.db)
            .await?;
    let Some(Some(name)) = name else {
        return Ok(());
    };
    let Some(target) = app.config.targets.iter().find(|t| t.name == name) else {
        return Ok(());
    };
    let path = format!(
        "{}/{}",
        kube::collection(Kind::Job, &target.namespace),
        name_of(app, id, Kind::Job).await?
    );
    let c = client(target).map_err(|e| ApiError::Internal(anyhow::anyhow!("{e}")))?;
    blocking(move || c.delete(&path))
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("stopping the run's Job: {e}")))
}

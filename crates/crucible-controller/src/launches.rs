//! Launches (issue 12): `POST /v1/launches` names a pack digest, or `draft:NAME` (the draft's
//! latest saved version that compiles), with parameters, launch settings, capabilities and
//! both ceilings. Everything `plan run` refuses before dispatch is refused here, before the
//! launch is accepted and before anything is spent, by the same function
//! (`crucible_engine::check_launch`): one admission path. An accepted launch is recorded (it
//! records the digest it runs, RFC-0002:C-PACK-BASE) and handed to the executor.
//!
//! A run's directory is `STATE_DIR/runs/<id>/`: the stored tree under the digest, delivered as
//! the gzipped archive a remote executor would get (measured against the delivery budget at
//! dispatch), unpacked into `pack/`; the engine's state beside it in `state/`, and the launch's
//! steering in `steering/`, never in it (RFC-0002:C-PACK-BASE).

use crate::audit;
use crate::db::{new_id, now_ms};
use crate::error::{ApiError, ApiResult};
use crate::identity::Caller;
use crate::packs::editable_team;
use crate::trees::{tree_dir, write_delivery};
use crate::App;
use axum::extract::State;
use axum::Json;
use crucible_engine::history::History;
use crucible_engine::{Launch, RunErrorKind, RunRequest};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A launch as accepted, kept with the run so a restarted controller can dispatch it again.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct LaunchRequest {
    /// A pack digest (`tree1:…`) or `draft:NAME`.
    pub pack: String,
    /// The run's team; may be left out by a caller who can edit in exactly one team.
    #[serde(default, skip_serializing)]
    pub team: Option<String>,
    /// Parameter values, by name.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Launch settings, by dotted name (`task.model`, `repo.ref`).
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
    /// Capabilities the run provides.
    #[serde(default)]
    pub caps: Vec<String>,
    /// The cost ceiling in USD; required (refused by admission when missing).
    pub max_cost: Option<f64>,
    /// The wall-clock ceiling as `plan run --max-time` takes it (`90s`, `1h30m`); required.
    pub max_time: Option<String>,
    /// The dispatch target: `local` (the default, the controller's own executor) or a
    /// Kubernetes target's name (issue 17, `dispatch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Per-run steering, by file name: delivered beside the pack's tree (`steering/`), never
    /// into it; every task reads it read-only, agent prompts carry it as external input
    /// (`crucible_engine::steering`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steering: BTreeMap<String, String>,
}

impl LaunchRequest {
    /// A request body read as a launch; `what` names it in the refusal (a launch, a render).
    pub(crate) fn parse(body: &[u8], what: &str) -> ApiResult<LaunchRequest> {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::BadRequest(format!("the {what} is not well-formed: {e}")))
    }

    /// The compile's `--param` list: parameters as `name=value`, settings as `a.b=value`.
    pub(crate) fn compile_params(&self) -> ApiResult<Vec<String>> {
        let mut out = Vec::with_capacity(self.params.len() + self.settings.len());
        for (k, v) in &self.params {
            if k.is_empty() || k.contains(['.', '=']) {
                return Err(ApiError::BadRequest(format!(
                    "the parameter name `{}` is not a name (a launch setting goes in `settings`)",
                    k.escape_debug()
                )));
            }
            out.push(format!("{k}={v}"));
        }
        for (k, v) in &self.settings {
            if !k.contains('.') || k.contains('=') {
                return Err(ApiError::BadRequest(format!(
                    "the launch setting `{}` is not a dotted name such as `task.model`",
                    k.escape_debug()
                )));
            }
            out.push(format!("{k}={v}"));
        }
        Ok(out)
    }

    /// The steering files, checked against the engine's bounds (refused, 422, naming the rule).
    pub(crate) fn steering_files(&self) -> ApiResult<Vec<(String, String)>> {
        let files: Vec<(String, String)> = self
            .steering
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        crucible_engine::steering::check(&files).map_err(ApiError::Refused)?;
        Ok(files)
    }

    pub(crate) fn max_secs(&self) -> ApiResult<Option<u64>> {
        self.max_time
            .as_deref()
            .map(|t| {
                crucible_plan::duration::parse(t)
                    .map_err(|e| ApiError::BadRequest(format!("max_time: {e}")))
            })
            .transpose()
    }
}

/// Why a launch cannot be dispatched. A compile refusal lets `draft:NAME` fall back to an
/// earlier version; any other refusal is the launch's answer.
pub(crate) enum Refusal {
    Compile(String),
    Other(ApiError),
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Refusal {
        Refusal::Other(e)
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        match r {
            Refusal::Compile(why) => ApiError::Refused(format!("compile: {why}")),
            Refusal::Other(e) => e,
        }
    }
}

/// How long one launch's compile may take before it is refused.
const COMPILE_TIMEOUT: Duration = Duration::from_secs(60);

/// Writes the launch's steering into `run_dir/steering/`, beside the delivered `pack/` and
/// never in it, each file read-only; the directory the engine is handed, or `None` without
/// steering. Written again, identically, when a restarted controller resumes the run.
fn deliver_steering(run_dir: &Path, launch: &LaunchRequest) -> ApiResult<Option<PathBuf>> {
    let files = launch.steering_files()?;
    if files.is_empty() {
        return Ok(None);
    }
    let dir = run_dir.join("steering");
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        for (name, text) in &files {
            let path = dir.join(name);
            if path.exists() {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
            }
            std::fs::write(&path, text)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444))?;
        }
        Ok(())
    };
    write().map_err(|e| anyhow::anyhow!("writing the run's steering: {e}"))?;
    Ok(Some(dir))
}

/// The manifest a launch runs: the delivered pack's `crucible.toml`.
pub(crate) fn manifest_path(run_dir: &Path) -> PathBuf {
    run_dir.join("pack").join("crucible.toml")
}

/// Compiles the delivered pack in `run_dir` for the launch and checks it as `plan run` would;
/// the engine request that runs it (a new run, or the resumption of the one in `state/`).
pub(crate) async fn prepare(
    app: &App,
    run_dir: &Path,
    digest: &str,
    launch: &LaunchRequest,
    mode: Launch,
    history: History,
) -> Result<RunRequest, Refusal> {
    let manifest_path = manifest_path(run_dir);
    if !manifest_path.is_file() {
        return Err(ApiError::Refused("the pack has no crucible.toml at its root".into()).into());
    }
    let params = launch.compile_params()?;
    let max_secs = launch.max_secs()?;
    let steering = deliver_steering(run_dir, launch)?;
    let compiled = compile(&app.config.compiler, &manifest_path, &params).await?;
    let mut manifest =
        crucible_pack::load(&manifest_path).map_err(|e| Refusal::Compile(e.to_string()))?;
    sandboxed(&manifest.manifest.sandbox)?;
    if let Some(r) = compiled.repo_ref {
        manifest.set_repo_ref(r).map_err(Refusal::Compile)?;
    }
    let plan = crucible_plan::ValidatedPlan::new(compiled.plan).map_err(|problems| {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        Refusal::Compile(lines.join("\n"))
    })?;
    // The web UI draws the run's graph from the plan it runs (`ui::pages`).
    crate::ui::save_plan(run_dir, &plan)?;
    let engine = &app.config.engine;
    let req = RunRequest {
        plan,
        manifest,
        pack_digest: digest.to_string(),
        state_dir: run_dir.join("state"),
        max_cost: launch.max_cost,
        max_secs,
        // RFC-0002:C-HUMAN-DECISION: under the controller a run has the `human` capability.
        caps: with_human(crucible_engine::substrate_caps(
            &launch.caps,
            &engine.inference,
        )),
        jobs: engine.jobs,
        agent_cmd: None,
        harness: None,
        model: None,
        max_files_bytes: engine.max_files_bytes,
        launch: mode,
        read_ahead: None,
        inference: engine.inference.clone(),
        history,
        // A series run's history is the controller's to supply (C-RUN-HISTORY), never a
        // local series of the engine's.
        series: None,
        reports: engine.reports.clone(),
        max_asks: engine.max_asks,
        no_sandbox: false,
        // The controller's state holds every team's packs, runs and the admin token; the host
        // a task reads (read-only) must not include it.
        hidden: vec![std::path::absolute(&app.config.state_dir)
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("the state directory: {e}")))?],
        groups: Default::default(),
        // Its engine opens and polls its decision requests (human routes and runbook gates) in
        // this store.
        decider: Some(Arc::new(crate::decisions::StoreDecider::new(
            app.db.clone(),
            run_id(run_dir),
        ))),
        decision_bounds: engine.decision_bounds,
        steering,
    };
    match crucible_engine::check_launch(&req) {
        Ok(()) => Ok(req),
        Err(e) => Err(match e.kind {
            RunErrorKind::Refused => ApiError::Refused(e.message),
            RunErrorKind::State => ApiError::Internal(anyhow::anyhow!("{}", e.message)),
        }
        .into()),
    }
}

/// Refuses a pack whose manifest would loosen the sandbox on the controller's host: a team's
/// pack is not the operator, so it can neither opt out (`[sandbox] enabled = false`) nor bind
/// host paths read-write into its tasks (`[sandbox] expose`), either of which would reach the
/// controller's state and every other team's.
fn sandboxed(s: &crucible_pack::manifest::SandboxConfig) -> Result<(), Refusal> {
    if !s.enabled {
        return Err(ApiError::Refused(
            "the pack opts out of the sandbox ([sandbox] enabled = false): every task a controller runs is sandboxed".into(),
        )
        .into());
    }
    if !s.expose.is_empty() {
        return Err(ApiError::Refused(format!(
            "the pack exposes host paths to its tasks ([sandbox] expose = {:?}): a controller's runs are given none of its host",
            s.expose
        ))
        .into());
    }
    Ok(())
}

/// The capabilities of a run under the controller: the launch's, and `human`.
fn with_human(mut caps: Vec<String>) -> Vec<String> {
    if !caps.iter().any(|c| c == "human") {
        caps.push("human".into());
    }
    caps
}

/// The controller's id of the run whose directory is `run_dir`.
fn run_id(run_dir: &Path) -> String {
    run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The launch's plan, compiled by `crucible __launch-plan` in a child process (bounded as
/// every compile is; see `crucible-cli/src/bounded.rs`).
async fn compile(
    compiler: &Path,
    manifest: &Path,
    params: &[String],
) -> Result<crucible_dsl::Compiled, Refusal> {
    let mut cmd = tokio::process::Command::new(compiler);
    cmd.arg("__launch-plan")
        .arg("--manifest")
        .arg(manifest)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for p in params {
        cmd.arg("--param").arg(p);
    }
    let out = tokio::time::timeout(COMPILE_TIMEOUT, cmd.output())
        .await
        .map_err(|_| {
            Refusal::Compile(format!(
                "the compile did not finish within {}s",
                COMPILE_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("running the compiler: {e}")))?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        let text = text.trim();
        return Err(Refusal::Compile(
            text.strip_prefix("error: ").unwrap_or(text).to_string(),
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("the compiler's answer: {e}")).into())
}

/// Delivers the stored tree under `digest` into `dest` as a run receives it: its gzipped
/// archive, refused over the delivery budget in force (RFC-0002:C-PACK-BASE, at dispatch),
/// unpacked with every file mode 0755, and checked to be that digest and no other.
pub(crate) fn deliver(trees: &Path, digest: &str, dest: &Path, budget: u64) -> ApiResult<()> {
    let stored = tree_dir(trees, digest)
        .filter(|d| d.is_dir())
        .ok_or_else(|| anyhow::anyhow!("the stored tree of {digest} is missing"))?;
    let archive = write_delivery(&stored, Vec::new())?;
    crate::trees::within_budget(archive.len() as u64, budget)?;
    let unpack = || -> std::io::Result<()> {
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(&archive[..]));
        for entry in a.entries()? {
            let mut entry = entry?;
            if entry.unpack_in(dest)? {
                let path = dest.join(entry.path()?);
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
            }
        }
        Ok(())
    };
    std::fs::create_dir_all(dest).map_err(anyhow::Error::from)?;
    unpack().map_err(|e| anyhow::anyhow!("unpacking the delivery: {e}"))?;
    let got = crucible_pack::files::tree1_digest(dest).map_err(|e| anyhow::anyhow!("{e}"))?;
    if got != digest {
        return Err(anyhow::anyhow!("the delivered tree is {got}, not {digest}").into());
    }
    Ok(())
}

/// The only refusal a launch naming something the caller cannot use gets: it cannot tell a
/// missing pack or draft from one of another team.
fn unavailable(what: &str) -> ApiError {
    ApiError::Refused(format!("`{}` is not available", what.escape_debug()))
}

/// The digests a launch may run, newest first, each with how the launch named it: one for a
/// digest, every saved version for `draft:NAME`. Only the run's team's packs (its own and those
/// shared with it) and drafts, and
/// for a firing of a standing launch (`series`), the digest it is pinned to: its tree is kept
/// for it (RFC-0002:C-PACK-BASE) and it runs while it is pinned, its pack deleted or not.
pub(crate) async fn candidates(
    app: &App,
    team_id: &str,
    pack: &str,
    series: Option<&str>,
) -> ApiResult<Vec<(String, String)>> {
    if let Some(name) = pack.strip_prefix("draft:") {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT v.version, v.digest FROM draft_versions v JOIN drafts d ON d.id = v.draft_id \
             WHERE d.team_id = $1 AND d.name = $2 ORDER BY v.version DESC",
        )
        .bind(team_id)
        .bind(name)
        .fetch_all(&app.db)
        .await?;
        if rows.is_empty() {
            return Err(unavailable(pack));
        }
        return Ok(rows
            .into_iter()
            .map(|(v, d)| (d, format!("{pack} version {v}")))
            .collect());
    }
    let held: Option<String> = sqlx::query_scalar(&format!(
        "SELECT r.digest FROM pack_revisions r JOIN packs p ON p.id = r.pack_id \
         WHERE {} AND r.digest = $2 \
         UNION SELECT v.digest FROM draft_versions v JOIN drafts d ON d.id = v.draft_id \
         WHERE d.team_id = $1 AND v.digest = $2 \
         UNION SELECT s.pack FROM standing s WHERE s.team_id = $1 AND s.pack = $2 AND s.id = $3",
        crate::packs::launchable_by("$1")
    ))
    .bind(team_id)
    .bind(pack)
    .bind(series.unwrap_or_default())
    .fetch_optional(&app.db)
    .await?;
    match held {
        Some(d) => Ok(vec![(d, "pack".into())]),
        None => Err(unavailable(pack)),
    }
}

/// `POST /v1/launches`: checks the launch as `plan run` would and, when nothing refuses it,
/// records the run (state `running`) and dispatches it. A refused launch leaves no row and no
/// file.
pub async fn launch(
    State(app): State<App>,
    caller: Caller,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let req = LaunchRequest::parse(&body, "launch")?;
    let (team, team_id) = editable_team(&caller, req.team.clone(), "launching a run")?;
    let launcher = Launcher {
        subject: &caller.id,
        team_id: &team_id,
        team: &team,
        series: None,
        source: None,
    };
    let history = History::none(app.config.engine.history_max_bytes);
    admit(&app, &launcher, &req, history).await.map(Json)
}

/// Who launches a run, for which team, and the series it belongs to (the standing launch that
/// fired it), if any.
pub(crate) struct Launcher<'a> {
    pub subject: &'a str,
    pub team_id: &'a str,
    pub team: &'a str,
    pub series: Option<&'a str>,
    /// How the run came to be launched when not by its launcher naming a pack (an ask); the
    /// run's `source` then says this instead.
    pub source: Option<&'a str>,
}

/// The one admission path of every launch, by hand or by a standing launch's firing: checks
/// the launch as `plan run` would and, when nothing refuses it, records the run (state
/// `running`) and dispatches it with `history`. A refused launch leaves no row and no file.
pub(crate) async fn admit(
    app: &App,
    launcher: &Launcher<'_>,
    req: &LaunchRequest,
    history: History,
) -> ApiResult<Value> {
    // Malformed parameters, ceilings and steering are refused before any pack is touched.
    req.compile_params()?;
    req.max_secs()?;
    req.steering_files()?;
    let target = dispatchable(app, req)?;
    let id = new_id();
    let run_dir = app.runs_dir().join(&id);
    // The tree delivered stays stored until the run records its digest.
    let trees = app.trees_in_use().await;
    let accepted = accept(app, launcher, req, &run_dir, history, target)
        .await
        .map(|mut a| {
            if let Some(source) = launcher.source {
                a.source = source.to_string();
            }
            a
        });
    let recorded = match accepted {
        Ok(a) => record(app, launcher, &id, &a, req, target)
            .await
            .map(|()| a),
        Err(e) => Err(e),
    };
    let accepted = match recorded {
        Ok(a) => a,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&run_dir);
            return Err(e);
        }
    };
    drop(trees);
    let answer = json!({
        "id": id,
        "team": launcher.team,
        "digest": accepted.digest,
        "source": accepted.source,
        "series": launcher.series,
        "target": target.map_or("local", |t| t.name.as_str()),
        "state": "running",
    });
    match target {
        None => app.executor.dispatch(app.clone(), id, accepted.engine),
        Some(t) => crate::dispatch::start(app.clone(), id, t.clone()),
    }
    Ok(answer)
}

/// The Kubernetes target a launch is dispatched to, if any: one that is configured and says
/// how its pods reach the controller (`controller_url`), or the launch is refused.
fn dispatchable<'a>(
    app: &'a App,
    req: &LaunchRequest,
) -> ApiResult<Option<&'a crate::kube::Target>> {
    let target = crate::kube::named_target(app, req.target.as_deref())?;
    if let Some(t) = target {
        if t.controller_url.is_none() {
            return Err(ApiError::Refused(format!(
                "the target `{}` sets no controller_url: its runs could not report to the controller",
                t.name
            )));
        }
    }
    Ok(target)
}

/// Checks a launch exactly as [`admit`] would, delivering into a scratch directory that is
/// removed after: a standing launch is refused at creation for what its firings would be
/// refused for. Records nothing.
pub(crate) async fn check(app: &App, team_id: &str, req: &LaunchRequest) -> ApiResult<()> {
    req.compile_params()?;
    req.max_secs()?;
    req.steering_files()?;
    let target = dispatchable(app, req)?;
    let scratch = app.tmp_dir().join(new_id());
    let history = History::none(app.config.engine.history_max_bytes);
    let trees = app.trees_in_use().await;
    let launcher = Launcher {
        subject: "",
        team_id,
        team: "",
        series: None,
        source: None,
    };
    let checked = accept(app, &launcher, req, &scratch, history, target).await;
    drop(trees);
    let _ = std::fs::remove_dir_all(&scratch);
    checked.map(|_| ())
}

/// A launch that passed every check: the digest it runs, how it was named, its engine request.
struct Accepted {
    digest: String,
    source: String,
    engine: RunRequest,
}

/// Delivers and checks the launch's candidates in turn (for a draft, the newest that
/// compiles); the digest accepted, how the launch named it, and the engine request. For a
/// Kubernetes target the delivery is checked against the budget exactly when the pack would go
/// as a ConfigMap (an image volume is exempt, RFC-0002:C-PACK-BASE), before anything is created.
async fn accept(
    app: &App,
    launcher: &Launcher<'_>,
    req: &LaunchRequest,
    run_dir: &Path,
    history: History,
    target: Option<&crate::kube::Target>,
) -> ApiResult<Accepted> {
    let candidates = candidates(app, launcher.team_id, &req.pack, launcher.series).await?;
    let mut first_failure = None;
    for (digest, source) in candidates {
        let _ = std::fs::remove_dir_all(run_dir);
        let budget = match target {
            Some(t)
                if crate::kube::image_reference(app, t, &digest)
                    .await?
                    .is_some() =>
            {
                u64::MAX
            }
            _ => app.config.delivery_budget_bytes,
        };
        let (trees, pack, d) = (app.trees_dir(), run_dir.join("pack"), digest.clone());
        tokio::task::spawn_blocking(move || deliver(&trees, &d, &pack, budget))
            .await
            .map_err(anyhow::Error::from)??;
        match prepare(app, run_dir, &digest, req, Launch::Fresh, history.clone()).await {
            Ok(engine) => {
                return Ok(Accepted {
                    digest,
                    source,
                    engine,
                })
            }
            Err(Refusal::Compile(why)) => {
                first_failure.get_or_insert((source, why));
            }
            Err(Refusal::Other(e)) => return Err(e),
        }
    }
    let (source, why) = first_failure.expect("at least one candidate");
    Err(ApiError::Refused(format!(
        "no version compiles; {source}: compile: {why}"
    )))
}

/// Records the accepted launch as a run in state `running`, with its audit row, before it is
/// dispatched: a restarted controller resumes exactly what is recorded running.
async fn record(
    app: &App,
    launcher: &Launcher<'_>,
    id: &str,
    a: &Accepted,
    req: &LaunchRequest,
    target: Option<&crate::kube::Target>,
) -> ApiResult<()> {
    let mut tx = app.db.begin().await?;
    sqlx::query(
        "INSERT INTO runs (id, team_id, subject_id, digest, source, request, state, dispatches, \
         created_at, series_id, target, executor) \
         VALUES ($1, $2, $3, $4, $5, $6, 'running', 1, $7, $8, $9, $10)",
    )
    .bind(id)
    .bind(launcher.team_id)
    .bind(launcher.subject)
    .bind(&a.digest)
    .bind(&a.source)
    .bind(serde_json::to_string(req).map_err(anyhow::Error::from)?)
    .bind(now_ms())
    .bind(launcher.series)
    .bind(target.map(|t| t.name.as_str()))
    // A run on a Kubernetes target is executed outside the controller (`link`): its engine
    // reports with a run token, and a restart never executes it here.
    .bind(match target {
        Some(_) => crate::link::REMOTE,
        None => crate::link::LOCAL,
    })
    .execute(&mut *tx)
    .await?;
    let mut series = match launcher.series {
        Some(s) => format!(", fired by standing launch {s}"),
        None => String::new(),
    };
    if let Some(t) = target {
        series.push_str(&format!(", on target {}", t.name));
    }
    audit::record(
        &mut tx,
        launcher.subject,
        "run.launch",
        &format!("run:{}/{id}", launcher.team),
        &format!("{} ({}){series}", a.digest, a.source),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

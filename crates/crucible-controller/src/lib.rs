//! The controller (issue 12): `crucible serve`, a team's packs behind an HTTP/JSON API, stored
//! in SQLite (default) or PostgreSQL, pack trees content-addressed under the state directory.
//! The CLI only parses and prints; everything the server does is here, one module per concern:
//! `db` (store and migrations), `identity` (subjects, roles, tokens), `audit`, `trees` (the
//! tree store, tar ingestion and flattening, RFC-0002:C-PACK-BASE), `collect` (removing stored
//! trees nothing records), `packs` (registration, import and reading), `drafts` (versions on a
//! base, with provenance, and publishing one as a pack), `launches` (a launch checked and
//! delivered), `executor` (runs on the embedded engine, resumed after a restart), `runs`
//! (reading and stopping runs, their logs and their event stream), `asks` (the asks runs emit,
//! decided under the operator's policy, RFC-0002:C-ASKS), `standing` (standing launches, issue
//! 13), `scheduler` (their firings, policies and series history, RFC-0002:C-RUN-HISTORY) on
//! `clock`; `api` routes them all and describes them in the OpenAPI document; `ui` is the web
//! UI over the same handlers.

pub mod api;
pub mod asks;
pub use api::router;
pub mod audit;
pub mod clock;
pub mod collect;
pub mod db;
pub mod decisions;
pub mod dispatch;
pub mod drafts;
pub mod error;
pub mod executor;
pub mod identity;
pub mod kube;
pub mod kubeapi;
pub mod launches;
pub mod link;
pub mod oci;
pub mod packs;
pub mod publish;
pub mod runs;
pub mod scheduler;
pub mod standing;
pub mod trees;
pub mod ui;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::Json;
use sqlx::AnyPool;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// The address `crucible serve` listens on and `crucible remote` talks to by default.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8870";

/// The delivery budget by default: 700 KiB of gzipped tar, which base64-encoded into a
/// Kubernetes ConfigMap (binaryData) stays under its 1 MiB object limit (docs/decisions.md).
pub const DEFAULT_DELIVERY_BUDGET: u64 = 700 * 1024;

/// The largest pack upload by default.
pub const DEFAULT_MAX_UPLOAD: u64 = 64 * 1024 * 1024;

/// How a controller is started.
#[derive(Clone, Debug)]
pub struct Config {
    pub addr: SocketAddr,
    pub state_dir: PathBuf,
    /// A `postgres://` or `sqlite://` URL; `None` is `STATE_DIR/controller.db`.
    pub database: Option<String>,
    pub delivery_budget_bytes: u64,
    pub max_upload_bytes: u64,
    /// The `crucible` executable each launch's plan is compiled by (`crucible __launch-plan`),
    /// in a child process under the compile's memory limit.
    pub compiler: PathBuf,
    /// What every run gets from the operator, as `plan run` takes it from its environment.
    pub engine: EngineSettings,
    /// The URL clients reach this controller at, for the links a series history carries
    /// (RFC-0002:C-RUN-HISTORY); `None` is `http://` and the bound address.
    pub public_url: Option<String>,
    /// Tests only: a clock standing at this time (Unix millis), moved by `POST /v1/clock`,
    /// and no background scheduler loop (`clock`).
    pub test_clock: Option<i64>,
    /// The pack registry packs are published to (RFC-0002:C-PACK-PUBLISH); none by default.
    pub registry: Option<publish::RegistryConfig>,
    /// The Kubernetes dispatch targets (issue 17; `kube`), besides `local`.
    pub targets: Vec<kube::Target>,
    /// How the asks runs emit are admitted (RFC-0002:C-ASKS).
    pub asks: asks::AskPolicy,
}

/// The operator's settings for the runs the controller executes (read once, at start).
#[derive(Clone, Debug)]
pub struct EngineSettings {
    pub inference: crucible_agent::inference::Inference,
    pub reports: crucible_engine::report::ReportConfig,
    pub max_asks: u32,
    /// The bounds on a human decision's evidence and note (RFC-0002:C-DECISION-EVIDENCE).
    pub decision_bounds: crucible_engine::decision::Bounds,
    pub history_max_bytes: u64,
    pub max_files_bytes: u64,
    /// Isolated tasks in flight at once, per run.
    pub jobs: usize,
}

/// The state every handler shares.
#[derive(Clone)]
pub struct App {
    pub db: AnyPool,
    pub config: Arc<Config>,
    /// The runs this controller is executing now.
    pub executor: Arc<executor::Executor>,
    /// Held shared by every use of a stored tree, exclusively by collection (`collect`).
    pub trees: collect::TreesLock,
    /// The scheduler's clock.
    pub clock: Arc<clock::Clock>,
    /// The URL runs are linked at (`Config::public_url`, else the bound address), no trailing
    /// slash.
    pub base_url: Arc<str>,
    /// One lock per standing launch, held while it fires: two firings of one series never
    /// decide at once.
    pub series_locks: Arc<scheduler::SeriesLocks>,
    /// Wakes the OCI publication worker (`publish`).
    pub publisher: Arc<publish::Publisher>,
    /// Serializes deciding asks, so one key is admitted once however many runs emit it.
    pub asks: Arc<tokio::sync::Mutex<()>>,
    /// Each run's spend as its session log said when last read (`runs::SpendCache`).
    pub spend: Arc<runs::SpendCache>,
}

impl App {
    pub fn trees_dir(&self) -> PathBuf {
        self.config.state_dir.join("trees")
    }

    /// Spool and staging space, on the same filesystem as the store so a tree is renamed in.
    pub fn tmp_dir(&self) -> PathBuf {
        self.config.state_dir.join("tmp")
    }

    /// Each run's directory: its delivered pack (`pack/`) and, beside it, the engine's state
    /// (`state/`).
    pub fn runs_dir(&self) -> PathBuf {
        self.config.state_dir.join("runs")
    }

    /// The controller-owned link to a run (RFC-0002:C-RUN-HISTORY).
    pub fn run_link(&self, id: &str) -> String {
        format!("{}/v1/runs/{id}", self.base_url)
    }
}

/// The default state directory: `$XDG_STATE_HOME/crucible/controller`, else under
/// `~/.local/state`. `crucible remote` reads `admin.token` from the same place.
pub fn default_state_dir() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("crucible/controller")
}

/// The token file the first start writes.
pub fn admin_token_file(state_dir: &std::path::Path) -> PathBuf {
    state_dir.join("admin.token")
}

/// `GET /v1/settings`: the limits in force, the delivery budget among them (C-PACK-BASE:
/// the budget is declared and retrievable) and the bound on the history a task of a series
/// run receives (C-RUN-HISTORY: discoverable before a run starts).
pub(crate) async fn settings(
    State(app): State<App>,
    _caller: identity::Caller,
) -> error::ApiResult<Json<serde_json::Value>> {
    Ok(Json(serde_json::json!({
        "delivery_budget_bytes": app.config.delivery_budget_bytes,
        "max_upload_bytes": app.config.max_upload_bytes,
        "history_max_bytes": app.config.engine.history_max_bytes,
        "history_max_records": crucible_plan::ceilings::MAX_HISTORY,
        "test_clock": app.clock.is_test(),
        "targets": kube::targets_json(&app).await?,
        "asks": app.config.asks.describe(),
    })))
}

/// Opens the store (bootstrapping the admin on first start), binds, calls `ready` with the
/// bound address and the start-up facts, then serves until the process is stopped.
pub async fn serve(config: Config, ready: impl FnOnce(SocketAddr, &str, bool)) -> Result<()> {
    let state = &config.state_dir;
    for dir in [
        state.clone(),
        state.join("trees"),
        state.join("tmp"),
        state.join("runs"),
    ] {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Spool files and staging trees left by a controller that died mid-upload.
    for entry in std::fs::read_dir(state.join("tmp"))? {
        let path = entry?.path();
        let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
    }
    let url = config
        .database
        .clone()
        .unwrap_or_else(|| db::default_url(state));
    let pool = db::open(&url).await?;
    let bootstrapped = identity::bootstrap(&pool, &admin_token_file(state)).await?;
    // Bound first, for the address run links carry; nothing answers before `ready`.
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .with_context(|| format!("binding {}", config.addr))?;
    let bound = listener.local_addr()?;
    let base_url = match &config.public_url {
        Some(u) => u.trim_end_matches('/').to_string(),
        None => format!("http://{bound}"),
    };
    let clock = match config.test_clock {
        Some(start) => clock::Clock::test(start),
        None => clock::Clock::system(),
    };
    let app = App {
        db: pool,
        config: Arc::new(config),
        executor: Arc::default(),
        trees: Arc::default(),
        clock: Arc::new(clock),
        base_url: base_url.into(),
        series_locks: Arc::default(),
        publisher: Arc::default(),
        asks: Arc::default(),
        spend: Arc::default(),
    };
    // RFC-0002:C-PACK-BASE: trees nothing records any more (or never did: a recording that
    // failed) are removed before the controller answers anyone, then every hour.
    collect::collect(&app).await?;
    collect::every_period(app.clone());
    publish::start(&app).await?;
    ready(bound, db::describe(&url), bootstrapped);
    // RFC-0002:C-PLAYBOOK-RESUME: the runs a controller that stopped was executing go on.
    executor::resume_all(&app).await?;
    link::settle_all(&app).await?;
    // Issue 17: runs on Kubernetes targets are watched again (never created twice).
    dispatch::resume_all(&app).await?;
    if !app.clock.is_test() {
        tokio::spawn(scheduler::tick_loop(app.clone()));
    }
    axum::serve(listener, router(app.clone()).merge(ui::router(app)))
        .await
        .context("serving")?;
    Ok(())
}

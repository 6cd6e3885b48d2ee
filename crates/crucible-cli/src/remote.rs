//! `crucible serve` (starts the controller) and `crucible remote` (its client): arguments in,
//! one HTTP call out, the controller's answer printed. A refusal exits 1 with the
//! controller's own reason.

use crate::args::{
    DraftSaveArgs, LaunchSpec, PushArgs, RemoteArgs, RemoteLaunchArgs, RemoteLogsArgs,
    RemoteRunArg, RemoteRunsArgs, RemoteRunsCommand, RemoteStandingCommand, ServeArgs,
    StandingCreateArgs,
};
use anyhow::{anyhow, bail, Context, Result};
use crucible_plan::terminal::escape;
use std::io::Write;
use std::process::ExitCode;

pub fn serve(a: ServeArgs) -> Result<ExitCode> {
    let state_dir = a
        .state_dir
        .unwrap_or_else(crucible_controller::default_state_dir);
    crucible_plan::duration::parse(&a.ask_max_time).map_err(|e| anyhow!("--ask-max-time: {e}"))?;
    if !(a.ask_max_cost.is_finite() && a.ask_max_cost >= 0.0) {
        bail!("--ask-max-cost must be a non-negative number of USD");
    }
    let config = crucible_controller::Config {
        addr: a.addr,
        state_dir: state_dir.clone(),
        database: a.database,
        delivery_budget_bytes: a.delivery_budget,
        max_upload_bytes: a.max_upload,
        compiler: std::env::current_exe().context("locating the crucible executable")?,
        public_url: a.public_url,
        test_clock: a
            .test_clock
            .as_deref()
            .map(crucible_controller::clock::parse_rfc3339)
            .transpose()
            .map_err(|e| anyhow!("--test-clock: {e}"))?,
        // Every run gets the operator's settings as `plan run` reads them, read once here.
        registry: crate::remote_pack::registry(a.registry, a.registry_credentials.as_deref())?,
        targets: match &a.targets {
            Some(file) => crucible_controller::kube::load_targets(file)?,
            None => Vec::new(),
        },
        engine: crucible_controller::EngineSettings {
            inference: crate::run::inference_bindings()?,
            reports: crate::run::report_config()?,
            max_asks: crate::run::asks_bound()?,
            decision_bounds: crate::decide::bounds()?,
            history_max_bytes: match a.history_max_bytes {
                Some(b) => b,
                None => crate::run::history_bound()?,
            },
            max_files_bytes: crate::compile::files_bound(None)?,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
        asks: crucible_controller::asks::AskPolicy {
            allow: a.ask_allow,
            per_hour: a.asks_per_hour,
            repeat_after_secs: a
                .ask_repeat_after
                .as_deref()
                .map(crucible_plan::duration::parse)
                .transpose()
                .map_err(|e| anyhow!("--ask-repeat-after: {e}"))?,
            max_cost: a.ask_max_cost,
            max_time: a.ask_max_time,
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(crucible_controller::serve(
        config,
        |addr, database, bootstrapped| {
            let mut out = std::io::stdout().lock();
            // Tests and scripts read the first line for the bound address (`--addr 127.0.0.1:0`).
            let _ = writeln!(out, "crucible controller listening on http://{addr}");
            let _ = writeln!(
                out,
                "database: {database}; state: {}",
                escape(&state_dir.display().to_string())
            );
            if bootstrapped {
                let file = crucible_controller::admin_token_file(&state_dir);
                let _ = writeln!(
                    out,
                    "first start: the admin token is in {}",
                    escape(&file.display().to_string())
                );
            }
            let _ = out.flush();
        },
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// The caller's token: `CRUCIBLE_TOKEN`, else the local controller's `admin.token`.
fn token(r: &RemoteArgs) -> Result<String> {
    if let Some(t) = std::env::var_os("CRUCIBLE_TOKEN") {
        return t
            .into_string()
            .map_err(|_| anyhow!("CRUCIBLE_TOKEN is not valid UTF-8"));
    }
    let dir = r
        .state_dir
        .clone()
        .unwrap_or_else(crucible_controller::default_state_dir);
    let file = crucible_controller::admin_token_file(&dir);
    let text = std::fs::read_to_string(&file).map_err(|e| {
        anyhow!(
            "no token: set CRUCIBLE_TOKEN, or run `crucible serve` on this machine first \
             (it writes {}): {e}",
            file.display()
        )
    })?;
    Ok(text.trim().to_string())
}

/// The controller's answer: the JSON body of a success, or its refusal as the error.
fn answer(
    response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    server: &str,
) -> Result<serde_json::Value> {
    let mut response =
        response.map_err(|e| anyhow!("cannot reach the controller at {server}: {e}"))?;
    let status = response.status();
    let text = response
        .body_mut()
        .with_config()
        .limit(16 * 1024 * 1024)
        .read_to_string()
        .context("reading the controller's answer")?;
    let body: serde_json::Value = serde_json::from_str(&text)
        .map_err(|_| anyhow!("the controller answered {status} with a body that is not JSON"))?;
    if !status.is_success() {
        let reason = body["error"].as_str().unwrap_or("no reason given");
        bail!("the controller refused ({}): {reason}", status.as_u16());
    }
    Ok(body)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

pub fn pack_push(r: &RemoteArgs, a: &PushArgs) -> Result<ExitCode> {
    let name = match &a.name {
        Some(n) => n.clone(),
        None => std::fs::canonicalize(&a.dir)?
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .ok_or_else(|| anyhow!("name the pack with --name"))?,
    };
    let mut query = vec![("name", name)];
    query.extend(a.team.clone().map(|t| ("team", t)));
    let body = upload(r, "/v1/packs", &a.dir, &query)?;
    println!("{}", escape(body["digest"].as_str().unwrap_or_default()));
    Ok(ExitCode::SUCCESS)
}

pub fn draft_save(r: &RemoteArgs, a: &DraftSaveArgs) -> Result<ExitCode> {
    let mut query = vec![("name", a.name.clone())];
    query.extend(a.team.clone().map(|t| ("team", t)));
    query.extend(a.base.clone().map(|b| ("base", b)));
    let body = upload(r, "/v1/drafts", &a.dir, &query)?;
    if let Some(p) = body["provenance"].as_object() {
        let replaced = body["provenance"]["overlay_paths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| o["replaced"] == true)
            .count();
        eprintln!(
            "version {} on base {}: overlay {} ({replaced} base files replaced)",
            body["version"],
            escape(p["base_digest"].as_str().unwrap_or_default()),
            escape(p["overlay_digest"].as_str().unwrap_or_default()),
        );
    }
    println!("{}", escape(body["digest"].as_str().unwrap_or_default()));
    Ok(ExitCode::SUCCESS)
}

/// Sends a pack directory's files as a tar to `path` (listing them as `crucible pack digest`
/// does, so a link is refused before anything is sent) and returns the controller's answer.
fn upload(
    r: &RemoteArgs,
    path: &str,
    dir: &std::path::Path,
    query: &[(&str, String)],
) -> Result<serde_json::Value> {
    let token = token(r)?;
    let listing =
        crucible_pack::files::pack_files(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    for p in &listing.ignored {
        eprintln!("ignored: {}", escape(p));
    }
    let tar = crucible_controller::trees::write_tar(dir, &listing.files, Vec::new())
        .with_context(|| format!("archiving {}", dir.display()))?;
    let url = format!("{}{path}", r.server.trim_end_matches('/'));
    let mut request = agent()
        .post(&url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/x-tar");
    for (k, v) in query {
        request = request.query(*k, v);
    }
    answer(request.send(&tar[..]), &r.server)
}

/// A GET, a DELETE or a POST to the controller, answered as JSON.
pub(crate) fn call(
    r: &RemoteArgs,
    method: &str,
    path: &str,
    json: Option<&serde_json::Value>,
) -> Result<serde_json::Value> {
    let token = token(r)?;
    let url = format!("{}{path}", r.server.trim_end_matches('/'));
    let auth = format!("Bearer {token}");
    let response = match (method, json) {
        ("GET", _) => agent().get(&url).header("Authorization", &auth).call(),
        ("DELETE", _) => agent().delete(&url).header("Authorization", &auth).call(),
        (_, Some(body)) => agent()
            .post(&url)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(body.to_string().as_bytes()),
        (_, None) => agent()
            .post(&url)
            .header("Authorization", &auth)
            .send_empty(),
    };
    answer(response, &r.server)
}

/// A run id as a path segment: the controller's ids are UUIDs; anything else is refused here
/// rather than sent.
fn run_id(run: &str) -> Result<&str> {
    if run.is_empty() || !run.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        bail!("{} is not a run id", escape(run));
    }
    Ok(run)
}

/// `--param` values as a launch's parameters and settings, split by whether the name has a dot.
pub(crate) fn params_and_settings(
    given: &[String],
) -> Result<(
    serde_json::Map<String, serde_json::Value>,
    serde_json::Map<String, serde_json::Value>,
)> {
    let (mut params, mut settings) = (serde_json::Map::new(), serde_json::Map::new());
    for p in given {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| anyhow!("--param {}: give name=value", escape(p)))?;
        let into = if k.contains('.') {
            &mut settings
        } else {
            &mut params
        };
        into.insert(k.to_string(), v.into());
    }
    Ok((params, settings))
}

/// `--steer` files as a launch's steering: each file's name and its text.
pub(crate) fn steering(files: &[std::path::PathBuf]) -> Result<serde_json::Value> {
    let mut steering = serde_json::Map::new();
    for file in files {
        let shown = || escape(&file.display().to_string()).into_owned();
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("--steer {}: not a file", shown()))?;
        let text =
            std::fs::read_to_string(file).map_err(|e| anyhow!("--steer {}: {e}", shown()))?;
        if steering.insert(name.clone(), text.into()).is_some() {
            bail!("--steer: two files named {}", escape(&name));
        }
    }
    Ok(steering.into())
}

/// A launch's JSON body.
fn launch_body(a: &LaunchSpec) -> Result<serde_json::Value> {
    let (params, settings) = params_and_settings(&a.params)?;
    Ok(serde_json::json!({
        "pack": a.pack,
        "team": a.team,
        "params": params,
        "settings": settings,
        "caps": a.caps,
        "max_cost": a.max_cost,
        "max_time": a.max_time.map(|s| format!("{s}s")),
        "target": a.target,
    }))
}

/// `remote launch`: the launch, checked by the controller before it is accepted; prints the
/// run id, and with `--follow` streams the run and exits as `plan run` does.
pub fn launch(r: &RemoteArgs, a: &RemoteLaunchArgs) -> Result<ExitCode> {
    let mut body = launch_body(&a.spec)?;
    body["steering"] = steering(&a.steer)?;
    let v = call(r, "POST", "/v1/launches", Some(&body))?;
    let id = v["id"].as_str().unwrap_or_default().to_string();
    eprintln!(
        "launched run {} of {} ({})",
        escape(&id),
        escape(v["digest"].as_str().unwrap_or_default()),
        escape(v["source"].as_str().unwrap_or_default())
    );
    if !a.follow {
        println!("{}", escape(&id));
        return Ok(ExitCode::SUCCESS);
    }
    follow(r, run_id(&id)?)
}

/// Prints each row of the run as it settles, from its event stream, then the run as `runs
/// show` does; the exit code is `plan run`'s.
fn follow(r: &RemoteArgs, id: &str) -> Result<ExitCode> {
    let token = token(r)?;
    let url = format!("{}/v1/runs/{id}/events", r.server.trim_end_matches('/'));
    let response = agent()
        .get(&url)
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .map_err(|e| anyhow!("cannot reach the controller at {}: {e}", r.server))?;
    if !response.status().is_success() {
        return answer(Ok(response), &r.server).map(|_| ExitCode::FAILURE);
    }
    let reader = std::io::BufReader::new(response.into_body().into_reader());
    let mut event = String::new();
    for line in std::io::BufRead::lines(reader) {
        let line = line.context("reading the run's events")?;
        if let Some(e) = line.strip_prefix("event: ") {
            event = e.to_string();
        } else if let Some(data) = line.strip_prefix("data: ") {
            let v: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
            match event.as_str() {
                "task_result" => println!("{}", row_line(&v)),
                "end" => break,
                _ => {}
            }
        }
    }
    let run = call(r, "GET", &format!("/v1/runs/{id}"), None)?;
    print_run_end(&run);
    Ok(match (run["state"].as_str(), run["verdict"].as_str()) {
        (Some("refused"), _) => ExitCode::FAILURE,
        (_, Some("valid")) => ExitCode::SUCCESS,
        _ => ExitCode::from(crate::run::EXIT_INVALID),
    })
}

/// A settled row, as `plan run` prints one (its task's text escaped).
fn row_line(row: &serde_json::Value) -> String {
    let text = |k: &str| escape(row[k].as_str().unwrap_or_default());
    let mut line = format!(
        "{} {} attempts={} cost=${:.2} secs={:.2}",
        text("task"),
        text("status"),
        row["attempts"],
        row["cost_usd"].as_f64().unwrap_or_default(),
        row["secs"].as_f64().unwrap_or_default()
    );
    if row["note"].is_string() {
        line.push_str(&format!(" note: {}", text("note")));
    }
    if row["refused"].is_string() {
        line.push_str(&format!(" refused: {}", text("refused")));
    }
    line
}

/// The end of a run as `plan run` prints it: outcome, spend, run and verdict.
fn print_run_end(run: &serde_json::Value) {
    let text = |v: &serde_json::Value| escape(v.as_str().unwrap_or("-")).into_owned();
    match run["state"].as_str() {
        Some("refused" | "failed") => println!("{}: {}", text(&run["state"]), text(&run["reason"])),
        _ => println!(
            "{}",
            crate::inspect::outcome_line(
                &text(&run["outcome"]),
                run["shutdown"]["ceiling"].as_str().map(escape),
                run["reason"].as_str()
            )
        ),
    }
    println!(
        "spent ${:.2} of ${:.2}",
        run["spent_usd"].as_f64().unwrap_or_default(),
        run["request"]["max_cost"].as_f64().unwrap_or_default()
    );
    println!("run: {}", text(&run["id"]));
    println!("verdict: {}", text(&run["verdict"]));
}

/// `remote runs` and `remote runs show RUN`.
pub fn runs(r: &RemoteArgs, a: &RemoteRunsArgs) -> Result<ExitCode> {
    if let Some(RemoteRunsCommand::Show(RemoteRunArg { run })) = &a.command {
        let v = call(r, "GET", &format!("/v1/runs/{}", run_id(run)?), None)?;
        let text = |k: &str| escape(v[k].as_str().unwrap_or("-"));
        println!(
            "run {} of team {} by {}",
            text("id"),
            text("team"),
            text("launched_by")
        );
        println!("pack {} ({})", text("digest"), text("source"));
        println!("state {}", text("state"));
        for row in v["rows"].as_array().into_iter().flatten() {
            println!("{}", row_line(row));
        }
        print_run_end(&v);
        return Ok(ExitCode::SUCCESS);
    }
    let v = call(r, "GET", "/v1/runs", None)?;
    for run in v["runs"].as_array().into_iter().flatten() {
        let text = |k: &str| escape(run[k].as_str().unwrap_or("-"));
        println!(
            "{}  {:<9} {:<9} {:<12} {} ({})",
            text("id"),
            text("state"),
            text("verdict"),
            text("team"),
            text("digest"),
            text("source")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `remote logs RUN [TASK]`: each settled row's kept files, each under a header naming it.
pub fn logs(r: &RemoteArgs, a: &RemoteLogsArgs) -> Result<ExitCode> {
    let path = match &a.task {
        Some(t) => format!("/v1/runs/{}/logs/{}", run_id(&a.run)?, task_segment(t)?),
        None => format!("/v1/runs/{}/logs", run_id(&a.run)?),
    };
    let v = call(r, "GET", &path, None)?;
    let mut out = std::io::stdout().lock();
    for row in v["rows"].as_array().into_iter().flatten() {
        for f in row["files"].as_array().into_iter().flatten() {
            let body = f["text"].as_str().unwrap_or_default();
            if body.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "── {} {} ──",
                escape(row["task"].as_str().unwrap_or_default()),
                escape(f["file"].as_str().unwrap_or_default())
            );
            for line in body.lines() {
                let _ = writeln!(out, "{}", escape(line));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A task name as a path segment: a plan's task names are identifiers.
fn task_segment(task: &str) -> Result<&str> {
    if task.is_empty()
        || !task
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        bail!("{} is not a task name", escape(task));
    }
    Ok(task)
}

/// `remote stop RUN`.
pub fn stop(r: &RemoteArgs, a: &RemoteRunArg) -> Result<ExitCode> {
    call(
        r,
        "POST",
        &format!("/v1/runs/{}/stop", run_id(&a.run)?),
        None,
    )?;
    eprintln!("stopping run {}", escape(&a.run));
    Ok(ExitCode::SUCCESS)
}

/// One standing launch as a line: id, name, team, pack, schedule, state, next time.
fn standing_line(s: &serde_json::Value) -> String {
    let text = |k: &str| escape(s[k].as_str().unwrap_or("-"));
    let schedule = match s["schedule"].as_str() {
        Some(c) => format!("{} ({})", escape(c), text("timezone")),
        None => "by hand".to_string(),
    };
    let state = if s["paused"] == true {
        "paused"
    } else {
        "active"
    };
    format!(
        "{}  {:<16} {:<12} {} {schedule} {state} next {}",
        text("id"),
        text("name"),
        text("team"),
        text("pack"),
        text("next_at")
    )
}

/// One firing as a line: when, why, what became of it.
fn firing_line(f: &serde_json::Value) -> String {
    let text = |k: &str| escape(f[k].as_str().unwrap_or("-"));
    let what = match f["result"].as_str() {
        Some("launched") => format!("launched run {}", text("run")),
        _ => format!("{}: {}", text("result"), text("reason")),
    };
    format!("{} {:<8} {what}", text("at"), text("trigger"))
}

/// A standing launch id as a path segment (the controller's ids are UUIDs).
fn standing_id(id: &str) -> Result<&str> {
    run_id(id).map_err(|_| anyhow!("{} is not a standing launch id", escape(id)))
}

/// `remote standing …`.
pub fn standing(r: &RemoteArgs, c: &RemoteStandingCommand) -> Result<ExitCode> {
    match c {
        RemoteStandingCommand::Create(a) => standing_create(r, a),
        RemoteStandingCommand::List => {
            let v = call(r, "GET", "/v1/standing", None)?;
            for s in v["standing"].as_array().into_iter().flatten() {
                println!("{}", standing_line(s));
            }
            Ok(ExitCode::SUCCESS)
        }
        RemoteStandingCommand::Show(a) => {
            let v = call(
                r,
                "GET",
                &format!("/v1/standing/{}", standing_id(&a.id)?),
                None,
            )?;
            println!("{}", standing_line(&v));
            for f in v["firings"].as_array().into_iter().flatten() {
                println!("{}", firing_line(f));
            }
            Ok(ExitCode::SUCCESS)
        }
        RemoteStandingCommand::Fire(a) => {
            let path = format!("/v1/standing/{}/fire", standing_id(&a.id)?);
            let f = call(r, "POST", &path, None)?;
            println!("{}", firing_line(&f));
            Ok(if f["result"] == "launched" {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        RemoteStandingCommand::Pause(a) | RemoteStandingCommand::Resume(a) => {
            let action = match c {
                RemoteStandingCommand::Pause(_) => "pause",
                _ => "resume",
            };
            let path = format!("/v1/standing/{}/{action}", standing_id(&a.id)?);
            println!("{}", standing_line(&call(r, "POST", &path, None)?));
            Ok(ExitCode::SUCCESS)
        }
        RemoteStandingCommand::Delete(a) => {
            call(
                r,
                "DELETE",
                &format!("/v1/standing/{}", standing_id(&a.id)?),
                None,
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn standing_create(r: &RemoteArgs, a: &StandingCreateArgs) -> Result<ExitCode> {
    let mut body = launch_body(&a.launch)?;
    body["name"] = a.name.clone().into();
    body["schedule"] = serde_json::json!(a.schedule);
    body["timezone"] = serde_json::json!(a.timezone);
    body["daily_max_cost"] = serde_json::json!(a.daily_max_cost);
    let v = call(r, "POST", "/v1/standing", Some(&body))?;
    eprintln!("{}", standing_line(&v));
    println!("{}", escape(v["id"].as_str().unwrap_or_default()));
    Ok(ExitCode::SUCCESS)
}

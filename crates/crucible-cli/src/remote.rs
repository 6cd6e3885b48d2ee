//! `crucible serve` (starts the controller) and `crucible remote` (its client): arguments in,
//! one HTTP call out, the controller's answer printed. A refusal exits 1 with the
//! controller's own reason.

use crate::args::{DraftSaveArgs, PushArgs, RemoteArgs, ServeArgs};
use anyhow::{anyhow, bail, Context, Result};
use crucible_plan::terminal::escape;
use std::io::Write;
use std::process::ExitCode;

pub fn serve(a: ServeArgs) -> Result<ExitCode> {
    let state_dir = a
        .state_dir
        .unwrap_or_else(crucible_controller::default_state_dir);
    let config = crucible_controller::Config {
        addr: a.addr,
        state_dir: state_dir.clone(),
        database: a.database,
        delivery_budget_bytes: a.delivery_budget,
        max_upload_bytes: a.max_upload,
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

//! `crucible remote pack show DIGEST` and `crucible serve --registry` (RFC-0002:C-PACK-PUBLISH):
//! a digest's packs, their revisions with provenance and publication state; the registry
//! settings read at start.

use crate::args::{PackShareArgs, PackShowArgs, RemoteArgs, RemoteRenderArgs, RemoteTargetCommand};
use anyhow::{Context, Result};
use crucible_plan::terminal::escape;
use serde_json::Value;
use std::process::ExitCode;

/// The registry `crucible serve` publishes to, with its credentials file read once.
pub fn registry(
    url: Option<String>,
    credentials: Option<&std::path::Path>,
) -> Result<Option<crucible_controller::publish::RegistryConfig>> {
    let Some(url) = url else { return Ok(None) };
    let credentials = match credentials {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            let line = text.lines().next().unwrap_or_default().trim().to_string();
            anyhow::ensure!(
                line.contains(':'),
                "{}: the first line must be USER:PASSWORD",
                file.display()
            );
            Some(line)
        }
        None => None,
    };
    // Checked now, so a malformed URL stops the start rather than every publication.
    crucible_controller::oci::Repository::new(&url, credentials.as_deref())?;
    Ok(Some(crucible_controller::publish::RegistryConfig {
        url,
        credentials,
    }))
}

/// One line for a publication state: `published sha256:…`, `pending: ERROR`, ….
pub fn publication_line(p: &Value) -> String {
    let state = p["state"].as_str().unwrap_or("unpublished");
    let mut line = match (
        state,
        p["manifest_digest"].as_str(),
        p["last_error"].as_str(),
    ) {
        ("published", Some(m), _) => format!("published {m}"),
        (_, _, Some(e)) => format!("{state}: {e}"),
        _ => state.to_string(),
    };
    if state == "published" {
        let layers = p["layers"].as_i64().unwrap_or(0);
        line.push_str(&format!(
            " ({layers} layer{}",
            if layers == 1 { "" } else { "s" }
        ));
        match p["base_layer_shared"].as_bool() {
            Some(true) => line.push_str(", the base's files first"),
            Some(false) => line.push_str(", the base layer not shared: its tree was not held"),
            None => {}
        }
        line.push(')');
    }
    escape(&line).into_owned()
}

pub fn show(r: &RemoteArgs, a: &PackShowArgs) -> Result<ExitCode> {
    let path = format!("/v1/digests/{}", a.digest);
    let body = crate::remote::call(r, "GET", &path, None)?;
    let text = |v: &Value| escape(v.as_str().unwrap_or_default()).into_owned();
    println!("{}", text(&body["digest"]));
    println!("publication: {}", publication_line(&body["publication"]));
    for pack in body["packs"].as_array().into_iter().flatten() {
        println!(
            "pack {}/{} ({}), current {}",
            text(&pack["team"]),
            text(&pack["name"]),
            text(&pack["id"]),
            text(&pack["digest"]),
        );
        for rev in pack["revisions"].as_array().into_iter().flatten() {
            let source = rev["source"]
                .as_str()
                .map(|s| format!(" from {}", escape(s)))
                .unwrap_or_default();
            println!(
                "  revision {} {} {}{source}: {}",
                rev["revision"],
                text(&rev["digest"]),
                text(&rev["origin"]),
                publication_line(&rev["publication"]),
            );
            if let Some(p) = rev["provenance"].as_object() {
                let paths = p["overlay_paths"].as_array().map_or(0, Vec::len);
                println!(
                    "    on base {}, overlay {} ({paths} paths)",
                    text(&p["base_digest"]),
                    text(&p["overlay_digest"]),
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `crucible remote render`: the objects a launch on a Kubernetes target would create, printed
/// as the controller rendered them (YAML documents); how the pack is delivered on stderr.
pub fn render(r: &RemoteArgs, a: &RemoteRenderArgs) -> Result<ExitCode> {
    let (params, settings) = crate::remote::params_and_settings(&a.params)?;
    let body = serde_json::json!({
        "target": a.target, "pack": a.pack, "team": a.team, "params": params,
        "settings": settings, "max_cost": a.max_cost, "max_time": a.max_time,
        "steering": crate::remote::steering(&a.steer)?,
    });
    let answer = crate::remote::call(r, "POST", "/v1/render", Some(&body))?;
    eprintln!(
        "{} on target {}: the pack delivered by {}",
        escape(answer["digest"].as_str().unwrap_or_default()),
        escape(answer["target"].as_str().unwrap_or_default()),
        escape(answer["delivery"].as_str().unwrap_or_default()),
    );
    print!("{}", answer["yaml"].as_str().unwrap_or_default());
    Ok(ExitCode::SUCCESS)
}

/// `crucible remote target list|trust|untrust`: the dispatch targets, and a platform admin's
/// registry-trust mark (`POST /v1/targets/{name}/trust`, docs/kubernetes.md).
pub fn target(r: &RemoteArgs, c: &RemoteTargetCommand) -> Result<ExitCode> {
    let (name, on) = match c {
        RemoteTargetCommand::List => {
            let settings = crate::remote::call(r, "GET", "/v1/settings", None)?;
            let text = |v: &Value| escape(v.as_str().unwrap_or("-")).into_owned();
            for t in settings["targets"].as_array().into_iter().flatten() {
                let trust = match t["registry_trusted"].as_bool() {
                    Some(true) => format!("registry-trusted ({})", text(&t["trust_set_by"])),
                    Some(false) => format!("not registry-trusted ({})", text(&t["trust_set_by"])),
                    None => "-".into(),
                };
                println!("{}\t{}\t{trust}", text(&t["name"]), text(&t["kind"]));
            }
            return Ok(ExitCode::SUCCESS);
        }
        RemoteTargetCommand::Trust(a) => (&a.name, true),
        RemoteTargetCommand::Untrust(a) => (&a.name, false),
    };
    let body = serde_json::json!({ "registry_trusted": on });
    let path = format!("/v1/targets/{name}/trust");
    crate::remote::call(r, "POST", &path, Some(&body))?;
    let what = if on {
        "registry-trusted"
    } else {
        "not registry-trusted"
    };
    eprintln!("target {} is {what}", escape(name));
    Ok(ExitCode::SUCCESS)
}

/// `remote pack share|unshare DIGEST --team T [--pack ID]`: the pack of your own teams that
/// records the digest (the one `--pack` names when several do) shared with team `T`, or no
/// more; prints the teams it is shared with after.
pub fn share(r: &RemoteArgs, a: &PackShareArgs, share: bool) -> Result<ExitCode> {
    let found = crate::remote::call(r, "GET", &format!("/v1/digests/{}", a.digest), None)?;
    // `shared_with` is shown only to the pack's own team: a pack shared with you is not yours
    // to share.
    let owned: Vec<&Value> = found["packs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["shared_with"].is_array())
        .filter(|p| a.pack.as_deref().is_none_or(|id| p["id"] == id))
        .collect();
    let id = match owned.as_slice() {
        [one] => one["id"].as_str().unwrap_or_default().to_string(),
        [] => anyhow::bail!(
            "no pack of your teams records {}{}",
            escape(&a.digest),
            a.pack
                .as_deref()
                .map(|p| format!(" with id {}", escape(p)))
                .unwrap_or_default()
        ),
        many => {
            let names: Vec<String> = many
                .iter()
                .map(|p| {
                    format!(
                        "{}/{} ({})",
                        escape(p["team"].as_str().unwrap_or_default()),
                        escape(p["name"].as_str().unwrap_or_default()),
                        escape(p["id"].as_str().unwrap_or_default())
                    )
                })
                .collect();
            anyhow::bail!(
                "{} packs of your teams record {}: {}; name one with --pack ID",
                many.len(),
                escape(&a.digest),
                names.join(", ")
            )
        }
    };
    let answer = if share {
        let body = serde_json::json!({ "team": a.team });
        crate::remote::call(r, "POST", &format!("/v1/packs/{id}/shares"), Some(&body))?
    } else {
        let path = format!("/v1/packs/{id}/shares/{}", a.team);
        crate::remote::call(r, "DELETE", &path, None)?
    };
    let with: Vec<String> = answer["shared_with"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| escape(t.as_str().unwrap_or_default()).into_owned())
        .collect();
    let verb = match (share, answer["changed"].as_bool()) {
        (true, Some(true)) => "shared with",
        (true, _) => "was already shared with",
        (false, Some(true)) => "no longer shared with",
        (false, _) => "was not shared with",
    };
    eprintln!("pack {} {verb} team {}", escape(&id), escape(&a.team));
    println!(
        "shared with: {}",
        if with.is_empty() {
            "no team".to_string()
        } else {
            with.join(", ")
        }
    );
    Ok(ExitCode::SUCCESS)
}

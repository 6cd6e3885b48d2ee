//! `crucible remote pack show DIGEST` and `crucible serve --registry` (RFC-0002:C-PACK-PUBLISH):
//! a digest's packs, their revisions with provenance and publication state; the registry
//! settings read at start.

use crate::args::{PackShowArgs, RemoteArgs};
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

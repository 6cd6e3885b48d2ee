//! `crucible init [DIR]` (issue 19): a starter pack a new user can run at once. Its files live
//! under `crates/crucible-cli/starter/` and are built into the binary; the conformance suite
//! runs what this writes, so the starter cannot drift out of date with the engine.

use crate::args::InitArgs;
use anyhow::{bail, Context, Result};
use crucible_plan::terminal::escape;
use std::path::Path;
use std::process::ExitCode;

/// Each starter file: its path in the pack and its text.
const FILES: [(&str, &str); 5] = [
    ("crucible.toml", include_str!("../starter/crucible.toml")),
    ("workflow.star", include_str!("../starter/workflow.star")),
    (
        "prompts/summarize.md",
        include_str!("../starter/prompts/summarize.md"),
    ),
    ("agent.sh", include_str!("../starter/agent.sh")),
    (".gitignore", include_str!("../starter/.gitignore")),
];

pub fn init(args: &InitArgs) -> Result<ExitCode> {
    let dir = &args.dir;
    let named = shown(dir);
    // Refused when anything is there: a starter file must never replace a file of the user's.
    let occupied = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => bail!("{named}: {e}"),
    };
    if occupied {
        bail!("{named} is not empty: `crucible init` writes a new pack only into an empty or new directory");
    }
    for (rel, text) in FILES {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| shown(parent))?;
        }
        std::fs::write(&path, text).with_context(|| shown(&path))?;
    }
    let manifest = shown(&dir.join("crucible.toml"));
    println!("wrote a starter pack in {named}:");
    for (rel, _) in FILES {
        println!("  {rel}");
    }
    println!("next:");
    println!("  crucible plan run --manifest {manifest} --max-cost 1 --max-time 5m");
    println!("  crucible runs show latest --manifest {manifest}");
    Ok(ExitCode::SUCCESS)
}

/// A path as printed: escaped, since a path is the user's text.
fn shown(path: &Path) -> String {
    escape(&path.display().to_string()).into_owned()
}

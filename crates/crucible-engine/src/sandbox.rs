//! Every attempt in a sandbox (issue 11, item 1; ARCHITECTURE.md, "A task is untrusted";
//! RFC-0002:C-PLAYBOOK-BUDGET, C-TASK-FILES).
//!
//! [`Sandbox::wrap`] turns the [`Spawn`] an attempt would run into the same spawn under
//! bubblewrap (`bwrap`), so `proc` runs and kills it exactly as before. Inside, the host's file
//! system is read-only; the pack directory and the state directory are replaced by empty
//! directories (so the session log, `run.json`, other runs and `workflow.star` are out of reach);
//! then the attempt's own paths are bound back: its workspace or isolated checkout read-write,
//! the staged `inputs/` in it read-only (a bind mount is read-only for root too), the run's
//! `inputs/` (the inputs and prompt files the contract names) and git memory read-only, and the
//! paths the spawn asks for (a harness's config and install directories). `/tmp` is private.
//! The attempt gets its own PID namespace whose init is bubblewrap, tied to the engine with
//! `--die-with-parent`: when the attempt's process exits or is killed, or the engine dies however
//! it dies, the kernel kills everything left in the namespace, `setsid` survivors included.
//! Every capability is dropped (`--cap-drop ALL`): an engine run as root would otherwise hand
//! its tasks `CAP_SYS_ADMIN`, and a task could simply unmount what hides the state directory or
//! remount its inputs read-write. A root task keeps uid 0 (it owns what root owns) and nothing more.
//! The network is shared, except for an agent task in a named sandbox ([`Named`]), which has none.
//! Host paths the manifest exposes (`[sandbox] expose`) are bound
//! read-write before the pack and the state directory are hidden, so neither is ever reachable
//! through one of them.

use crucible_agent::spawn::Spawn;
use crucible_pack::manifest::Manifest;
use std::path::{Path, PathBuf};

/// The Debian package that provides `bwrap`.
pub const PACKAGE: &str = "bubblewrap";

/// How the run's attempts are spawned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Under bubblewrap, at this path.
    Bwrap(PathBuf),
    /// Unsandboxed, because the operator said so (named: the flag or the manifest key).
    Off(&'static str),
}

/// The operator's opt-out flag and the manifest's key, as `check` and the refusal name them.
pub const FLAG: &str = "--no-sandbox";
pub const MANIFEST_KEY: &str = "[sandbox] enabled = false";

/// Decides the mode: sandboxed unless the operator opted out; refused (before any dispatch)
/// when bubblewrap is wanted and missing.
pub fn mode(no_sandbox_flag: bool, manifest_enabled: bool) -> Result<Mode, String> {
    if no_sandbox_flag {
        return Ok(Mode::Off(FLAG));
    }
    if !manifest_enabled {
        return Ok(Mode::Off(MANIFEST_KEY));
    }
    find_bwrap().map(Mode::Bwrap).ok_or_else(|| {
        format!(
            "tasks run in a bubblewrap sandbox and `bwrap` is not on PATH: install the `{PACKAGE}` package (apt-get install {PACKAGE}), or opt out with {FLAG} or {MANIFEST_KEY}"
        )
    })
}

/// `bwrap` on the engine's PATH.
fn find_bwrap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("bwrap"))
        .find(|p| p.is_file())
}

/// A task's named sandbox (`sandbox = "name"` naming `[agent.sandbox.<name>]`): the run's layout
/// with no network (`--unshare-net`: only its own loopback), and of the manifest's declared
/// `[env].secrets` only those it lists. An image or an egress allowlist is refused before any
/// dispatch (`LoadedManifest::unbuilt`), so neither appears here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    pub name: String,
    /// The declared secrets its tasks receive.
    pub secrets: Vec<String>,
}

/// The named sandbox `name` as `manifest` defines it, or why a task asking for it cannot run:
/// it is undefined, lists a secret `[env].secrets` does not declare, or the run is unsandboxed
/// (`sandboxed` false), where no network could be taken away.
pub fn named(manifest: &Manifest, name: &str, sandboxed: bool) -> Result<Named, String> {
    let Some(def) = manifest.agent.sandbox.get(name) else {
        return Err(format!(
            "names sandbox `{name}`, which no [agent.sandbox.{name}] table defines"
        ));
    };
    if let Some(s) = def
        .secrets
        .iter()
        .find(|s| !manifest.env.secrets.contains(s))
    {
        return Err(format!(
            "names sandbox `{name}`, whose secret `{s}` [env].secrets does not declare"
        ));
    }
    if !sandboxed {
        return Err(format!(
            "names sandbox `{name}` (no network), which needs the bubblewrap sandbox this run opted out of ({FLAG} or {MANIFEST_KEY})"
        ));
    }
    Ok(Named {
        name: name.to_string(),
        secrets: def.secrets.clone(),
    })
}

/// One run's sandbox layout.
#[derive(Clone, Debug)]
pub struct Sandbox {
    bwrap: PathBuf,
    /// Host paths the manifest exposes read-write (`[sandbox] expose`), bound before the hidden
    /// ones are hidden.
    exposed: Vec<PathBuf>,
    /// Host directories no task may see: the pack and the state directory.
    hidden: Vec<PathBuf>,
    /// Run paths every task reads: the run's `inputs/` and its git memory.
    readable: Vec<PathBuf>,
}

impl Sandbox {
    pub fn new(
        bwrap: PathBuf,
        exposed: &[String],
        pack: &Path,
        state: &Path,
        run_dir: &Path,
    ) -> Sandbox {
        Sandbox {
            bwrap,
            exposed: exposed.iter().map(PathBuf::from).collect(),
            hidden: vec![pack.to_path_buf(), state.to_path_buf()],
            readable: vec![run_dir.join("inputs"), run_dir.join("memory")],
        }
    }

    /// `spawn` run under bubblewrap: the same environment (bwrap passes its own to the task),
    /// the same working directory, the layout described at the top of this module; without a
    /// network when `no_network` (a task in a named sandbox).
    pub fn wrap(&self, spawn: Spawn, no_network: bool) -> Spawn {
        let s = |p: &Path| p.to_string_lossy().into_owned();
        let mut argv: Vec<String> = [
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--unshare-pid",
            "--unshare-ipc",
            "--die-with-parent",
            "--cap-drop",
            "ALL",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        argv.insert(0, s(&self.bwrap));
        if no_network {
            argv.push("--unshare-net".to_string());
        }
        let mut op = |flag: &str, path: &Path| {
            argv.extend([flag.to_string(), s(path)]);
            if flag != "--tmpfs" {
                argv.push(s(path));
            }
        };
        for e in &self.exposed {
            op("--bind-try", e);
        }
        for h in &self.hidden {
            op("--tmpfs", h);
        }
        op("--bind", &spawn.cwd);
        let inputs = spawn.cwd.join(crate::files::INPUTS_DIR);
        if inputs.is_dir() {
            op("--ro-bind", &inputs);
        }
        for r in &self.readable {
            op("--ro-bind-try", r);
        }
        for m in &spawn.mounts {
            op(
                if m.writable {
                    "--bind-try"
                } else {
                    "--ro-bind-try"
                },
                &m.path,
            );
        }
        argv.extend(["--chdir".to_string(), s(&spawn.cwd)]);
        argv.extend(spawn.argv);
        Spawn {
            argv,
            env: spawn.env,
            cwd: spawn.cwd,
            mounts: spawn.mounts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_is_bound_after_the_pack_is_hidden() {
        let sb = Sandbox::new(
            "/usr/bin/bwrap".into(),
            &[],
            Path::new("/p"),
            Path::new("/p/state"),
            Path::new("/p/state/runs/r"),
        );
        let w = sb.wrap(
            Spawn::shell("true", Path::new("/p/workspace"), vec![]),
            false,
        );
        assert!(!w.argv.iter().any(|a| a == "--unshare-net"));
        let at = |a: &str| w.argv.iter().position(|x| x == a).unwrap();
        assert_eq!(w.argv[0], "/usr/bin/bwrap");
        assert!(at("/p") < at("/p/workspace"));
        assert!(at("--die-with-parent") < at("--chdir"));
        assert!(w.argv.ends_with(&["-c".to_string(), "true".to_string()]));
        assert_eq!(w.cwd, Path::new("/p/workspace"));
    }
}

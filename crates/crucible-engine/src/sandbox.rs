//! Every attempt in a sandbox (issue 11, item 1; ARCHITECTURE.md, "A task is untrusted";
//! RFC-0002:C-PLAYBOOK-BUDGET, C-TASK-FILES).
//!
//! [`Sandbox::jail`] prepares, for the [`Spawn`] an attempt runs, the namespaces its child
//! makes before `exec` ([`jail`]), so `proc` runs, times and kills it exactly as before. Inside,
//! the host's file system is read-only; the pack directory and the state directory are replaced
//! by empty directories (so the session log, `run.json`, other runs and `workflow.star` are out
//! of reach); then the attempt's own paths are bound back: its workspace or isolated checkout
//! read-write, the staged `inputs/` in it read-only (a bind mount is read-only for root too), the
//! run's `inputs/` (the inputs and prompt files the contract names) and git memory read-only, and
//! the paths the spawn asks for (a harness's config and install directories). `/tmp` is private.
//! The attempt's process is PID 1 of its own PID namespace, tied to the engine: when it exits or
//! is killed, or the engine dies however it dies, the kernel kills everything left in the
//! namespace, `setsid` survivors included. Every capability is dropped: an engine run as root
//! would otherwise hand its tasks `CAP_SYS_ADMIN`, and a task could simply unmount what hides the
//! state directory or remount its inputs read-write. A root task keeps uid 0 (it owns what root
//! owns) and nothing more. The network is shared, except for an agent task in a named sandbox
//! ([`Named`]), which has none. A runbook's effect classes (issue 15) bound its turn the same
//! way ([`Bounds`]): without `network` it has none, without `filesystem.write` its working
//! directory is read-only but for its result file. Host paths the manifest exposes (`[sandbox] expose`) are bound
//! read-write before the pack and the state directory are hidden, so neither is ever reachable
//! through one of them. The layout is bubblewrap's (what this module ran until it was measured:
//! bench/README.md, "The sandbox's cost"), made without a helper process or a new root.

mod jail;
pub mod overlay;

use crucible_agent::spawn::Spawn;
use crucible_pack::manifest::Manifest;
use jail::{Bind, Plan, Step};
pub use jail::{Jail, Jailed};
use std::path::{Path, PathBuf};

/// How the run's attempts are spawned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// In namespaces the engine makes for each attempt.
    Namespaces,
    /// Unsandboxed, because the operator said so (named: the flag or the manifest key).
    Off(&'static str),
}

/// The operator's opt-out flag and the manifest's key, as `check` and the refusal name them.
pub const FLAG: &str = "--no-sandbox";
pub const MANIFEST_KEY: &str = "[sandbox] enabled = false";

/// Decides the mode: sandboxed unless the operator opted out; refused (before any dispatch)
/// when the sandbox is wanted and this host cannot make it (tried once, empty).
pub fn mode(no_sandbox_flag: bool, manifest_enabled: bool) -> Result<Mode, String> {
    if no_sandbox_flag {
        return Ok(Mode::Off(FLAG));
    }
    if !manifest_enabled {
        return Ok(Mode::Off(MANIFEST_KEY));
    }
    probe().map(|()| Mode::Namespaces).map_err(|why| {
        format!(
            "tasks run in a sandbox of Linux namespaces and this host cannot make one ({why}): run the engine as root or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0), or opt out with {FLAG} or {MANIFEST_KEY}"
        )
    })
}

/// Makes an empty sandbox once, in a child that exits instead of running anything: whether this
/// host lets the engine make one, and if not, the step that failed.
fn probe() -> Result<(), String> {
    let root = Path::new("/");
    let jail = Jail::new(plan(Vec::new(), Vec::new(), root, false));
    jail.try_make()
        .map_err(|why| crucible_plan::terminal::escape(why.trim()).into_owned())
}

/// The plan for binds and steps (in order), working in `cwd`.
fn plan(binds: Vec<Bind>, steps: Vec<Step>, cwd: &Path, no_network: bool) -> Plan {
    Plan {
        binds,
        steps,
        cwd: jail::c_path(cwd),
        no_network,
        user_maps: (!jail::may_mount()).then(jail::own_maps),
    }
}

/// A task's named sandbox (`sandbox = "name"` naming `[agent.sandbox.<name>]`): the run's layout
/// with no network (a network namespace of its own: only its loopback), and of the manifest's declared
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
            "names sandbox `{name}` (no network), which needs the sandbox this run opted out of ({FLAG} or {MANIFEST_KEY})"
        ));
    }
    Ok(Named {
        name: name.to_string(),
        secrets: def.secrets.clone(),
    })
}

/// What one attempt's sandbox takes away beyond the run's layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bounds {
    /// No network (`--unshare-net`: only its own loopback).
    pub no_network: bool,
    /// The working directory read-only, but for its result file (`PLAN_TASK_RESULT.json`,
    /// which the engine creates empty before the turn so it can be bound writable).
    pub read_only: bool,
}

impl Bounds {
    /// The bounds of an attempt of `task`: none, but no network in a named sandbox (`named`),
    /// and a runbook's (issue 15) without `network` and without `filesystem.write`.
    pub fn of(task: &crucible_plan::Task, named: bool) -> Bounds {
        let rb = task.runbook.as_ref();
        Bounds {
            no_network: named || rb.is_some_and(|r| !r.allows(NETWORK)),
            read_only: rb.is_some_and(|r| !r.allows(WRITE)),
        }
    }
}

/// The runbook effect classes the sandbox enforces (issue 15).
pub const NETWORK: &str = "network";
pub const WRITE: &str = "filesystem.write";

/// One run's sandbox layout.
#[derive(Clone, Debug)]
pub struct Sandbox {
    /// Host paths the manifest exposes read-write (`[sandbox] expose`), bound before the hidden
    /// ones are hidden.
    exposed: Vec<PathBuf>,
    /// Host directories no task may see: the pack, the state directory and whatever the
    /// launcher adds (a controller's state).
    hidden: Vec<PathBuf>,
    /// Run paths every task reads: the run's `inputs/` and its git memory.
    readable: Vec<PathBuf>,
}

impl Sandbox {
    pub fn new(
        exposed: &[String],
        pack: &Path,
        state: &Path,
        run_dir: &Path,
        also_hidden: &[PathBuf],
    ) -> Sandbox {
        Sandbox {
            // Relative to where the engine was launched, as every manifest path on the
            // command line is.
            exposed: exposed
                .iter()
                .map(|e| std::path::absolute(e).unwrap_or_else(|_| PathBuf::from(e)))
                .collect(),
            hidden: [pack, state]
                .into_iter()
                .map(Path::to_path_buf)
                .chain(also_hidden.iter().cloned())
                .collect(),
            readable: vec![run_dir.join("inputs"), run_dir.join("memory")],
        }
    }

    /// Binds `dir` read-only into every attempt at its own path, after the hidden directories
    /// are hidden (a run's steering, beside its pack inside a controller's hidden state).
    pub fn also_readable(mut self, dir: Option<&Path>) -> Sandbox {
        self.readable.extend(dir.map(Path::to_path_buf));
        self
    }

    /// The sandbox `spawn` runs in: the layout described at the top of this module, in this
    /// order (a later mount covers an earlier one), within `bounds`.
    pub fn jail(&self, spawn: &Spawn, bounds: Bounds) -> Jail {
        let mut binds = Vec::new();
        let mut steps = Vec::new();
        let mut bind = |b: Bind| {
            steps.push(Step::Bind(binds.len()));
            binds.push(b);
        };
        for e in &self.exposed {
            bind(Bind::new(e, true, true));
        }
        let mut hide: Vec<Step> = (self.hidden.iter())
            .map(|h| Step::Hide(jail::c_path(h), jail::ancestors(h)))
            .collect();
        bind(Bind::new(&spawn.cwd, !bounds.read_only, false));
        if bounds.read_only {
            // The engine made the result file: the one file such a turn writes.
            bind(Bind::new(
                &spawn.cwd.join(crucible_agent::RESULT_FILE),
                true,
                false,
            ));
        }
        let inputs = spawn.cwd.join(crate::files::INPUTS_DIR);
        if inputs.is_dir() {
            bind(Bind::new(&inputs, false, false));
        }
        for r in &self.readable {
            bind(Bind::new(r, false, true));
        }
        for m in &spawn.mounts {
            bind(Bind::new(&m.path, m.writable, true));
        }
        // The hidden directories go between the exposed paths and the attempt's own.
        let exposed = self.exposed.len();
        let tail = steps.split_off(exposed);
        steps.append(&mut hide);
        steps.extend(tail);
        Jail::new(plan(binds, steps, &spawn.cwd, bounds.no_network))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc::{run, Abort, Deadline, Ended};
    use tokio::sync::watch;
    use tokio::time::{Duration, Instant};

    // The order of the layout: an exposed parent of the pack does not reveal it, the hidden pack
    // does not hide the workspace inside it, the staged inputs stay read-only inside the
    // writable workspace, the rest of the host is read-only, the task is PID 1 and keeps no
    // capability.
    #[tokio::test]
    async fn the_layout_holds_in_its_order() {
        let top = tempfile::tempdir().unwrap();
        let pack = top.path().join("pack");
        let ws = pack.join("workspace");
        let inputs = ws.join(crate::files::INPUTS_DIR);
        std::fs::create_dir_all(&inputs).unwrap();
        std::fs::create_dir_all(pack.join("state/runs/r")).unwrap();
        std::fs::write(pack.join("crucible.toml"), "").unwrap();
        std::fs::write(inputs.join("in.txt"), "x").unwrap();
        let exposed = [top.path().to_string_lossy().into_owned()];
        let state = pack.join("state");
        let sb = Sandbox::new(&exposed, &pack, &state, &state.join("runs/r"), &[]);
        let script = "test ! -e ../crucible.toml || exit 11; \
            touch made || exit 12; \
            ! touch inputs/in.txt 2>/dev/null || exit 13; \
            ! touch /usr/x 2>/dev/null || exit 14; \
            grep -q '^CapEff:.0*$' /proc/self/status || exit 15; \
            test \"$$\" = 1 || exit 16";
        let path = std::env::var("PATH").unwrap_or_default();
        let spawn = Spawn::shell(script, &ws, vec![("PATH".into(), path)]);
        let jail = sb.jail(&spawn, Bounds::default());
        let (_tx, rx) = watch::channel(Abort::None);
        let deadline = Deadline {
            at: Instant::now() + Duration::from_secs(30),
            own_limit: true,
        };
        let groups = crate::proc::ProcessGroups::default();
        let f = run(&spawn, Some(&jail), deadline, rx, None, &groups)
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&f.stderr);
        assert!(
            matches!(f.ended, Ended::Exited(s) if s.success()),
            "{:?} {err}",
            f.ended
        );
        assert!(ws.join("made").exists());
    }

    // The engine starts a sandboxed task itself: a program that is not there is a failure to
    // start (a transport failure of the attempt, as std's spawn reports it), never a hang or a
    // task that ran; one that is there runs with exactly the spawn's environment, its output
    // piped back, its exit status kept.
    #[tokio::test]
    async fn a_sandboxed_spawn_starts_what_is_there_and_refuses_what_is_not() {
        let top = tempfile::tempdir().unwrap();
        let (pack, ws) = (top.path().join("pack"), top.path().join("ws"));
        std::fs::create_dir_all(&ws).unwrap();
        let sb = Sandbox::new(
            &[],
            &pack,
            &pack.join("state"),
            &pack.join("state/runs/r"),
            &[],
        );
        let path = (
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        );
        let groups = crate::proc::ProcessGroups::default();
        let deadline = || Deadline {
            at: Instant::now() + Duration::from_secs(30),
            own_limit: true,
        };
        let (_tx, rx) = watch::channel(Abort::None);
        let missing = Spawn {
            argv: vec!["crucible-no-such-program".into()],
            env: vec![path.clone()],
            cwd: ws.clone(),
            mounts: Vec::new(),
        };
        let jail = sb.jail(&missing, Bounds::default());
        let err = run(&missing, Some(&jail), deadline(), rx.clone(), None, &groups)
            .await
            .expect_err("a missing program is not started");
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
        let spawn = Spawn::shell(
            "echo \"$ONLY:$HOME\"; echo err >&2; exit 7",
            &ws,
            vec![path, ("ONLY".into(), "this".into())],
        );
        let jail = sb.jail(&spawn, Bounds::default());
        let f = run(&spawn, Some(&jail), deadline(), rx, None, &groups)
            .await
            .unwrap();
        assert!(
            matches!(f.ended, Ended::Exited(s) if s.code() == Some(7)),
            "{:?}",
            f.ended
        );
        assert_eq!(f.stdout, b"this:\n");
        assert_eq!(f.stderr, b"err\n");
    }
}

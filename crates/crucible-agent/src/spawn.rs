//! The one process the engine starts for an attempt (ARCHITECTURE.md, "Process groups"): a
//! command task's `sh -c`, or a harness turn. The engine runs it (`crucible_engine::proc::run`)
//! as its own process group with exactly this environment; the sandbox wraps it and binds its
//! [`Mount`]s.

use std::path::{Path, PathBuf};

/// One process the engine starts for an attempt: a command task's `sh -c`, or a harness turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spawn {
    /// Program first; never a shell string for harnesses.
    pub argv: Vec<String>,
    /// The COMPLETE environment: proc clears the engine's own.
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// Paths outside cwd the process needs (a harness's per-run config dir, its CLI install
    /// dir), for the sandbox to bind.
    pub mounts: Vec<Mount>,
}

/// A path outside the attempt's cwd that its process needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub path: PathBuf,
    pub writable: bool,
}

impl Spawn {
    /// `sh -c command` in `cwd`: a command or evaluate task, or the command stand-in's turn.
    pub fn shell(command: &str, cwd: &Path, env: Vec<(String, String)>) -> Spawn {
        Spawn {
            argv: vec![
                shell().to_string_lossy().into_owned(),
                "-c".into(),
                command.into(),
            ],
            env,
            cwd: cwd.to_path_buf(),
            mounts: Vec::new(),
        }
    }

    /// The value of `name` in the environment, if set.
    pub fn var(&self, name: &str) -> Option<&str> {
        (self.env.iter().rev())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `sh`, found on the engine's PATH once: resolving it on every spawn costs a failed exec per
/// PATH entry ahead of it, on every task.
fn shell() -> &'static Path {
    static SH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SH.get_or_init(|| {
        std::env::var_os("PATH")
            .and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join("sh"))
                    .find(|p| p.is_file())
            })
            // Not found: spawning the bare name fails the same way a lookup would.
            .unwrap_or_else(|| "sh".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_spawn_runs_sh_dash_c_with_the_given_env() {
        let s = Spawn::shell("echo hi", Path::new("/w"), vec![("A".into(), "1".into())]);
        assert!(s.argv[0].ends_with("sh"));
        assert_eq!(&s.argv[1..], ["-c", "echo hi"]);
        assert_eq!(s.var("A"), Some("1"));
        assert_eq!(s.var("B"), None);
        assert_eq!(s.cwd, Path::new("/w"));
        assert!(s.mounts.is_empty());
    }
}

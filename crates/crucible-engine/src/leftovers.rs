//! A refused launch leaves nothing behind (issue 19): the state directory, its `runs/` and the
//! workspace are removed again when this launch made them and is refused before its run exists.
//! Nothing that was there before the launch is touched, and `runs/` and the state directory are
//! removed only when empty: another run's files never go.

use std::path::{Path, PathBuf};

/// What did not exist before a launch.
pub struct Before {
    state_dir: Option<PathBuf>,
    runs: Option<PathBuf>,
    ws: Option<PathBuf>,
}

impl Before {
    pub fn note(state_dir: &Path, ws: &Path) -> Before {
        let absent = |p: PathBuf| (!p.exists()).then_some(p);
        Before {
            state_dir: absent(state_dir.to_path_buf()),
            runs: absent(state_dir.join("runs")),
            ws: absent(ws.to_path_buf()),
        }
    }

    /// Armed once the launch holds the state directory's lock: declared after the lock, it is
    /// dropped before it, so the lock file goes while still held (`lock` takes only a lock
    /// file still at its path).
    pub fn armed(self) -> Leftovers {
        Leftovers { made: Some(self) }
    }
}

/// Removes what the launch made when dropped, unless [`Leftovers::keep`] was called.
pub struct Leftovers {
    made: Option<Before>,
}

impl Leftovers {
    /// The run exists: what the launch made is its own.
    pub fn keep(&mut self) {
        self.made = None;
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let Some(made) = self.made.take() else {
            return;
        };
        if let Some(ws) = &made.ws {
            let _ = std::fs::remove_dir_all(ws);
        }
        if let Some(runs) = &made.runs {
            let _ = std::fs::remove_dir(runs);
        }
        if let Some(state) = &made.state_dir {
            let _ = std::fs::remove_file(state.join(crate::lock::LOCK_FILE));
            let _ = std::fs::remove_dir(state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_only_what_the_launch_made() {
        let d = tempfile::tempdir().unwrap();
        let (state, ws) = (d.path().join("state"), d.path().join("ws"));
        std::fs::create_dir_all(ws.join("old")).unwrap();
        let left = Before::note(&state, &ws).armed();
        std::fs::create_dir_all(state.join("runs")).unwrap();
        std::fs::write(state.join(crate::lock::LOCK_FILE), "").unwrap();
        std::fs::write(ws.join("new"), "").unwrap();
        drop(left);
        assert!(!state.exists());
        assert!(ws.join("old").exists() && ws.join("new").exists());
    }

    #[test]
    fn a_kept_launch_keeps_everything_and_other_runs_stay() {
        let d = tempfile::tempdir().unwrap();
        let (state, ws) = (d.path().join("state"), d.path().join("ws"));
        let mut kept = Before::note(&state, &ws).armed();
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(state.join("runs/r1")).unwrap();
        kept.keep();
        drop(kept);
        assert!(ws.exists() && state.join("runs/r1").exists());
        let left = Before::note(&d.path().join("s2"), &d.path().join("w2")).armed();
        std::fs::create_dir_all(d.path().join("s2/runs/r2")).unwrap();
        drop(left);
        assert!(d.path().join("s2/runs/r2").exists());
    }
}

//! One engine per state directory and per workspace (issue 11): a run, its resumption and its
//! reruns hold an exclusive `flock` on `<state>/engine.lock` from before the workspace is touched
//! until the engine exits. A second launch is refused at once, naming the run that holds the lock
//! and its engine's pid; a lock left by an engine that died is released by the kernel with its
//! last descriptor, so the next launch simply takes it over.
//!
//! Two state directories can still share one workspace (the same pack launched with different
//! `--state-dir`s). The workspace's `.git` link names the git memory of the run that built it,
//! under that run's state directory, so a launch also refuses while that other directory's lock
//! is held.

use crate::RunError;
use rustix::fs::{flock, FlockOperation};
use rustix::io::Errno;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The lock file in a state directory.
pub const LOCK_FILE: &str = "engine.lock";

/// The held lock; released when dropped (or when the process dies, however it dies).
pub struct EngineLock {
    file: File,
}

impl EngineLock {
    /// Takes the state directory's lock, creating the directory if needed, or refuses naming
    /// whoever holds it.
    pub fn take(state_dir: &Path) -> Result<EngineLock, RunError> {
        let err = |e: std::io::Error| {
            RunError::refused(format!(
                "state directory {}: cannot take its lock: {e}",
                state_dir.display()
            ))
        };
        // A refused launch removes the lock file and the state directory it made (see
        // `leftovers`): a lock taken on a file no longer at the path is no lock, so take the
        // one there now.
        let mut tries = 0;
        let file = loop {
            tries += 1;
            let opened = std::fs::create_dir_all(state_dir).and_then(|()| open(state_dir));
            let mut file = match opened {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => continue,
                Err(e) => return Err(err(e)),
            };
            match lock_exclusive(&mut file) {
                Ok(()) => {}
                Err(Errno::WOULDBLOCK) => return Err(in_use(state_dir, &mut file)),
                Err(e) => return Err(err(e.into())),
            }
            if still_linked(&file, state_dir) {
                break file;
            }
            if tries >= 3 {
                return Err(err(std::io::Error::other(
                    "its lock file keeps being replaced",
                )));
            }
        };
        let mut lock = EngineLock { file };
        lock.record(None).map_err(err)?;
        Ok(lock)
    }

    /// Records the run this engine is working on, for the refusal a second launch gets.
    pub fn claim(&mut self, run_id: &str) -> std::io::Result<()> {
        self.record(Some(run_id))
    }

    fn record(&mut self, run_id: Option<&str>) -> std::io::Result<()> {
        let mut text = format!("pid {}\n", std::process::id());
        if let Some(id) = run_id {
            text.push_str(&format!("run {id}\n"));
        }
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(text.as_bytes())
    }
}

/// How long a lock whose recorded engine no longer exists may take to be released.
const RELEASE_GRACE: Duration = Duration::from_secs(2);

/// Takes the exclusive lock on `file` without waiting on a live engine. The kernel may put the
/// last reference to a killed engine's lock file (so release the lock) on a work queue a moment
/// after the engine was reaped: a `--resume` launched at once would be refused by a dead engine.
/// So a lock whose recorded pid names no process is tried again for up to [`RELEASE_GRACE`].
fn lock_exclusive(file: &mut File) -> Result<(), Errno> {
    let began = Instant::now();
    loop {
        match flock(&*file, FlockOperation::NonBlockingLockExclusive) {
            Err(Errno::WOULDBLOCK) if began.elapsed() < RELEASE_GRACE && holder_gone(file) => {
                std::thread::sleep(Duration::from_millis(5));
            }
            taken => return taken,
        }
    }
}

/// Whether the engine the lock file names has exited (it recorded its pid when it took it).
fn holder_gone(file: &mut File) -> bool {
    let pid = field(&recorded(file), "pid ").and_then(|p| p.parse::<i32>().ok());
    let Some(pid) = pid.filter(|&p| p > 0) else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    let probed = unsafe { libc::kill(pid, 0) };
    probed != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// What the holder recorded in the lock file (empty if it cannot be read).
fn recorded(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text));
    text
}

/// The value of the recorded line starting with `key`, if not empty.
fn field(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Whether `file` is the lock file at its path in `state_dir` (not one unlinked since).
fn still_linked(file: &File, state_dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        file.metadata(),
        std::fs::metadata(state_dir.join(LOCK_FILE)),
    ) {
        (Ok(held), Ok(there)) => held.dev() == there.dev() && held.ino() == there.ino(),
        _ => false,
    }
}

fn open(state_dir: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(state_dir.join(LOCK_FILE))
}

/// The refusal for a lock another engine holds: its run and pid as it recorded them.
fn in_use(state_dir: &Path, file: &mut File) -> RunError {
    let text = recorded(file);
    let holder = match (field(&text, "run "), field(&text, "pid ")) {
        (Some(run), Some(pid)) => {
            format!("run {run} is still running in another engine (pid {pid})")
        }
        (None, Some(pid)) => format!("another engine (pid {pid}) is starting a run in it"),
        _ => "another engine is starting a run in it".to_string(),
    };
    RunError::refused(format!(
        "state directory {} is in use: {holder}; one engine per state directory: wait for it to end, or stop it",
        state_dir.display()
    ))
}

/// Whether an engine holds the state directory's lock now: its current run is running.
pub fn engine_running(state_dir: &Path) -> bool {
    let Ok(file) = std::fs::File::open(state_dir.join(LOCK_FILE)) else {
        return false;
    };
    // A shared probe: it fails only while an engine holds the lock exclusively.
    matches!(
        flock(&file, FlockOperation::NonBlockingLockShared),
        Err(Errno::WOULDBLOCK)
    )
}

/// Refuses when the workspace was built by a run of another state directory whose engine is
/// still running: it would be rebuilt under that engine's tasks.
pub fn check_workspace(ws: &Path, state_dir: &Path) -> Result<(), RunError> {
    let Some(other) = builder_state_dir(ws) else {
        return Ok(());
    };
    let same = match (other.canonicalize(), state_dir.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => other == state_dir,
    };
    if same {
        return Ok(());
    }
    if !engine_running(&other) {
        return Ok(());
    }
    let Ok(mut file) = std::fs::File::open(other.join(LOCK_FILE)) else {
        return Ok(());
    };
    let RunError { message, .. } = in_use(&other, &mut file);
    Err(RunError::refused(format!(
        "the workspace {} belongs to another state directory: {message}",
        ws.display()
    )))
}

/// The state directory of the run whose git memory the workspace's `.git` link names
/// (`<state>/runs/<id>/memory`).
fn builder_state_dir(ws: &Path) -> Option<PathBuf> {
    let link = std::fs::read_to_string(ws.join(".git")).ok()?;
    let gitdir = PathBuf::from(link.strip_prefix("gitdir:")?.trim());
    let runs = gitdir.parent()?.parent()?;
    (runs.file_name()? == "runs").then(|| runs.parent().map(Path::to_path_buf))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_run_and_pid() {
        let d = tempfile::tempdir().unwrap();
        let mut first = EngineLock::take(d.path()).unwrap();
        first.claim("run-1").unwrap();
        let e = EngineLock::take(d.path()).err().expect("refused");
        assert!(e.message.contains("run run-1"), "{}", e.message);
        assert!(
            e.message.contains(&format!("pid {}", std::process::id())),
            "{}",
            e.message
        );
        drop(first);
        EngineLock::take(d.path()).expect("released with its holder");
    }

    // A killed engine's lock can outlive the engine by a moment (the kernel puts its last
    // reference on a work queue): a launch then waits for it instead of being refused, but only
    // while the recorded pid names no process.
    #[test]
    fn a_lock_recorded_by_an_engine_that_is_gone_is_waited_for() {
        let d = tempfile::tempdir().unwrap();
        let mut held = EngineLock::take(d.path()).unwrap();
        // A pid that is certainly free: a child already reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        held.file.set_len(0).unwrap();
        held.file.seek(SeekFrom::Start(0)).unwrap();
        write!(held.file, "pid {dead}\nrun run-1\n").unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        let began = Instant::now();
        EngineLock::take(d.path()).expect("taken once the dead engine's lock is released");
        assert!(began.elapsed() >= Duration::from_millis(150));
        release.join().unwrap();
    }
}

//! Each attempt's own output, kept for the operator (issue 19): the end of every turn's stdout
//! and stderr under `runs/<id>/logs/<task>/`, secrets masked, bounded per stream and per run.
//!
//! Only the engine writes here, after the turn's process group is gone; a task never reaches
//! these files (the sandbox hides the state directory, and a log's path is not in its inputs).
//! A row names its directory (`log`, relative to the run's directory); its files are
//! `attempt-<n>.stdout` / `.stderr`, and `attempt-<n>-repair-<r>.*` for an agent's repair turns.

use crate::taskenv::Masker;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The most of one stream a log keeps: its end, where a failure's reason is.
pub const STREAM_MAX: usize = 256 << 10;

/// The most all of a run's logs may hold: a wide fan-out of chatty tasks must not fill the
/// state directory's disk.
pub const RUN_MAX: u64 = 256 << 20;

/// Written at the head of a stream whose start was cut off.
pub const CUT_MARK: &str = "[earlier output not kept]\n";

/// Written instead of a stream once the run's logs reached [`RUN_MAX`].
pub const FULL_MARK: &str = "[not kept: this run's logs reached their bound of 256 MiB]\n";

/// The run's log area and what it holds so far.
#[derive(Debug)]
pub struct Logs {
    run_dir: PathBuf,
    used: AtomicU64,
}

/// A turn's two streams as they end.
pub struct Streams<'a> {
    pub stdout: &'a [u8],
    pub stderr: &'a [u8],
}

/// The name of a turn's files in its task's log directory: `attempt-<n>`, or
/// `attempt-<n>-repair-<r>` for repair turn `r`.
pub fn turn_name(attempt: u32, repair: Option<u32>) -> String {
    match repair {
        None => format!("attempt-{attempt}"),
        Some(r) => format!("attempt-{attempt}-repair-{r}"),
    }
}

impl Logs {
    pub fn new(run_dir: &Path) -> Logs {
        Logs {
            run_dir: run_dir.to_path_buf(),
            used: AtomicU64::new(0),
        }
    }

    /// Keeps one turn's streams as `logs/<dir>/<turn>.stdout` and `.stderr`; returns the log
    /// directory relative to the run's, or `None` when it could not be written (a log is for
    /// the operator: failing to keep it never changes how the task settles).
    pub fn keep(&self, dir: &str, turn: &str, streams: Streams, masker: &Masker) -> Option<String> {
        let rel = format!("logs/{dir}");
        let abs = self.run_dir.join(&rel);
        std::fs::create_dir_all(&abs).ok()?;
        for (ext, bytes) in [("stdout", streams.stdout), ("stderr", streams.stderr)] {
            let text = self.bounded(bytes, masker);
            std::fs::write(abs.join(format!("{turn}.{ext}")), text).ok()?;
        }
        Some(rel)
    }

    /// The text a stream is kept as: its last [`STREAM_MAX`] bytes from a line start, masked,
    /// or [`FULL_MARK`] once the run's bound is reached.
    fn bounded(&self, bytes: &[u8], masker: &Masker) -> String {
        let (cut, tail) = if bytes.len() > STREAM_MAX {
            let from = bytes.len() - STREAM_MAX;
            let start = bytes[from..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(from, |p| from + p + 1);
            (true, &bytes[start..])
        } else {
            (false, bytes)
        };
        let size = tail.len() as u64;
        let before = self.used.fetch_add(size, Ordering::SeqCst);
        if before + size > RUN_MAX {
            return FULL_MARK.to_string();
        }
        let text = masker.text(&String::from_utf8_lossy(tail));
        if cut {
            format!("{CUT_MARK}{text}")
        } else {
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dir: &Path, rel: &str, file: &str) -> String {
        std::fs::read_to_string(dir.join(rel).join(file)).unwrap()
    }

    #[test]
    fn keeps_both_streams_under_the_task_directory() {
        let d = tempfile::tempdir().unwrap();
        let logs = Logs::new(d.path());
        let streams = Streams {
            stdout: b"out\n",
            stderr: b"err\n",
        };
        let rel = logs
            .keep("0001-a", "attempt-1", streams, &Masker::default())
            .unwrap();
        assert_eq!(rel, "logs/0001-a");
        assert_eq!(read(d.path(), &rel, "attempt-1.stdout"), "out\n");
        assert_eq!(read(d.path(), &rel, "attempt-1.stderr"), "err\n");
    }

    #[test]
    fn a_long_stream_keeps_its_end_from_a_line_start() {
        let d = tempfile::tempdir().unwrap();
        let logs = Logs::new(d.path());
        let long = format!("{}\nlast\n", "x".repeat(STREAM_MAX + 10));
        let streams = Streams {
            stdout: long.as_bytes(),
            stderr: b"",
        };
        let rel = logs
            .keep("a", "attempt-1", streams, &Masker::default())
            .unwrap();
        assert_eq!(
            read(d.path(), &rel, "attempt-1.stdout"),
            format!("{CUT_MARK}last\n")
        );
    }

    #[test]
    fn past_the_run_bound_a_stream_is_not_kept() {
        let d = tempfile::tempdir().unwrap();
        let logs = Logs::new(d.path());
        logs.used.store(RUN_MAX, Ordering::SeqCst);
        let streams = Streams {
            stdout: b"x\n",
            stderr: b"",
        };
        let rel = logs
            .keep("a", "attempt-1", streams, &Masker::default())
            .unwrap();
        assert_eq!(read(d.path(), &rel, "attempt-1.stdout"), FULL_MARK);
        assert_eq!(turn_name(2, Some(1)), "attempt-2-repair-1");
    }
}

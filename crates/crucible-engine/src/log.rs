//! The session log writer (ARCHITECTURE.md, "Write ahead").
//!
//! Lines are appended by one writer thread that batches whatever is queued into a single write
//! and one `fdatasync`, then reports the highest sequence number now durable. The coordinator
//! acts on a line only after that report, so every line is on disk before its effects; batching
//! keeps the fsync count at most one per line while the coordinator keeps dispatching.

use crucible_plan::wire::{encode, Event};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// The RFC 3339 UTC timestamp every line carries.
pub fn now_ts() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Appends one line and syncs it, synchronously (for the first and last lines).
pub fn append_now(file: &mut File, event: &Event) -> io::Result<()> {
    let mut line = encode(event, &now_ts());
    line.push('\n');
    file.write_all(line.as_bytes())?;
    file.sync_data()
}

pub fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// A queued line's number; durability is reported as "everything up to N".
pub type Seq = u64;

pub struct Writer {
    tx: Option<mpsc::Sender<(Seq, String)>>,
    next: Seq,
    thread: Option<JoinHandle<io::Result<File>>>,
}

impl Writer {
    /// Starts the writer thread; `durable(Ok(n))` is called (on that thread) each time every
    /// line up to `n` is synced, and `durable(Err(_))` once if the log cannot be written, after
    /// which nothing more is written.
    pub fn start(mut file: File, durable: impl Fn(Result<Seq, String>) + Send + 'static) -> Writer {
        let (tx, rx) = mpsc::channel::<(Seq, String)>();
        let thread = std::thread::spawn(move || -> io::Result<File> {
            let mut buf = String::new();
            while let Ok((mut last, line)) = rx.recv() {
                buf.clear();
                buf.push_str(&line);
                while let Ok((seq, line)) = rx.try_recv() {
                    buf.push_str(&line);
                    last = seq;
                }
                let written = file
                    .write_all(buf.as_bytes())
                    .and_then(|()| file.sync_data());
                if let Err(e) = written {
                    durable(Err(e.to_string()));
                    return Err(e);
                }
                durable(Ok(last));
            }
            Ok(file)
        });
        Writer {
            tx: Some(tx),
            next: 0,
            thread: Some(thread),
        }
    }

    /// Queues an event; returns its sequence number.
    pub fn push(&mut self, event: &Event) -> Seq {
        self.next += 1;
        let mut line = encode(event, &now_ts());
        line.push('\n');
        if let Some(tx) = &self.tx {
            // A send fails only when the thread died on an I/O error, which `finish` reports.
            let _ = tx.send((self.next, line));
        }
        self.next
    }

    /// Drains the queue and returns the file for the last, synchronous line.
    pub fn finish(mut self) -> io::Result<File> {
        drop(self.tx.take());
        self.thread
            .take()
            .expect("joined once")
            .join()
            .map_err(|_| io::Error::other("session log writer panicked"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::wire::Shutdown;
    use crucible_plan::{Outcome, Verdict};

    fn event() -> Event {
        Event::Shutdown(Shutdown {
            outcome: Outcome::Finished,
            ceiling: None,
            reason: None,
            verdict: Verdict::Valid,
            spent_usd: 0.0,
            elapsed_secs: 0.0,
        })
    }

    // ARCHITECTURE.md (write ahead): a line is reported durable only after it is synced, and
    // reports cover every line up to their number, in order.
    #[test]
    fn lines_are_reported_durable_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let (tx, rx) = mpsc::channel();
        let mut w = Writer::start(open(&path).unwrap(), move |r| tx.send(r).unwrap());
        let seqs: Vec<Seq> = (0..50).map(|_| w.push(&event())).collect();
        let mut file = w.finish().unwrap();
        append_now(&mut file, &event()).unwrap();
        let reports: Vec<Seq> = rx.try_iter().map(Result::unwrap).collect();
        assert!(reports.windows(2).all(|p| p[0] < p[1]));
        assert_eq!(reports.last(), seqs.last());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 51);
        assert_eq!(crucible_plan::wire::decode_log(&text).unwrap().len(), 51);
    }
}

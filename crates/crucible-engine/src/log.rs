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
    /// Starts the writer thread; `durable(n)` is called (on that thread) each time every line
    /// up to `n` is synced.
    pub fn start(mut file: File, durable: impl Fn(Seq) + Send + 'static) -> Writer {
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
                file.write_all(buf.as_bytes())?;
                file.sync_data()?;
                durable(last);
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

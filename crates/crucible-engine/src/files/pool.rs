//! The copies of a capture or a staging, run on a few threads. Copying into the page cache is
//! CPU-bound work for the kernel (allocating inodes and pages, moving bytes), so two cores copy
//! a large set in about two thirds of the time one does. One walker feeds the jobs through a
//! bounded queue, so the descriptors the queued jobs hold stay bounded however large the set.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::thread;

/// One copy, with whatever must follow it on the same thread.
pub(crate) type Job<'env, E> = Box<dyn FnOnce() -> Result<(), E> + Send + 'env>;

/// The most threads a pool uses: more buys nothing on the machines this engine runs on, where
/// the other tasks of the run want cores too.
const MAX_WIDTH: usize = 4;

/// Run `feed`, which hands jobs to the submit function it is given, with the jobs running on up
/// to [`MAX_WIDTH`] threads (no more than the machine's cores), spawned as jobs arrive. The first
/// error of a job stops the rest: queued jobs are dropped unrun and submit returns `false`, so
/// the feed can stop early. That error is returned in preference to `feed`'s own.
pub(crate) fn in_parallel<'env, E, F>(feed: F) -> Result<(), E>
where
    E: Send + 'env,
    F: FnOnce(&mut dyn FnMut(Job<'env, E>) -> bool) -> Result<(), E>,
{
    let width = thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WIDTH));
    let (tx, rx) = mpsc::sync_channel::<Job<'env, E>>(2 * width);
    let rx = Mutex::new(rx);
    let stop = AtomicBool::new(false);
    let first: Mutex<Option<E>> = Mutex::new(None);
    let fed = thread::scope(|s| {
        let mut workers = 0;
        let fed = feed(&mut |job| {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            if workers < width {
                workers += 1;
                s.spawn(|| work(&rx, &stop, &first));
            }
            // Workers drain the queue until it is closed, so a send always completes.
            tx.send(job).is_ok()
        });
        // Closing the queue lets the workers drain it and end; the scope joins them.
        drop(tx);
        fed
    });
    match first
        .into_inner()
        .expect("a worker panicked holding the error")
    {
        Some(e) => Err(e),
        None => fed,
    }
}

fn work<E>(rx: &Mutex<mpsc::Receiver<Job<'_, E>>>, stop: &AtomicBool, first: &Mutex<Option<E>>) {
    loop {
        let job = rx
            .lock()
            .expect("no worker panics holding the queue")
            .recv();
        let Ok(job) = job else { return };
        if stop.load(Ordering::Relaxed) {
            continue;
        }
        if let Err(e) = job() {
            stop.store(true, Ordering::Relaxed);
            first
                .lock()
                .expect("no worker panics holding the error")
                .get_or_insert(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_job_runs_once() {
        let ran = AtomicUsize::new(0);
        in_parallel::<(), _>(|submit| {
            for _ in 0..1000 {
                assert!(submit(Box::new(|| {
                    ran.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })));
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(ran.load(Ordering::Relaxed), 1000);
    }

    #[test]
    fn the_first_job_error_stops_the_feed_and_is_returned() {
        let submitted = AtomicUsize::new(0);
        let err = in_parallel(|submit| {
            for i in 0..100_000 {
                submitted.fetch_add(1, Ordering::Relaxed);
                let more = submit(Box::new(move || match i {
                    3 => Err("job 3 failed"),
                    _ => Ok(()),
                }));
                if !more {
                    return Err("stopped");
                }
            }
            Ok(())
        })
        .unwrap_err();
        assert_eq!(err, "job 3 failed");
        assert!(submitted.load(Ordering::Relaxed) < 100_000);
    }

    #[test]
    fn a_feed_error_is_returned_when_no_job_failed() {
        let err = in_parallel(|submit| {
            submit(Box::new(|| Ok(())));
            Err("walk failed")
        })
        .unwrap_err();
        assert_eq!(err, "walk failed");
    }
}

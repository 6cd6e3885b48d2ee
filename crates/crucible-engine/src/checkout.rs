//! Isolated checkouts (issue 18): each attempt of an isolated task works in a checkout of HEAD
//! that nothing else sees, and that goes when the attempt does.
//!
//! Where the engine has a mount namespace of its own (`sandbox::overlay`) and its attempts are
//! sandboxed, the checkout is an overlay: its lower layer a checkout of HEAD the engine keeps
//! (in the run directory, inside the state directory every task has hidden, so no task reaches
//! it), shared by every attempt that starts at that HEAD, and its upper layer empty per
//! attempt. An attempt then costs two directories and a mount however large the workspace, and
//! its writes go up, never down; capture and staging read and write the merged view at the
//! same path as before. A HEAD of fewer than a thousand files and 64 MiB gets whole checkouts
//! all the same: writing it costs little, and an overlay taxes every byte an attempt writes (its
//! declared files leave by copy, not rename). When HEAD has moved, the kept checkout is moved
//! with it by writing only the paths that changed, unless an attempt still stands on it: a new
//! one is written then, and the old one removed once its last attempt is. Without the namespace (an engine that is not
//! root, `--no-sandbox`, or a file system that refuses an overlay's upper layer) each attempt
//! gets a whole checkout of its own, as before.

use crate::git::{GitError, Memory};
use crate::sandbox::overlay;
use git2::Oid;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The directory in the run directory that holds the kept checkouts and the upper layers.
pub(crate) const LAYERS: &str = "layers";

/// `0` gives every isolated attempt a whole checkout of its own (what an overlay is measured
/// against: bench/scale.sh).
const OVERLAY_ENV: &str = "CRUCIBLE_OVERLAY";

/// The run's isolated checkouts.
pub(crate) struct Checkouts {
    /// `layers/` in the run directory: the kept checkouts and every attempt's upper layer.
    root: PathBuf,
    /// Whether attempts get overlays; turned off for the run by the first mount refused.
    overlay: AtomicBool,
    /// The kept checkout of the last HEAD an attempt started at.
    kept: Mutex<Kept>,
    /// Names the next directory under `root`.
    next: AtomicU64,
}

#[derive(Default)]
struct Kept {
    lower: Option<Arc<Lower>>,
    /// The last HEAD found too small to be worth an overlay.
    light: Option<Oid>,
}

/// The smallest HEAD an overlay is used for: below both, a whole checkout costs little, while
/// an overlay costs on every byte an attempt writes and its declared files leave it by copy,
/// not rename (bench/README.md, "Declared files").
const OVERLAY_MIN_FILES: usize = 1_000;
const OVERLAY_MIN_BYTES: u64 = 64 << 20;

/// A checkout of `head` that nothing writes while an attempt's overlay stands on it.
struct Lower {
    head: Oid,
    dir: PathBuf,
}

impl Drop for Lower {
    /// Its last attempt is gone and a newer one is kept.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One attempt's checkout, at `dir`.
pub(crate) struct Checkout {
    pub dir: PathBuf,
    /// Its upper layer's directory (the upper layer and overlayfs's work directory inside) and
    /// the lower it stands on; `None` for a whole checkout.
    layers: Option<(PathBuf, Arc<Lower>)>,
}

impl Checkouts {
    /// `sandboxed`: the run's attempts run in the sandbox, which hides the kept checkouts.
    pub fn new(run_dir: &Path, sandboxed: bool) -> Checkouts {
        let wanted = std::env::var_os(OVERLAY_ENV).is_none_or(|v| v != "0");
        Checkouts {
            root: run_dir.join(LAYERS),
            overlay: AtomicBool::new(wanted && sandboxed && overlay::available()),
            kept: Mutex::new(Kept::default()),
            next: AtomicU64::new(0),
        }
    }

    /// The directory `layers/` the run's kept checkouts and upper layers live in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A checkout of HEAD at `dir` (created).
    pub fn make(&self, memory: &Memory, dir: PathBuf) -> Result<Checkout, GitError> {
        let lower = if self.overlay.load(Ordering::Relaxed) {
            self.lower(memory)?
        } else {
            None
        };
        if let Some(lower) = lower {
            let upper = self.fresh("upper");
            let (up, work) = (upper.join("upper"), upper.join("work"));
            let made = [&up, &work, &dir]
                .into_iter()
                .try_for_each(std::fs::create_dir_all)
                .and_then(|()| overlay::mount(&lower.dir, &up, &work, &dir));
            if made.is_ok() {
                return Ok(Checkout {
                    dir,
                    layers: Some((upper, lower)),
                });
            }
            // This file system cannot hold an upper layer (or the kernel lacks overlayfs):
            // whole checkouts for the rest of the run.
            self.overlay.store(false, Ordering::Relaxed);
            let _ = std::fs::remove_dir_all(&upper);
            self.kept.lock().unwrap_or_else(|p| p.into_inner()).lower = None;
        }
        memory.checkout_to(&dir)?;
        Ok(Checkout { dir, layers: None })
    }

    /// The kept checkout of HEAD: the one kept already, moved to HEAD in place when no attempt
    /// stands on it, or a new one; `None` when HEAD is too small to be worth an overlay.
    fn lower(&self, memory: &Memory) -> Result<Option<Arc<Lower>>, GitError> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let head = memory.head();
        if let Some(lower) = kept.lower.as_ref().filter(|l| l.head == head) {
            return Ok(Some(lower.clone()));
        }
        if kept.light == Some(head) {
            return Ok(None);
        }
        let (files, bytes) = memory.head_weight()?;
        if files < OVERLAY_MIN_FILES && bytes < OVERLAY_MIN_BYTES {
            kept.light = Some(head);
            return Ok(None);
        }
        if let Some(mut idle) = kept.lower.take().and_then(|l| Arc::try_unwrap(l).ok()) {
            // Moved in place: a failure half-way leaves it unusable, so it is dropped then.
            idle.head = memory.advance_checkout(&idle.dir, idle.head)?;
            return Ok(Some(kept.lower.insert(Arc::new(idle)).clone()));
        }
        let dir = self.fresh("lower");
        let head = memory.checkout_to(&dir).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        Ok(Some(
            kept.lower.insert(Arc::new(Lower { head, dir })).clone(),
        ))
    }

    fn fresh(&self, what: &str) -> PathBuf {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.root.join(format!("{what}-{n}"))
    }
}

impl Checkout {
    /// Unmounts an overlay at once (the run's sweep must never walk into one); returns what is
    /// left to remove, which the caller may do off its path.
    pub fn unmount(mut self) -> impl FnOnce() + Send {
        let (dir, layers) = (std::mem::take(&mut self.dir), self.layers.take());
        if layers.is_some() {
            let _ = overlay::unmount(&dir);
        }
        move || {
            let _ = std::fs::remove_dir_all(&dir);
            if let Some((upper, lower)) = layers {
                let _ = std::fs::remove_dir_all(upper);
                drop(lower);
            }
        }
    }
}

impl Drop for Checkout {
    /// An attempt dropped mid-way (its future cancelled) leaves no mount behind; the run's
    /// sweep removes its files.
    fn drop(&mut self) {
        if self.layers.is_some() {
            let _ = overlay::unmount(&self.dir);
        }
    }
}

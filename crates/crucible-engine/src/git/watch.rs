//! What may have changed in the shared workspace since the last task commit, as the kernel
//! reports it (inotify), so a commit stages those paths instead of walking the whole work tree
//! (issue 18). Every directory of the workspace is watched from the start of the run; each event
//! names a path below one of them, and the commit diffs exactly those paths (and everything below
//! the directories among them) against the index, as `git add -A` would.
//!
//! Whenever the events may not name every change, the next commit is a full pass instead
//! ([`Changed::Everything`]): the kernel's queue overflowed, a directory was moved (its watches
//! and those below it now name the wrong paths), an ignore or attributes file changed (which
//! changes what `git add -A` does to paths nobody touched), the workspace holds a nested
//! repository (whose own git directory is not watched), or a watch could not be added.

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What a commit must stage.
pub(super) enum Changed {
    /// The whole work tree: the events may not name every change.
    Everything,
    /// These paths, relative to the workspace (files, or directories to take whole).
    Paths(Vec<PathBuf>),
}

pub(super) struct Watch {
    fd: OwnedFd,
    root: PathBuf,
    /// Each watched directory, relative to the workspace (`""` for the root).
    dirs: HashMap<i32, PathBuf>,
    /// Paths an event named since the last commit.
    dirty: BTreeSet<PathBuf>,
    /// Directories created since the last commit: watched once it is made.
    fresh: Vec<PathBuf>,
    /// An event may have been missed: the next commit is a full pass.
    lost: bool,
    /// A nested repository below the root: every commit is a full pass.
    nested: bool,
}

/// Everything that changes what `git add -A` stages at a path: entries made, removed or moved,
/// contents written (including through a writable mapping, whose close is reported), modes.
fn mask() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW
}

/// Files whose change changes how every other path is staged.
fn rules_file(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| n == ".gitignore" || n == ".gitattributes")
}

impl Watch {
    /// Watches every directory of `root`; `None` when the kernel refuses (no inotify, or the
    /// watch limit reached), and then every commit is a full pass.
    pub(super) fn start(root: &Path) -> Option<Watch> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).ok()?;
        let mut w = Watch {
            fd,
            root: root.to_path_buf(),
            dirs: HashMap::new(),
            dirty: BTreeSet::new(),
            fresh: Vec::new(),
            lost: false,
            nested: false,
        };
        w.watch_below(Path::new("")).then_some(w)
    }

    /// Watches `rel` and every directory below it (a directory already watched keeps its watch
    /// and has its path renewed). The watch is added before the directory is read, so a
    /// subdirectory made meanwhile is either read here or reported. False when the kernel
    /// refuses a watch.
    fn watch_below(&mut self, rel: &Path) -> bool {
        let mut stack = vec![rel.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let abs = self.root.join(&dir);
            match inotify::add_watch(&self.fd, &abs, mask()) {
                Ok(wd) => {
                    self.dirs.insert(wd, dir.clone());
                }
                // Gone (or replaced by a file) since: an event names it.
                Err(Errno::NOENT | Errno::NOTDIR) => continue,
                Err(_) => return false,
            }
            let Ok(entries) = std::fs::read_dir(&abs) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                if name == OsStr::new(".git") {
                    // The root's is the link to the run's memory; any other is a repository.
                    self.nested |= !dir.as_os_str().is_empty();
                    continue;
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(dir.join(name));
                }
            }
        }
        true
    }

    /// Reads every event queued so far. Called after the task's processes are gone, so every
    /// change they made is queued (the kernel queues an event within the call that made it).
    fn drain(&mut self) {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16 << 10];
        let mut reader = inotify::Reader::new(&self.fd, &mut buf);
        loop {
            let ev = match reader.next() {
                Ok(ev) => ev,
                Err(Errno::INTR) => continue,
                Err(Errno::WOULDBLOCK) => break,
                Err(_) => {
                    self.lost = true;
                    break;
                }
            };
            let flags = ev.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                self.lost = true;
                continue;
            }
            if flags.contains(ReadFlags::IGNORED) {
                self.dirs.remove(&ev.wd());
                continue;
            }
            let (Some(dir), Some(name)) = (self.dirs.get(&ev.wd()), ev.file_name()) else {
                // An event on a watched directory itself: its parent's event names it.
                continue;
            };
            let name = OsStr::from_bytes(name.to_bytes());
            if name == ".git" {
                // The root's is the link to the run's memory; any other is a repository.
                self.nested |= !dir.as_os_str().is_empty();
                continue;
            }
            let path = dir.join(name);
            if flags.contains(ReadFlags::ISDIR) {
                if flags.contains(ReadFlags::MOVED_FROM) {
                    // Its watches, and those below it, would name the old paths.
                    self.lost = true;
                } else if flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
                    self.fresh.push(path.clone());
                }
            }
            self.dirty.insert(path);
        }
    }

    /// What the next commit must stage; the events are consumed.
    pub(super) fn take(&mut self) -> Changed {
        self.drain();
        let dirty = std::mem::take(&mut self.dirty);
        if self.lost || self.nested || dirty.iter().any(|p| rules_file(p)) {
            return Changed::Everything;
        }
        Changed::Paths(dirty.into_iter().collect())
    }

    /// After a failed staging: the paths taken were not staged, so the next commit is a full
    /// pass.
    pub(super) fn spoil(&mut self) {
        self.lost = true;
    }

    /// After a commit: watches the directories made since the last one, or, after a full pass,
    /// every directory again (whatever was missed is watched from now on). False when the kernel
    /// refuses a watch: then nothing can be trusted any more.
    pub(super) fn settle(&mut self, everything: bool) -> bool {
        if everything {
            self.lost = false;
            self.fresh.clear();
            self.nested = false;
            return self.watch_below(Path::new(""));
        }
        let fresh = std::mem::take(&mut self.fresh);
        fresh.iter().all(|d| self.watch_below(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(w: &mut Watch) -> Option<Vec<String>> {
        match w.take() {
            Changed::Everything => None,
            Changed::Paths(p) => Some(p.iter().map(|p| p.display().to_string()).collect()),
        }
    }

    /// The paths named, less `late`: files an earlier step wrote, whose close the kernel may
    /// report only now when a process another test spawned meanwhile held a copy of the
    /// descriptor until its `exec` (naming a path again only stages it again).
    fn paths_but(w: &mut Watch, late: &[&str]) -> Option<Vec<String>> {
        paths(w).map(|p| {
            p.into_iter()
                .filter(|p| !late.contains(&p.as_str()))
                .collect()
        })
    }

    #[test]
    fn names_what_changed_and_gives_up_where_it_cannot() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f"), "f").unwrap();
        let mut w = Watch::start(root).unwrap();
        assert_eq!(paths(&mut w), Some(vec![]));
        std::fs::write(root.join("a/b/f"), "g").unwrap();
        std::fs::write(root.join("top"), "t").unwrap();
        assert_eq!(paths(&mut w), Some(vec!["a/b/f".into(), "top".into()]));
        assert!(w.settle(false));
        // A new directory is named whole, and watched from the next commit on.
        std::fs::create_dir_all(root.join("n/m")).unwrap();
        std::fs::write(root.join("n/m/x"), "x").unwrap();
        let late = ["a/b/f", "top"];
        assert_eq!(paths_but(&mut w, &late), Some(vec!["n".into()]));
        assert!(w.settle(false));
        std::fs::write(root.join("n/m/y"), "y").unwrap();
        assert_eq!(paths_but(&mut w, &late), Some(vec!["n/m/y".into()]));
        assert!(w.settle(false));
        // A moved directory's watches name old paths: a full pass, then watched again.
        std::fs::rename(root.join("a"), root.join("c")).unwrap();
        assert_eq!(paths(&mut w), None);
        assert!(w.settle(true));
        std::fs::write(root.join("c/b/f"), "h").unwrap();
        let late = ["top", "n/m/x", "n/m/y"];
        assert_eq!(paths_but(&mut w, &late), Some(vec!["c/b/f".into()]));
        assert!(w.settle(false));
        // Ignore rules change what every path stages.
        std::fs::write(root.join("n/.gitignore"), "*").unwrap();
        assert_eq!(paths(&mut w), None);
        assert!(w.settle(true));
        // A nested repository's own git directory is not watched: full passes from then on.
        std::fs::create_dir_all(root.join("c/.git")).unwrap();
        assert_eq!(paths(&mut w), None);
        assert!(w.settle(true));
        assert_eq!(paths(&mut w), None);
    }
}

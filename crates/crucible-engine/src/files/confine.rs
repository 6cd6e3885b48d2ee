//! Confinement of declared paths by descriptor walk (RFC-0002:C-TASK-FILES).
//!
//! A path string is never resolved. The workspace root is opened once as a directory descriptor
//! and every component below it is opened relative to its parent with `O_NOFOLLOW`, so a symbolic
//! link anywhere is refused rather than followed. `openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` does the same in one call where the kernel allows
//! it; the component walk is the fallback and also classifies every refusal precisely. The final
//! descriptor is `fstat`ed: anything but a regular file with exactly one link is refused, and the
//! caller copies from that same descriptor, so a swap after the check cannot redirect the read.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::FileProblem;

/// Which resolver opens a declared path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    /// `openat2` when the kernel (and any seccomp filter) allows it, else the component walk.
    Auto,
    /// Only `openat2`; tests use it to exercise that resolver on its own.
    #[cfg(test)]
    Openat2,
    /// Only the component-by-component `openat(O_NOFOLLOW)` walk.
    #[cfg(test)]
    Manual,
}

/// Set once `openat2` is found unusable, so later opens go straight to the component walk.
static OPENAT2_UNUSABLE: AtomicBool = AtomicBool::new(false);

/// Split a declared path into its components, refusing every form that is not a plain relative
/// path: empty, absolute, NUL, empty segments (`a//b`, trailing `/`), `.` and `..` segments.
pub(crate) fn components(path: &str) -> Result<Vec<&str>, FileProblem> {
    let bad = |why: &'static str| Err(FileProblem::BadPath(why));
    if path.is_empty() {
        return bad("is empty");
    }
    if path.starts_with('/') {
        return bad("is absolute");
    }
    if path.contains('\0') {
        return bad("holds a NUL byte");
    }
    let segs: Vec<&str> = path.split('/').collect();
    for seg in &segs {
        match *seg {
            "" => return bad("has an empty segment"),
            ".." => return bad("traverses upward with `..`"),
            "." => return bad("has a `.` segment"),
            _ => {}
        }
    }
    Ok(segs)
}

/// Open a trusted directory (the workspace root, the run's files area) as a descriptor.
pub(crate) fn open_dir(path: &Path) -> rustix::io::Result<OwnedFd> {
    rfs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Flags for the final open: `O_NONBLOCK` so a FIFO cannot block the engine, `O_NOCTTY` so a
/// terminal cannot become the controlling one, `O_NOFOLLOW` so the last component is no link.
fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
}

/// Open `path` below `root` for reading, confined, and check it is a singly linked regular file.
pub(crate) fn open_confined(
    root: BorrowedFd<'_>,
    path: &str,
    walk: Walk,
) -> Result<File, FileProblem> {
    let segs = components(path)?;
    let fd = match walk {
        #[cfg(test)]
        Walk::Manual => walk_components(root, &segs)?,
        #[cfg(test)]
        Walk::Openat2 => match via_openat2(root, path) {
            Some(Ok(fd)) => fd,
            Some(Err(Errno::NOSYS | Errno::PERM)) | None => {
                return Err(FileProblem::Unreadable("openat2 is unavailable".into()))
            }
            // A refusal: the component walk names the offending component.
            Some(Err(_)) => walk_components(root, &segs)?,
        },
        Walk::Auto => match via_openat2(root, path) {
            Some(Ok(fd)) => fd,
            Some(Err(Errno::NOSYS | Errno::PERM)) => {
                OPENAT2_UNUSABLE.store(true, Ordering::Relaxed);
                walk_components(root, &segs)?
            }
            // Unavailable, or a refusal the component walk will name precisely.
            Some(Err(_)) | None => walk_components(root, &segs)?,
        },
    };
    check_regular(fd)
}

/// `openat2` beneath `root`: first an `O_PATH` open, whose `fstat` refuses a non-regular file
/// without ever opening it for reading (opening a device can have side effects), then the read
/// open, which must land on the same inode. `None` when `openat2` is known unusable.
fn via_openat2(root: BorrowedFd<'_>, path: &str) -> Option<Result<OwnedFd, Errno>> {
    if OPENAT2_UNUSABLE.load(Ordering::Relaxed) {
        return None;
    }
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let probe = (|| {
        let pfd = rfs::openat2(
            root,
            path,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            how,
        )?;
        let before = rfs::fstat(&pfd)?;
        if FileType::from_raw_mode(before.st_mode) != FileType::RegularFile {
            // The component walk's pre-open `statat` reports the exact kind.
            return Err(Errno::NXIO);
        }
        let fd = rfs::openat2(root, path, read_flags(), Mode::empty(), how)?;
        let after = rfs::fstat(&fd)?;
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) {
            // Swapped between the two opens: let the walk look again.
            return Err(Errno::AGAIN);
        }
        Ok(fd)
    })();
    Some(probe)
}

/// Open each directory component relative to its parent with `O_NOFOLLOW | O_DIRECTORY`, then
/// the last one with [`read_flags`] after an `lstat`-style check of its type.
fn walk_components(root: BorrowedFd<'_>, segs: &[&str]) -> Result<OwnedFd, FileProblem> {
    let (last, dirs) = segs
        .split_last()
        .expect("components() never returns an empty list");
    let held = walk_dirs(root, dirs).map_err(|(i, e)| {
        let parent = e.parent.as_ref().map_or(root, |fd| fd.as_fd());
        classify(parent, dirs[i], &segs[..=i].join("/"), e.errno, true)
    })?;
    let parent = held.as_ref().map_or(root, |fd| fd.as_fd());
    let shown = segs.join("/");
    // Refuse a FIFO, socket or device before opening it at all; the fstat after the open is
    // still the check that counts, since the entry can change in between.
    match rfs::statat(parent, *last, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let ft = FileType::from_raw_mode(st.st_mode);
            if ft != FileType::RegularFile {
                return Err(kind_problem(ft, &shown));
            }
        }
        Err(e) => return Err(classify(parent, last, &shown, e, false)),
    }
    rfs::openat(parent, *last, read_flags(), Mode::empty())
        .map_err(|e| classify(parent, last, &shown, e, false))
}

/// Why [`walk_dirs`] stopped: the error, and the directory that held the component it could not
/// open (`None` for the root).
struct DirRefused {
    errno: Errno,
    parent: Option<OwnedFd>,
}

/// Open each of `dirs` relative to the one before, from `root`, with `O_NOFOLLOW | O_DIRECTORY`
/// (`O_PATH`: nothing is read through them); `None` when `dirs` is empty. On failure, the index
/// of the component that could not be opened.
fn walk_dirs(root: BorrowedFd<'_>, dirs: &[&str]) -> Result<Option<OwnedFd>, (usize, DirRefused)> {
    let mut held: Option<OwnedFd> = None;
    for (i, seg) in dirs.iter().enumerate() {
        let parent = held.as_ref().map_or(root, |fd| fd.as_fd());
        match rfs::openat(
            parent,
            *seg,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => held = Some(fd),
            Err(errno) => {
                return Err((
                    i,
                    DirRefused {
                        errno,
                        parent: held,
                    },
                ))
            }
        }
    }
    Ok(held)
}

/// Open the directory `dirs` names below `root` as confined as [`open_confined`] opens a file
/// (no link of any kind on the way, nothing outside `root`); `None` stands for `root` itself.
/// An entry renamed out of it is therefore an entry of the root's tree and nothing else.
pub(crate) fn open_dir_confined(
    root: BorrowedFd<'_>,
    dirs: &[&str],
    walk: Walk,
) -> Result<Option<OwnedFd>, Errno> {
    if dirs.is_empty() {
        return Ok(None);
    }
    let via_openat2 = || {
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rfs::openat2(root, dirs.join("/"), flags, Mode::empty(), how).map(Some)
    };
    let via_walk = || walk_dirs(root, dirs).map_err(|(_, refused)| refused.errno);
    match walk {
        #[cfg(test)]
        Walk::Manual => via_walk(),
        #[cfg(test)]
        Walk::Openat2 => via_openat2(),
        Walk::Auto if OPENAT2_UNUSABLE.load(Ordering::Relaxed) => via_walk(),
        Walk::Auto => match via_openat2() {
            Err(Errno::NOSYS | Errno::PERM) => {
                OPENAT2_UNUSABLE.store(true, Ordering::Relaxed);
                via_walk()
            }
            opened => opened,
        },
    }
}

/// Turn a failed open of `seg` (shown as `shown`) into the problem a note can name, by looking
/// at the entry itself without following it.
fn classify(
    parent: BorrowedFd<'_>,
    seg: &str,
    shown: &str,
    err: Errno,
    want_dir: bool,
) -> FileProblem {
    match rfs::statat(parent, seg, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => FileProblem::Absent,
        Err(_) if err == Errno::NOENT => FileProblem::Absent,
        Err(_) => FileProblem::Unreadable(err.to_string()),
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => FileProblem::Symlink {
                component: shown.to_string(),
            },
            // The right kind, yet the open failed (permissions, say): report the error.
            FileType::Directory if want_dir => FileProblem::Unreadable(err.to_string()),
            FileType::RegularFile if !want_dir => FileProblem::Unreadable(err.to_string()),
            // A non-directory where a directory is needed: the declared path cannot exist.
            _ if want_dir => FileProblem::Absent,
            ft => kind_problem(ft, shown),
        },
    }
}

fn kind_problem(ft: FileType, shown: &str) -> FileProblem {
    match ft {
        FileType::Symlink => FileProblem::Symlink {
            component: shown.to_string(),
        },
        other => FileProblem::NotRegular(kind_name(other)),
    }
}

fn kind_name(ft: FileType) -> &'static str {
    match ft {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

/// The check that counts, on the descriptor the copy will read: a regular file, one link.
///
/// A hard link to a file outside the workspace is indistinguishable from a file by any path
/// resolution, so every multiply linked file is refused.
fn check_regular(fd: OwnedFd) -> Result<File, FileProblem> {
    let st = rfs::fstat(&fd).map_err(|e| FileProblem::Unreadable(e.to_string()))?;
    let ft = FileType::from_raw_mode(st.st_mode);
    if ft != FileType::RegularFile {
        return Err(FileProblem::NotRegular(kind_name(ft)));
    }
    if st.st_nlink > 1 {
        return Err(FileProblem::HardLinked {
            links: st.st_nlink as u64,
        });
    }
    // The read must block normally on a regular file; O_NONBLOCK only guarded the open.
    let flags = rfs::fcntl_getfl(&fd).map_err(|e| FileProblem::Unreadable(e.to_string()))?;
    rfs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)
        .map_err(|e| FileProblem::Unreadable(e.to_string()))?;
    Ok(File::from(fd))
}

/// Whether this process may call `openat2` at all (a seccomp filter may refuse it).
#[cfg(test)]
pub(crate) fn openat2_usable() -> bool {
    let probe = rfs::openat2(
        rfs::CWD,
        ".",
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::empty(),
    );
    !matches!(probe, Err(Errno::NOSYS | Errno::PERM))
}

/// The resolvers the tests can exercise here: the component walk always, `openat2` where usable.
#[cfg(test)]
pub(crate) fn test_walks() -> Vec<Walk> {
    let mut walks = vec![Walk::Manual];
    if openat2_usable() {
        walks.push(Walk::Openat2);
    }
    walks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::testkit::{mkfifo, Scene};
    use std::io::Read;
    use std::os::unix::fs::symlink;

    fn open(s: &Scene, path: &str, walk: Walk) -> Result<String, FileProblem> {
        let root = open_dir(&s.ws).unwrap();
        let mut f = open_confined(root.as_fd(), path, walk)?;
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        Ok(text)
    }

    // Which resolvers run here: where openat2 works (this machine's kernel) both are tested;
    // where a seccomp filter refuses it, the Auto walk must fall back to the component walk.
    #[test]
    fn auto_walk_uses_openat2_or_falls_back() {
        let s = Scene::new();
        s.write("f", b"x");
        let root = open_dir(&s.ws).unwrap();
        if openat2_usable() {
            assert!(matches!(via_openat2(root.as_fd(), "f"), Some(Ok(_))));
        } else {
            eprintln!("openat2 is refused here: only the component walk is exercised");
        }
        assert_eq!(open(&s, "f", Walk::Auto).unwrap(), "x");
    }

    // RFC-0002:C-TASK-FILES: a declared path must be relative and must not traverse.
    #[test]
    fn refuses_paths_that_are_not_plain_relative_paths() {
        for (path, why) in [
            ("", "is empty"),
            ("/etc/passwd", "is absolute"),
            ("../outside/secret", "traverses upward with `..`"),
            ("a/../../outside/secret", "traverses upward with `..`"),
            ("a//b", "has an empty segment"),
            ("a/", "has an empty segment"),
            ("./a", "has a `.` segment"),
            ("a\0b", "holds a NUL byte"),
        ] {
            assert_eq!(components(path), Err(FileProblem::BadPath(why)), "{path:?}");
        }
        assert_eq!(components("a/b.c/d"), Ok(vec!["a", "b.c", "d"]));
    }

    #[test]
    fn opens_a_regular_file_at_any_depth() {
        let s = Scene::new();
        s.write("top.txt", b"top");
        s.write("a/b/c/deep.txt", b"deep");
        for walk in test_walks() {
            assert_eq!(open(&s, "top.txt", walk).unwrap(), "top");
            assert_eq!(open(&s, "a/b/c/deep.txt", walk).unwrap(), "deep");
        }
    }

    #[test]
    fn absent_paths_are_absent() {
        let s = Scene::new();
        s.write("file", b"x");
        for walk in test_walks() {
            assert_eq!(open(&s, "missing", walk), Err(FileProblem::Absent));
            assert_eq!(open(&s, "nodir/missing", walk), Err(FileProblem::Absent));
            // A regular file where a directory component is needed.
            assert_eq!(open(&s, "file/child", walk), Err(FileProblem::Absent));
        }
    }

    // RFC-0002:C-TASK-FILES: a symbolic link is refused as the file itself.
    #[test]
    fn refuses_a_symlink_as_the_file() {
        let s = Scene::new();
        symlink(s.outside.join("secret"), s.ws.join("out.txt")).unwrap();
        s.write("real.txt", b"inside");
        symlink("real.txt", s.ws.join("inner-link")).unwrap();
        for walk in test_walks() {
            let sym = |c: &str| {
                Err(FileProblem::Symlink {
                    component: c.to_string(),
                })
            };
            assert_eq!(open(&s, "out.txt", walk), sym("out.txt"));
            // Even a link that stays inside the workspace.
            assert_eq!(open(&s, "inner-link", walk), sym("inner-link"));
        }
    }

    // RFC-0002:C-TASK-FILES: a symbolic link is refused per path component.
    #[test]
    fn refuses_a_symlink_as_a_directory_component() {
        let s = Scene::new();
        symlink(&s.outside, s.ws.join("d")).unwrap();
        std::fs::create_dir_all(s.ws.join("x/y")).unwrap();
        symlink(&s.outside, s.ws.join("x/y/z")).unwrap();
        for walk in test_walks() {
            assert_eq!(
                open(&s, "d/secret", walk),
                Err(FileProblem::Symlink {
                    component: "d".into()
                })
            );
            assert_eq!(
                open(&s, "x/y/z/secret", walk),
                Err(FileProblem::Symlink {
                    component: "x/y/z".into()
                })
            );
        }
    }

    // RFC-0002:C-TASK-FILES: a hard link to a file outside the workspace is refused without
    // relying on resolution: every multiply linked file is.
    #[test]
    fn refuses_a_hard_link_to_a_file_outside() {
        let s = Scene::new();
        std::fs::hard_link(s.outside.join("secret"), s.ws.join("report.txt")).unwrap();
        for walk in test_walks() {
            assert_eq!(
                open(&s, "report.txt", walk),
                Err(FileProblem::HardLinked { links: 2 })
            );
        }
    }

    // A FIFO must be refused without the engine blocking on it (the test would hang).
    #[test]
    fn refuses_a_fifo_without_blocking() {
        let s = Scene::new();
        mkfifo(&s.ws.join("pipe"));
        for walk in test_walks() {
            assert_eq!(
                open(&s, "pipe", walk),
                Err(FileProblem::NotRegular("a FIFO"))
            );
        }
    }

    #[test]
    fn refuses_a_socket_and_a_directory() {
        let s = Scene::new();
        let _listener = std::os::unix::net::UnixListener::bind(s.ws.join("sock")).unwrap();
        std::fs::create_dir(s.ws.join("dir")).unwrap();
        for walk in test_walks() {
            assert_eq!(
                open(&s, "sock", walk),
                Err(FileProblem::NotRegular("a socket"))
            );
            assert_eq!(
                open(&s, "dir", walk),
                Err(FileProblem::NotRegular("a directory"))
            );
        }
    }

    // The descriptor check itself refuses a device: an unprivileged task cannot create one in
    // the workspace, so the check is exercised on /dev/null's descriptor directly.
    #[test]
    fn descriptor_check_refuses_a_device() {
        let fd = rfs::open("/dev/null", read_flags(), Mode::empty()).unwrap();
        assert_eq!(
            check_regular(fd).unwrap_err(),
            FileProblem::NotRegular("a character device")
        );
    }

    // The descriptor a capture reads is left blocking, so a short read cannot pass for EOF.
    #[test]
    fn opened_file_reads_in_blocking_mode() {
        let s = Scene::new();
        s.write("f", b"x");
        let root = open_dir(&s.ws).unwrap();
        for walk in test_walks() {
            let f = open_confined(root.as_fd(), "f", walk).unwrap();
            assert!(!rfs::fcntl_getfl(&f).unwrap().contains(OFlags::NONBLOCK));
        }
    }
}

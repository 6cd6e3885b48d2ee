//! Descriptor-relative tree operations for engine-owned trees (the run's `files/` area and a
//! workspace's `inputs/`). Every call names an entry relative to an open directory and never
//! follows a symbolic link, so a link planted by a task cannot redirect a write or a removal.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use rustix::fs::{self as rfs, AtFlags, Dir, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::pool::{in_parallel, Job};
use super::{DIR_MODE, FILE_MODE};

/// Open directory `name` below `parent`, refusing a symbolic link.
pub(crate) fn open_subdir(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rfs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Create (if needed) and open each directory of `segs` in turn below `root`.
pub(crate) fn mkdir_p_at(root: BorrowedFd<'_>, segs: &[&str]) -> io::Result<Option<OwnedFd>> {
    let mut held: Option<OwnedFd> = None;
    for seg in segs {
        let parent = held.as_ref().map_or(root, |fd| fd.as_fd());
        match rfs::mkdirat(parent, *seg, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        held = Some(open_subdir(parent, OsStr::new(seg))?);
    }
    Ok(held)
}

/// Create a new file `name` in `dir`; never opens an existing entry or follows a link.
pub(crate) fn create_file_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<File> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    Ok(File::from(fd))
}

/// Copy `src` to a new file `name` in `dir` and make it read-only; the byte count copied.
///
/// `std::io::copy` between two files uses `copy_file_range` (and so reflinks where the file
/// system can), falling back to read/write across file systems.
pub(crate) fn copy_into(
    src: &mut impl io::Read,
    dir: BorrowedFd<'_>,
    name: &OsStr,
) -> io::Result<u64> {
    let mut out = create_file_at(dir, name)?;
    let n = io::copy(src, &mut out)?;
    rfs::fchmod(&out, Mode::from_raw_mode(FILE_MODE))?;
    Ok(n)
}

/// The names in directory `dir`, without `.` and `..`.
pub(crate) fn entries(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    let mut it = Dir::read_from(dir)?;
    while let Some(entry) = it.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        names.push(OsStr::from_bytes(name).to_owned());
    }
    Ok(names)
}

/// Seal every directory below `dir` (files were sealed as they were written), then `dir` itself.
pub(crate) fn seal_dirs(dir: BorrowedFd<'_>) -> io::Result<()> {
    for name in entries(dir)? {
        let st = rfs::statat(dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            seal_dirs(open_subdir(dir, &name)?.as_fd())?;
        }
    }
    rfs::fchmod(dir, Mode::from_raw_mode(DIR_MODE))?;
    Ok(())
}

/// Remove entry `name` of `parent` and everything below it, without following links; the bytes
/// of regular files removed. A missing entry removes nothing.
pub(crate) fn remove_tree_at(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<u64> {
    let st = match rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {
            let dir = open_subdir(parent, name)?;
            // Sealed directories must become writable before their entries can go.
            rfs::fchmod(&dir, Mode::from_raw_mode(0o700))?;
            let mut bytes = 0;
            for entry in entries(dir.as_fd())? {
                bytes += remove_tree_at(dir.as_fd(), &entry)?;
            }
            rfs::unlinkat(parent, name, AtFlags::REMOVEDIR)?;
            Ok(bytes)
        }
        ft => {
            rfs::unlinkat(parent, name, AtFlags::empty())?;
            Ok(if ft == FileType::RegularFile {
                st.st_size as u64
            } else {
                0
            })
        }
    }
}

/// Copy the engine-owned tree in `src` into the empty directory `dst`, sealing what it writes
/// (`dst` included); anything in `src` other than a regular file or a directory is an error (the
/// tree was tampered with). The files are copied on a [`pool`](super::pool) of threads.
pub(crate) fn copy_tree_at(src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> io::Result<()> {
    in_parallel(|submit| feed_tree(src, dst, submit))?;
    seal_dirs(dst)
}

/// Make `src`'s directories below `dst` and submit one copy job per file.
fn feed_tree(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    submit: &mut dyn FnMut(Job<'static, io::Error>) -> bool,
) -> io::Result<()> {
    // Shared with the jobs, which close them as the last one using each finishes.
    let (from, to) = (
        Arc::new(src.try_clone_to_owned()?),
        Arc::new(dst.try_clone_to_owned()?),
    );
    for name in entries(src)? {
        let st = rfs::statat(src, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                rfs::mkdirat(dst, name.as_os_str(), Mode::from_raw_mode(0o700))?;
                let sub_dst = open_subdir(dst, &name)?;
                feed_tree(open_subdir(src, &name)?.as_fd(), sub_dst.as_fd(), submit)?;
            }
            FileType::RegularFile => {
                let (from, to) = (Arc::clone(&from), Arc::clone(&to));
                let more = submit(Box::new(move || {
                    let fd = rfs::openat(
                        &*from,
                        name.as_os_str(),
                        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )?;
                    copy_into(&mut File::from(fd), to.as_fd(), &name).map(drop)
                }));
                if !more {
                    // A copy failed; in_parallel returns its error.
                    return Ok(());
                }
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "`{}` in a captured set is neither a file nor a directory",
                        name.to_string_lossy()
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// Move the complete tree `tmp` to `name` within `dir` in one step. Where `name` already exists
/// the two are exchanged atomically, so a reader sees the old set or the new one, never neither
/// or a mix; the old set is then at `tmp`, and `true` says the caller must remove it.
pub(crate) fn publish_at(dir: BorrowedFd<'_>, tmp: &OsStr, name: &OsStr) -> io::Result<bool> {
    match rfs::renameat_with(dir, tmp, dir, name, RenameFlags::NOREPLACE) {
        Ok(()) => return Ok(false),
        Err(Errno::EXIST) => {}
        // No rename flags on this file system: a plain rename cannot replace a non-empty
        // directory, so the old entry is moved aside first.
        Err(Errno::INVAL) => {
            let aside = temp_name();
            match rfs::renameat(dir, name, dir, aside.as_os_str()) {
                Ok(()) => {
                    rfs::renameat(dir, tmp, dir, name)?;
                    rfs::renameat(dir, aside.as_os_str(), dir, tmp)?;
                    return Ok(true);
                }
                Err(Errno::NOENT) => {
                    rfs::renameat(dir, tmp, dir, name)?;
                    return Ok(false);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(e) => return Err(e.into()),
    }
    rfs::renameat_with(dir, tmp, dir, name, RenameFlags::EXCHANGE)?;
    Ok(true)
}

/// A fresh temporary entry name; the leading `.` keeps it apart from every set directory, whose
/// names are task names or escaped keys (a leading `.` in a key is escaped).
pub(crate) fn temp_name() -> OsString {
    format!(".tmp-{}", uuid::Uuid::now_v7().simple()).into()
}

/// Whether `name` is one of [`temp_name`]'s, left behind by a crash.
pub(crate) fn is_temp(name: &OsStr) -> bool {
    name.as_bytes().starts_with(b".tmp-")
}

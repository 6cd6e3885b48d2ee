//! Capture by rename out of a disposable root (RFC-0002:C-TASK-FILES).
//!
//! An isolated task's checkout is removed as soon as its files are captured, so a checked file
//! can become the captured copy itself: one rename instead of a copy of every byte. The engine
//! adopts a file only where that is exactly as safe as copying it, and copies otherwise:
//! - the rename names the entry inside a directory opened by the confined walk, so it can only
//!   ever move an entry of the root's own tree;
//! - what arrives must be the very inode the confined open checked (a regular file, one link);
//! - once sealed read-only, no descriptor anywhere may hold it open for writing, which a read
//!   lease proves (the kernel refuses `F_RDLCK` while the file has any writer, shared writable
//!   mappings included), and it must still have that one link. A process the task left behind
//!   therefore cannot change the set afterwards through anything it held, which is what the copy
//!   guarantees.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use rustix::fs::{self as rfs, AtFlags, Mode};

use super::confine::{open_dir_confined, Walk};
use super::tree::remove_tree_at;
use super::FILE_MODE;

/// Move the checked file at `segs` (below the disposable `root`) to `name` in `to`, sealed
/// read-only; its size when adopted. `None` when it was not, and the caller copies from
/// `checked` as for any root. `Err` only for the engine's own directory `to`.
pub(crate) fn adopt(
    root: BorrowedFd<'_>,
    segs: &[&str],
    walk: Walk,
    checked: &File,
    to: BorrowedFd<'_>,
    name: &OsStr,
) -> io::Result<Option<u64>> {
    let (last, dirs) = segs.split_last().expect("at least one component");
    let Ok(parent) = open_dir_confined(root, dirs, walk) else {
        return Ok(None);
    };
    let from = parent.as_ref().map_or(root, |fd| fd.as_fd());
    // Refused across file systems, or for a directory the task made unwritable: copy instead.
    if rfs::renameat(from, *last, to, name).is_err() {
        return Ok(None);
    }
    let was = rfs::fstat(checked)?;
    let moved = rfs::statat(to, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let sealed = (moved.st_dev, moved.st_ino) == (was.st_dev, was.st_ino)
        && rfs::fchmod(checked, Mode::from_raw_mode(FILE_MODE)).is_ok()
        && no_writer(checked)
        && rfs::fstat(checked)?.st_nlink == 1;
    if sealed {
        return Ok(Some(rfs::fstat(checked)?.st_size as u64));
    }
    // Whatever was moved (the entry swapped in after the check, or the file with a writer) is a
    // name in the engine's directory; removing it leaves the checked descriptor to copy from.
    remove_tree_at(to, name)?;
    Ok(None)
}

/// Whether no descriptor holds `file` open for writing: a read lease is granted only then. It is
/// released at once; it only had to be granted.
fn no_writer(file: &File) -> bool {
    let fd = file.as_raw_fd();
    // SAFETY: F_SETLEASE on a descriptor this function borrows; no memory is passed.
    let granted = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) } == 0;
    if granted {
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
    }
    granted
}

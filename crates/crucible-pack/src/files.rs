//! Confined access to pack files, the pack's file list and its `tree1:` digest
//! (RFC-0002:C-PACK-BASE).
//!
//! Every read walks the path one component at a time from a directory descriptor opened on the
//! pack root, with `O_NOFOLLOW` on each step, so a symbolic link anywhere in the path is refused
//! rather than resolved, and a rename racing the walk cannot redirect it outside the pack.

use rustix::fs::{fstat, openat, statat, AtFlags, FileType, Mode, OFlags, CWD};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Path segments whose whole subtree is not pack content (RFC-0002:C-PACK-BASE).
pub const EXCLUDED_SEGMENTS: &[&str] = &["state", ".git", "workspace"];

/// The largest pack file read as text (a loaded source, a prompt or schema file, a goal file).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// A pack file that could not be read, with the pack-relative path it concerns.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {kind}")]
pub struct PackFileError {
    pub path: String,
    pub kind: PackFileErrorKind,
}

#[derive(Debug, thiserror::Error)]
pub enum PackFileErrorKind {
    #[error("an absolute path is refused: pack paths are relative to the pack directory")]
    Absolute,
    #[error(
        "the segment `{0}` is refused: pack paths may not contain empty, `.` or `..` segments"
    )]
    BadSegment(String),
    #[error("a pack path may not contain a newline")]
    Newline,
    #[error("`{0}` is a symbolic link: pack files are read without following links")]
    Symlink(String),
    #[error("not a regular file")]
    NotRegular,
    #[error("not found")]
    NotFound,
    #[error("{size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: u64, max: u64 },
    #[error("the file name is not valid UTF-8")]
    NotUtf8,
    #[error("{0}")]
    Io(std::io::Error),
}

fn fail(path: &str, kind: PackFileErrorKind) -> PackFileError {
    PackFileError {
        path: path.to_string(),
        kind,
    }
}

/// Checks a pack-relative path's shape and returns its segments.
pub fn split_rel(rel: &str) -> Result<Vec<&str>, PackFileError> {
    if rel.starts_with('/') {
        return Err(fail(rel, PackFileErrorKind::Absolute));
    }
    if rel.contains('\n') {
        return Err(fail(rel, PackFileErrorKind::Newline));
    }
    let segments: Vec<&str> = rel.split('/').collect();
    for seg in &segments {
        if seg.is_empty() || *seg == "." || *seg == ".." {
            return Err(fail(rel, PackFileErrorKind::BadSegment((*seg).to_string())));
        }
    }
    Ok(segments)
}

/// An open pack directory: every read below it is confined to it.
#[derive(Debug)]
pub struct PackDir {
    fd: OwnedFd,
}

impl PackDir {
    /// Opens `root` (itself may be reached through links: it is the operator's choice).
    pub fn open(root: &Path) -> Result<PackDir, PackFileError> {
        let fd = openat(
            CWD,
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| fail(&root.display().to_string(), PackFileErrorKind::Io(e.into())))?;
        Ok(PackDir { fd })
    }

    /// Reads the regular file at `rel` below the root, refusing anything larger than `max_bytes`.
    pub fn read(&self, rel: &str, max_bytes: u64) -> Result<Vec<u8>, PackFileError> {
        let segments = split_rel(rel)?;
        let (last, dirs) = segments.split_last().expect("split yields one segment");
        let mut owned: Option<OwnedFd> = None;
        for (i, seg) in dirs.iter().enumerate() {
            let at = owned.as_ref().unwrap_or(&self.fd);
            let next = openat(
                at,
                *seg,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| step_error(at, seg, rel, &segments[..=i].join("/"), e))?;
            owned = Some(next);
        }
        let at = owned.as_ref().unwrap_or(&self.fd);
        // NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        let fd = openat(
            at,
            *last,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| step_error(at, last, rel, rel, e))?;
        let stat = fstat(&fd).map_err(|e| fail(rel, PackFileErrorKind::Io(e.into())))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(fail(rel, PackFileErrorKind::NotRegular));
        }
        let size = stat.st_size as u64;
        if size > max_bytes {
            return Err(fail(
                rel,
                PackFileErrorKind::TooLarge {
                    size,
                    max: max_bytes,
                },
            ));
        }
        let mut out = Vec::with_capacity(size as usize);
        // Read one byte past the limit so a file that grew after fstat is still refused.
        std::fs::File::from(fd)
            .take(max_bytes.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|e| fail(rel, PackFileErrorKind::Io(e)))?;
        if out.len() as u64 > max_bytes {
            return Err(fail(
                rel,
                PackFileErrorKind::TooLarge {
                    size: out.len() as u64,
                    max: max_bytes,
                },
            ));
        }
        Ok(out)
    }

    /// Whether `rel` names a directory below the root, reached without following links.
    pub fn is_dir(&self, rel: &str) -> Result<bool, PackFileError> {
        let segments = split_rel(rel)?;
        let mut owned: Option<OwnedFd> = None;
        for (i, seg) in segments.iter().enumerate() {
            let at = owned.as_ref().unwrap_or(&self.fd);
            match openat(
                at,
                *seg,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => owned = Some(fd),
                Err(Errno::NOTDIR | Errno::NOENT) => return Ok(false),
                Err(e) => return Err(step_error(at, seg, rel, &segments[..=i].join("/"), e)),
            }
        }
        Ok(true)
    }
}

/// Maps an `openat` failure on one component to the refusal it means.
fn step_error(at: &OwnedFd, seg: &str, rel: &str, component: &str, e: Errno) -> PackFileError {
    // O_DIRECTORY|O_NOFOLLOW on a link reports ENOTDIR, not ELOOP: look at the entry itself.
    let is_link = || {
        statat(at, seg, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
    };
    match e {
        Errno::LOOP => fail(rel, PackFileErrorKind::Symlink(component.to_string())),
        Errno::NOTDIR if is_link() => fail(rel, PackFileErrorKind::Symlink(component.to_string())),
        Errno::NOTDIR => fail(rel, PackFileErrorKind::NotRegular),
        Errno::NOENT => fail(rel, PackFileErrorKind::NotFound),
        other => fail(rel, PackFileErrorKind::Io(other.into())),
    }
}

/// The pack's files and the paths its walk ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackListing {
    /// Pack-relative paths of every pack file, in byte order.
    pub files: Vec<String>,
    /// Excluded entries (a directory once, as `dir/`), in byte order.
    pub ignored: Vec<String>,
}

/// Lists a pack's files (RFC-0002:C-PACK-BASE): regular files outside any `state`, `.git` or
/// `workspace` segment; a symbolic link or other non-regular entry outside them is refused.
pub fn pack_files(root: &Path) -> Result<PackListing, PackFileError> {
    let mut listing = PackListing::default();
    walk(root, "", &mut listing)?;
    listing.files.sort();
    listing.ignored.sort();
    Ok(listing)
}

fn walk(dir: &Path, prefix: &str, out: &mut PackListing) -> Result<(), PackFileError> {
    let io = |p: &str, e: std::io::Error| fail(p, PackFileErrorKind::Io(e));
    let entries = std::fs::read_dir(dir).map_err(|e| io(prefix, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io(prefix, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            let shown = format!("{prefix}{}", name.to_string_lossy());
            return Err(fail(&shown, PackFileErrorKind::NotUtf8));
        };
        let rel = format!("{prefix}{name}");
        let kind = entry.file_type().map_err(|e| io(&rel, e))?;
        let excluded = EXCLUDED_SEGMENTS.contains(&name);
        if kind.is_dir() && excluded {
            // Reported once as a directory: a run's state or workspace can hold thousands of
            // files, and nothing below an excluded segment can be part of the pack.
            out.ignored.push(format!("{rel}/"));
        } else if kind.is_dir() {
            walk(&entry.path(), &format!("{rel}/"), out)?;
        } else if excluded {
            out.ignored.push(rel);
        } else if kind.is_symlink() {
            return Err(fail(&rel, PackFileErrorKind::Symlink(rel.clone())));
        } else if !kind.is_file() {
            return Err(fail(&rel, PackFileErrorKind::NotRegular));
        } else if rel.contains('\n') {
            return Err(fail(&rel, PackFileErrorKind::Newline));
        } else {
            out.files.push(rel);
        }
    }
    Ok(())
}

/// The pack digest: `tree1:` and the SHA-256 of one `<sha256hex>  <path>\n` line per pack file
/// in byte order of path (RFC-0002:C-PACK-BASE). File contents are read through [`PackDir`], so
/// a link swapped in after the listing is refused rather than followed.
pub fn tree1_digest(root: &Path) -> Result<String, PackFileError> {
    tree1_of(root, &pack_files(root)?)
}

/// The digest of an already-made listing of `root`.
pub fn tree1_of(root: &Path, listing: &PackListing) -> Result<String, PackFileError> {
    let dir = PackDir::open(root)?;
    let mut summary = String::new();
    for path in &listing.files {
        let bytes = dir.read(path, u64::MAX)?;
        summary.push_str(&hex::encode(Sha256::digest(&bytes)));
        summary.push_str("  ");
        summary.push_str(path);
        summary.push('\n');
    }
    Ok(format!(
        "tree1:{}",
        hex::encode(Sha256::digest(summary.as_bytes()))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn pack() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("prompts/deep")).unwrap();
        std::fs::write(d.path().join("prompts/deep/a.md"), "hello").unwrap();
        std::fs::write(d.path().join("workflow.star"), "workflow([])\n").unwrap();
        d
    }

    #[test]
    fn reads_a_nested_regular_file() {
        let d = pack();
        let dir = PackDir::open(d.path()).unwrap();
        assert_eq!(dir.read("prompts/deep/a.md", 100).unwrap(), b"hello");
        assert!(dir.is_dir("prompts/deep").unwrap());
        assert!(!dir.is_dir("workflow.star").unwrap());
    }

    // RFC-0002:C-PACK-BASE — absolute paths and `..`, `.` and empty segments are refused.
    #[test]
    fn refuses_absolute_and_traversal() {
        let d = pack();
        let dir = PackDir::open(d.path()).unwrap();
        for bad in [
            "/etc/passwd",
            "../x",
            "prompts/../workflow.star",
            "./workflow.star",
            "prompts//deep/a.md",
            "",
        ] {
            let e = dir.read(bad, 100).unwrap_err();
            assert!(
                matches!(
                    e.kind,
                    PackFileErrorKind::Absolute | PackFileErrorKind::BadSegment(_)
                ),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn refuses_a_symlink_in_any_component() {
        let d = pack();
        symlink(d.path().join("prompts"), d.path().join("linkdir")).unwrap();
        symlink(
            d.path().join("workflow.star"),
            d.path().join("prompts/link.star"),
        )
        .unwrap();
        let dir = PackDir::open(d.path()).unwrap();
        let e = dir.read("linkdir/deep/a.md", 100).unwrap_err();
        assert!(
            matches!(e.kind, PackFileErrorKind::Symlink(ref c) if c == "linkdir"),
            "{e}"
        );
        let e = dir.read("prompts/link.star", 100).unwrap_err();
        assert!(matches!(e.kind, PackFileErrorKind::Symlink(_)), "{e}");
    }

    #[test]
    fn refuses_a_fifo_and_a_directory() {
        let d = pack();
        rustix::fs::mkfifoat(CWD, d.path().join("pipe"), Mode::from_raw_mode(0o600)).unwrap();
        let dir = PackDir::open(d.path()).unwrap();
        assert!(matches!(
            dir.read("pipe", 100).unwrap_err().kind,
            PackFileErrorKind::NotRegular
        ));
        assert!(matches!(
            dir.read("prompts", 100).unwrap_err().kind,
            PackFileErrorKind::NotRegular
        ));
        assert!(matches!(
            dir.read("missing.md", 100).unwrap_err().kind,
            PackFileErrorKind::NotFound
        ));
    }

    #[test]
    fn refuses_an_oversized_file() {
        let d = pack();
        let dir = PackDir::open(d.path()).unwrap();
        let e = dir.read("prompts/deep/a.md", 4).unwrap_err();
        assert!(
            matches!(e.kind, PackFileErrorKind::TooLarge { size: 5, max: 4 }),
            "{e}"
        );
        assert_eq!(dir.read("prompts/deep/a.md", 5).unwrap(), b"hello");
    }

    // RFC-0002:C-PACK-BASE — excluded segments are ignored and reported; links outside are refused.
    #[test]
    fn lists_pack_files_and_reports_ignored() {
        let d = pack();
        std::fs::create_dir_all(d.path().join("state/runs")).unwrap();
        std::fs::write(d.path().join("state/runs/x"), "").unwrap();
        std::fs::create_dir_all(d.path().join("sub/workspace")).unwrap();
        std::fs::write(d.path().join("sub/workspace/y"), "").unwrap();
        symlink("/etc/passwd", d.path().join("sub/workspace/link")).unwrap();
        let listing = pack_files(d.path()).unwrap();
        assert_eq!(listing.files, vec!["prompts/deep/a.md", "workflow.star"]);
        assert_eq!(listing.ignored, vec!["state/", "sub/workspace/"]);
        symlink("/etc/passwd", d.path().join("prompts/evil")).unwrap();
        let e = pack_files(d.path()).unwrap_err();
        assert!(matches!(e.kind, PackFileErrorKind::Symlink(_)), "{e}");
    }

    // RFC-0002:C-PACK-BASE — the digest over a known tree, computed independently.
    #[test]
    fn tree1_digest_of_a_known_tree() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("b")).unwrap();
        std::fs::write(d.path().join("a.txt"), "a\n").unwrap();
        std::fs::write(d.path().join("b/c.txt"), "").unwrap();
        std::fs::create_dir_all(d.path().join(".git")).unwrap();
        std::fs::write(d.path().join(".git/HEAD"), "ignored").unwrap();
        // sha256("a\n") and sha256("") are well known.
        let summary = "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7  a.txt\n\
                       e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  b/c.txt\n";
        let want = format!("tree1:{}", hex::encode(Sha256::digest(summary.as_bytes())));
        assert_eq!(tree1_digest(d.path()).unwrap(), want);
        // Mode and timestamps are not part of it.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            d.path().join("a.txt"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        assert_eq!(tree1_digest(d.path()).unwrap(), want);
    }
}

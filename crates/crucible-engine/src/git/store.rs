//! How the run's git memory stores what task commits write, so that each commit costs what it
//! changed and the memory stays small (issue 18).
//!
//! - Trees and commits are written as loose objects whose zlib stream is stored, not deflated.
//!   A flat directory's tree is rewritten whole by every commit that changes it (git's trees are
//!   whole objects), and deflating it was most of a commit's cost in a directory of thousands of
//!   files; a tree is mostly object ids, which do not compress anyway. The loose copies live
//!   until the next pack (every `PACK_EVERY` commits), where each becomes a small delta.
//! - Task refs are folded into `packed-refs` whenever the objects are packed, as
//!   `git pack-refs` does: a loose ref is a whole file (a 4 KiB block) per task.

use super::{gerr, ioerr, GitError};
use git2::{ObjectType, Oid, Repository};
use sha1::Digest;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes an object as a loose object with a stored (uncompressed) zlib stream, unless the
/// memory has it already. Written under a temporary name and renamed, as git and libgit2 write
/// loose objects, so a reader never sees part of one.
pub(super) fn write_stored(
    repo: &Repository,
    kind: ObjectType,
    data: &[u8],
) -> Result<Oid, GitError> {
    let mut payload = format!("{} {}\0", kind.str(), data.len()).into_bytes();
    payload.extend_from_slice(data);
    // The object's id, as git computes it (SHA-1 of header and data). libgit2's own hash detects
    // collision attacks at several times the cost; these objects are the engine's own trees and
    // commits, naming objects it wrote or read from the memory.
    let id =
        Oid::from_bytes(&sha1::Sha1::digest(&payload)).map_err(gerr("cannot hash an object"))?;
    let odb = repo
        .odb()
        .map_err(gerr("cannot open the object database"))?;
    if odb.exists(id) {
        return Ok(id);
    }
    let hex = id.to_string();
    let dir = repo.path().join("objects").join(&hex[..2]);
    std::fs::create_dir_all(&dir).map_err(ioerr(format!("{}", dir.display())))?;
    let tmp = dir.join(format!("tmp_obj_crucible_{}", std::process::id()));
    let fin = dir.join(&hex[2..]);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&zlib_stored(&payload)?)?;
        drop(f);
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o444))?;
        std::fs::rename(&tmp, &fin)
    };
    write().map_err(ioerr(format!("cannot write object {hex}")))?;
    Ok(id)
}

/// A zlib stream (RFC 1950) holding `data` in stored, uncompressed deflate blocks.
fn zlib_stored(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let out = Vec::with_capacity(data.len() + data.len() / 0xffff * 5 + 16);
    let mut z = flate2::write::ZlibEncoder::new(out, flate2::Compression::none());
    z.write_all(data)?;
    z.finish()
}

/// The directory of the task refs, below the git directory.
const TASKS: &str = "refs/crucible/tasks";

/// Folds every loose task ref into `packed-refs` and removes the loose files, as
/// `git pack-refs` does: the packed file is written whole under git's lock name
/// (`packed-refs.lock`, so neither git nor libgit2 writes it meanwhile), synced, and renamed
/// over the old one before any loose ref goes; a crash in between leaves a ref both loose and
/// packed, with the same value. Every other line of `packed-refs` is kept as it was.
pub(super) fn pack_task_refs(repo: &Repository) -> Result<(), GitError> {
    let gitdir = repo.path();
    let mut loose = Vec::new();
    loose_refs(&gitdir.join(TASKS), TASKS, &mut loose)?;
    if loose.is_empty() {
        return Ok(());
    }
    let packed = gitdir.join("packed-refs");
    let lock = gitdir.join("packed-refs.lock");
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)
    {
        Ok(f) => f,
        // Someone else is writing it: the loose refs stay loose until the next time.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(ioerr("cannot lock packed-refs".into())(e)),
    };
    let written = (|| -> std::io::Result<()> {
        let old = match std::fs::read(&packed) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let (header, mut refs) = parse_packed(&old);
        for (name, id, _) in &loose {
            refs.insert(
                name.as_bytes().to_vec(),
                format!("{id} {name}\n").into_bytes(),
            );
        }
        let mut out = header;
        for lines in refs.values() {
            out.extend_from_slice(lines);
        }
        file.write_all(&out)?;
        file.sync_data()?;
        std::fs::rename(&lock, &packed)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&lock);
        return Err(ioerr("cannot write packed-refs".into())(e));
    }
    for (_, _, path) in loose {
        std::fs::remove_file(&path).map_err(ioerr(format!("cannot remove {}", path.display())))?;
    }
    Ok(())
}

/// The loose refs below `dir` (named `prefix/...`), with their ids and files; files that are
/// not a ref to an object id (a lock, a symbolic ref) are left out.
fn loose_refs(
    dir: &Path,
    prefix: &str,
    out: &mut Vec<(String, Oid, PathBuf)>,
) -> Result<(), GitError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(ioerr(format!("{}", dir.display()))(e)),
    };
    for e in entries {
        let e = e.map_err(ioerr(format!("{}", dir.display())))?;
        let Some(name) = e.file_name().to_str().map(|n| format!("{prefix}/{n}")) else {
            continue;
        };
        let ty = e.file_type().map_err(ioerr(format!("{}", dir.display())))?;
        if ty.is_dir() {
            loose_refs(&e.path(), &name, out)?;
        } else if ty.is_file() && !name.ends_with(".lock") {
            let body = std::fs::read_to_string(e.path()).unwrap_or_default();
            let hex = body.trim();
            if let Some(id) = Oid::from_str(hex).ok().filter(|_| hex.len() == 40) {
                out.push((name, id, e.path()));
            }
        }
    }
    Ok(())
}

/// `packed-refs` as its header (with the `sorted` trait, which the rewrite keeps true) and its
/// refs by name, each with its lines (the ref, and the peeled id after a tag).
fn parse_packed(bytes: &[u8]) -> (Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>) {
    const HEADER: &[u8] = b"# pack-refs with: peeled fully-peeled sorted \n";
    let mut header = HEADER.to_vec();
    let mut refs: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut last: Option<Vec<u8>> = None;
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        let mut line = line.to_vec();
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        if line.starts_with(b"#") {
            header = line;
            if !header.windows(8).any(|w| w == b" sorted ") {
                header.pop();
                header.extend_from_slice(b" sorted \n");
            }
        } else if line.starts_with(b"^") {
            if let Some(lines) = last.as_ref().and_then(|n| refs.get_mut(n)) {
                lines.extend_from_slice(&line);
            }
        } else if let Some(sp) = line.iter().position(|b| *b == b' ') {
            let name = line[sp + 1..line.len() - 1].to_vec();
            refs.insert(name.clone(), line);
            last = Some(name);
        }
    }
    (header, refs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_zlib_streams_inflate_to_what_was_stored() {
        // Checked by libgit2's own reader: an object written stored reads back, at sizes
        // around a stored block's limit.
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(tmp.path()).unwrap();
        for len in [0, 1, 65_535, 65_536, 200_000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let id = write_stored(&repo, ObjectType::Blob, &data).unwrap();
            assert_eq!(id, Oid::hash_object(ObjectType::Blob, &data).unwrap());
            let odb = repo.odb().unwrap();
            assert_eq!(odb.read(id).unwrap().data(), data.as_slice(), "{len} bytes");
            // Stored, not deflated (the pattern would deflate to a few hundred bytes): the
            // object's header and bytes, and a few bytes of block headers, zlib's and its sum.
            let hex = id.to_string();
            let file = tmp.path().join("objects").join(&hex[..2]).join(&hex[2..]);
            let stored = format!("blob {len}\0").len() + len;
            let size = std::fs::metadata(file).unwrap().len() as usize;
            assert!(size >= stored && size <= stored + 64, "{len}: {size}");
        }
    }
}

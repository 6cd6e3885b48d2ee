//! The content-addressed tree store (RFC-0002:C-PACK-BASE): a pack tree lives under
//! `STATE_DIR/trees/<hex>` for its digest `tree1:<hex>`, written once and never changed. An
//! uploaded tar is unpacked into a staging directory beside the store, checked entry by entry
//! (paths, links and other non-regular files, a path that is a prefix of another, duplicates),
//! digested by crucible-pack's own code, measured against the delivery budget, and only then
//! renamed into place: a refused upload leaves nothing behind.

use crate::error::{ApiError, ApiResult};
use crucible_pack::files::{pack_files, split_rel, tree1_of, EXCLUDED_SEGMENTS};
use flate2::write::GzEncoder;
use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What a tree's ingestion found.
#[derive(Debug)]
pub struct Ingested {
    pub digest: String,
    /// Excluded paths the upload held (a directory once, as `dir/`), in byte order.
    pub ignored: Vec<String>,
    /// The size of the gzipped tar a run is delivered: what the delivery budget measures.
    pub delivered_bytes: u64,
    /// Saved on a base: the overlay's provenance.
    pub overlay: Option<Overlay>,
}

/// What an overlay put over its base (RFC-0002:C-PACK-BASE provenance).
#[derive(Debug)]
pub struct Overlay {
    /// The digest of the overlay's files alone, computed as a pack's; it keeps no tree.
    pub digest: String,
    /// Every overlay path, in byte order, and whether it replaced a base file.
    pub paths: Vec<OverlayPath>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct OverlayPath {
    pub path: String,
    pub replaced: bool,
}

/// The files an upload unpacked, and the directories they imply.
struct Unpacked {
    ignored: Vec<String>,
    files: HashSet<String>,
    dirs: HashSet<String>,
}

/// The store's directory for a digest, refusing anything that is not `tree1:` and 64 hex.
pub fn tree_dir(trees: &Path, digest: &str) -> Option<PathBuf> {
    let hex = digest.strip_prefix("tree1:")?;
    let ok = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then(|| trees.join(hex))
}

/// Writes the tar of `files` under `root` (byte order, every file mode 0755, owner 0, time 0),
/// so the same tree always gives the same bytes. The delivered archive is this, gzipped.
pub fn write_tar<W: Write>(root: &Path, files: &[String], out: W) -> std::io::Result<W> {
    let mut b = tar::Builder::new(out);
    for path in files {
        let mut f = std::fs::File::open(root.join(path))?;
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o755);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        h.set_size(f.metadata()?.len());
        b.append_data(&mut h, path, &mut f)?;
    }
    b.into_inner()
}

/// The gzipped delivery archive of a stored tree, written to `out`.
pub fn write_delivery<W: Write>(root: &Path, out: W) -> ApiResult<W> {
    let listing = pack_files(root).map_err(|e| anyhow::anyhow!("stored tree: {e}"))?;
    let gz = write_tar(
        root,
        &listing.files,
        GzEncoder::new(out, flate2::Compression::default()),
    )
    .map_err(|e| anyhow::anyhow!("writing the delivery archive: {e}"))?;
    Ok(gz.finish().map_err(|e| anyhow::anyhow!("gzip: {e}"))?)
}

/// A writer that only counts.
#[derive(Default)]
struct Count(u64);

impl Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// RFC-0002:C-PACK-BASE: a tree whose delivered archive is over the budget in force is refused
/// (at save, registration, import, draft publish and dispatch), naming the budget and the size.
pub fn within_budget(delivered_bytes: u64, budget: u64) -> ApiResult<()> {
    if delivered_bytes > budget {
        return Err(ApiError::Refused(format!(
            "the pack's delivered archive is {delivered_bytes} bytes, over the delivery budget of \
             {budget} bytes"
        )));
    }
    Ok(())
}

fn refused(path: &str, why: &str) -> ApiError {
    ApiError::Refused(format!("{}: {why}", path.escape_debug()))
}

/// Unpacks the tar at `upload` into the store under `trees`, refusing it whole on the first
/// rule it breaks, when its delivery archive exceeds `budget` bytes, or when its digest is not
/// `expect` (when given). With a `base` (a stored
/// tree) the upload is an overlay: the stored tree is the base's files with the overlay's
/// placed over them by path, whole files replaced, nothing merged or removed.
pub fn ingest_tar(
    trees: &Path,
    staging_parent: &Path,
    upload: &Path,
    budget: u64,
    base: Option<&Path>,
    expect: Option<&str>,
) -> ApiResult<Ingested> {
    let staging = tempfile::tempdir_in(staging_parent).map_err(anyhow::Error::from)?;
    let unpacked = unpack(upload, staging.path())?;
    let overlay = match base {
        Some(base) => Some(flatten(base, staging.path(), &unpacked)?),
        None => None,
    };
    let listing = pack_files(staging.path()).map_err(|e| anyhow::anyhow!("staged tree: {e}"))?;
    if listing.files.is_empty() {
        return Err(ApiError::Refused("the archive holds no pack files".into()));
    }
    let digest = tree1_of(staging.path(), &listing).map_err(|e| anyhow::anyhow!("digest: {e}"))?;
    if let Some(want) = expect.filter(|want| *want != digest) {
        return Err(ApiError::Refused(format!(
            "the archive's files digest to {digest}, not `{}`",
            want.escape_debug()
        )));
    }
    let delivered_bytes = write_delivery(staging.path(), Count::default())?.0;
    within_budget(delivered_bytes, budget)?;
    let dest = tree_dir(trees, &digest).expect("tree1_of makes a well-formed digest");
    if !dest.exists() {
        let kept = staging.keep();
        if let Err(e) = std::fs::rename(&kept, &dest) {
            let _ = std::fs::remove_dir_all(&kept);
            // Another upload of the same tree may have won the rename: same digest, same bytes.
            if !dest.exists() {
                return Err(anyhow::anyhow!("storing the tree: {e}").into());
            }
        }
    }
    Ok(Ingested {
        digest,
        ignored: unpacked.ignored,
        delivered_bytes,
        overlay,
    })
}

/// Decompresses the gzipped upload at `src` into a spool file beside the store, refusing it
/// (413) as soon as the tar it holds passes `limit` bytes: a small archive cannot unpack into
/// an unbounded one.
pub fn gunzip_bounded(
    src: &Path,
    spool_dir: &Path,
    limit: u64,
) -> ApiResult<tempfile::NamedTempFile> {
    use std::io::Read;
    let input = std::fs::File::open(src).map_err(anyhow::Error::from)?;
    let mut out = tempfile::NamedTempFile::new_in(spool_dir).map_err(anyhow::Error::from)?;
    let mut gz = flate2::read::GzDecoder::new(input).take(limit + 1);
    let n = std::io::copy(&mut gz, out.as_file_mut())
        .map_err(|e| ApiError::BadRequest(format!("malformed gzip: {e}")))?;
    if n > limit {
        return Err(ApiError::TooLarge(format!(
            "the archive unpacks to over the limit of {limit} bytes"
        )));
    }
    Ok(out)
}

/// Copies every base file the overlay does not hold into `dest` (which holds the overlay),
/// refusing a file of one that is the directory of a file of the other; returns the overlay's
/// provenance, its digest taken before any base file joins it.
fn flatten(base: &Path, dest: &Path, over: &Unpacked) -> ApiResult<Overlay> {
    let stored = |e| anyhow::anyhow!("stored tree: {e}");
    let own = pack_files(dest).map_err(stored)?;
    let digest = tree1_of(dest, &own).map_err(stored)?;
    let base_files = pack_files(base).map_err(stored)?.files;
    let in_base: HashSet<&str> = base_files.iter().map(String::as_str).collect();
    let paths = own
        .files
        .iter()
        .map(|p| OverlayPath {
            path: p.clone(),
            replaced: in_base.contains(p.as_str()),
        })
        .collect();
    for file in &base_files {
        if over.files.contains(file) {
            continue;
        }
        if over.dirs.contains(file) {
            return Err(prefix_clash(file));
        }
        let segments: Vec<&str> = file.split('/').collect();
        for end in 1..segments.len() {
            let parent = segments[..end].join("/");
            if over.files.contains(&parent) {
                return Err(prefix_clash(&parent));
            }
        }
        let target = dest.join(file);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(anyhow::Error::from)?;
        }
        std::fs::copy(base.join(file), &target).map_err(anyhow::Error::from)?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
            .map_err(anyhow::Error::from)?;
    }
    Ok(Overlay { digest, paths })
}

/// Unpacks every entry under `dest`, enforcing the pack rules.
fn unpack(upload: &Path, dest: &Path) -> ApiResult<Unpacked> {
    let malformed = |e: std::io::Error| ApiError::BadRequest(format!("malformed tar: {e}"));
    let file = std::fs::File::open(upload).map_err(anyhow::Error::from)?;
    let mut archive = tar::Archive::new(file);
    let mut files: HashSet<String> = HashSet::new();
    let mut dirs: HashSet<String> = HashSet::new();
    let mut ignored = BTreeSet::new();
    for entry in archive.entries().map_err(malformed)? {
        let mut entry = entry.map_err(malformed)?;
        let raw = entry.path_bytes().into_owned();
        let Ok(text) = String::from_utf8(raw) else {
            return Err(ApiError::Refused("a pack path must be valid UTF-8".into()));
        };
        // `tar -C dir .` frames every path with `./`: archive framing, not a path segment.
        let path = text
            .strip_prefix("./")
            .unwrap_or(&text)
            .trim_end_matches('/');
        let kind = entry.header().entry_type();
        if path.is_empty() || path == "." {
            if kind.is_dir() {
                continue;
            }
            return Err(refused(&text, "an entry needs a path"));
        }
        let segments = split_rel(path).map_err(|e| ApiError::Refused(e.to_string()))?;
        if let Some(i) = segments.iter().position(|s| EXCLUDED_SEGMENTS.contains(s)) {
            let whole = i + 1 == segments.len() && !kind.is_dir();
            let shown = segments[..=i].join("/");
            ignored.insert(if whole { shown } else { format!("{shown}/") });
            continue;
        }
        if kind.is_dir() {
            // Directories are not pack content: only the ones files imply are tracked.
            continue;
        }
        if kind.is_symlink() || kind.is_hard_link() {
            return Err(refused(path, "is a link: a pack holds regular files only"));
        }
        if !(kind.is_file() || kind == tar::EntryType::Continuous) {
            return Err(refused(
                path,
                "is not a regular file: a pack holds regular files only",
            ));
        }
        if files.contains(path) {
            return Err(refused(path, "appears twice in the archive"));
        }
        if dirs.contains(path) {
            return Err(prefix_clash(path));
        }
        for end in 1..segments.len() {
            let parent = segments[..end].join("/");
            if files.contains(&parent) {
                return Err(prefix_clash(&parent));
            }
            dirs.insert(parent);
        }
        files.insert(path.to_string());
        let target = dest.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(anyhow::Error::from)?;
        }
        let mut out = std::fs::File::create(&target).map_err(anyhow::Error::from)?;
        std::io::copy(&mut entry, &mut out).map_err(malformed)?;
        out.set_permissions(std::fs::Permissions::from_mode(0o755))
            .map_err(anyhow::Error::from)?;
    }
    Ok(Unpacked {
        ignored: ignored.into_iter().collect(),
        files,
        dirs,
    })
}

/// RFC-0002:C-PACK-BASE: one file's path followed by `/` may not prefix another's (across base
/// and overlay too).
fn prefix_clash(path: &str) -> ApiError {
    refused(
        path,
        "is a file and also the directory of another file: one pack path may not be a prefix of \
         another",
    )
}

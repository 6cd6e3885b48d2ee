//! Capture of a task's declared files into the run's `files/` area (RFC-0002:C-TASK-FILES,
//! RFC-0002:C-SETTLED-JOIN).
//!
//! A set is all or nothing: every declared path is opened by the confined walk and copied from
//! the checked descriptor (or, out of a disposable root, moved: see `files/adopt.rs`)
//! into a temporary directory inside `files/`, which is renamed over
//! `files/<dir>/` only when the whole set is good. Any problem publishes none of it and removes
//! whatever set the task published before, so a stale set is never staged as this attempt's.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::{self as rfs, Mode as FsMode};
use sha2::{Digest, Sha256};

use crucible_plan::FileDecl;

use super::adopt::adopt;
use super::confine::{components, open_confined, open_dir, Walk};
use super::pool::in_parallel;
use super::tree::{
    copy_into, entries, is_temp, mkdir_p_at, open_subdir, publish_at, remove_tree_at, seal_dirs,
    temp_name,
};
use super::{FileProblem, FilesError, FilesErrorKind, NAME_MAX};

/// The default run-total bound on captured bytes: 1 GiB.
pub const DEFAULT_MAX_FILES_BYTES: u64 = 1 << 30;
/// The environment variable that sets the bound (below the flag, above the default).
pub const MAX_FILES_BYTES_ENV: &str = "CRUCIBLE_FILES_MAX_BYTES";
/// The CLI flag (without its dashes) that sets the bound.
pub const MAX_FILES_BYTES_FLAG: &str = "max-files-bytes";

/// How many schema errors a note gives.
const SCHEMA_ERRORS_SHOWN: usize = 3;

/// Parse a byte size: a whole number, optionally followed by `K`, `M`, `G` or `T` (binary
/// multiples; `KiB`, `KB` and a trailing `B` are accepted as the same).
pub fn parse_size(text: &str) -> Result<u64, FilesError> {
    let bad = |why: &str| FilesError {
        context: format!("reading the captured-files bound `{text}`"),
        kind: FilesErrorKind::BadSize(why.to_string()),
    };
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(bad("it does not start with a number"));
    }
    let n: u64 = digits.parse().map_err(|_| bad("the number is too large"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad("the unit is not one of B, K, M, G, T")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| bad("the size is too large"))
}

/// The run's bound: the flag's value if given, else the environment variable's, else
/// [`DEFAULT_MAX_FILES_BYTES`]. `crucible check` prints the result before a run.
pub fn max_files_bytes(flag: Option<&str>, env: Option<&str>) -> Result<u64, FilesError> {
    match flag.or(env) {
        Some(text) => parse_size(text),
        None => Ok(DEFAULT_MAX_FILES_BYTES),
    }
}

/// The run-total captured-bytes bound and what the published sets currently hold. The runner
/// owns one per run and shares it with every capture; charging is atomic, so concurrent
/// captures cannot both squeeze under the bound.
#[derive(Debug)]
pub struct FilesBudget {
    limit: u64,
    used: AtomicU64,
}

impl FilesBudget {
    pub fn new(limit: u64) -> FilesBudget {
        FilesBudget {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// The budget of a resumed run: temporaries a crash left in `files_dir` are removed, and the
    /// sets already published there count against the bound.
    pub fn resume(limit: u64, files_dir: &Path) -> Result<FilesBudget, FilesError> {
        let budget = FilesBudget::new(limit);
        let dir = match open_dir(files_dir) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(budget),
            Err(e) => {
                return Err(FilesError::io(
                    format!("opening {}", files_dir.display()),
                    e,
                ))
            }
        };
        let ctx = || format!("recovering {}", files_dir.display());
        for name in entries(dir.as_fd()).map_err(|e| FilesError::io(ctx(), e))? {
            if is_temp(&name) {
                remove_tree_at(dir.as_fd(), &name).map_err(|e| FilesError::io(ctx(), e))?;
            } else {
                let bytes = set_bytes(dir.as_fd(), &name).map_err(|e| FilesError::io(ctx(), e))?;
                budget.used.fetch_add(bytes, Ordering::Relaxed);
            }
        }
        Ok(budget)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held by published sets (and by captures in progress).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.used())
    }

    fn try_charge(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn release(&self, n: u64) {
        // Saturating: a set published by an earlier run of a resumed one may not be counted.
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(n))
            });
    }
}

/// Bytes of the regular files in set `name` below `dir`.
fn set_bytes(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<u64> {
    use rustix::fs::{AtFlags, FileType};
    let st = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(st.st_size as u64),
        FileType::Directory => {
            let sub = open_subdir(dir, name)?;
            let mut total = 0;
            for entry in entries(sub.as_fd())? {
                total += set_bytes(sub.as_fd(), &entry)?;
            }
            Ok(total)
        }
        _ => Ok(0),
    }
}

/// What one declared path held at some instant, compared by content.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Held {
    Absent,
    /// Something the confined walk would not read (a link, a FIFO, a hard link…).
    Unreadable,
    Content([u8; 32]),
}

/// What each declared path held before an attempt started, taken by the same confined walk that
/// captures (RFC-0002:C-SETTLED-JOIN): a failing attempt's capture keeps only the paths whose
/// content it changed, whether or not version control can see them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    held: BTreeMap<String, Held>,
}

impl Snapshot {
    pub fn take(root: &Path, decls: &[FileDecl]) -> Result<Snapshot, FilesError> {
        let root_fd = open_dir(root)
            .map_err(|e| FilesError::io(format!("opening workspace {}", root.display()), e))?;
        let mut held = BTreeMap::new();
        for decl in decls {
            let state = match open_confined(root_fd.as_fd(), &decl.path, Walk::Auto) {
                Ok(mut file) => match digest(&mut file) {
                    Ok(d) => Held::Content(d),
                    Err(_) => Held::Unreadable,
                },
                Err(FileProblem::Absent) => Held::Absent,
                Err(_) => Held::Unreadable,
            };
            held.insert(decl.path.clone(), state);
        }
        Ok(Snapshot { held })
    }
}

fn digest(r: &mut impl Read) -> io::Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match r.read(&mut buf)? {
            0 => break,
            n => hasher.update(&buf[..n]),
        }
    }
    Ok(hasher.finalize().into())
}

/// Whether the attempt whose files are captured passed or failed.
#[derive(Clone, Copy, Debug)]
pub enum Mode<'a> {
    /// Every declared file must be present and confined; schema'd files are validated.
    Passing,
    /// Only paths the attempt changed since `Snapshot` are captured; files are not validated.
    Failing(&'a Snapshot),
}

/// Where one capture reads and writes.
#[derive(Clone, Copy, Debug)]
pub struct CaptureRequest<'a> {
    /// The root the attempt ran in (the run's workspace, or its isolated copy).
    pub workspace: &'a Path,
    pub decls: &'a [FileDecl],
    /// The run's `files/` area (`runs/<run-id>/files`).
    pub files_dir: &'a Path,
    /// The producer's directory name, from [`dir_name`](super::dir_name).
    pub dir_name: &'a str,
    /// `workspace` is thrown away once captured (an isolated task's checkout), so a checked file
    /// may be moved out of it rather than copied, where `adopt` finds that as safe.
    pub disposable: bool,
}

/// One declared path and why it was not captured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub problem: FileProblem,
}

/// Why a set was not published. For a passing attempt the runner turns this into a measured
/// failure at the producer, not retried; for a failing one it only joins the failure note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureFailure {
    pub problems: Vec<Problem>,
}

impl CaptureFailure {
    /// The note fragment: names each file and what is wrong with it, never its content.
    pub fn note(&self) -> String {
        format!(
            "{}; no file of the set was captured",
            self.notes().join("; ")
        )
    }

    /// One note per problem, as [`note`](Self::note) gives them.
    pub fn notes(&self) -> Vec<String> {
        self.problems
            .iter()
            .map(|p| format!("declared file `{}` {}", p.path, p.problem))
            .collect()
    }

    /// The bound, where exceeding it is why the set was refused.
    pub fn over_bound(&self) -> Option<u64> {
        self.problems.iter().find_map(|p| match p.problem {
            FileProblem::OverBound { limit } => Some(limit),
            _ => None,
        })
    }
}

/// A set published under `files/<dir>/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishedSet {
    pub dir: PathBuf,
    pub bytes: u64,
}

/// What a capture did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Captured {
    /// The task declares no files: there is no set, and any earlier one was removed.
    NothingDeclared,
    Published(PublishedSet),
    /// Nothing was published and any earlier set of the task was removed.
    Refused(CaptureFailure),
}

/// What a passing attempt's set would be refused for, checked in place by the same confined
/// walk and schemas without capturing anything: the notes a repair turn is shown
/// (RFC-0002:C-TASK-FILES). The capture after the repair checks everything again.
pub fn precheck(
    workspace: &Path,
    decls: &[FileDecl],
) -> Result<Option<CaptureFailure>, FilesError> {
    let root = open_dir(workspace)
        .map_err(|e| FilesError::io(format!("opening workspace {}", workspace.display()), e))?;
    let mut problems = Vec::new();
    for decl in decls {
        let found = match open_confined(root.as_fd(), &decl.path, Walk::Auto) {
            Err(p) => Some(p),
            Ok(mut file) => match &decl.schema {
                Some(schema) => validate(&mut file, schema).map_err(|e| {
                    FilesError::io(format!("checking declared file `{}`", decl.path), e)
                })?,
                None => None,
            },
        };
        if let Some(problem) = found {
            let path = decl.path.clone();
            problems.push(Problem { path, problem });
        }
    }
    Ok((!problems.is_empty()).then_some(CaptureFailure { problems }))
}

/// Capture `req.decls` from `req.workspace` as the set of `req.dir_name`.
///
/// `Err` is the engine's own failure (the files area could not be written); everything the task
/// did wrong is a [`Captured::Refused`].
pub fn capture(
    req: &CaptureRequest<'_>,
    mode: Mode<'_>,
    budget: &FilesBudget,
) -> Result<Captured, FilesError> {
    capture_observed(req, mode, budget, &mut |_| {})
}

/// [`capture`], calling `between_check_and_copy` with each declared path after its descriptor
/// passed the checks and before the copy from it: the seam an end-to-end test uses to swap the
/// file under the engine deterministically (the copy must still read the checked file).
pub fn capture_observed(
    req: &CaptureRequest<'_>,
    mode: Mode<'_>,
    budget: &FilesBudget,
    between_check_and_copy: &mut dyn FnMut(&str),
) -> Result<Captured, FilesError> {
    capture_with(req, mode, budget, Walk::Auto, between_check_and_copy)
}

/// [`capture_observed`] with the resolver chosen, so tests cover each one.
pub(crate) fn capture_with(
    req: &CaptureRequest<'_>,
    mode: Mode<'_>,
    budget: &FilesBudget,
    walk: Walk,
    between_check_and_copy: &mut dyn FnMut(&str),
) -> Result<Captured, FilesError> {
    let files_ctx = || format!("capturing into {}", req.files_dir.display());
    let name = OsStr::new(req.dir_name);
    if req.decls.is_empty() {
        remove_set(req.files_dir, req.dir_name, budget)?;
        return Ok(Captured::NothingDeclared);
    }
    // A key is runtime data: one too long to be a directory name fails its producer like any
    // other problem with its files, rather than the engine.
    if req.dir_name.len() > NAME_MAX {
        return Ok(Captured::Refused(CaptureFailure {
            problems: vec![Problem {
                path: req.decls[0].path.clone(),
                problem: FileProblem::SetNameTooLong {
                    bytes: req.dir_name.len(),
                },
            }],
        }));
    }
    std::fs::create_dir_all(req.files_dir).map_err(|e| FilesError::io(files_ctx(), e))?;
    let files = open_dir(req.files_dir).map_err(|e| FilesError::io(files_ctx(), e))?;
    let root = open_dir(req.workspace)
        .map_err(|e| FilesError::io(format!("opening workspace {}", req.workspace.display()), e))?;

    let tmp = temp_name();
    rfs::mkdirat(&files, tmp.as_os_str(), FsMode::from_raw_mode(0o700))
        .map_err(|e| FilesError::io(files_ctx(), e))?;
    let tmp_fd = open_subdir(files.as_fd(), &tmp).map_err(|e| FilesError::io(files_ctx(), e))?;

    let mut charged = 0;
    let outcome = fill(
        req,
        mode,
        budget,
        walk,
        between_check_and_copy,
        root.as_fd(),
        tmp_fd.as_fd(),
        &mut charged,
    );
    let problems = match outcome {
        Ok(problems) => problems,
        Err(e) => {
            budget.release(charged);
            // Best effort: the engine error is the one to report.
            let _ = remove_tree_at(files.as_fd(), &tmp);
            return Err(e);
        }
    };
    if !problems.is_empty() {
        budget.release(charged);
        remove_tree_at(files.as_fd(), &tmp).map_err(|e| FilesError::io(files_ctx(), e))?;
        remove_set(req.files_dir, req.dir_name, budget)?;
        return Ok(Captured::Refused(CaptureFailure { problems }));
    }
    seal_dirs(tmp_fd.as_fd()).map_err(|e| FilesError::io(files_ctx(), e))?;
    drop(tmp_fd);
    // A revise round's (or a retried attempt's) set replaces the last one in one step.
    if publish_at(files.as_fd(), &tmp, name).map_err(|e| FilesError::io(files_ctx(), e))? {
        let freed =
            remove_tree_at(files.as_fd(), &tmp).map_err(|e| FilesError::io(files_ctx(), e))?;
        budget.release(freed);
    }
    Ok(Captured::Published(PublishedSet {
        dir: req.files_dir.join(req.dir_name),
        bytes: charged,
    }))
}

/// Where a declared path's problem was found: by the check every path gets, or after its copy
/// (the bound, its schema, an unchanged failing path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    Check,
    Copy,
}

/// Check every declared path in order and copy (or [`adopt`]) each into `tmp`, the copies on a
/// [`pool`](super::pool) of threads; the problems found, in declaration order. Once a problem is
/// known nothing will be published, so later paths are only checked, not copied: every check
/// problem is reported, and the first problem found after a copy only where no earlier path had
/// one, as a copy in declaration order would find it.
#[allow(clippy::too_many_arguments)]
fn fill(
    req: &CaptureRequest<'_>,
    mode: Mode<'_>,
    budget: &FilesBudget,
    walk: Walk,
    hook: &mut dyn FnMut(&str),
    root: BorrowedFd<'_>,
    tmp: BorrowedFd<'_>,
    charged: &mut u64,
) -> Result<Vec<Problem>, FilesError> {
    let found: Mutex<Vec<(usize, Found, Problem)>> = Mutex::new(Vec::new());
    // Each captured file's size by declaration index, charged to the bound in that order once
    // every copy is done, so which file is named as over the bound never depends on which copy
    // finished first.
    let sizes: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());
    let sized = |i: usize, bytes: u64| sizes.lock().expect("no copy panics").push((i, bytes));
    let problem = |i: usize, at: Found, p: FileProblem| {
        let path = req.decls[i].path.clone();
        let mut found = found.lock().expect("no copy panics holding the problems");
        found.push((i, at, Problem { path, problem: p }));
    };
    let any_problem = || !found.lock().expect("no copy panics").is_empty();
    let ctx = |path: &str| format!("capturing declared file `{path}`");
    in_parallel(|submit| {
        let mut seen = BTreeSet::new();
        let mut last_parent: Option<(Vec<&str>, Arc<OwnedFd>)> = None;
        for (i, decl) in req.decls.iter().enumerate() {
            if !seen.insert(decl.path.as_str()) {
                continue;
            }
            let opened = match open_confined(root, &decl.path, walk) {
                Ok(opened) => opened,
                Err(p) => {
                    problem(i, Found::Check, p);
                    continue;
                }
            };
            if any_problem() {
                continue;
            }
            hook(&decl.path);
            let io_err = |e| FilesError::io(ctx(&decl.path), e);
            let segs = components(&decl.path).expect("open_confined checked the path");
            let (last, dirs) = segs.split_last().expect("at least one component");
            // Declared paths usually come directory by directory: reuse the last one's.
            let parent = match &last_parent {
                Some((held, fd)) if held.as_slice() == dirs => Arc::clone(fd),
                _ => {
                    let fd = match mkdir_p_at(tmp, dirs).map_err(io_err)? {
                        Some(fd) => fd,
                        None => tmp.try_clone_to_owned().map_err(io_err)?,
                    };
                    let fd = Arc::new(fd);
                    last_parent = Some((dirs.to_vec(), Arc::clone(&fd)));
                    fd
                }
            };
            let last = OsString::from(*last);
            // A file already larger than the room left is refused from its size, before any
            // copy: a 2 GiB sparse file would otherwise be read (and written dense) up to the
            // bound first. The copy below still stops one byte past the room, for a file that
            // grows after this look.
            if opened
                .metadata()
                .is_ok_and(|m| m.len() > budget.remaining())
            {
                problem(
                    i,
                    Found::Copy,
                    FileProblem::OverBound {
                        limit: budget.limit(),
                    },
                );
                continue;
            }
            if req.disposable {
                if let Some(bytes) =
                    adopt(root, &segs, walk, &opened, parent.as_fd(), &last).map_err(io_err)?
                {
                    sized(i, bytes);
                    if let Some(p) =
                        after_copy(decl, mode, parent.as_fd(), &last).map_err(io_err)?
                    {
                        problem(i, Found::Copy, p);
                    }
                    continue;
                }
            }
            let (problem, sized, decl) = (&problem, &sized, &req.decls[i]);
            let more = submit(Box::new(move || {
                let io_err = |e| FilesError::io(ctx(&decl.path), e);
                // Copy until EOF (the size fstat saw may be stale), but at most one byte past
                // the room left: that byte proves the bound exceeded without copying an
                // oversized file whole.
                let room = budget.remaining();
                let mut src = (&opened).take(room.saturating_add(1));
                let copied = copy_into(&mut src, parent.as_fd(), &last).map_err(io_err)?;
                if copied > room {
                    let limit = budget.limit();
                    problem(i, Found::Copy, FileProblem::OverBound { limit });
                    return Ok(());
                }
                sized(i, copied);
                if let Some(p) = after_copy(decl, mode, parent.as_fd(), &last).map_err(io_err)? {
                    problem(i, Found::Copy, p);
                }
                Ok(())
            }));
            if !more {
                break;
            }
        }
        Ok(())
    })?;
    let mut sizes = sizes
        .into_inner()
        .expect("no copy panics holding the sizes");
    sizes.sort_unstable();
    for (i, bytes) in sizes {
        if !budget.try_charge(bytes) {
            problem(
                i,
                Found::Copy,
                FileProblem::OverBound {
                    limit: budget.limit(),
                },
            );
            break;
        }
        *charged += bytes;
    }
    let mut found = found
        .into_inner()
        .expect("no copy panics holding the problems");
    found.sort_by_key(|(i, at, _)| (*i, *at == Found::Copy));
    let first = found.first().map(|(i, _, _)| *i);
    Ok(found
        .into_iter()
        .filter(|(i, at, _)| *at == Found::Check || Some(*i) == first)
        .map(|(_, _, p)| p)
        .collect())
}

/// What the captured copy `name` in `parent` owes once copied: a passing attempt's schema'd file
/// must be admitted by its schema, a failing attempt's path must have changed since the snapshot.
fn after_copy(
    decl: &FileDecl,
    mode: Mode<'_>,
    parent: BorrowedFd<'_>,
    name: &OsStr,
) -> io::Result<Option<FileProblem>> {
    let captured = || -> io::Result<File> {
        let flags = rfs::OFlags::RDONLY | rfs::OFlags::NOFOLLOW | rfs::OFlags::CLOEXEC;
        Ok(File::from(rfs::openat(
            parent,
            name,
            flags,
            FsMode::empty(),
        )?))
    };
    match mode {
        Mode::Passing => match &decl.schema {
            Some(schema) => validate(&mut captured()?, schema),
            None => Ok(None),
        },
        Mode::Failing(before) => match before.held.get(&decl.path).unwrap_or(&Held::Absent) {
            Held::Content(old) if digest(&mut captured()?)? == *old => {
                Ok(Some(FileProblem::Unchanged))
            }
            _ => Ok(None),
        },
    }
}

/// Parse the captured copy as JSON and validate it (draft 2020-12). Messages mask the value:
/// a file written by a steered agent must not leak through the note.
fn validate(copy: &mut File, schema: &serde_json::Value) -> io::Result<Option<FileProblem>> {
    let mut text = Vec::new();
    copy.read_to_end(&mut text)?;
    let value: serde_json::Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(e) => {
            return Ok(Some(FileProblem::NotJson {
                line: e.line(),
                column: e.column(),
            }))
        }
    };
    let validator = match jsonschema::draft202012::new(schema) {
        Ok(v) => v,
        Err(e) => return Ok(Some(FileProblem::SchemaUnusable(e.to_string()))),
    };
    let errors: Vec<(String, String)> = validator
        .iter_errors(&value)
        .take(SCHEMA_ERRORS_SHOWN)
        .map(|e| (e.instance_path.as_str().to_string(), masked_message(&e)))
        .collect();
    Ok((!errors.is_empty()).then_some(FileProblem::SchemaMismatch(errors)))
}

/// The error's message with no part of the instance in it. `masked()` replaces the value itself;
/// the kinds that would still list instance property names or decoded content get a fixed text.
fn masked_message(e: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as K;
    match &e.kind {
        K::AdditionalProperties { .. } => "additional properties are not allowed".into(),
        K::UnevaluatedProperties { .. } => "unevaluated properties are not allowed".into(),
        K::PropertyNames { .. } => "a property name is not admitted by propertyNames".into(),
        K::FromUtf8 { .. } => "decoded content is not UTF-8".into(),
        _ => e.masked().to_string(),
    }
}

/// Remove the set published as `dir_name`, if any: a failing capture, or a task that skipped,
/// transport-failed or was never dispatched, must leave none behind (RFC-0002:C-SETTLED-JOIN).
/// Returns whether a set was removed.
pub fn remove_set(
    files_dir: &Path,
    dir_name: &str,
    budget: &FilesBudget,
) -> Result<bool, FilesError> {
    if dir_name.len() > NAME_MAX {
        // No such set can ever have been published.
        return Ok(false);
    }
    let ctx = || format!("removing set `{dir_name}` from {}", files_dir.display());
    let files = match open_dir(files_dir) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(false),
        Err(e) => return Err(FilesError::io(ctx(), e)),
    };
    let present = rfs::statat(&files, dir_name, rfs::AtFlags::SYMLINK_NOFOLLOW).is_ok();
    let freed = remove_tree_at(files.as_fd(), OsStr::new(dir_name))
        .map_err(|e| FilesError::io(ctx(), e))?;
    budget.release(freed);
    Ok(present)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::confine::test_walks;
    use crate::files::escape::dir_name;
    use crate::files::testkit::{decls, mkfifo, mode, Scene};
    use crate::files::{DIR_MODE, FILE_MODE};
    use serde_json::json;
    use std::os::unix::fs::symlink;

    fn req<'a>(s: &'a Scene, d: &'a [FileDecl], name: &'a str) -> CaptureRequest<'a> {
        CaptureRequest {
            workspace: &s.ws,
            decls: d,
            files_dir: &s.files,
            dir_name: name,
            disposable: false,
        }
    }

    fn big() -> FilesBudget {
        FilesBudget::new(DEFAULT_MAX_FILES_BYTES)
    }

    fn refused(c: Captured) -> CaptureFailure {
        match c {
            Captured::Refused(f) => f,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn published(c: Captured) -> PublishedSet {
        match c {
            Captured::Published(p) => p,
            other => panic!("expected a published set, got {other:?}"),
        }
    }

    // RFC-0002:C-TASK-FILES: a passing attempt's declared files are captured byte for byte,
    // engine-owned and read-only, under files/<task>/ at their declared paths.
    #[test]
    fn passing_capture_publishes_every_declared_file_read_only() {
        let s = Scene::new();
        let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        s.write("out/report.bin", &binary);
        s.write("summary.txt", b"done\n");
        s.write("undeclared.txt", b"not mine");
        let d = decls(&["out/report.bin", "summary.txt"]);
        let budget = big();
        let set = published(capture(&req(&s, &d, "build"), Mode::Passing, &budget).unwrap());
        assert_eq!(set.dir, s.files.join("build"));
        assert_eq!(set.bytes, 70_005);
        assert_eq!(budget.used(), 70_005);
        assert_eq!(
            std::fs::read(set.dir.join("out/report.bin")).unwrap(),
            binary
        );
        assert_eq!(
            std::fs::read(set.dir.join("summary.txt")).unwrap(),
            b"done\n"
        );
        assert!(!set.dir.join("undeclared.txt").exists());
        assert_eq!(mode(&set.dir.join("summary.txt")), FILE_MODE);
        assert_eq!(mode(&set.dir.join("out/report.bin")), FILE_MODE);
        assert_eq!(mode(&set.dir.join("out")), DIR_MODE);
        assert_eq!(mode(&set.dir), DIR_MODE);
        // No temporary is left behind.
        let left: Vec<_> = std::fs::read_dir(&s.files).unwrap().collect();
        assert_eq!(left.len(), 1);
    }

    // RFC-0002:C-TASK-FILES: an absent declared file refuses the whole set, naming the file.
    #[test]
    fn absent_file_refuses_the_set_and_names_it() {
        let s = Scene::new();
        s.write("a.txt", b"a");
        let d = decls(&["a.txt", "missing.json"]);
        let budget = big();
        let f = refused(capture(&req(&s, &d, "t"), Mode::Passing, &budget).unwrap());
        assert_eq!(
            f.problems,
            vec![Problem {
                path: "missing.json".into(),
                problem: FileProblem::Absent
            }]
        );
        assert_eq!(
            f.note(),
            "declared file `missing.json` is absent; no file of the set was captured"
        );
        assert!(!s.files.join("t").exists());
        assert_eq!(budget.used(), 0);
    }

    // RFC-0002:C-SETTLED-JOIN: a refused capture removes the set an earlier attempt published.
    #[test]
    fn refusal_removes_an_earlier_set() {
        let s = Scene::new();
        s.write("a.txt", b"first");
        let d = decls(&["a.txt"]);
        let budget = big();
        published(capture(&req(&s, &d, "t"), Mode::Passing, &budget).unwrap());
        assert_eq!(budget.used(), 5);
        std::fs::remove_file(s.ws.join("a.txt")).unwrap();
        refused(capture(&req(&s, &d, "t"), Mode::Passing, &budget).unwrap());
        assert!(!s.files.join("t").exists());
        assert_eq!(budget.used(), 0);
    }

    // RFC-0002:C-REVISE-LOOP: a round's set replaces the last one (atomically, by exchange).
    #[test]
    fn a_later_set_replaces_the_earlier_one() {
        let s = Scene::new();
        s.write("a.txt", b"round one");
        s.write("only-in-one.txt", b"1");
        let budget = big();
        let d1 = decls(&["a.txt", "only-in-one.txt"]);
        published(capture(&req(&s, &d1, "t"), Mode::Passing, &budget).unwrap());
        s.write("a.txt", b"round two!");
        let d2 = decls(&["a.txt"]);
        let set = published(capture(&req(&s, &d2, "t"), Mode::Passing, &budget).unwrap());
        assert_eq!(std::fs::read(set.dir.join("a.txt")).unwrap(), b"round two!");
        assert!(!set.dir.join("only-in-one.txt").exists());
        assert_eq!(budget.used(), 10);
        assert_eq!(std::fs::read_dir(&s.files).unwrap().count(), 1);
    }

    // RFC-0002:C-TASK-FILES: hostile packs are refused at capture, whichever resolver runs.
    #[test]
    fn hostile_entries_are_refused_at_capture() {
        let s = Scene::new();
        symlink(s.outside.join("secret"), s.ws.join("link.txt")).unwrap();
        symlink(&s.outside, s.ws.join("dir")).unwrap();
        std::fs::hard_link(s.outside.join("secret"), s.ws.join("hard.txt")).unwrap();
        mkfifo(&s.ws.join("fifo"));
        let cases = [
            (
                "link.txt",
                FileProblem::Symlink {
                    component: "link.txt".into(),
                },
            ),
            (
                "dir/secret",
                FileProblem::Symlink {
                    component: "dir".into(),
                },
            ),
            ("hard.txt", FileProblem::HardLinked { links: 2 }),
            ("fifo", FileProblem::NotRegular("a FIFO")),
            (
                "../outside/secret",
                FileProblem::BadPath("traverses upward with `..`"),
            ),
            ("/etc/passwd", FileProblem::BadPath("is absolute")),
        ];
        for walk in test_walks() {
            for (path, want) in &cases {
                let d = decls(&[path]);
                let got = capture_with(&req(&s, &d, "t"), Mode::Passing, &big(), walk, &mut |_| {})
                    .unwrap();
                assert_eq!(
                    refused(got).problems[0].problem,
                    *want,
                    "{path} via {walk:?}"
                );
                assert!(!s.files.join("t").exists());
            }
        }
    }

    // RFC-0002:C-TASK-FILES: a file swapped for a link between the check and the copy is still
    // read from the checked descriptor, so the link's target never reaches the set.
    #[test]
    fn a_swap_after_the_check_cannot_redirect_the_copy() {
        for walk in test_walks() {
            let s = Scene::new();
            s.write("out.txt", b"what the task wrote");
            let d = decls(&["out.txt"]);
            let (ws, secret) = (s.ws.clone(), s.outside.join("secret"));
            let mut swapped = false;
            let mut swap = |path: &str| {
                assert_eq!(path, "out.txt");
                std::fs::remove_file(ws.join(path)).unwrap();
                symlink(&secret, ws.join(path)).unwrap();
                swapped = true;
            };
            let set = published(
                capture_with(&req(&s, &d, "t"), Mode::Passing, &big(), walk, &mut swap).unwrap(),
            );
            assert!(swapped);
            assert_eq!(
                std::fs::read(set.dir.join("out.txt")).unwrap(),
                b"what the task wrote"
            );
            // The workspace now holds the link, and its target is not what was captured.
            assert!(std::fs::symlink_metadata(s.ws.join("out.txt"))
                .unwrap()
                .file_type()
                .is_symlink());
        }
    }

    fn schema_decl(path: &str, schema: serde_json::Value) -> Vec<FileDecl> {
        vec![FileDecl {
            path: path.into(),
            schema: Some(schema),
        }]
    }

    // RFC-0002:C-TASK-FILES: a schema'd file is validated from the captured copy; the note names
    // the file and gives instance path and message, never the value.
    #[test]
    fn schema_mismatch_names_file_and_instance_path_not_value() {
        let s = Scene::new();
        s.write(
            "report.json",
            br#"{"count": "hunter2-SECRET", "items": [1, "x-SECRET"], "leak-SECRET-KEY": 1}"#,
        );
        let d = schema_decl(
            "report.json",
            json!({
                "type": "object",
                "properties": {
                    "count": {"type": "integer"},
                    "items": {"type": "array", "items": {"type": "integer"}}
                },
                "additionalProperties": false
            }),
        );
        let budget = big();
        let f = refused(capture(&req(&s, &d, "t"), Mode::Passing, &budget).unwrap());
        let note = f.note();
        assert!(note.contains("`report.json`"), "{note}");
        assert!(note.contains("at /count:"), "{note}");
        assert!(note.contains("at /items/1:"), "{note}");
        assert!(!note.contains("SECRET"), "the note leaks content: {note}");
        assert!(!s.files.join("t").exists());
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn schema_file_that_is_not_json_is_refused() {
        let s = Scene::new();
        s.write("r.json", b"{\n  \"a\": SECRET\n}");
        let d = schema_decl("r.json", json!({"type": "object"}));
        let f = refused(capture(&req(&s, &d, "t"), Mode::Passing, &big()).unwrap());
        assert_eq!(
            f.problems[0].problem,
            FileProblem::NotJson { line: 2, column: 8 }
        );
        assert!(!f.note().contains("SECRET"));
    }

    #[test]
    fn schema_admitted_file_is_published() {
        let s = Scene::new();
        s.write("r.json", br#"{"ok": true}"#);
        let d = schema_decl("r.json", json!({"type": "object", "required": ["ok"]}));
        published(capture(&req(&s, &d, "t"), Mode::Passing, &big()).unwrap());
    }

    // RFC-0002:C-SETTLED-JOIN: a failing attempt's unchanged declared path is treated as absent,
    // so the set is withheld and any earlier set removed.
    #[test]
    fn failing_attempt_that_did_not_change_a_path_publishes_nothing() {
        let s = Scene::new();
        s.write("left-by-earlier-task.txt", b"earlier evidence");
        s.write("fresh.txt", b"old");
        let d = decls(&["left-by-earlier-task.txt", "fresh.txt"]);
        let budget = big();
        // An earlier round's set exists and must go.
        published(capture(&req(&s, &d, "t"), Mode::Passing, &budget).unwrap());
        let before = Snapshot::take(&s.ws, &d).unwrap();
        s.write("fresh.txt", b"new content");
        let f = refused(capture(&req(&s, &d, "t"), Mode::Failing(&before), &budget).unwrap());
        assert_eq!(
            f.problems,
            vec![Problem {
                path: "left-by-earlier-task.txt".into(),
                problem: FileProblem::Unchanged
            }]
        );
        assert!(!s.files.join("t").exists());
        assert_eq!(budget.used(), 0);
    }

    // RFC-0002:C-SETTLED-JOIN: a rewrite with identical content is no change.
    #[test]
    fn failing_attempt_rewriting_identical_content_did_not_change_it() {
        let s = Scene::new();
        s.write("same.txt", b"same");
        let d = decls(&["same.txt"]);
        let before = Snapshot::take(&s.ws, &d).unwrap();
        std::fs::remove_file(s.ws.join("same.txt")).unwrap();
        s.write("same.txt", b"same");
        let f = refused(capture(&req(&s, &d, "t"), Mode::Failing(&before), &big()).unwrap());
        assert_eq!(f.problems[0].problem, FileProblem::Unchanged);
    }

    // RFC-0002:C-SETTLED-JOIN: a failing attempt's written files are captured, unvalidated.
    #[test]
    fn failing_attempt_that_wrote_its_paths_is_captured_without_validation() {
        let s = Scene::new();
        s.write("changed.json", b"old");
        let d = vec![
            FileDecl {
                path: "changed.json".into(),
                schema: Some(json!({"type": "object"})),
            },
            FileDecl {
                path: "created.txt".into(),
                schema: None,
            },
        ];
        let before = Snapshot::take(&s.ws, &d).unwrap();
        s.write("changed.json", b"not json at all");
        s.write("created.txt", b"new");
        let set = published(capture(&req(&s, &d, "t"), Mode::Failing(&before), &big()).unwrap());
        assert_eq!(
            std::fs::read(set.dir.join("changed.json")).unwrap(),
            b"not json at all"
        );
    }

    // RFC-0002:C-SETTLED-JOIN: a failing attempt's absent or non-regular path withholds the set.
    #[test]
    fn failing_attempt_with_an_absent_path_publishes_nothing() {
        let s = Scene::new();
        let d = decls(&["a.txt", "b.txt"]);
        let before = Snapshot::take(&s.ws, &d).unwrap();
        s.write("a.txt", b"a");
        let f = refused(capture(&req(&s, &d, "t"), Mode::Failing(&before), &big()).unwrap());
        assert_eq!(f.problems[0].problem, FileProblem::Absent);
        assert_eq!(f.problems[0].path, "b.txt");
    }

    // RFC-0002:C-TASK-FILES: the run-total bound fails the producer naming the bound and never
    // truncates: nothing of the set is published and its bytes are released.
    #[test]
    fn exceeding_the_bound_refuses_the_set_naming_the_bound() {
        let s = Scene::new();
        s.write("a.bin", &[1u8; 600]);
        s.write("b.bin", &[2u8; 600]);
        let budget = FilesBudget::new(1000);
        let d = decls(&["a.bin", "b.bin"]);
        let f = refused(capture(&req(&s, &d, "t"), Mode::Passing, &budget).unwrap());
        assert_eq!(f.over_bound(), Some(1000));
        assert_eq!(f.problems[0].path, "b.bin");
        let note = f.note();
        assert!(note.contains("bound of 1000 bytes"), "{note}");
        assert!(note.contains("--max-files-bytes") && note.contains(MAX_FILES_BYTES_ENV));
        assert_eq!(budget.used(), 0);
        assert!(!s.files.join("t").exists());
    }

    // RFC-0002:C-TASK-FILES: the bound is run-total, shared across producers.
    #[test]
    fn the_bound_is_shared_across_sets() {
        let s = Scene::new();
        s.write("a.bin", &[1u8; 600]);
        let budget = FilesBudget::new(1000);
        let d = decls(&["a.bin"]);
        published(capture(&req(&s, &d, "first"), Mode::Passing, &budget).unwrap());
        let f = refused(capture(&req(&s, &d, "second"), Mode::Passing, &budget).unwrap());
        assert_eq!(f.over_bound(), Some(1000));
        assert_eq!(budget.used(), 600);
        // Removing the first set frees its share.
        assert!(remove_set(&s.files, "first", &budget).unwrap());
        assert_eq!(budget.used(), 0);
        published(capture(&req(&s, &d, "second"), Mode::Passing, &budget).unwrap());
    }

    // RFC-0002:C-TASK-FILES: odd keys and keys that collide without escaping get distinct
    // one-component directories.
    #[test]
    fn odd_instance_keys_capture_into_distinct_directories() {
        let s = Scene::new();
        s.write("o.txt", b"x");
        let d = decls(&["o.txt"]);
        let keys = [
            "a/b",
            "a%2Fb",
            "a\\b",
            "a%5Cb",
            ".hidden",
            "%2Ehidden",
            "..",
            "100%",
        ];
        let budget = big();
        for (i, key) in keys.iter().enumerate() {
            s.write("o.txt", format!("{i}").as_bytes());
            let name = dir_name("shard", Some(key));
            let set = published(capture(&req(&s, &d, &name), Mode::Passing, &budget).unwrap());
            assert_eq!(set.dir.parent().unwrap(), s.files);
        }
        for (i, key) in keys.iter().enumerate() {
            let got = std::fs::read(s.files.join(dir_name("shard", Some(key))).join("o.txt"));
            assert_eq!(got.unwrap(), format!("{i}").as_bytes(), "key {key:?}");
        }
        assert_eq!(std::fs::read_dir(&s.files).unwrap().count(), keys.len());
    }

    // RFC-0002:C-TASK-FILES: a key too long for a directory name fails the producer, not the
    // engine; the longest that fits is captured.
    #[test]
    fn an_overlong_instance_key_is_a_problem_not_an_engine_error() {
        let s = Scene::new();
        s.write("o.txt", b"x");
        let d = decls(&["o.txt"]);
        let fits = dir_name("shard", Some(&"k".repeat(NAME_MAX - "shard[]".len())));
        assert_eq!(fits.len(), NAME_MAX);
        published(capture(&req(&s, &d, &fits), Mode::Passing, &big()).unwrap());
        let long = dir_name("shard", Some(&"/".repeat(100)));
        let f = refused(capture(&req(&s, &d, &long), Mode::Passing, &big()).unwrap());
        assert_eq!(
            f.problems[0].problem,
            FileProblem::SetNameTooLong { bytes: 307 }
        );
        assert!(f.note().contains("307 bytes, over the 255"), "{}", f.note());
        assert!(!remove_set(&s.files, &long, &big()).unwrap());
    }

    // RFC-0002:C-SETTLED-JOIN: a task with no declared files leaves no set behind.
    #[test]
    fn no_declarations_remove_any_earlier_set() {
        let s = Scene::new();
        s.write("a", b"a");
        let budget = big();
        published(capture(&req(&s, &decls(&["a"]), "t"), Mode::Passing, &budget).unwrap());
        let c = capture(&req(&s, &[], "t"), Mode::Passing, &budget).unwrap();
        assert_eq!(c, Captured::NothingDeclared);
        assert!(!s.files.join("t").exists());
        assert!(!remove_set(&s.files, "t", &budget).unwrap());
    }

    // RFC-0002:C-PLAYBOOK-RESUME: a resumed run counts the sets already published and drops
    // the temporaries a crash left.
    #[test]
    fn resumed_budget_counts_published_sets_and_sweeps_temporaries() {
        let s = Scene::new();
        s.write("a", &[0u8; 300]);
        published(capture(&req(&s, &decls(&["a"]), "t"), Mode::Passing, &big()).unwrap());
        std::fs::create_dir_all(s.files.join(".tmp-crashed/sub")).unwrap();
        std::fs::write(s.files.join(".tmp-crashed/sub/x"), [0u8; 50]).unwrap();
        let budget = FilesBudget::resume(1000, &s.files).unwrap();
        assert_eq!(budget.used(), 300);
        assert!(!s.files.join(".tmp-crashed").exists());
        assert_eq!(
            FilesBudget::resume(1, &s.ws.join("nope")).unwrap().used(),
            0
        );
    }

    // RFC-0002:C-TASK-FILES: concurrent captures cannot together squeeze past the bound.
    #[test]
    fn concurrent_charges_never_exceed_the_bound() {
        let budget = FilesBudget::new(10_000);
        let granted = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        if budget.try_charge(7) {
                            granted.fetch_add(7, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(budget.used(), granted.load(Ordering::Relaxed));
        assert!(budget.used() <= 10_000 && budget.used() > 10_000 - 7);
    }

    // RFC-0002:C-SETTLED-JOIN: a path that held a link (or nothing) before and a regular file
    // now was written by the attempt.
    #[test]
    fn failing_attempt_replacing_a_link_with_a_file_changed_it() {
        let s = Scene::new();
        symlink(s.outside.join("secret"), s.ws.join("out.txt")).unwrap();
        let d = decls(&["out.txt"]);
        let before = Snapshot::take(&s.ws, &d).unwrap();
        std::fs::remove_file(s.ws.join("out.txt")).unwrap();
        s.write("out.txt", b"TOP-SECRET-OUTSIDE");
        let set = published(capture(&req(&s, &d, "t"), Mode::Failing(&before), &big()).unwrap());
        assert!(set.dir.join("out.txt").exists());
    }

    /// The request of an isolated task, whose root is removed once captured.
    fn disposable<'a>(s: &'a Scene, d: &'a [FileDecl], name: &'a str) -> CaptureRequest<'a> {
        CaptureRequest {
            disposable: true,
            ..req(s, d, name)
        }
    }

    fn inode(p: &Path) -> u64 {
        std::os::unix::fs::MetadataExt::ino(&std::fs::symlink_metadata(p).unwrap())
    }

    // RFC-0002:C-TASK-FILES: out of a disposable root the checked file itself becomes the
    // captured copy (moved, not copied), byte for byte and sealed like a copy.
    #[test]
    fn a_disposable_root_gives_up_its_files_by_rename() {
        // Written by a child process: a process forked by another test thread while this one
        // held a file open for writing would keep that descriptor until it execs, and the
        // lease (rightly) refuses a file someone holds open for writing.
        let write_apart = |s: &Scene, rel: &str, content: &str| {
            let path = s.ws.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let ok = std::process::Command::new("sh")
                .args(["-c", "printf '%s' \"$1\" > \"$2\"", "sh", content])
                .arg(&path)
                .status()
                .unwrap()
                .success();
            assert!(ok);
        };
        for walk in test_walks() {
            let s = Scene::new();
            write_apart(&s, "out/deep/a.bin", &"7".repeat(100_000));
            write_apart(&s, "b.txt", "bee");
            let was = (
                inode(&s.ws.join("out/deep/a.bin")),
                inode(&s.ws.join("b.txt")),
            );
            let d = decls(&["out/deep/a.bin", "b.txt"]);
            let budget = big();
            let captured = capture_with(
                &disposable(&s, &d, "t"),
                Mode::Passing,
                &budget,
                walk,
                &mut |_| {},
            );
            let set = published(captured.unwrap());
            assert_eq!(set.bytes, 100_003, "{walk:?}");
            assert_eq!(budget.used(), 100_003);
            let (a, b) = (set.dir.join("out/deep/a.bin"), set.dir.join("b.txt"));
            assert_eq!((inode(&a), inode(&b)), was, "{walk:?}: moved, not copied");
            assert_eq!(std::fs::read(&a).unwrap(), "7".repeat(100_000).into_bytes());
            assert_eq!(std::fs::read(&b).unwrap(), b"bee");
            assert_eq!((mode(&a), mode(&b)), (FILE_MODE, FILE_MODE));
            assert_eq!(mode(&set.dir.join("out/deep")), DIR_MODE);
            assert!(!s.ws.join("b.txt").exists());
        }
    }

    // RFC-0002:C-TASK-FILES: a file some process still holds open for writing (a process the
    // task left behind, say) is copied, so what it writes later never reaches the set.
    #[test]
    fn a_file_with_a_writer_left_behind_is_copied_not_moved() {
        use std::io::Write;
        let s = Scene::new();
        s.write("out.txt", b"final\n");
        let was = inode(&s.ws.join("out.txt"));
        let mut writer = std::fs::OpenOptions::new()
            .append(true)
            .open(s.ws.join("out.txt"))
            .unwrap();
        let d = decls(&["out.txt"]);
        let set = published(capture(&disposable(&s, &d, "t"), Mode::Passing, &big()).unwrap());
        let got = set.dir.join("out.txt");
        assert_ne!(inode(&got), was, "a file with a writer must not be adopted");
        writer.write_all(b"written after the capture\n").unwrap();
        assert_eq!(std::fs::read(&got).unwrap(), b"final\n");
        assert_eq!(mode(&got), FILE_MODE);
    }

    // RFC-0002:C-TASK-FILES: a file swapped for a link after the check is not adopted: the link
    // that the rename moved is dropped, the checked descriptor is copied, and the link's target
    // outside the root is neither read nor touched.
    #[test]
    fn a_swap_after_the_check_is_not_adopted() {
        for walk in test_walks() {
            let s = Scene::new();
            s.write("dir/out.txt", b"what the task wrote");
            let d = decls(&["dir/out.txt"]);
            let (ws, secret) = (s.ws.clone(), s.outside.join("secret"));
            let mut swap = |path: &str| {
                std::fs::remove_file(ws.join(path)).unwrap();
                symlink(&secret, ws.join(path)).unwrap();
            };
            let req = disposable(&s, &d, "t");
            let set =
                published(capture_with(&req, Mode::Passing, &big(), walk, &mut swap).unwrap());
            let got = set.dir.join("dir/out.txt");
            assert!(
                std::fs::symlink_metadata(&got).unwrap().is_file(),
                "{walk:?}"
            );
            assert_eq!(std::fs::read(&got).unwrap(), b"what the task wrote");
            assert_eq!(std::fs::read(&secret).unwrap(), b"TOP-SECRET-OUTSIDE");
        }
    }

    // RFC-0002:C-TASK-FILES: a directory on the way swapped for a link after the check cannot
    // steer the rename outside the root: the rename walks the directories confined again.
    #[test]
    fn a_directory_swapped_for_a_link_cannot_steer_the_rename() {
        for walk in test_walks() {
            let s = Scene::new();
            s.write("dir/secret", b"what the task wrote");
            let d = decls(&["dir/secret"]);
            let (ws, outside) = (s.ws.clone(), s.outside.clone());
            let mut swap = |_: &str| {
                std::fs::rename(ws.join("dir"), ws.join("moved")).unwrap();
                symlink(&outside, ws.join("dir")).unwrap();
            };
            let req = disposable(&s, &d, "t");
            let set =
                published(capture_with(&req, Mode::Passing, &big(), walk, &mut swap).unwrap());
            assert_eq!(
                std::fs::read(set.dir.join("dir/secret")).unwrap(),
                b"what the task wrote"
            );
            // The file outside the root stayed where it was.
            assert_eq!(
                std::fs::read(s.outside.join("secret")).unwrap(),
                b"TOP-SECRET-OUTSIDE",
                "{walk:?}"
            );
        }
    }

    // RFC-0002:C-TASK-FILES: an adopted file counts against the run-total bound like a copy.
    #[test]
    fn an_adopted_file_over_the_bound_refuses_the_set() {
        let s = Scene::new();
        s.write("big.bin", &[1u8; 4096]);
        let d = decls(&["big.bin"]);
        let budget = FilesBudget::new(4095);
        let f = refused(capture(&disposable(&s, &d, "t"), Mode::Passing, &budget).unwrap());
        assert_eq!(f.over_bound(), Some(4095));
        assert_eq!(budget.used(), 0);
        assert!(!s.files.join("t").exists());
    }

    #[test]
    fn sizes_parse_with_binary_units_and_the_flag_wins() {
        for (text, want) in [
            ("0", 0),
            ("1024", 1024),
            ("200M", 200 << 20),
            ("200MiB", 200 << 20),
            ("2g", 2 << 30),
            ("7 KB", 7 << 10),
            ("3B", 3),
            ("1T", 1 << 40),
        ] {
            assert_eq!(parse_size(text).unwrap(), want, "{text}");
        }
        for bad in ["", "M", "12X", "-1", "99999999999999999999", "20000000000T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(
            max_files_bytes(None, None).unwrap(),
            DEFAULT_MAX_FILES_BYTES
        );
        assert_eq!(max_files_bytes(None, Some("1K")).unwrap(), 1024);
        assert_eq!(max_files_bytes(Some("2K"), Some("1K")).unwrap(), 2048);
        assert!(max_files_bytes(Some("junk"), Some("1K")).is_err());
    }
}

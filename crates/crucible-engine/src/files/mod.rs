//! Declared files between tasks: the engine's security boundary on disk (RFC-0002:C-TASK-FILES,
//! with the file parts of C-SETTLED-JOIN, C-PLAYBOOK-LANE, C-PLAYBOOK-RESUME and C-REVISE-LOOP).
//!
//! - [`escape`]: the directory name of a producer's set (`node[<escaped key>]`).
//! - `confine`: opening a declared path by descriptor walk, never by resolving a string.
//! - [`capture`](mod@capture): the pre-attempt [`Snapshot`], capture into `runs/<id>/files/<dir>/` with atomic
//!   publication, schema validation, and the run-total [`FilesBudget`].
//! - `adopt`: capture by rename out of a disposable root, where that is as safe as a copy.
//! - [`stage`](mod@stage): which sets a task receives ([`plan_staging`]) and copying them
//!   read-only under `inputs/<dir>/` in its workspace ([`stage()`](stage::stage)).
//! - `tree` and `pool`: descriptor-relative tree operations, and the threads copies run on.
//!
//! The runner owns the decisions about status; this module reports what it found as a
//! [`CaptureFailure`] whose [`note`](CaptureFailure::note) goes into the task's note.

mod adopt;
pub mod capture;
mod confine;
pub mod escape;
mod pool;
pub mod stage;
mod tree;

use std::fmt;
use std::io;

pub use capture::{
    capture, capture_observed, max_files_bytes, parse_size, precheck, remove_set, CaptureFailure,
    CaptureRequest, Captured, FilesBudget, Mode, Problem, PublishedSet, Snapshot,
    DEFAULT_MAX_FILES_BYTES, MAX_FILES_BYTES_ENV, MAX_FILES_BYTES_FLAG,
};
pub use escape::{dir_name, escape_key};
pub use stage::{
    plan_staging, stage, unstage, Consumer, Producer, SettledGraph, StagedSet, StagingPlan,
    COMMIT_EXCLUDE, INPUTS_DIR,
};

/// Open `rel` below `root` for reading by the confined walk that captures declared files: no
/// link of any kind, a regular file with one link. For the engine's own answer files (asks).
pub fn open_in_root(root: &std::path::Path, rel: &str) -> Result<std::fs::File, FileProblem> {
    let dir = confine::open_dir(root).map_err(|e| FileProblem::Unreadable(e.to_string()))?;
    confine::open_confined(std::os::fd::AsFd::as_fd(&dir), rel, confine::Walk::Auto)
}

/// The longest file name Linux file systems take, in bytes; a set's directory name is one.
pub const NAME_MAX: usize = 255;

/// Mode of every captured or staged file: engine-owned, read-only to everyone.
pub const FILE_MODE: u32 = 0o444;
/// Mode of every captured or staged directory: listable, not writable.
pub const DIR_MODE: u32 = 0o555;

/// Why one declared path was not captured. Every variant describes the path, never its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileProblem {
    /// The declared path is not a plain relative path (the reason says which rule it breaks).
    BadPath(&'static str),
    Absent,
    /// A component (shown as the path up to and including it) is a symbolic link.
    Symlink {
        component: String,
    },
    /// Not a regular file: the kind it is instead.
    NotRegular(&'static str),
    /// A regular file with more than one link; a hard link may reach outside the workspace.
    HardLinked {
        links: u64,
    },
    /// The file could not be opened or read.
    Unreadable(String),
    /// A failing attempt's path whose content is what it held before the attempt started.
    Unchanged,
    /// A schema'd file whose captured copy is not JSON.
    NotJson {
        line: usize,
        column: usize,
    },
    /// The schema did not compile (the plan validator should have refused it).
    SchemaUnusable(String),
    /// The first few schema errors, each as (instance path, message without the value).
    SchemaMismatch(Vec<(String, String)>),
    /// Capturing this file would take the run past its captured-files bound.
    OverBound {
        limit: u64,
    },
    /// The set's directory name (an instance key escaped) is longer than a file name may be.
    SetNameTooLong {
        bytes: usize,
    },
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileProblem::BadPath(why) => write!(f, "is not a confined relative path: it {why}"),
            FileProblem::Absent => f.write_str("is absent"),
            FileProblem::Symlink { component } => {
                write!(f, "is reached through a symbolic link at `{component}`")
            }
            FileProblem::NotRegular(kind) => write!(f, "is {kind}, not a regular file"),
            FileProblem::HardLinked { links } => write!(
                f,
                "has {links} hard links; a file linked more than once is refused"
            ),
            FileProblem::Unreadable(e) => write!(f, "could not be read: {e}"),
            FileProblem::Unchanged => {
                f.write_str("was not written by this attempt (unchanged since it started)")
            }
            FileProblem::NotJson { line, column } => {
                write!(
                    f,
                    "is not JSON (syntax error at line {line}, column {column})"
                )
            }
            FileProblem::SchemaUnusable(e) => write!(f, "has a schema that does not compile: {e}"),
            FileProblem::SchemaMismatch(errors) => {
                f.write_str("does not match its schema: ")?;
                for (i, (at, msg)) in errors.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    let at = if at.is_empty() { "(root)" } else { at };
                    write!(f, "at {at}: {msg}")?;
                }
                Ok(())
            }
            FileProblem::SetNameTooLong { bytes } => write!(
                f,
                "cannot be captured: the set's directory name is {bytes} bytes, over the \
                 {NAME_MAX} a file name may have"
            ),
            FileProblem::OverBound { limit } => write!(
                f,
                "would take the run's captured files past their bound of {limit} bytes \
                 (--{MAX_FILES_BYTES_FLAG} or {MAX_FILES_BYTES_ENV})"
            ),
        }
    }
}

/// An engine-side failure: the files area or a workspace could not be written or read. Unlike a
/// [`FileProblem`], it is not the task's doing.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {kind}")]
pub struct FilesError {
    /// What the engine was doing, naming the path involved.
    pub context: String,
    pub kind: FilesErrorKind,
}

#[derive(Debug, thiserror::Error)]
pub enum FilesErrorKind {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("not a byte size ({0})")]
    BadSize(String),
    /// One producer's set could not be staged: the consumer settles blocked with reason
    /// `staging_refused`, naming `task`.
    #[error("the set of `{task}` could not be staged: {source}")]
    Staging { task: String, source: io::Error },
}

impl FilesError {
    pub(crate) fn io(context: impl Into<String>, err: impl Into<io::Error>) -> FilesError {
        FilesError {
            context: context.into(),
            kind: FilesErrorKind::Io(err.into()),
        }
    }
}

/// Fixtures shared by the unit tests of this module tree.
#[cfg(test)]
pub(crate) mod testkit {
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    use crucible_plan::FileDecl;

    /// A workspace, a directory outside it, and a run's files area, all under one temp dir.
    pub struct Scene {
        pub _tmp: tempfile::TempDir,
        pub ws: PathBuf,
        pub outside: PathBuf,
        pub files: PathBuf,
    }

    impl Scene {
        pub fn new() -> Scene {
            let tmp = tempfile::tempdir().unwrap();
            let ws = tmp.path().join("ws");
            let outside = tmp.path().join("outside");
            let files = tmp.path().join("run/files");
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::create_dir_all(&outside).unwrap();
            std::fs::write(outside.join("secret"), b"TOP-SECRET-OUTSIDE").unwrap();
            Scene {
                _tmp: tmp,
                ws,
                outside,
                files,
            }
        }

        /// Write `rel` in the workspace, creating its directories.
        pub fn write(&self, rel: &str, content: &[u8]) {
            let p = self.ws.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
    }

    pub fn decls(paths: &[&str]) -> Vec<FileDecl> {
        paths
            .iter()
            .map(|p| FileDecl {
                path: p.to_string(),
                schema: None,
            })
            .collect()
    }

    pub fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    /// Create a FIFO at `p`.
    pub fn mkfifo(p: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
    }
}

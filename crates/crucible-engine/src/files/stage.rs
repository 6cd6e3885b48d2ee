//! Staging captured sets into a task's workspace before dispatch (RFC-0002:C-TASK-FILES,
//! RFC-0002:C-SETTLED-JOIN, RFC-0002:C-PLAYBOOK-LANE, RFC-0002:C-REVISE-LOOP).
//!
//! [`plan_staging`] decides which sets a task receives; [`stage`] makes the workspace's
//! `inputs/` hold exactly those sets, each copied whole and read-only under its producer's
//! directory name, so a set meant for one consumer is never left for the next one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode};
use rustix::io::Errno;

use crucible_plan::{Join, Status};

use super::confine::open_dir;
use super::escape::dir_name;
use super::tree::{copy_tree_at, entries, open_subdir, publish_at, remove_tree_at, temp_name};
use super::{FilesError, DIR_MODE};

/// The workspace directory staged sets live under.
pub const INPUTS_DIR: &str = "inputs";

/// The gitignore-style rule (for `.git/info/exclude`) that keeps staged inputs out of git
/// memory commits: staged files are another task's output, not this task's change.
pub const COMMIT_EXCLUDE: &str = "/inputs/";

/// One settled producer of a node: the task itself, or one instance of a mapped task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Producer {
    /// The instance's raw key; `None` for an unmapped task.
    pub key: Option<String>,
    pub status: Status,
    /// The complete set published for it in this run, if any.
    pub set: Option<PathBuf>,
}

/// What the runner knows about the graph as it stands when a task is about to dispatch.
pub trait SettledGraph {
    /// The task's declared dependencies, optional ones included.
    fn depends_on(&self, task: &str) -> Vec<String>;
    /// The settled producers of a task: one for an unmapped task, one per instance for a mapped
    /// one (the last round for a revise body task), none while it is unsettled.
    fn producers(&self, task: &str) -> Vec<Producer>;
}

/// The task about to dispatch.
#[derive(Clone, Copy, Debug)]
pub struct Consumer<'a> {
    pub name: &'a str,
    pub join: Join,
    /// An epilogue task receives every settled main-graph task's set.
    pub epilogue: bool,
    /// The settled main-graph tasks; read only for an epilogue task.
    pub main_graph: &'a [String],
    /// The reviewer, when a revise target runs its second or later round: the reviewer's
    /// failing round's set is staged under the reviewer's name (RFC-0002:C-REVISE-LOOP).
    pub reviewer: Option<&'a str>,
}

/// One set to stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedSet {
    pub task: String,
    pub key: Option<String>,
    /// Its directory under `inputs/`.
    pub dir_name: String,
    /// The published set it is copied from.
    pub source: PathBuf,
}

/// The sets a consumer receives, in a stable order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StagingPlan {
    pub sets: Vec<StagedSet>,
}

impl StagingPlan {
    /// The staged-file flag of one producer (an instance when `key` is given).
    pub fn staged(&self, task: &str, key: Option<&str>) -> bool {
        self.sets
            .iter()
            .any(|s| s.task == task && s.key.as_deref() == key)
    }

    /// The staged-file flag of a task's entry: whether any set of it (any instance's, for a
    /// mapped task) was staged.
    pub fn task_staged(&self, task: &str) -> bool {
        self.sets.iter().any(|s| s.task == task)
    }
}

/// Decide which sets `consumer` receives:
/// - every passing ancestor's, transitively, not only direct dependencies' (C-TASK-FILES);
/// - a failed direct dependency's only into a `join = "settled"` consumer (C-SETTLED-JOIN);
/// - for an epilogue task, every settled main-graph task's, passing or failing (C-PLAYBOOK-LANE);
/// - for a revise target past its first round, the reviewer's failing round's (C-REVISE-LOOP).
///
/// Status is read per producer, so a passing instance of a mapped task is a passing producer.
/// Only a producer that settled passing or failing can have a set; any other status stages
/// nothing even if a stale set were offered.
pub fn plan_staging(consumer: &Consumer<'_>, graph: &impl SettledGraph) -> StagingPlan {
    let mut chosen: BTreeMap<String, StagedSet> = BTreeMap::new();
    let mut take = |task: &str, allow_fail: bool| {
        for p in graph.producers(task) {
            let admitted = p.status == Status::Pass || (allow_fail && p.status == Status::Fail);
            if let (true, Some(source)) = (admitted, p.set) {
                let dir = dir_name(task, p.key.as_deref());
                chosen.insert(
                    dir.clone(),
                    StagedSet {
                        task: task.to_string(),
                        key: p.key,
                        dir_name: dir,
                        source,
                    },
                );
            }
        }
    };

    let direct = graph.depends_on(consumer.name);
    // Breadth-first over dependencies; `seen` makes a diamond visit each ancestor once.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut queue: VecDeque<String> = direct.iter().cloned().collect();
    while let Some(task) = queue.pop_front() {
        if !seen.insert(task.clone()) {
            continue;
        }
        let is_direct = direct.contains(&task);
        take(&task, is_direct && consumer.join == Join::Settled);
        queue.extend(graph.depends_on(&task));
    }
    if consumer.epilogue {
        for task in consumer.main_graph {
            take(task, true);
        }
    }
    if let Some(reviewer) = consumer.reviewer {
        take(reviewer, true);
    }
    StagingPlan {
        sets: chosen.into_values().collect(),
    }
}

/// Make `<workspace>/inputs/` hold exactly `sets`: each copied whole and read-only under its
/// directory name (a temporary copy renamed into place, so never a partial set), and any other
/// entry, a stale set meant for an earlier task included, removed.
///
/// `inputs/` is opened without following links: a link a task planted there is removed, not
/// written through.
pub fn stage(workspace: &Path, sets: &[StagedSet]) -> Result<(), FilesError> {
    let ctx = || format!("staging inputs into {}", workspace.display());
    let io = |e| FilesError::io(ctx(), e);
    let root = open_dir(workspace).map_err(io)?;
    let inputs_name = OsStr::new(INPUTS_DIR);
    match rfs::statat(&root, INPUTS_DIR, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {}
        Ok(_) => {
            remove_tree_at(root.as_fd(), inputs_name).map_err(|e| FilesError::io(ctx(), e))?;
        }
        Err(Errno::NOENT) => {}
        Err(e) => return Err(io(e)),
    }
    match rfs::mkdirat(&root, INPUTS_DIR, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(io(e)),
    }
    let inputs = open_subdir(root.as_fd(), inputs_name).map_err(|e| FilesError::io(ctx(), e))?;
    rfs::fchmod(&inputs, Mode::from_raw_mode(0o755)).map_err(io)?;

    let wanted: BTreeSet<&OsStr> = sets.iter().map(|s| OsStr::new(&s.dir_name)).collect();
    for name in entries(inputs.as_fd()).map_err(|e| FilesError::io(ctx(), e))? {
        if !wanted.contains(name.as_os_str()) {
            remove_tree_at(inputs.as_fd(), &name).map_err(|e| FilesError::io(ctx(), e))?;
        }
    }
    for set in sets {
        let set_ctx = || {
            format!(
                "staging set `{}` from {} into {}",
                set.dir_name,
                set.source.display(),
                workspace.display()
            )
        };
        let tmp = temp_name();
        rfs::mkdirat(&inputs, tmp.as_os_str(), Mode::from_raw_mode(0o700))
            .map_err(|e| FilesError::io(set_ctx(), e))?;
        let copied = (|| {
            let src = open_dir(&set.source)?;
            let dst = open_subdir(inputs.as_fd(), &tmp)?;
            copy_tree_at(src.as_fd(), dst.as_fd())?;
            rfs::fchmod(&dst, Mode::from_raw_mode(DIR_MODE))?;
            std::io::Result::Ok(())
        })();
        if let Err(e) = copied {
            let _ = remove_tree_at(inputs.as_fd(), &tmp);
            return Err(FilesError::io(set_ctx(), e));
        }
        if publish_at(inputs.as_fd(), &tmp, OsStr::new(&set.dir_name))
            .map_err(|e| FilesError::io(set_ctx(), e))?
        {
            remove_tree_at(inputs.as_fd(), &tmp).map_err(|e| FilesError::io(set_ctx(), e))?;
        }
    }
    rfs::fchmod(&inputs, Mode::from_raw_mode(DIR_MODE)).map_err(io)?;
    Ok(())
}

/// Remove `<workspace>/inputs/` and everything staged in it (sealed directories included), as
/// the runner must before discarding or committing a task's workspace changes.
pub fn unstage(workspace: &Path) -> Result<(), FilesError> {
    let ctx = || format!("removing staged inputs from {}", workspace.display());
    let root = open_dir(workspace).map_err(|e| FilesError::io(ctx(), e))?;
    remove_tree_at(root.as_fd(), OsStr::new(INPUTS_DIR)).map_err(|e| FilesError::io(ctx(), e))?;
    Ok(())
}

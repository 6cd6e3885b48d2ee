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
use super::{FilesError, FilesErrorKind, DIR_MODE};

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
/// written through. A set that cannot be copied (missing, or tampered with so that it holds
/// something other than files and directories) fails with [`FilesErrorKind::Staging`] naming
/// its producer, and no partial copy of it is left.
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
        let refused = |source: std::io::Error| FilesError {
            context: format!(
                "staging set `{}` from {} into {}",
                set.dir_name,
                set.source.display(),
                workspace.display()
            ),
            kind: FilesErrorKind::Staging {
                task: set.task.clone(),
                source,
            },
        };
        let tmp = temp_name();
        rfs::mkdirat(&inputs, tmp.as_os_str(), Mode::from_raw_mode(0o700))
            .map_err(|e| refused(e.into()))?;
        let copied = (|| {
            let src = open_dir(&set.source)?;
            let dst = open_subdir(inputs.as_fd(), &tmp)?;
            copy_tree_at(src.as_fd(), dst.as_fd())
        })();
        if let Err(e) = copied {
            // Never leave a partial copy behind; the copy error is the one to report.
            let _ = remove_tree_at(inputs.as_fd(), &tmp);
            return Err(refused(e));
        }
        if publish_at(inputs.as_fd(), &tmp, OsStr::new(&set.dir_name)).map_err(refused)? {
            remove_tree_at(inputs.as_fd(), &tmp).map_err(refused)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::capture::{capture, CaptureRequest, Captured, FilesBudget, Mode};
    use crate::files::testkit::{decls, mkfifo, mode, Scene};
    use crate::files::FILE_MODE;
    use std::collections::HashMap;
    use std::os::unix::fs::symlink;

    /// A settled graph the runner would describe: dependencies and producers per task.
    #[derive(Default)]
    struct Graph {
        deps: HashMap<&'static str, Vec<&'static str>>,
        prods: HashMap<&'static str, Vec<Producer>>,
    }

    impl Graph {
        fn task(mut self, name: &'static str, deps: &[&'static str], status: Status) -> Graph {
            self.deps.insert(name, deps.to_vec());
            self.prods.insert(name, vec![prod(None, status, name)]);
            self
        }
        fn mapped(
            mut self,
            name: &'static str,
            deps: &[&'static str],
            inst: Vec<Producer>,
        ) -> Graph {
            self.deps.insert(name, deps.to_vec());
            self.prods.insert(name, inst);
            self
        }
    }

    fn prod(key: Option<&str>, status: Status, src: &str) -> Producer {
        Producer {
            key: key.map(str::to_string),
            status,
            set: Some(PathBuf::from(format!("/files/{src}"))),
        }
    }

    impl SettledGraph for Graph {
        fn depends_on(&self, task: &str) -> Vec<String> {
            self.deps
                .get(task)
                .map(|d| d.iter().map(|s| s.to_string()).collect())
                .unwrap_or_default()
        }
        fn producers(&self, task: &str) -> Vec<Producer> {
            self.prods.get(task).cloned().unwrap_or_default()
        }
    }

    fn consumer(name: &str, join: Join) -> Consumer<'_> {
        Consumer {
            name,
            join,
            epilogue: false,
            main_graph: &[],
            reviewer: None,
        }
    }

    fn dirs(plan: &StagingPlan) -> Vec<&str> {
        plan.sets.iter().map(|s| s.dir_name.as_str()).collect()
    }

    // RFC-0002:C-TASK-FILES: every passing ancestor, not only direct dependencies.
    #[test]
    fn passing_ancestors_are_staged_transitively() {
        let g = Graph::default()
            .task("fetch", &[], Status::Pass)
            .task("build", &["fetch"], Status::Pass)
            .task("lint", &[], Status::Pass)
            .task("test", &["build"], Status::Pass);
        let plan = plan_staging(&consumer("test", Join::All), &g);
        assert_eq!(dirs(&plan), ["build", "fetch"]);
        assert!(plan.staged("fetch", None) && !plan.task_staged("lint"));
    }

    // RFC-0002:C-SETTLED-JOIN: a failed direct dependency's set only into a settled join.
    #[test]
    fn a_failed_set_goes_only_to_a_settled_join_on_it() {
        let g = Graph::default()
            .task("root", &[], Status::Fail)
            .task("mid", &["root"], Status::Fail)
            .task("judge", &["mid"], Status::Pass);
        assert_eq!(
            dirs(&plan_staging(&consumer("judge", Join::Settled), &g)),
            ["mid"]
        );
        assert!(plan_staging(&consumer("judge", Join::All), &g)
            .sets
            .is_empty());
        assert!(plan_staging(&consumer("judge", Join::Passed), &g)
            .sets
            .is_empty());
    }

    // RFC-0002:C-SETTLED-JOIN: nothing from a skipped, transport-failed or blocked producer,
    // even if a stale set were offered.
    #[test]
    fn only_passing_or_failing_producers_have_sets() {
        let g = Graph::default()
            .task("s", &[], Status::Skipped)
            .task("t", &[], Status::Transport)
            .task("b", &[], Status::Blocked)
            .task("c", &["s", "t", "b"], Status::Pass);
        assert!(plan_staging(&consumer("c", Join::Settled), &g)
            .sets
            .is_empty());
        let epi = Consumer {
            epilogue: true,
            main_graph: &["s".into(), "t".into(), "b".into()],
            ..consumer("notify", Join::All)
        };
        assert!(plan_staging(&epi, &g).sets.is_empty());
    }

    // RFC-0002:C-PLAYBOOK-LANE: every settled main-graph task's set, passed or failed, goes to
    // every epilogue task; the epilogue's own ancestors follow the ordinary rule.
    #[test]
    fn epilogue_gets_every_settled_main_graph_set() {
        let g = Graph::default()
            .task("ok", &[], Status::Pass)
            .task("broke", &["ok"], Status::Fail)
            .task("collect", &[], Status::Pass)
            .task("notify", &["collect"], Status::Pass);
        let main = ["ok".to_string(), "broke".to_string()];
        let epi = Consumer {
            epilogue: true,
            main_graph: &main,
            ..consumer("notify", Join::All)
        };
        let plan = plan_staging(&epi, &g);
        assert_eq!(dirs(&plan), ["broke", "collect", "ok"]);
    }

    // RFC-0002:C-SETTLED-JOIN: instances are staged under their own escaped names, with a flag
    // per instance; the node's flag says whether any was staged.
    #[test]
    fn instances_are_staged_per_instance_under_escaped_names() {
        let g = Graph::default()
            .mapped(
                "shard",
                &[],
                vec![
                    prod(Some("eu/west"), Status::Pass, "a"),
                    prod(Some(".x"), Status::Fail, "b"),
                    prod(Some("50%"), Status::Pass, "c"),
                ],
            )
            .task("merge", &["shard"], Status::Pass);
        let all = plan_staging(&consumer("merge", Join::All), &g);
        assert_eq!(dirs(&all), ["shard[50%25]", "shard[eu%2Fwest]"]);
        assert!(all.staged("shard", Some("eu/west")));
        assert!(!all.staged("shard", Some(".x")));
        assert!(all.task_staged("shard"));
        let settled = plan_staging(&consumer("merge", Join::Settled), &g);
        assert!(settled.staged("shard", Some(".x")));
        assert_eq!(settled.sets.len(), 3);
    }

    // RFC-0002:C-REVISE-LOOP: from round two a target gets the reviewer's failing round's set.
    #[test]
    fn revise_target_gets_the_reviewers_failing_set() {
        let g = Graph::default().task("draft", &[], Status::Pass).task(
            "review",
            &["draft"],
            Status::Fail,
        );
        let c = Consumer {
            reviewer: Some("review"),
            ..consumer("draft", Join::All)
        };
        let plan = plan_staging(&c, &g);
        assert_eq!(dirs(&plan), ["review"]);
        assert!(plan.task_staged("review"));
    }

    fn publish(s: &Scene, name: &str, files: &[(&str, &[u8])], budget: &FilesBudget) -> PathBuf {
        for (p, c) in files {
            s.write(p, c);
        }
        let paths: Vec<&str> = files.iter().map(|(p, _)| *p).collect();
        let d = decls(&paths);
        let req = CaptureRequest {
            workspace: &s.ws,
            decls: &d,
            files_dir: &s.files,
            dir_name: name,
            disposable: false,
        };
        match capture(&req, Mode::Passing, budget).unwrap() {
            Captured::Published(p) => p.dir,
            other => panic!("{other:?}"),
        }
    }

    fn set(name: &str, source: PathBuf) -> StagedSet {
        StagedSet {
            task: name.into(),
            key: None,
            dir_name: name.into(),
            source,
        }
    }

    // RFC-0002:C-TASK-FILES: staged sets are complete, namespaced and read-only, and inputs/
    // holds exactly the consumer's sets (a stale set for an earlier consumer is gone).
    #[test]
    fn stage_copies_sets_read_only_and_drops_stale_ones() {
        let s = Scene::new();
        let budget = FilesBudget::new(1 << 20);
        let a = publish(&s, "a", &[("out/x.txt", b"from a"), ("y", b"ya")], &budget);
        let b = publish(&s, "b", &[("out/x.txt", b"from b")], &budget);
        let consumer_ws = s.ws.join("consumer");
        std::fs::create_dir(&consumer_ws).unwrap();

        stage(&consumer_ws, &[set("a", a.clone()), set("b", b.clone())]).unwrap();
        let inputs = consumer_ws.join(INPUTS_DIR);
        assert_eq!(
            std::fs::read(inputs.join("a/out/x.txt")).unwrap(),
            b"from a"
        );
        assert_eq!(
            std::fs::read(inputs.join("b/out/x.txt")).unwrap(),
            b"from b"
        );
        assert_eq!(mode(&inputs.join("a/y")), FILE_MODE);
        assert_eq!(mode(&inputs.join("a/out")), DIR_MODE);
        assert_eq!(mode(&inputs.join("a")), DIR_MODE);
        assert_eq!(mode(&inputs), DIR_MODE);

        // The next consumer gets only b; a's set, and anything else in inputs/, goes.
        stage(&consumer_ws, &[set("b", b)]).unwrap();
        let names: Vec<_> = std::fs::read_dir(&inputs)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["b"]);
        // The engine's copy is untouched by staging.
        assert_eq!(std::fs::read(a.join("out/x.txt")).unwrap(), b"from a");

        unstage(&consumer_ws).unwrap();
        assert!(!inputs.exists());
        unstage(&consumer_ws).unwrap();
    }

    // RFC-0002:C-SETTLED-JOIN: a set that cannot be copied whole is refused naming its producer
    // (the runner blocks the consumer with `staging_refused`), and no partial copy remains.
    #[test]
    fn an_unstageable_set_is_refused_naming_its_producer() {
        let s = Scene::new();
        let budget = FilesBudget::new(1 << 20);
        let a = publish(&s, "a", &[("x", b"payload")], &budget);
        let ws = s.ws.join("consumer");
        std::fs::create_dir(&ws).unwrap();
        // A FIFO slipped into the engine's copy is tampering, not a file to stage.
        let tampered = s.files.join("tampered");
        std::fs::create_dir(&tampered).unwrap();
        std::fs::write(tampered.join("ok"), b"ok").unwrap();
        mkfifo(&tampered.join("zz-fifo"));
        let mut bad = set("tampered", tampered);
        bad.task = "producer".into();
        for broken in [bad, set("gone", s.files.join("gone"))] {
            let err = stage(&ws, &[set("a", a.clone()), broken.clone()]).unwrap_err();
            match err.kind {
                FilesErrorKind::Staging { ref task, .. } => assert_eq!(task, &broken.task),
                ref other => panic!("{other:?}"),
            }
            let names: Vec<_> = std::fs::read_dir(ws.join(INPUTS_DIR))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            assert_eq!(names, ["a"], "no partial copy of {}", broken.dir_name);
        }
    }

    // A task that replaced inputs/ or a set directory with a link cannot make staging write
    // (or remove) through it.
    #[test]
    fn stage_never_writes_through_a_planted_link() {
        let s = Scene::new();
        let budget = FilesBudget::new(1 << 20);
        let a = publish(&s, "a", &[("x", b"payload")], &budget);
        let ws = s.ws.join("consumer");
        std::fs::create_dir(&ws).unwrap();
        symlink(&s.outside, ws.join(INPUTS_DIR)).unwrap();
        stage(&ws, &[set("a", a.clone())]).unwrap();
        assert!(std::fs::symlink_metadata(ws.join(INPUTS_DIR))
            .unwrap()
            .is_dir());
        assert_eq!(std::fs::read(ws.join("inputs/a/x")).unwrap(), b"payload");
        assert!(s.outside.join("secret").exists());
        assert!(!s.outside.join("a").exists());

        // Now a link where the set directory goes, pointing outside.
        unstage(&ws).unwrap();
        std::fs::create_dir(ws.join(INPUTS_DIR)).unwrap();
        symlink(&s.outside, ws.join("inputs/a")).unwrap();
        stage(&ws, &[set("a", a)]).unwrap();
        assert!(std::fs::symlink_metadata(ws.join("inputs/a"))
            .unwrap()
            .is_dir());
        assert_eq!(
            std::fs::read(s.outside.join("secret")).unwrap(),
            b"TOP-SECRET-OUTSIDE"
        );
        assert_eq!(std::fs::read_dir(&s.outside).unwrap().count(), 1);
    }

    // RFC-0002:C-SETTLED-JOIN: capture is not commit; staged inputs never enter git memory
    // when the runner installs COMMIT_EXCLUDE.
    #[test]
    fn commit_exclude_keeps_staged_inputs_out_of_git() {
        let s = Scene::new();
        let budget = FilesBudget::new(1 << 20);
        let a = publish(&s, "a", &[("deep/x", b"payload")], &budget);
        let ws = s.ws.join("repo");
        let repo = git2::Repository::init(&ws).unwrap();
        std::fs::write(ws.join(".git/info/exclude"), format!("{COMMIT_EXCLUDE}\n")).unwrap();
        stage(&ws, &[set("a", a)]).unwrap();
        std::fs::write(ws.join("work.txt"), b"the task's own change").unwrap();
        let mut opts = git2::StatusOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(true);
        let statuses = repo.statuses(Some(&mut opts)).unwrap();
        let paths: Vec<_> = statuses
            .iter()
            .map(|e| e.path().unwrap().to_string())
            .collect();
        assert_eq!(paths, ["work.txt"]);
    }
}

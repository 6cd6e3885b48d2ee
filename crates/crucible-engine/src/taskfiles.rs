//! The runner's side of declared files (RFC-0002:C-TASK-FILES, the file parts of
//! C-SETTLED-JOIN and C-PLAYBOOK-LANE): which sets a task is staged with, staging and the
//! pre-attempt snapshot, capture once an attempt is graded, and removal of a set no row vouches
//! for. The confinement, copying and publication themselves are [`crate::files`]'.

use crate::files::{
    self, plan_staging, CaptureRequest, Captured, Consumer, FilesBudget, FilesErrorKind, Mode,
    Producer, SettledGraph, Snapshot, StagedSet, StagingPlan,
};
use crate::graph::fanout::instance_name;
use crate::graph::Entry;
use crate::taskio::Graded;
use crucible_plan::wire::TaskResult;
use crucible_plan::{Stage, Status, Task};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A hidden test hook, honoured only by debug builds: a shell command run in the attempt's root
/// between the check of each declared file and the copy from it, with the declared path in
/// `CRUCIBLE_CAPTURE_PATH`. It lets an end-to-end test swap a file for a link at exactly that
/// instant; a release build never reads it.
pub const CAPTURE_HOOK_ENV: &str = "CRUCIBLE_TEST_CAPTURE_HOOK";

/// The run's declared-files state, shared by every attempt.
pub struct RunFiles {
    /// `runs/<id>/files`.
    pub dir: PathBuf,
    pub budget: FilesBudget,
    /// Task name → index, so staging walks ancestors without a scan per step.
    index: HashMap<String, usize>,
    /// Whether any task declares files; without one, there is never anything to stage.
    any: bool,
    hook: Option<String>,
    /// Tasks whose folded row says `files: true` but whose set did not survive an interruption:
    /// their consumers dispatch told that nothing was staged (RFC-0002:C-PLAYBOOK-RESUME).
    lost: HashSet<String>,
}

/// Why a task could not be staged: it settles blocked with `staging_refused` naming `task`.
#[derive(Clone, Debug)]
pub struct StagingRefused {
    /// The producer whose set could not be staged (`None` when the workspace itself failed).
    pub task: Option<String>,
    pub note: String,
}

/// What an attempt was prepared with: the snapshot its failing capture compares against, and
/// whether `inputs/` was made in its root.
pub struct Prepared {
    snapshot: Snapshot,
    staged: bool,
}

impl RunFiles {
    pub fn new(run_dir: &Path, tasks: &[Task], limit: u64) -> RunFiles {
        let hook = if cfg!(debug_assertions) {
            std::env::var(CAPTURE_HOOK_ENV).ok()
        } else {
            None
        };
        RunFiles {
            dir: run_dir.join("files"),
            budget: FilesBudget::new(limit),
            index: tasks
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.clone(), i))
                .collect(),
            any: tasks.iter().any(|t| !t.emits_files.is_empty()),
            hook,
            lost: HashSet::new(),
        }
    }

    /// RFC-0002:C-PLAYBOOK-RESUME: takes over the `files/` area a run already holds (a
    /// resumption's, or the sets a rerun copied in): the sets there count against the bound,
    /// the temporaries a crash left are dropped, and a folded row whose set is gone is noted,
    /// so its consumers dispatch without it rather than being refused.
    pub fn take_over(&mut self, rows: &[TaskResult]) -> Result<(), files::FilesError> {
        self.budget = FilesBudget::resume(self.budget.limit(), &self.dir)?;
        self.lost = rows
            .iter()
            .filter(|r| r.files)
            .filter(|r| match self.set_of(&r.task) {
                Some((task, key)) => !self.set_dir(task, key).is_dir(),
                None => false,
            })
            .map(|r| r.task.clone())
            .collect();
        Ok(())
    }

    /// The task and instance key a row's set belongs to: `name` for a task, `node[key]` for
    /// an instance of a plan task.
    fn set_of<'a>(&self, row: &'a str) -> Option<(&'a str, Option<&'a str>)> {
        if self.index.contains_key(row) {
            return Some((row, None));
        }
        let (node, rest) = row.split_once('[')?;
        let key = rest.strip_suffix(']')?;
        self.index.contains_key(node).then_some((node, Some(key)))
    }

    fn set_dir(&self, task: &str, key: Option<&str>) -> PathBuf {
        self.dir.join(files::dir_name(task, key))
    }

    /// The sets task `i` receives, read from each settled task's entry as `entry` gives it (its
    /// row's, a mapped node's fold with one producer per instance, or a revise round's). A
    /// `reviewer` is a revise target's reviewer from its second round on, whose failing round's
    /// set `entry` must then give (RFC-0002:C-REVISE-LOOP).
    pub fn staging(
        &self,
        tasks: &[Task],
        deps: &[Vec<usize>],
        entry: &dyn Fn(usize) -> Option<Entry>,
        i: usize,
        reviewer: Option<&str>,
    ) -> StagingPlan {
        if !self.any {
            return StagingPlan::default();
        }
        let t = &tasks[i];
        let epilogue = t.stage == Stage::Epilogue;
        let main_graph: Vec<String> = if epilogue {
            (0..tasks.len())
                .filter(|&m| tasks[m].stage == Stage::Iteration && entry(m).is_some())
                .map(|m| tasks[m].name.clone())
                .collect()
        } else {
            Vec::new()
        };
        let view = View {
            files: self,
            tasks,
            deps,
            entry,
        };
        let consumer = Consumer {
            name: &t.name,
            join: t.join,
            epilogue,
            main_graph: &main_graph,
            reviewer,
        };
        plan_staging(&consumer, &view)
    }

    /// Before an attempt, in the root it runs in: stage `sets` under `inputs/`, then snapshot
    /// the declared paths (what a failing capture compares against).
    pub fn prepare(
        &self,
        root: &Path,
        task: &Task,
        sets: &[StagedSet],
    ) -> Result<Prepared, StagingRefused> {
        let staged = !sets.is_empty();
        if staged {
            files::stage(root, sets).map_err(|e| StagingRefused {
                task: match &e.kind {
                    FilesErrorKind::Staging { task, .. } => Some(task.clone()),
                    _ => None,
                },
                note: format!("staging refused: {e}"),
            })?;
        }
        let snapshot = Snapshot::take(root, &task.emits_files).map_err(|e| StagingRefused {
            task: None,
            note: format!("cannot snapshot the declared files before the attempt: {e}"),
        })?;
        Ok(Prepared { snapshot, staged })
    }

    /// Capture after a graded attempt, before its workspace changes are committed or discarded,
    /// under `files/<name>` (`name` from [`files::dir_name`]: an instance's key escaped). A
    /// passing attempt whose set is refused becomes a measured failure keeping its output; a
    /// failing attempt's problems only join its note. Returns whether a set was published.
    pub fn capture(
        &self,
        root: &Path,
        task: &Task,
        name: &str,
        prepared: &Prepared,
        graded: &mut Graded,
    ) -> bool {
        let mode = match graded.status {
            _ if task.emits_files.is_empty() => return false,
            Status::Pass => Mode::Passing,
            Status::Fail => Mode::Failing(&prepared.snapshot),
            // Skipped or transport-failed: nothing is captured and no earlier set survives.
            _ => {
                if let Err(e) = files::remove_set(&self.dir, name, &self.budget) {
                    append_note(graded, &format!("cannot remove its earlier file set: {e}"));
                }
                return false;
            }
        };
        let req = CaptureRequest {
            workspace: root,
            decls: &task.emits_files,
            files_dir: &self.dir,
            dir_name: name,
            // An isolated task's checkout is removed right after (coord's cleanup).
            disposable: task.isolated,
        };
        let captured = match &self.hook {
            Some(hook) => files::capture_observed(&req, mode, &self.budget, &mut |path| {
                run_hook(hook, root, path)
            }),
            None => files::capture(&req, mode, &self.budget),
        };
        let problem = match captured {
            Ok(Captured::Published(_)) => return true,
            Ok(Captured::NothingDeclared) => return false,
            Ok(Captured::Refused(f)) => f.note(),
            Err(e) => format!("declared files could not be captured: {e}"),
        };
        if graded.status == Status::Pass {
            // RFC-0002:C-TASK-FILES: output drift fails where it happened, output retained.
            *graded = Graded::fail(problem, graded.output.take());
        } else {
            append_note(graded, &problem);
        }
        false
    }

    /// A settled row that vouches for no set: remove any set published under its task's name
    /// (a skipped, transport-failed or undispatched task must leave none behind).
    pub fn settled_without_set(&self, task: &Task) -> Result<(), files::FilesError> {
        if task.emits_files.is_empty() {
            return Ok(());
        }
        files::remove_set(&self.dir, &files::dir_name(&task.name, None), &self.budget).map(|_| ())
    }
}

impl Prepared {
    /// Whether `inputs/` must be removed before the root's changes are committed or discarded.
    pub fn staged(&self) -> bool {
        self.staged
    }
}

fn append_note(graded: &mut Graded, more: &str) {
    graded.note = Some(match graded.note.take() {
        Some(n) if !n.is_empty() => format!("{n}; {more}"),
        _ => more.to_string(),
    });
}

fn run_hook(hook: &str, root: &Path, path: &str) {
    // A test-only seam: its failure is the test's to notice through what gets captured.
    let _ = std::process::Command::new("sh")
        .arg("-c")
        .arg(hook)
        .current_dir(root)
        .env("CRUCIBLE_CAPTURE_PATH", path)
        .status();
}

/// Set the `files` flag of each settled-join entry and each epilogue `outcome.tasks` entry to
/// whether that producer's set was staged for this consumer, and for a mapped producer each
/// `per_instance` entry's to whether that instance's was (RFC-0002:C-SETTLED-JOIN).
pub fn mark_staged(inputs: &mut Value, task: &Task, deps: &[&str], plan: &StagingPlan) {
    if task.join == crucible_plan::Join::Settled {
        for d in deps {
            if let Some(entry) = inputs.get_mut(*d) {
                mark_entry(entry, d, plan);
            }
        }
    }
    if let Some(Value::Object(tasks)) = inputs.pointer_mut("/outcome/tasks") {
        for (name, entry) in tasks.iter_mut() {
            mark_entry(entry, name, plan);
        }
    }
}

fn mark_entry(entry: &mut Value, task: &str, plan: &StagingPlan) {
    let Value::Object(entry) = entry else {
        return;
    };
    entry.insert("files".into(), Value::Bool(plan.task_staged(task)));
    if let Some(Value::Object(instances)) = entry.get_mut("per_instance") {
        for (key, inst) in instances.iter_mut() {
            if let Value::Object(inst) = inst {
                let staged = plan.staged(task, Some(key));
                inst.insert("files".into(), Value::Bool(staged));
            }
        }
    }
}

/// Refuse, before any dispatch, a workspace that already holds `inputs/` when a task declares
/// files: staging owns that directory (RFC-0002:C-TASK-FILES stages under `inputs/<producer>/`)
/// and would overwrite and then remove what the repository or setup put there.
pub fn check_workspace(tasks: &[Task], ws: &Path) -> Result<(), String> {
    let declares = tasks.iter().any(|t| !t.emits_files.is_empty());
    let taken = std::fs::symlink_metadata(ws.join(files::INPUTS_DIR)).is_ok();
    if declares && taken {
        return Err(format!(
            "the workspace already holds `{}` (from the repository, setup_cmd or an inject), \
             where declared files are staged: rename it, or declare no emits_files",
            files::INPUTS_DIR
        ));
    }
    Ok(())
}

/// Keep staged inputs out of every commit of the run's git memory: they are another task's
/// output, not this task's change.
pub fn exclude_inputs(git_dir: &Path) -> std::io::Result<()> {
    let info = git_dir.join("info");
    std::fs::create_dir_all(&info)?;
    let path = info.join("exclude");
    let existing = std::fs::read_to_string(&path).unwrap_or_default();
    if existing.lines().any(|l| l.trim() == files::COMMIT_EXCLUDE) {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let sep = if existing.is_empty() || existing.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    writeln!(f, "{sep}{}", files::COMMIT_EXCLUDE)
}

/// The coordinator's settled entries seen as the graph staging reads.
struct View<'a> {
    files: &'a RunFiles,
    tasks: &'a [Task],
    deps: &'a [Vec<usize>],
    entry: &'a dyn Fn(usize) -> Option<Entry>,
}

impl SettledGraph for View<'_> {
    fn depends_on(&self, task: &str) -> Vec<String> {
        self.files.index.get(task).map_or_else(Vec::new, |&i| {
            self.deps[i]
                .iter()
                .map(|&d| self.tasks[d].name.clone())
                .collect()
        })
    }

    fn producers(&self, task: &str) -> Vec<Producer> {
        let Some(e) = self.files.index.get(task).and_then(|&i| (self.entry)(i)) else {
            return Vec::new();
        };
        // A mapped node's producers are its instances, each with its own status and set
        // (RFC-0002:C-SETTLED-JOIN); the node's own flag only says whether any was published.
        if let Some(instances) = &e.per_instance {
            return instances
                .iter()
                .map(|(key, inst)| Producer {
                    key: Some(key.clone()),
                    status: inst.status,
                    set: (inst.files && !self.files.lost.contains(&instance_name(task, key)))
                        .then(|| self.files.set_dir(task, Some(key))),
                })
                .collect();
        }
        vec![Producer {
            key: None,
            status: e.status,
            set: (e.files && !self.files.lost.contains(task))
                .then(|| self.files.set_dir(task, None)),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn producer(paths: &[&str]) -> Task {
        let mut t = Task::new("make", crucible_plan::TaskKind::Command);
        t.emits_files = paths
            .iter()
            .map(|p| crucible_plan::FileDecl {
                path: p.to_string(),
                schema: None,
            })
            .collect();
        t
    }

    // RFC-0002:C-TASK-FILES: a passing attempt whose set is refused becomes a measured failure
    // that keeps its output; a failing attempt's capture problem only joins its note.
    #[test]
    fn capture_converts_a_pass_and_annotates_a_fail() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let t = producer(&["x.txt"]);
        let files = RunFiles::new(tmp.path(), std::slice::from_ref(&t), 1 << 20);
        let prepared = files.prepare(&ws, &t, &[]).unwrap();
        assert!(!prepared.staged());

        let mut pass = Graded {
            status: Status::Pass,
            note: None,
            output: Some(serde_json::json!({"v": 1})),
        };
        assert!(!files.capture(&ws, &t, "make", &prepared, &mut pass));
        assert_eq!(pass.status, Status::Fail);
        assert_eq!(pass.output, Some(serde_json::json!({"v": 1})));
        assert!(pass.note.unwrap().contains("`x.txt` is absent"));

        let mut fail = Graded::fail("exit 2", None);
        assert!(!files.capture(&ws, &t, "make", &prepared, &mut fail));
        assert_eq!(fail.status, Status::Fail);
        assert!(fail
            .note
            .unwrap()
            .starts_with("exit 2; declared file `x.txt`"));

        std::fs::write(ws.join("x.txt"), "new").unwrap();
        let mut fail = Graded::fail("exit 2", None);
        assert!(files.capture(&ws, &t, "make", &prepared, &mut fail));
        assert_eq!(fail.note.as_deref(), Some("exit 2"));
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("files/make/x.txt")).unwrap(),
            "new"
        );
        // A later skip removes the set it published.
        let mut skipped = Graded {
            status: Status::Skipped,
            note: None,
            output: None,
        };
        assert!(!files.capture(&ws, &t, "make", &prepared, &mut skipped));
        assert!(!tmp.path().join("files/make").exists());
    }

    // RFC-0002:C-SETTLED-JOIN: a mapped producer stages per instance under its escaped name,
    // a failed instance only into a settled join; C-TASK-FILES: passing ones transitively.
    #[test]
    fn staging_takes_a_mapped_producer_per_instance() {
        let tmp = tempfile::tempdir().unwrap();
        let mut each = producer(&["x.txt"]);
        each.name = "each".into();
        let mut use_ = Task::new("use", crucible_plan::TaskKind::Command);
        use_.join = crucible_plan::Join::Passed;
        let mut judge = Task::new("judge", crucible_plan::TaskKind::Command);
        judge.join = crucible_plan::Join::Settled;
        let late = Task::new("late", crucible_plan::TaskKind::Command);
        let tasks = vec![each, use_, judge, late];
        let deps = vec![vec![], vec![0], vec![0], vec![1]];
        let files = RunFiles::new(tmp.path(), &tasks, 1 << 20);
        let fold = crate::graph::fanout::fold(vec![
            ("a/b".into(), Entry::new(Status::Pass, None, None, true)),
            ("bad".into(), Entry::new(Status::Fail, None, None, true)),
            ("none".into(), Entry::new(Status::Pass, None, None, false)),
        ]);
        let entry = |j: usize| {
            (j == 0)
                .then(|| fold.clone())
                .or_else(|| (j == 1).then(|| Entry::new(Status::Pass, None, None, false)))
        };
        let dirs = |i| -> Vec<String> {
            let plan = files.staging(&tasks, &deps, &entry, i, None);
            plan.sets.into_iter().map(|s| s.dir_name).collect()
        };
        assert_eq!(dirs(1), ["each[a%2Fb]"]);
        assert_eq!(
            dirs(3),
            ["each[a%2Fb]"],
            "a passing instance reaches a descendant"
        );
        assert_eq!(dirs(2), ["each[a%2Fb]", "each[bad]"]);
        let plan = files.staging(&tasks, &deps, &entry, 2, None);
        assert_eq!(
            plan.sets[0].source,
            tmp.path().join("files").join("each[a%2Fb]")
        );
        let mut inputs = serde_json::json!({"each": fold.to_value()});
        mark_staged(&mut inputs, &tasks[2], &["each"], &plan);
        assert_eq!(inputs["each"]["files"], true);
        assert_eq!(inputs["each"]["per_instance"]["a/b"]["files"], true);
        assert_eq!(inputs["each"]["per_instance"]["bad"]["files"], true);
        assert_eq!(inputs["each"]["per_instance"]["none"]["files"], false);
    }

    // RFC-0002:C-TASK-FILES: the exclude rule is written once, after whatever the file held.
    #[test]
    fn exclude_inputs_appends_once() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("info")).unwrap();
        std::fs::write(tmp.path().join("info/exclude"), "# git's template").unwrap();
        exclude_inputs(tmp.path()).unwrap();
        exclude_inputs(tmp.path()).unwrap();
        let text = std::fs::read_to_string(tmp.path().join("info/exclude")).unwrap();
        assert_eq!(text, "# git's template\n/inputs/\n");
    }

    // RFC-0002:C-SETTLED-JOIN: a settled entry's and an outcome entry's `files` flag says
    // whether that set was staged for this consumer.
    #[test]
    fn mark_staged_sets_the_flags_of_this_consumer() {
        let mut t = Task::new("judge", crucible_plan::TaskKind::Command);
        t.join = crucible_plan::Join::Settled;
        let plan = StagingPlan {
            sets: vec![StagedSet {
                task: "a".into(),
                key: None,
                dir_name: "a".into(),
                source: PathBuf::from("/f/a"),
            }],
        };
        let mut inputs = serde_json::json!({
            "a": {"files": false}, "b": {"files": false},
            "outcome": {"tasks": {"a": {"files": false}, "c": {"files": true}}}
        });
        mark_staged(&mut inputs, &t, &["a", "b"], &plan);
        assert_eq!(
            inputs,
            serde_json::json!({
                "a": {"files": true}, "b": {"files": false},
                "outcome": {"tasks": {"a": {"files": true}, "c": {"files": false}}}
            })
        );
    }
}

//! Rerunning from a task (RFC-0002:C-PLAYBOOK-RERUN): what the parent left, which tasks run
//! again, and the reused rows a rerun settles before its first dispatch. The replay of the
//! reused tasks' commits is `git::replay`; the coordinator settles the reused rows through its
//! ordinary `settle`, so dependents see them exactly as live results.

use crate::admit::Admitted;
use crate::resume::read_log;
use crate::{files, state, RunError};
use crucible_plan::wire::TaskResult;
use crucible_plan::{canonical, Plan, Stage, Task};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The task an instance's (`node[key]`) or round's (`task[round-N]`) row belongs to; a task's
/// own name for any other row. A reused mapped node or loop brings these rows along.
fn sub_of(row: &str) -> &str {
    row.strip_suffix(']')
        .and_then(|s| s.split_once('['))
        .map_or(row, |(t, _)| t)
}

/// A finished parent run, checked and ready to be reused.
pub struct Parent {
    pub id: String,
    /// The parent's git memory, holding one commit set per task.
    pub memory: PathBuf,
    /// The commit the parent's workspace started from.
    pub base_commit: String,
    /// The rows this rerun reuses, in the order the parent settled them, each marked with the
    /// run that produced it.
    pub reused: Vec<TaskResult>,
    /// The captured sets of reused tasks, in the parent's `files/`: copied into the rerun's.
    pub sets: Vec<PathBuf>,
}

/// RFC-0002:C-PLAYBOOK-RERUN: copies the reused tasks' captured sets into the rerun's `files/`,
/// so that they are staged to dependents exactly as a live producer's.
pub fn copy_sets(parent: &Parent, files_dir: &Path) -> Result<(), RunError> {
    for set in &parent.sets {
        let name = set.file_name().expect("a set directory has a name");
        copy_tree(set, &files_dir.join(name), false).map_err(|e| {
            RunError::state(format!(
                "cannot copy the captured files {} of the parent run {}: {e}",
                set.display(),
                parent.id
            ))
        })?;
    }
    Ok(())
}

/// Copies the tree `from` into `to`, merging with what `to` holds. Never writes through a link
/// already at a destination path. `writable` makes every copied file writable by its owner (a
/// restored workspace file, which tasks may edit, unlike a published set).
pub(crate) fn copy_tree(from: &Path, to: &Path, writable: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if std::fs::symlink_metadata(&dst).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(std::io::Error::other(format!(
                "{} is a link: nothing is written through it",
                dst.display()
            )));
        }
        let kind = e.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst, writable)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
            if writable {
                let mut perm = std::fs::metadata(&dst)?.permissions();
                perm.set_mode(perm.mode() | 0o200);
                std::fs::set_permissions(&dst, perm)?;
            }
        }
    }
    Ok(())
}

/// Reads the parent and decides the rerun set, refusing (before anything is set up) a parent
/// that has not shut down, a selection outside the graph, missing evidence, and reused tasks
/// whose definition changed.
pub fn load(
    plan: &Plan,
    adm: &Admitted,
    state_dir: &Path,
    parent: &str,
    select: &[String],
) -> Result<Parent, RunError> {
    let refuse = |m: String| RunError::refused(format!("cannot rerun from run {parent}: {m}"));
    let dir = state::run_dir(state_dir, parent).map_err(&refuse)?;
    if !dir.is_dir() {
        return Err(refuse(format!("no such run in {}", state_dir.display())));
    }
    let log_path = dir.join("session.jsonl");
    if !log_path.is_file() {
        return Err(refuse(format!(
            "its session log {} is missing",
            log_path.display()
        )));
    }
    let log = read_log(&log_path)?;
    if log.shutdown.is_none() {
        return Err(refuse(
            "it has not shut down (resume it with `plan run --resume`, or wait for it)".into(),
        ));
    }
    let index: HashMap<&str, usize> = plan
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let mut selected = Vec::new();
    for s in select {
        match index.get(s.as_str()) {
            Some(&i) if plan.tasks[i].stage == Stage::Iteration => selected.push(i),
            Some(_) => {
                return Err(refuse(format!(
                    "--select {s} names an epilogue task; epilogue tasks always run again"
                )))
            }
            None => return Err(refuse(format!("--select {s}: the graph has no such task"))),
        }
    }
    // The node's own row: instance and round rows (`name[…]`) are parts of it.
    let rows: HashMap<&str, &TaskResult> = log.rows.iter().map(|r| (r.task.as_str(), r)).collect();
    let digests_then: HashMap<&str, &str> = log
        .admitted
        .as_ref()
        .map(|a| {
            a.tasks
                .iter()
                .map(|t| (t.name.as_str(), t.digest.as_str()))
                .collect()
        })
        .unwrap_or_default();
    let passed = |i: usize| {
        let name = plan.tasks[i].name.as_str();
        digests_then.contains_key(name) && rows.get(name).is_some_and(|r| r.status.is_pass())
    };
    let rerun = rerun_set(&plan.tasks, adm.graph.dependents(), &selected, passed);
    let digests_now = canonical::task_digests(plan);
    let reused: BTreeSet<&str> = (0..plan.tasks.len())
        .filter(|i| !rerun.contains(i))
        .map(|i| plan.tasks[i].name.as_str())
        .collect();
    let changed: Vec<&str> = reused
        .iter()
        .copied()
        .filter(|n| digests_now.get(*n).map(String::as_str) != digests_then.get(n).copied())
        .collect();
    if !changed.is_empty() {
        return Err(refuse(format!(
            "the definition of reused task(s) {} changed since the parent ran; select them to run them again",
            changed.join(", ")
        )));
    }
    let mut missing = Vec::new();
    let mut sets = Vec::new();
    let memory = dir.join("memory");
    if !reused.is_empty() && !memory.is_dir() {
        missing.push(format!(
            "its task commits (git memory {})",
            memory.display()
        ));
    }
    // A reused task's set, or each reused instance's (a mapped node's sets are its instances',
    // under their escaped keys: RFC-0002:C-TASK-FILES).
    let mapped = |t: &str| plan.task(t).is_some_and(|t| t.over.is_some());
    for row in log.rows.iter().filter(|r| r.files) {
        let node = sub_of(&row.task);
        let dir_name = if node == row.task && reused.contains(node) && !mapped(node) {
            files::dir_name(node, None)
        } else if node != row.task && reused.contains(node) && mapped(node) {
            let key = &row.task[node.len() + 1..row.task.len() - 1];
            files::dir_name(node, Some(key))
        } else {
            continue;
        };
        let set = dir.join("files").join(dir_name);
        if set.is_dir() {
            sets.push(set);
        } else {
            missing.push(format!(
                "the captured files of {} ({})",
                row.task,
                set.display()
            ));
        }
    }
    let base_commit = match std::fs::read_to_string(dir.join("run.json")) {
        Ok(t) => serde_json::from_str::<state::RunJson>(&t)
            .map(|r| r.base_commit)
            .map_err(|e| refuse(format!("its run.json does not parse: {e}")))?,
        Err(_) => {
            missing.push(format!(
                "its run.json, which records the start commit ({})",
                dir.join("run.json").display()
            ));
            String::new()
        }
    };
    if !missing.is_empty() {
        return Err(refuse(format!("missing {}", missing.join("; "))));
    }
    let reused_rows = log
        .rows
        .iter()
        .filter(|r| reused.contains(r.task.as_str()) || reused.contains(sub_of(&r.task)))
        .map(|r| {
            let mut r = r.clone();
            // The original producer, when the parent itself reused it.
            r.reused_from = Some(r.reused_from.unwrap_or_else(|| parent.to_string()));
            r
        })
        .collect();
    Ok(Parent {
        id: parent.to_string(),
        memory,
        base_commit,
        reused: reused_rows,
        sets,
    })
}

/// RFC-0002:C-PLAYBOOK-RERUN: the selected tasks and everything downstream of them, every
/// main-graph task the parent did not settle passing (or did not contain), every epilogue task,
/// and every member of a revise loop any rerun task belongs to (with what is downstream of it:
/// a new round's result replaces what its dependents read). A mapped task is one node here.
pub fn rerun_set(
    tasks: &[Task],
    dependents: &[Vec<usize>],
    selected: &[usize],
    passed_in_parent: impl Fn(usize) -> bool,
) -> BTreeSet<usize> {
    let mut set = BTreeSet::new();
    let add_downstream = |set: &mut BTreeSet<usize>, from: &[usize]| {
        let mut stack = from.to_vec();
        while let Some(i) = stack.pop() {
            if set.insert(i) {
                stack.extend(dependents[i].iter().copied());
            }
        }
    };
    add_downstream(&mut set, selected);
    for (i, t) in tasks.iter().enumerate() {
        if t.stage == Stage::Epilogue || !passed_in_parent(i) {
            set.insert(i);
        }
    }
    let index: HashMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let bodies: Vec<Vec<usize>> = tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.revise.is_empty())
        .map(|(r, t)| {
            let mut body: Vec<usize> = t
                .revise
                .iter()
                .filter_map(|n| index.get(n.as_str()).copied())
                .collect();
            body.push(r);
            body
        })
        .collect();
    loop {
        let touched: Vec<usize> = bodies
            .iter()
            .filter(|b| b.iter().any(|i| set.contains(i)) && !b.iter().all(|i| set.contains(i)))
            .flatten()
            .copied()
            .collect();
        if touched.is_empty() {
            return set;
        }
        for &i in &touched {
            set.remove(&i);
        }
        add_downstream(&mut set, &touched);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn graph(tasks: serde_json::Value) -> (Vec<Task>, Vec<Vec<usize>>) {
        let tasks: Vec<Task> = serde_json::from_value(tasks).unwrap();
        let mut dependents = vec![Vec::new(); tasks.len()];
        for (i, t) in tasks.iter().enumerate() {
            for d in &t.depends_on {
                let j = tasks.iter().position(|u| &u.name == d).unwrap();
                dependents[j].push(i);
            }
        }
        (tasks, dependents)
    }

    fn names(tasks: &[Task], set: &BTreeSet<usize>) -> Vec<String> {
        set.iter().map(|&i| tasks[i].name.clone()).collect()
    }

    // RFC-0002:C-PLAYBOOK-RERUN: selected + downstream + not passed + every epilogue.
    #[test]
    fn selection_downstream_failures_and_epilogues() {
        let (tasks, deps) = graph(json!([
            {"name": "a", "kind": "command", "run": "x"},
            {"name": "b", "kind": "command", "run": "x", "depends_on": ["a"]},
            {"name": "c", "kind": "command", "run": "x", "depends_on": ["b"]},
            {"name": "d", "kind": "command", "run": "x"},
            {"name": "e", "kind": "command", "run": "x"},
            {"name": "z", "kind": "command", "run": "x", "stage": "epilogue"},
        ]));
        let set = rerun_set(&tasks, &deps, &[1], |i| i != 3);
        assert_eq!(names(&tasks, &set), ["b", "c", "d", "z"]);
    }

    // RFC-0002:C-PLAYBOOK-RERUN + C-REVISE-LOOP: a rerun member pulls in its whole loop, and
    // what lies downstream of the loop.
    #[test]
    fn a_loop_member_reruns_the_whole_loop() {
        let (tasks, deps) = graph(json!([
            {"name": "plan", "kind": "command", "run": "x"},
            {"name": "write", "kind": "command", "run": "x", "depends_on": ["plan"]},
            {"name": "review", "kind": "command", "run": "x", "depends_on": ["write"],
             "revise": ["write"], "max_rounds": 2},
            {"name": "after", "kind": "command", "run": "x", "depends_on": ["review"]},
            {"name": "other", "kind": "command", "run": "x"},
        ]));
        let set = rerun_set(&tasks, &deps, &[], |i| i != 2);
        assert_eq!(names(&tasks, &set), ["write", "review", "after"]);
    }
}

//! Resumption (RFC-0002:C-PLAYBOOK-RESUME): reading an interrupted run back from its session
//! log. Nothing here executes anything: [`reopen`] checks the run's identity, rebuilds the
//! workspace and hands the coordinator the folded rows, which it takes through the same state
//! machine as live settlements (`Coord::fold`), so there is no second execution path.

use crate::{files, git, state, RunError, RunRequest, RunSummary};
use crucible_plan::wire::{
    decode_line, decode_own_log, Event, PlanAdmitted, Shutdown, Start, TaskResult,
};
use crucible_plan::Status;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A run's session log, decoded.
pub struct Log {
    pub start: Start,
    /// When the run first started (the `start` line's timestamp).
    pub started_at: SystemTime,
    pub admitted: Option<PlanAdmitted>,
    /// Every settled row, in the order it was settled.
    pub rows: Vec<TaskResult>,
    /// How many asks the run emitted before (RFC-0002:C-ASKS counts them against its bound).
    pub asks: u32,
    /// Decision requests the run opened (RFC-0002:C-HUMAN-DECISION), in the order they opened.
    pub opened: Vec<crucible_plan::wire::DecisionOpened>,
    /// Stages of staged runbook tasks whose turns were done (issue 15), in the order logged,
    /// without those of an attempt that ended.
    pub stages: Vec<crucible_plan::wire::RunbookStage>,
    pub shutdown: Option<Shutdown>,
    /// A torn last line to cut before anything is appended: the byte length to keep.
    torn: Option<u64>,
    /// The last line is whole but lacks its newline: one must be added before appending.
    unterminated: bool,
}

/// Reads a session log. A torn last line is tolerated; any other malformed line is refused
/// with its line number.
pub fn read_log(path: &Path) -> Result<Log, RunError> {
    read_log_without(path, &[])
}

/// Reads a session log, checking but leaving out the lines of the kinds in `skip`.
fn read_log_without(path: &Path, skip: &[&str]) -> Result<Log, RunError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        RunError::refused(format!(
            "cannot read the session log {}: {e}",
            path.display()
        ))
    })?;
    let lines = decode_own_log(&text, skip)
        .map_err(|e| RunError::refused(format!("{}: {e}", path.display())))?;
    let (mut torn, mut unterminated) = (None, false);
    if !text.is_empty() && !text.ends_with('\n') {
        let cut = text.rfind('\n').map_or(0, |i| i + 1);
        if decode_line(&text[cut..]).is_ok() {
            unterminated = true;
        } else {
            torn = Some(cut as u64);
        }
    }
    let rows = lines.len();
    let mut it = lines.into_iter();
    let (start, ts) = match it.next() {
        Some(l) => match l.event {
            Event::Start(s) => (s, l.ts),
            _ => return Err(not_a_run(path)),
        },
        None => return Err(not_a_run(path)),
    };
    let started_at = humantime::parse_rfc3339(&ts).map_err(|e| {
        RunError::refused(format!(
            "{}: the start line's time {ts:?} does not parse: {e}",
            path.display()
        ))
    })?;
    let mut log = Log {
        start,
        started_at,
        admitted: None,
        rows: Vec::with_capacity(rows),
        asks: 0,
        opened: Vec::new(),
        stages: Vec::new(),
        shutdown: None,
        torn,
        unterminated,
    };
    for l in it {
        match l.event {
            Event::PlanAdmitted(a) => log.admitted = Some(a),
            Event::TaskResult(r) => log.rows.push(r),
            Event::AsksEmitted(a) => log.asks += a.asks.len() as u32,
            Event::DecisionOpened(o) => log.opened.push(o),
            Event::RunbookStage(st) => log.stages.push(st),
            Event::RunbookStagesClosed(c) => log.stages.retain(|st| st.set != c.set),
            Event::Shutdown(s) => log.shutdown = Some(s),
            _ => {}
        }
    }
    Ok(log)
}

fn not_a_run(path: &Path) -> RunError {
    // The start line is written before any dispatch: without it the run never began.
    RunError::refused(format!(
        "{}: the session log does not begin with a start line; nothing was dispatched, so launch the run again without --resume",
        path.display()
    ))
}

impl Log {
    /// Opens the log for appending, cutting a torn last line first so that appended lines never
    /// follow a fragment.
    pub fn open_for_append(&self, path: &Path) -> std::io::Result<File> {
        if let Some(len) = self.torn {
            let f = std::fs::OpenOptions::new().write(true).open(path)?;
            f.set_len(len)?;
            f.sync_all()?;
        }
        let mut f = crate::log::open(path)?;
        if self.unterminated {
            std::io::Write::write_all(&mut f, b"\n")?;
        }
        Ok(f)
    }

    /// The run's rows by task, in plan order, for a summary (`None` for an unsettled task).
    /// The names of the log's instance and round rows (`RunSummary::sub_rows`).
    pub fn sub_rows(&self, plan: &crucible_plan::Plan) -> Vec<String> {
        let tasks: HashSet<&str> = plan.tasks.iter().map(|t| t.name.as_str()).collect();
        (self.rows.iter())
            .filter(|r| !tasks.contains(r.task.as_str()))
            .map(|r| r.task.clone())
            .collect()
    }

    pub fn summary_rows(&self, plan: &crucible_plan::Plan) -> Vec<(String, Option<TaskResult>)> {
        // One pass over the log, the last row of each name winning: a log can hold a row per
        // task of a plan of any size, so no lookup may walk it per task.
        let last: HashMap<&str, &TaskResult> =
            self.rows.iter().map(|r| (r.task.as_str(), r)).collect();
        plan.tasks
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    last.get(t.name.as_str()).map(|r| (*r).clone()),
                )
            })
            .collect()
    }
}

/// The spend of an interrupted run's own rows (reused rows are apart). A mapped node's and a
/// loop body task's rows sum their instance or round rows, which carry the spend: counted once.
pub fn own_spend(plan: &crucible_plan::Plan, rows: &[TaskResult]) -> f64 {
    let loops = crate::graph::revise::loops(plan);
    let summing: HashSet<&str> = (plan.tasks.iter())
        .filter(|t| t.over.is_some())
        .map(|t| t.name.as_str())
        .chain(loops.iter().flat_map(|l| l.body.iter().map(String::as_str)))
        .collect();
    rows.iter()
        .filter(|r| r.reused_from.is_none() && !summing.contains(r.task.as_str()))
        .map(|r| r.cost_usd)
        .sum()
}

/// The spend of a run's reused rows, as the run reported it: a reused mapped node's or loop's
/// own rows carry it, the instance and round rows copied along with them do not add to it.
pub fn reused_spend(plan: &crucible_plan::Plan, rows: &[TaskResult]) -> f64 {
    let tasks: HashSet<&str> = plan.tasks.iter().map(|t| t.name.as_str()).collect();
    rows.iter()
        .filter(|r| r.reused_from.is_some() && tasks.contains(r.task.as_str()))
        .map(|r| r.cost_usd)
        .sum()
}

/// An interrupted run, ready for the coordinator.
pub struct Reopened {
    pub run_id: String,
    pub run_dir: PathBuf,
    pub log: Log,
    pub file: File,
    /// Wall-clock time since the run first started, downtime included.
    pub elapsed: Duration,
}

/// What `plan run --resume` finds.
pub enum Resumption {
    /// The run already shut down: its verdict, and nothing changed.
    Finished(Box<RunSummary>),
    Live(Box<Reopened>),
}

/// The lines a resumption leaves out: the admitted plan is the run's record of what it ran (a
/// rerun reads it); a resumption compiles its own plan and checks its digest.
const RESUME_SKIPS: &[&str] = &["plan_admitted"];

/// The most recent run (`state/current`): its id, directory and session log.
fn current_run(state_dir: &Path) -> Result<(String, PathBuf, PathBuf), RunError> {
    let current = std::fs::read_to_string(state_dir.join("current")).map_err(|e| {
        RunError::refused(format!(
            "nothing to resume: no run recorded in {} ({e})",
            state_dir.join("current").display()
        ))
    })?;
    let run_id = current.trim().to_string();
    let run_dir = state::run_dir(state_dir, &run_id).map_err(|e| {
        RunError::refused(format!(
            "cannot resume: {} holds no run id: {e}",
            state_dir.join("current").display()
        ))
    })?;
    let path = run_dir.join("session.jsonl");
    Ok((run_id, run_dir, path))
}

/// A resumption's session log, read on a thread of its own while the caller compiles the plan:
/// at 100,000 rows each takes a few hundred milliseconds, and neither needs the other. It is
/// read before the engine holds the state directory's lock, so [`reopen`] uses it only if the
/// run is still the current one and its log has not changed since; otherwise it reads it again.
pub struct ReadAhead(std::thread::JoinHandle<Option<Early>>);

struct Early {
    run_id: String,
    stamp: Stamp,
    log: Result<Log, RunError>,
}

/// A log's file and its last change, taken before it is read. Every writer of a log appends to
/// it or cuts a torn line, each of which changes its length or times.
#[derive(PartialEq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

impl ReadAhead {
    pub fn start(state_dir: &Path) -> ReadAhead {
        let state_dir = state_dir.to_path_buf();
        ReadAhead(std::thread::spawn(move || {
            let (run_id, _, path) = current_run(&state_dir).ok()?;
            let stamp = Stamp::of(&path)?;
            let log = read_log_without(&path, RESUME_SKIPS);
            Some(Early { run_id, stamp, log })
        }))
    }

    /// The log read ahead, if it is `run_id`'s and the file at `path` is unchanged.
    fn take(self, run_id: &str, path: &Path) -> Option<Result<Log, RunError>> {
        let early = self.0.join().ok()??;
        let unchanged = early.run_id == run_id && Stamp::of(path) == Some(early.stamp);
        unchanged.then_some(early.log)
    }
}

/// Picks the most recent run (`state/current`), checks that the launch matches it, and, unless
/// it already shut down, rebuilds its workspace and opens its log for appending.
pub fn reopen(
    req: &RunRequest,
    read_ahead: Option<ReadAhead>,
    max_cost: f64,
    ws: &Path,
    state_dir: &Path,
) -> Result<Resumption, RunError> {
    let (run_id, run_dir, path) = current_run(state_dir)?;
    // The plan's digest, a safeguard of the identity check, is computed while the log is read
    // (unless it was read ahead): both grow with the plan and neither needs the other.
    let (log, plan_digest) = std::thread::scope(|s| {
        let digest = s.spawn(|| crucible_plan::canonical::plan_digest(&req.plan));
        let log = (read_ahead.and_then(|r| r.take(&run_id, &path)))
            .unwrap_or_else(|| read_log_without(&path, RESUME_SKIPS));
        (log, digest.join().expect("a plan digest does not panic"))
    });
    let log = log?;
    check_identity(req, &log.start, &plan_digest, max_cost)?;
    if let Some(sd) = &log.shutdown {
        let reused = reused_spend(&req.plan, &log.rows);
        return Ok(Resumption::Finished(Box::new(RunSummary {
            run_id,
            run_dir,
            outcome: sd.outcome,
            ceiling: sd.ceiling,
            reason: sd.reason.clone(),
            verdict: sd.verdict,
            spent_usd: sd.spent_usd,
            reused_usd: reused,
            max_cost: log.start.max_cost,
            elapsed_secs: sd.elapsed_secs,
            max_secs: log.start.max_secs as u64,
            rows: log.summary_rows(&req.plan),
            sub_rows: log.sub_rows(&req.plan),
        })));
    }
    let names: HashSet<&str> = req.plan.tasks.iter().map(|t| t.name.as_str()).collect();
    // An instance's or round's row names its task followed by a bracketed key or round.
    let known = |n: &str| {
        names.contains(n)
            || (n.strip_suffix(']').and_then(|s| s.split_once('[')))
                .is_some_and(|(t, _)| names.contains(t))
    };
    if let Some(r) = log.rows.iter().find(|r| !known(r.task.as_str())) {
        return Err(RunError::refused(format!(
            "cannot resume run {run_id}: its log settles `{}`, which the plan does not contain",
            r.task
        )));
    }
    // Attempts the interrupted engine left running would go on working, and spending, outside
    // every ceiling: they die before anything is rebuilt. Their worktrees are never reused.
    crate::proc::kill_recorded_groups(&run_dir.join("groups"));
    let _ = std::fs::remove_dir_all(run_dir.join("worktrees"));
    let _ = std::fs::remove_dir_all(run_dir.join(crate::checkout::LAYERS));
    git::reopen(ws, &run_dir.join("memory"))
        .map_err(|e| RunError::refused(format!("cannot resume run {run_id}: workspace: {e}")))?;
    // The pristine checkout plus the declared files of every folded task that passed, in the
    // order they settled; a failing task's set reaches consumers only through staging.
    for r in log
        .rows
        .iter()
        .filter(|r| r.files && r.status == Status::Pass)
    {
        let set = run_dir.join("files").join(files::dir_name(&r.task, None));
        if names.contains(r.task.as_str()) && set.is_dir() {
            crate::rerun::copy_tree(&set, ws, true).map_err(|e| {
                RunError::refused(format!(
                    "cannot resume run {run_id}: restoring the declared files of {}: {e}",
                    r.task
                ))
            })?;
        }
    }
    git::commit_restored(ws)
        .map_err(|e| RunError::refused(format!("cannot resume run {run_id}: workspace: {e}")))?;
    let file = log
        .open_for_append(&path)
        .map_err(|e| RunError::state(format!("session log: {e}")))?;
    let elapsed = SystemTime::now()
        .duration_since(log.started_at)
        .unwrap_or_default();
    Ok(Resumption::Live(Box::new(Reopened {
        run_id,
        run_dir,
        log,
        file,
        elapsed,
    })))
}

/// RFC-0002:C-PLAYBOOK-RESUME: the same pack, params, variant and cost ceiling, each named when
/// it differs. The plan digest follows from those; it is checked last as a safeguard.
fn check_identity(
    req: &RunRequest,
    start: &Start,
    plan_digest: &str,
    max_cost: f64,
) -> Result<(), RunError> {
    let mut diffs = Vec::new();
    if start.pack != req.pack_digest {
        diffs.push(format!(
            "the pack ({} then, {} now)",
            start.pack, req.pack_digest
        ));
    }
    if start.params != req.plan.params {
        let keys: std::collections::BTreeSet<&String> =
            start.params.keys().chain(req.plan.params.keys()).collect();
        let changed: Vec<&str> = keys
            .into_iter()
            .filter(|k| start.params.get(*k) != req.plan.params.get(*k))
            .map(String::as_str)
            .collect();
        diffs.push(format!("params ({})", changed.join(", ")));
    }
    if start.variant != req.manifest.variant {
        diffs.push(format!(
            "the manifest variant ({:?} then, {:?} now)",
            start.variant, req.manifest.variant
        ));
    }
    if start.max_cost != max_cost {
        diffs.push(format!(
            "--max-cost ({} then, {} now)",
            start.max_cost, max_cost
        ));
    }
    if diffs.is_empty() && start.plan != plan_digest {
        diffs.push("the compiled plan".into());
    }
    if diffs.is_empty() {
        return Ok(());
    }
    Err(RunError::refused(format!(
        "cannot resume run {}: it differs from this launch in {}",
        start.run,
        diffs.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::wire::encode;
    use crucible_plan::Status;

    fn start() -> String {
        encode(
            &Event::Start(Start {
                run: "r".into(),
                gate: "task".into(),
                pack: "tree1:x".into(),
                plan: "sha256:x".into(),
                variant: String::new(),
                params: Default::default(),
                max_cost: 1.0,
                max_secs: 60.0,
                parent: None,
                series: None,
            }),
            "2026-11-30T00:00:00.000Z",
        )
    }

    fn row(task: &str) -> String {
        encode(
            &Event::TaskResult(TaskResult {
                attempts: 1,
                ..TaskResult::new(task, Status::Pass)
            }),
            "2026-11-30T00:00:01.000Z",
        )
    }

    fn append_and_reread(text: &str) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, text).unwrap();
        let log = read_log(&path).unwrap();
        let mut f = log.open_for_append(&path).unwrap();
        std::io::Write::write_all(&mut f, format!("{}\n", row("after")).as_bytes()).unwrap();
        read_log(&path)
            .unwrap()
            .rows
            .into_iter()
            .map(|r| r.task)
            .collect()
    }

    // RFC-0002:C-PLAYBOOK-RESUME: a log read ahead, before the engine holds the lock, is used
    // only while it is the current run's and unchanged; a line appended since, or another run
    // made current, and the log is read again.
    #[test]
    fn a_log_read_ahead_is_used_only_while_unchanged() {
        let state = tempfile::tempdir().unwrap();
        let (a, b) = (state::new_run_id(), state::new_run_id());
        for id in [&a, &b] {
            let dir = state::run_dir(state.path(), id).unwrap();
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("session.jsonl"),
                format!("{}\n{}\n", start(), row("x")),
            )
            .unwrap();
        }
        let current = |id: &str| std::fs::write(state.path().join("current"), id).unwrap();
        let path = |id: &str| {
            state::run_dir(state.path(), id)
                .unwrap()
                .join("session.jsonl")
        };
        current(&a);
        let early = ReadAhead::start(state.path()).take(&a, &path(&a));
        assert_eq!(early.expect("unchanged").unwrap().rows.len(), 1);
        // Read ahead to the end, then a line appended before the engine takes it.
        let read = ReadAhead::start(state.path()).0.join().unwrap();
        let ahead = ReadAhead(std::thread::spawn(move || read));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path(&a))
            .unwrap();
        std::io::Write::write_all(&mut f, format!("{}\n", row("y")).as_bytes()).unwrap();
        assert!(
            ahead.take(&a, &path(&a)).is_none(),
            "a line was appended since"
        );
        let ahead = ReadAhead::start(state.path());
        assert!(
            ahead.take(&b, &path(&b)).is_none(),
            "another run is current"
        );
        current(&b);
        let early = ReadAhead::start(state.path()).take(&b, &path(&b));
        assert_eq!(early.expect("unchanged").unwrap().start.run, "r");
    }

    // RFC-0002:C-PLAYBOOK-RESUME: a torn last line is cut before anything is appended, so the
    // log stays readable after the resumption writes to it.
    #[test]
    fn a_torn_last_line_is_cut_before_appending() {
        let torn = format!("{}\n{}\n{}", start(), row("a"), &row("b")[..20]);
        assert_eq!(append_and_reread(&torn), ["a", "after"]);
    }

    // A whole last line that only lost its newline is kept, and terminated before appending.
    #[test]
    fn a_whole_unterminated_last_line_is_kept() {
        let text = format!("{}\n{}", start(), row("a"));
        assert_eq!(append_and_reread(&text), ["a", "after"]);
    }

    // Issue 15, C-PLAYBOOK-RESUME: the stages a resumed run folds are those of attempts that
    // did not end; an ended attempt's (a revise loop's earlier round) are never restored.
    #[test]
    fn stages_of_an_ended_attempt_are_not_folded() {
        use crucible_plan::wire::{CheckpointRecord, RunbookStage, RunbookStagesClosed};
        let stage = |set: &str, stage: &str| {
            let line = Event::RunbookStage(RunbookStage {
                task: "t".into(),
                set: set.into(),
                checkpoint: CheckpointRecord {
                    stage: stage.into(),
                    artifacts: Vec::new(),
                    gate: None,
                },
                cost_usd: 0.0,
            });
            encode(&line, "2026-11-30T00:00:01.000Z")
        };
        let closed = encode(
            &Event::RunbookStagesClosed(RunbookStagesClosed {
                task: "t".into(),
                set: "t".into(),
            }),
            "2026-11-30T00:00:02.000Z",
        );
        let text = [
            start(),
            stage("t", "plan"),
            stage("u", "plan"),
            stage("t", "report"),
            closed,
            stage("t", "plan"),
        ]
        .join("\n");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, format!("{text}\n")).unwrap();
        let folded: Vec<(String, String)> = (read_log(&path).unwrap().stages.into_iter())
            .map(|s| (s.set, s.checkpoint.stage))
            .collect();
        assert_eq!(
            folded,
            [("u".into(), "plan".into()), ("t".into(), "plan".into())]
        );
    }

    #[test]
    fn a_log_without_a_start_line_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, format!("{}\n", row("a"))).unwrap();
        let e = read_log(&path).err().expect("refused");
        assert!(e.message.contains("does not begin with a start line"));
    }

    // RFC-0002:C-PLAYBOOK-RESUME: the `resumed` line's spend counts instance and round rows
    // once, not again through the node's or body task's summing row, and never reused rows.
    #[test]
    fn own_spend_counts_instances_and_rounds_once() {
        use crucible_plan::{FieldRef, Plan, Task, TaskKind, WorkflowType};
        let mut each = Task::new("each", TaskKind::Command);
        each.over = FieldRef::parse("src.items");
        let mut review = Task::new("review", TaskKind::Command);
        review.revise = vec!["draft".into()];
        review.max_rounds = 2;
        review.depends_on = vec!["draft".into()];
        let plan = Plan {
            version: 1,
            workflow_type: WorkflowType::Playbook,
            result: None,
            history_record: None,
            params: Default::default(),
            tasks: vec![
                Task::new("src", TaskKind::Command),
                each,
                Task::new("draft", TaskKind::Command),
                review,
            ],
        };
        let row = |task: &str, cost_usd: f64| TaskResult {
            attempts: 1,
            cost_usd,
            ..TaskResult::new(task, Status::Pass)
        };
        let mut reused = row("src", 8.0);
        reused.reused_from = Some("parent".into());
        let rows = [
            reused,
            row("each[a]", 1.0),
            row("each", 1.0),
            row("draft[round-1]", 2.0),
            row("review[round-1]", 4.0),
            row("draft", 2.0),
            row("review", 4.0),
        ];
        assert_eq!(own_spend(&plan, &rows), 7.0);
        let mut copied = rows.map(|mut r| {
            r.reused_from = Some("parent".into());
            r
        });
        copied[0].cost_usd = 0.5;
        // RFC-0002:C-PLAYBOOK-RERUN: reused spend once, through the rows that carry it.
        assert_eq!(reused_spend(&plan, &copied), 0.5 + 1.0 + 2.0 + 4.0);
    }
}

//! Running a runbook (issue 15, Runbook contract v1): what the engine does with a `skill()`
//! task whose plan carries a [`TaskRunbook`]. When its turn finishes, each checkpoint's declared
//! artifacts are hashed into the row's ledger (their SHA-256 and size, never their contents),
//! and each success predicate is checked: a turn that claims success while one fails has failed,
//! by name. The files are read below the turn's working directory without following links, so
//! a link or a special file is never taken for an artifact. A checkpoint's gate is then put to
//! a person as a human decision (RFC-0002:C-HUMAN-DECISION) through the run's
//! [`decision::Decider`], the terminal or a controller, over the stage's evidence
//! ([`gate_evidence`]); a run with a gate and no one to answer is refused before dispatch, with
//! everything else it cannot enforce ([`unenforceable`]).

use crate::decision::{self, Answer, QuestionView};
use crucible_pack::files::{PackDir, PackFileErrorKind};
use crucible_plan::runbook::{Checkpoint, Gate, PredicateKind, TaskRunbook};
use crucible_plan::wire::{
    ArtifactRecord, CheckpointRecord, GateRecord, PredicateRecord, RunbookLedger, RunbookStage,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The largest artifact hashed, in bytes: a larger one is recorded as too large.
pub const MAX_ARTIFACT_BYTES: u64 = 64 * 1024 * 1024;

/// The ledger of a task running `rb` in `cwd`: the checkpoints its stages recorded as each
/// ended, and its predicates as its last turn left its files.
pub fn ledger(rb: &TaskRunbook, cwd: &Path, checkpoints: Vec<CheckpointRecord>) -> RunbookLedger {
    let dir = PackDir::open(cwd).ok();
    let look = |path: &str| observe(dir.as_ref(), path);
    RunbookLedger {
        name: rb.name.clone(),
        digest: rb.digest.clone(),
        checkpoints,
        predicates: (rb.predicates.iter())
            .map(|p| {
                let seen = look(&p.path);
                let holds = match p.kind {
                    PredicateKind::ArtifactExists => seen.bytes.is_some(),
                    PredicateKind::ArtifactNonempty => seen.bytes.is_some_and(|b| b > 0),
                };
                PredicateRecord {
                    kind: p.kind,
                    path: p.path.clone(),
                    holds,
                }
            })
            .collect(),
    }
}

/// Checkpoint `c` as the stage's turn left its files in `cwd`: each artifact hashed, no gate yet.
pub fn checkpoint(c: &Checkpoint, cwd: &Path) -> CheckpointRecord {
    let dir = PackDir::open(cwd).ok();
    CheckpointRecord {
        stage: c.stage.clone(),
        artifacts: (c.artifact_paths.iter())
            .map(|p| observe(dir.as_ref(), p))
            .collect(),
        gate: None,
    }
}

/// The prompt of the turn of stage `k` of `rb` (issue 15): the task's prompt (the sealed
/// procedure, the contract's expectations, the arguments), and before its result instruction
/// which stage this is, what is hashed when it ends and which gate follows, and the stages done
/// before it with their checkpoint hashes (`done`, in order) and their gates' decisions.
pub fn stage_prompt(prompt: &str, rb: &TaskRunbook, k: usize, done: &[CheckpointRecord]) -> String {
    let c = &rb.checkpoints[k];
    let n = rb.checkpoints.len();
    let mut out = format!(
        "# Runbook stage `{}` ({} of {n})\n\nThis runbook runs as one turn per stage, in order, and this turn is stage `{}`: {}. Do this stage's part of the procedure only, then write the result; each later stage is its own turn.\n",
        c.stage,
        k + 1,
        c.stage,
        c.summary
    );
    if !c.artifact_paths.is_empty() {
        out.push_str(&format!(
            "\nWhen this turn ends, these files are hashed as the stage's checkpoint: {}.\n",
            c.artifact_paths.join(", ")
        ));
    }
    if let Some(g) = &c.gate {
        out.push_str(&format!(
            "\nThen a person decides the gate `{}` ({}); no later stage runs unless they approve.\n",
            g.id, g.prompt
        ));
    }
    if done.is_empty() {
        out.push_str("\nNo stage is done yet.\n");
    } else {
        out.push_str("\nStages done (their files are in your working directory):\n");
        for (c, rec) in rb.checkpoints.iter().zip(done) {
            let files: Vec<String> = (rec.artifacts.iter())
                .map(|a| match (&a.sha256, a.bytes) {
                    (Some(h), Some(b)) => format!("{} sha256:{h} ({b} bytes)", a.path),
                    _ => format!("{} (absent)", a.path),
                })
                .collect();
            out.push_str(&format!("\n- `{}` ({})", c.stage, c.summary));
            if !files.is_empty() {
                out.push_str(&format!(": {}", files.join(", ")));
            }
            if let Some(g) = &rec.gate {
                out.push_str(&format!("; gate `{}` approved by {}", g.id, g.by));
            }
        }
        out.push('\n');
    }
    let later: Vec<String> = (rb.checkpoints[k + 1..].iter())
        .map(|c| format!("`{}`", c.stage))
        .collect();
    match later.is_empty() {
        true => {
            out.push_str("\nThis is the last stage: the success checks are made when it ends.\n")
        }
        false => out.push_str(&format!("\nStages after this one: {}.\n", later.join(", "))),
    }
    // Before the result instruction, which stays the prompt's last word.
    let at = prompt.rfind("\n# Result\n").map_or(prompt.len(), |i| i + 1);
    format!("{}{out}\n{}", &prompt[..at], &prompt[at..])
}

/// Where the artifacts of stage `stage` of the task set `set` are kept beside the run.
pub fn stage_dir(run_dir: &Path, set: &str, stage: &str) -> PathBuf {
    run_dir.join("stages").join(set).join(stage)
}

/// Keeps each hashed artifact of `rec`, read from `cwd` without following links, in `dir`, so a
/// resumed run can put the stage's files back ([`restore_stage`]).
pub fn keep_stage(rec: &CheckpointRecord, cwd: &Path, dir: &Path) -> Result<(), String> {
    let from = PackDir::open(cwd).map_err(|e| e.to_string())?;
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    for a in rec.artifacts.iter().filter(|a| a.sha256.is_some()) {
        let bytes = from
            .read(&a.path, MAX_ARTIFACT_BYTES)
            .map_err(|e| e.to_string())?;
        let to = dir.join(&a.path);
        std::fs::create_dir_all(to.parent().expect("a file has a parent"))
            .and_then(|()| std::fs::write(&to, bytes))
            .map_err(|e| format!("{}: {e}", to.display()))?;
    }
    Ok(())
}

/// Puts the artifacts kept for `rec` in `dir` back into `cwd`, each checked against its hash,
/// never through a link or onto anything but a regular file. An artifact the stage left absent
/// stays absent. Fails (and the stage runs again) when anything kept is missing or changed.
pub fn restore_stage(rec: &CheckpointRecord, dir: &Path, cwd: &Path) -> Result<(), String> {
    for a in &rec.artifacts {
        let Some(sha) = &a.sha256 else { continue };
        let kept = PackDir::open(dir)
            .and_then(|d| d.read(&a.path, MAX_ARTIFACT_BYTES))
            .map_err(|e| format!("the kept `{}`: {e}", a.path))?;
        if &hex::encode(Sha256::digest(&kept)) != sha {
            return Err(format!("the kept `{}` is not what was hashed", a.path));
        }
        let parts = crucible_pack::files::split_rel(&a.path).map_err(|e| e.to_string())?;
        let mut at = cwd.to_path_buf();
        for (i, part) in parts.iter().enumerate() {
            at.push(part);
            let last = i + 1 == parts.len();
            match std::fs::symlink_metadata(&at) {
                Ok(m) if !last && m.is_dir() => {}
                Ok(m) if last && m.is_file() => {}
                Ok(_) => return Err(format!("`{}` is in the way of `{}`", at.display(), a.path)),
                Err(_) if last => {}
                Err(_) => std::fs::create_dir(&at).map_err(|e| format!("{}: {e}", at.display()))?,
            }
        }
        std::fs::write(&at, &kept).map_err(|e| format!("{}: {e}", at.display()))?;
    }
    Ok(())
}

/// The stages an interrupted run's log says were done, by set: each stage's last record, in the
/// order the stages were first logged.
pub fn fold_stages(lines: Vec<RunbookStage>) -> HashMap<String, Vec<RunbookStage>> {
    let mut by_set: HashMap<String, Vec<RunbookStage>> = HashMap::new();
    for line in lines {
        let held = by_set.entry(line.set.clone()).or_default();
        match (held.iter_mut()).find(|s| s.checkpoint.stage == line.checkpoint.stage) {
            Some(s) => *s = line,
            None => held.push(line),
        }
    }
    by_set
}

/// Why a turn that claimed success has failed: the first predicate that does not hold.
pub fn failed_predicate(ledger: &RunbookLedger) -> Option<String> {
    let p = ledger.predicates.iter().find(|p| !p.holds)?;
    Some(format!(
        "runbook `{}`: success claimed while predicate {} `{}` fails",
        ledger.name,
        p.kind.spelling(),
        p.path
    ))
}

/// One file below the working directory: hashed, or why not.
fn observe(dir: Option<&PackDir>, path: &str) -> ArtifactRecord {
    let mut rec = ArtifactRecord {
        path: path.to_string(),
        sha256: None,
        bytes: None,
        unhashed: None,
    };
    let Some(dir) = dir else {
        rec.unhashed = Some("the working directory cannot be read".into());
        return rec;
    };
    match dir.read(path, MAX_ARTIFACT_BYTES) {
        Ok(bytes) => {
            rec.sha256 = Some(hex::encode(Sha256::digest(&bytes)));
            rec.bytes = Some(bytes.len() as u64);
        }
        Err(e) => {
            if let PackFileErrorKind::TooLarge { size, .. } = e.kind {
                rec.bytes = Some(size);
            }
            rec.unhashed = Some(e.kind.to_string());
        }
    }
    rec
}

/// How a run could enforce a runbook's bounds: what admission knows of the substrate.
#[derive(Clone, Copy, Debug)]
pub struct Enforcement {
    /// Attempts run in the task sandbox.
    pub sandboxed: bool,
    /// Agent turns run on the command backend (`agent_cmd`), not a harness CLI.
    pub command_backend: bool,
    /// The harness CLI this task's turns run on, where admission could resolve one.
    pub harness: Option<crucible_agent::harness::HarnessKind>,
    /// Someone answers the run's decisions (a terminal or a controller), so a gate can be put.
    pub can_ask: bool,
}

/// Why task `task` cannot run its runbook `rb` honestly on this substrate, each reason once:
/// what the contract forbids that nothing here can take away, and what it needs that nothing
/// here can give. Admission refuses these before any dispatch, so `check` says the same.
pub fn unenforceable(task: &str, rb: &TaskRunbook, how: Enforcement) -> Vec<String> {
    use crate::sandbox::{NETWORK, WRITE};
    let at = format!("task `{task}` runs runbook `{}`", rb.name);
    let mut out = Vec::new();
    if !rb.capabilities.is_empty() {
        out.push(format!(
            "{at}, which requires the tool(s) {}: no harness here reports its tools with stable fingerprints to check them against; list none in requiredCapabilities",
            rb.capabilities.join(", ")
        ));
    }
    let forbids = |class: &str| !rb.allows(class);
    if !how.sandboxed && (forbids(NETWORK) || forbids(WRITE)) {
        out.push(format!(
            "{at}, whose effect classes leave out {}: only the task sandbox takes those away, and this run opted out of it ({} or {})",
            [NETWORK, WRITE].into_iter().filter(|c| forbids(c)).collect::<Vec<_>>().join(" and "),
            crate::sandbox::FLAG,
            crate::sandbox::MANIFEST_KEY
        ));
    }
    if forbids(NETWORK) && !how.command_backend {
        out.push(format!(
            "{at}, which leaves out `network`: a harness CLI reaches its model over the network, and the sandbox cannot take the network from its tools alone; allow `network`, or run it on the command backend"
        ));
    }
    if let (Some(tools), Some(kind), false) = (rb.tools(), how.harness, how.command_backend) {
        if let Err(why) = kind.allow_list(&tools) {
            out.push(format!(
                "{at}, which allows only the tool(s) {}: {why}; run it on a harness that can (claude, pi), or allow `*`",
                tools.join(", ")
            ));
        }
    }
    if forbids(PROCESS_EXEC) {
        out.push(format!(
            "{at}, which leaves out `process.exec`: every agent turn here is a process that may start others (a shell command, or a CLI with a shell tool), and nothing withholds that; allow `process.exec`"
        ));
    }
    if !how.can_ask {
        for gate in rb.checkpoints.iter().filter_map(|c| c.gate.as_ref()) {
            out.push(format!(
                "{at}, which has the gate `{}`: a gate waits for a person's decision, and no one answers this run's decisions; run it on a terminal (stdin and stderr) or with CRUCIBLE_DECISIONS_URL naming a controller, or remove the gate",
                gate.id
            ));
        }
    }
    out
}

/// The effect class of starting processes.
pub const PROCESS_EXEC: &str = "process.exec";

/// The one question a gate asks, and its two options.
pub const GATE_QUESTION: &str = "approve";
pub const APPROVE: &str = "yes";
pub const REJECT: &str = "no";

/// The name a gate's decision request goes by: one request per run, task and gate (a task name
/// never holds `:`, so no route can take it).
pub fn gate_route(task: &str, gate: &str) -> String {
    format!("{task}:{gate}")
}

/// The question of a gate's request: its prompt, answered `yes` (approved) or `no`.
pub fn gate_question(gate: &Gate) -> QuestionView {
    QuestionView {
        id: GATE_QUESTION.to_string(),
        kind: "noul".to_string(),
        ask: gate.prompt.clone(),
        options: vec![APPROVE.to_string(), REJECT.to_string()],
        multiple: false,
    }
}

/// The evidence of the gate of checkpoint `c` of task `task`'s runbook `rb` (C-DECISION-EVIDENCE
/// for a gate): the runbook's release, the gate, the stage and its summary, and each of the
/// checkpoint's artifacts as the turn left it in `cwd` (path, size, SHA-256 and contents, as
/// `text` or `base64`; or why it could not be read). Over `max_bytes` encoded it fails naming
/// the bound; it is never truncated. Returns the evidence, key-sorted, and its digest.
pub fn gate_evidence(
    task: &str,
    rb: &TaskRunbook,
    c: &Checkpoint,
    gate: &Gate,
    cwd: &Path,
    max_bytes: u64,
) -> Result<(Value, String), String> {
    let dir = PackDir::open(cwd).ok();
    let mut size: u64 = 0;
    let mut artifacts = Vec::new();
    for path in &c.artifact_paths {
        let Some(d) = &dir else {
            artifacts.push(json!({"path": path, "unread": "the working directory cannot be read"}));
            continue;
        };
        let bytes = match d.read(path, MAX_ARTIFACT_BYTES.min(max_bytes.saturating_sub(size))) {
            Ok(b) => b,
            Err(e) => {
                if let PackFileErrorKind::TooLarge { size: n, .. } = e.kind {
                    if size.saturating_add(n) > max_bytes {
                        return Err(decision::over_bound(max_bytes, size.saturating_add(n)));
                    }
                }
                artifacts.push(json!({"path": path, "unread": e.kind.to_string()}));
                continue;
            }
        };
        size += bytes.len() as u64;
        let mut a = json!({"path": path, "bytes": bytes.len(),
            "sha256": crucible_plan::canonical::sha256(&bytes)});
        match String::from_utf8(bytes) {
            Ok(text) => a["text"] = json!(text),
            Err(e) => a["base64"] = json!(decision::base64(e.as_bytes())),
        }
        artifacts.push(a);
    }
    let ev = json!({
        "task": task,
        "runbook": {"name": rb.name, "digest": rb.digest},
        "gate": {"id": gate.id, "prompt": gate.prompt},
        "stage": {"name": c.stage, "summary": c.summary},
        "artifacts": artifacts,
    });
    decision::seal(&ev, max_bytes)
}

/// What a gate's request came to, recorded in the ledger: approved only by an answer `yes`
/// held to the request's rules; a refusal, an expiry, or no answer is never an approval.
pub fn gate_record(gate: &Gate, digest: &str, answer: Option<&Answer>) -> GateRecord {
    GateRecord {
        id: gate.id.clone(),
        approved: answer.is_some_and(|a| {
            a.answers.get(GATE_QUESTION).map(Vec::as_slice) == Some(&[APPROVE.to_string()])
        }),
        by: answer.map_or_else(|| "expired".to_string(), |a| a.principal.clone()),
        digest: digest.to_string(),
        note: answer.and_then(|a| a.note.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::runbook::{Checkpoint, Gate};

    fn staged() -> TaskRunbook {
        let cp = |stage: &str, path: &str, gate: bool| Checkpoint {
            stage: stage.into(),
            summary: format!("{stage} ready"),
            artifact_paths: vec![path.into()],
            gate: gate.then(|| Gate {
                id: "approve".into(),
                prompt: "Approve it".into(),
            }),
        };
        TaskRunbook {
            name: "triage".into(),
            digest: "tree1:00".into(),
            effects: vec!["*".into()],
            capabilities: Vec::new(),
            predicates: Vec::new(),
            checkpoints: vec![
                cp("plan", "r/plan.md", true),
                cp("report", "r/report.md", false),
            ],
        }
    }

    // A stage's prompt: the task's, then which stage it is, what is hashed, the gate after it,
    // the stages done with their hashes and decisions, and what comes after; the result
    // instruction stays last.
    #[test]
    fn a_stage_prompt_says_where_the_run_is() {
        let rb = staged();
        let prompt = "# Task: t\n\nProcedure.\n\n# Result\n\nWrite the result.\n";
        let first = stage_prompt(prompt, &rb, 0, &[]);
        assert!(first.starts_with("# Task: t\n\nProcedure.\n\n# Runbook stage `plan` (1 of 2)\n"));
        assert!(first.contains("hashed as the stage's checkpoint: r/plan.md."));
        assert!(first.contains("a person decides the gate `approve` (Approve it)"));
        assert!(first.contains("No stage is done yet."));
        assert!(first.contains("Stages after this one: `report`."));
        assert!(
            first.ends_with("\n# Result\n\nWrite the result.\n"),
            "{first}"
        );
        let done = CheckpointRecord {
            stage: "plan".into(),
            artifacts: vec![ArtifactRecord {
                path: "r/plan.md".into(),
                sha256: Some("ab".into()),
                bytes: Some(2),
                unhashed: None,
            }],
            gate: Some(GateRecord {
                id: "approve".into(),
                approved: true,
                by: "terminal:alice".into(),
                digest: "sha256:cd".into(),
                note: None,
            }),
        };
        let second = stage_prompt(prompt, &rb, 1, &[done]);
        assert!(second.contains("# Runbook stage `report` (2 of 2)"));
        assert!(second.contains(
            "- `plan` (plan ready): r/plan.md sha256:ab (2 bytes); gate `approve` approved by terminal:alice"
        ));
        assert!(second.contains("This is the last stage"));
        assert!(!second.contains("decides the gate"));
    }

    // What a stage kept is put back byte for byte and checked against its hash; a changed copy,
    // or a link in the way, is refused (the stage then runs again), never written through.
    #[test]
    fn a_kept_stage_is_restored_only_as_it_was_hashed() {
        let rb = staged();
        let (work, kept, fresh) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        std::fs::create_dir(work.path().join("r")).unwrap();
        std::fs::write(work.path().join("r/plan.md"), "the plan").unwrap();
        let rec = checkpoint(&rb.checkpoints[0], work.path());
        assert_eq!(rec.artifacts[0].bytes, Some(8));
        let dir = kept.path().join("plan");
        keep_stage(&rec, work.path(), &dir).unwrap();
        restore_stage(&rec, &dir, fresh.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(fresh.path().join("r/plan.md")).unwrap(),
            "the plan"
        );

        let linked = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), linked.path().join("r")).unwrap();
        let refused = restore_stage(&rec, &dir, linked.path()).unwrap_err();
        assert!(
            refused.contains("is in the way of `r/plan.md`"),
            "{refused}"
        );
        assert!(!elsewhere.path().join("plan.md").exists());

        std::fs::write(dir.join("r/plan.md"), "another plan").unwrap();
        let changed = restore_stage(&rec, &dir, tempfile::tempdir().unwrap().path()).unwrap_err();
        assert_eq!(changed, "the kept `r/plan.md` is not what was hashed");
    }

    // A resumed run folds each stage's last line, by set, in the order the stages were logged.
    #[test]
    fn folded_stages_keep_each_stages_last_line() {
        let line = |set: &str, stage: &str, approved: Option<bool>| RunbookStage {
            task: "t".into(),
            set: set.into(),
            checkpoint: CheckpointRecord {
                stage: stage.into(),
                artifacts: Vec::new(),
                gate: approved.map(|approved| GateRecord {
                    id: "g".into(),
                    approved,
                    by: "terminal:a".into(),
                    digest: String::new(),
                    note: None,
                }),
            },
            cost_usd: 0.0,
        };
        let folded = fold_stages(vec![
            line("t", "plan", None),
            line("t[a]", "plan", None),
            line("t", "plan", Some(true)),
            line("t", "report", None),
        ]);
        let t: Vec<_> = (folded["t"].iter())
            .map(|s| (s.checkpoint.stage.as_str(), s.checkpoint.gate.is_some()))
            .collect();
        assert_eq!(t, [("plan", true), ("report", false)]);
        assert_eq!(folded["t[a]"].len(), 1);
    }
}

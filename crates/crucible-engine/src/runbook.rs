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
    ArtifactRecord, CheckpointRecord, GateRecord, PredicateRecord, RunbookLedger,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The largest artifact hashed, in bytes: a larger one is recorded as too large.
pub const MAX_ARTIFACT_BYTES: u64 = 64 * 1024 * 1024;

/// The ledger of a turn of `rb` that ran in `cwd`: its checkpoints and predicates as the turn
/// left its files. Gates are decided afterwards ([`gate_evidence`]).
pub fn ledger(rb: &TaskRunbook, cwd: &Path) -> RunbookLedger {
    let dir = PackDir::open(cwd).ok();
    let look = |path: &str| observe(dir.as_ref(), path);
    RunbookLedger {
        name: rb.name.clone(),
        digest: rb.digest.clone(),
        checkpoints: (rb.checkpoints.iter())
            .map(|c| CheckpointRecord {
                stage: c.stage.clone(),
                artifacts: c.artifact_paths.iter().map(|p| look(p)).collect(),
                gate: None,
            })
            .collect(),
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
    /// Attempts run in the bubblewrap sandbox.
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
            "{at}, whose effect classes leave out {}: only the bubblewrap sandbox takes those away, and this run opted out of it ({} or {})",
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

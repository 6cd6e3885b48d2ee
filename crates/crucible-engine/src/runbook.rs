//! Running a runbook (issue 15, Runbook contract v1): what the engine does with a `skill()`
//! task whose plan carries a [`TaskRunbook`]. When its turn finishes, each checkpoint's declared
//! artifacts are hashed into the row's ledger (their SHA-256 and size, never their contents),
//! and each success predicate is checked: a turn that claims success while one fails has failed,
//! by name. The files are read below the turn's working directory without following links, so
//! a link or a special file is never taken for an artifact. A checkpoint's gate is then put to
//! a person ([`Gatekeeper`], the CLI's terminal); a run with a gate and no one to ask is refused
//! before dispatch, with everything else it cannot enforce ([`unenforceable`]).

use crucible_pack::files::{PackDir, PackFileErrorKind};
use crucible_plan::runbook::{PredicateKind, TaskRunbook};
use crucible_plan::wire::{
    ArtifactRecord, CheckpointRecord, GateRecord, PredicateRecord, RunbookLedger,
};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The largest artifact hashed, in bytes: a larger one is recorded as too large.
pub const MAX_ARTIFACT_BYTES: u64 = 64 * 1024 * 1024;

/// The ledger of a turn of `rb` that ran in `cwd`: its checkpoints and predicates as the turn
/// left its files. Gates are decided afterwards ([`pass_gates`]).
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
    /// A person can be asked at a gate (the engine has a terminal to ask on).
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
    if forbids(PROCESS_EXEC) {
        out.push(format!(
            "{at}, which leaves out `process.exec`: every agent turn here is a process that may start others (a shell command, or a CLI with a shell tool), and nothing withholds that; allow `process.exec`"
        ));
    }
    if !how.can_ask {
        for gate in rb.checkpoints.iter().filter_map(|c| c.gate.as_ref()) {
            out.push(format!(
                "{at}, which has the gate `{}`: a gate waits for a person, and this run has no terminal to ask on; run it on a terminal (stdin and stderr), or remove the gate",
                gate.id
            ));
        }
    }
    out
}

/// The effect class of starting processes.
pub const PROCESS_EXEC: &str = "process.exec";

/// What a person is shown at a gate: the stage's summary and its artifacts as hashed.
#[derive(Clone, Debug)]
pub struct GateAsk {
    pub task: String,
    pub runbook: String,
    pub gate: crucible_plan::runbook::Gate,
    pub stage: String,
    pub summary: String,
    pub artifacts: Vec<ArtifactRecord>,
}

/// A person the run can ask at a gate (the CLI's terminal). The engine never passes a gate
/// without one: a run that could not ask is refused before dispatch ([`unenforceable`]).
pub trait Gatekeeper: Send + Sync {
    /// Shows `ask` and waits for the decision: `Ok(true)` approved, `Ok(false)` rejected, `Err`
    /// when no answer could be had (the terminal closed), which is never an approval.
    fn decide(&self, ask: &GateAsk) -> Result<bool, String>;
}

/// Asks `keeper` at each gate of a turn that passed, in checkpoint order, recording each decision
/// in `ledger`; the first gate not approved fails the turn, with why.
pub fn pass_gates(
    task: &str,
    rb: &TaskRunbook,
    ledger: &mut RunbookLedger,
    keeper: &dyn Gatekeeper,
) -> Result<(), String> {
    for (c, rec) in rb.checkpoints.iter().zip(ledger.checkpoints.iter_mut()) {
        let Some(gate) = &c.gate else { continue };
        let ask = GateAsk {
            task: task.to_string(),
            runbook: rb.name.clone(),
            gate: gate.clone(),
            stage: c.stage.clone(),
            summary: c.summary.clone(),
            artifacts: rec.artifacts.clone(),
        };
        let decided = keeper.decide(&ask);
        rec.gate = Some(GateRecord {
            id: gate.id.clone(),
            approved: decided == Ok(true),
            by: "terminal".into(),
        });
        match decided {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "runbook `{}`: gate `{}` was rejected at the terminal",
                    rb.name, gate.id
                ))
            }
            Err(why) => {
                return Err(format!(
                "runbook `{}`: gate `{}` got no decision ({why}); it is never passed without one",
                rb.name, gate.id
            ))
            }
        }
    }
    Ok(())
}

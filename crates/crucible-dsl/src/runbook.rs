//! `skill(runbook = "dir")`, or a `skill` directory holding `runbook.json` (issue 15): the
//! bundle is checked and sealed when the playbook compiles, so an invalid contract is a compile
//! error at `<dir>/runbook.json:line:col` naming its rule, and the plan records the sealed
//! release (its digest and the bounds the engine enforces). The turn's prompt is the sealed
//! procedure, with what the contract expects of the turn said after it.

use crate::ctx::{Args, R};
use crate::diag::rules;
use crucible_pack::runbook::{seal_checked, BundleError, Runbook, CONTRACT_FILE};
use crucible_plan::runbook::TaskRunbook;

/// Whether the pack directory `dir` is a runbook bundle (it holds `runbook.json`).
pub fn is_bundle(a: &Args, dir: &str) -> bool {
    std::fs::symlink_metadata(a.ctx.pack_root.join(dir).join(CONTRACT_FILE)).is_ok()
}

/// Checks and seals the bundle `dir` (named by argument `arg`): the procedure text the turn is
/// given and what the plan records of the release.
pub fn compile(a: &Args, arg: &str, dir: &str) -> R<(String, TaskRunbook)> {
    let root = a.ctx.pack_root.join(dir);
    let (release, runbook) = match seal_checked(&root) {
        Ok((release, checked)) => (release, checked.runbook),
        Err(BundleError::Refused(r)) => return Err(refused(a, arg, dir, r.errors.0)),
        Err(e) => {
            return Err(a.fail(
                Some(arg),
                rules::FILE,
                format!(
                    "{}(): the runbook bundle `{dir}` cannot be sealed: {e}",
                    a.ctor
                ),
                "a bundle holds only regular files and directories below the pack".into(),
            ))
        }
    };
    let procedure = a.pack_text(arg, &format!("{dir}/{}", release.procedure))?;
    let expected = expectations(&runbook);
    let text = match expected.is_empty() {
        true => procedure,
        false => format!("{}{expected}", procedure.trim_end()),
    };
    Ok((
        text,
        TaskRunbook {
            name: runbook.name,
            digest: release.digest,
            effects: (runbook.allowed_effect_classes.iter())
                .map(|e| e.spelling())
                .collect(),
            capabilities: runbook.required_capabilities,
            predicates: runbook.success_predicates,
            checkpoints: runbook.checkpoints,
        },
    ))
}

/// Each contract error at its place in the bundle's `runbook.json`, then one at the call.
fn refused(
    a: &Args,
    arg: &str,
    dir: &str,
    errors: Vec<crucible_plan::diag::Diagnostic>,
) -> anyhow::Error {
    let n = errors.len();
    for mut d in errors {
        d.file = format!("{dir}/{}", d.file.trim_start_matches(&format!("{dir}/")));
        a.ctx.diags.borrow_mut().push(d);
    }
    a.fail(
        Some(arg),
        rules::RUNBOOK,
        format!(
            "{}(): the runbook bundle `{dir}` is refused ({n} error(s) in {dir}/{CONTRACT_FILE})",
            a.ctor
        ),
        format!("fix {dir}/{CONTRACT_FILE}; `crucible runbook validate {dir}` checks it alone"),
    )
}

/// What the contract expects of the turn, said after the procedure: the skills it may read,
/// the artifacts it produces and the checks made when it claims success.
fn expectations(r: &Runbook) -> String {
    let mut out = String::new();
    if !r.skill_dependencies.is_empty() {
        out.push_str("\n\n## Skills you may read\n\nWhen you need one, read its SKILL.md in the runbook's directory:\n");
        for d in &r.skill_dependencies {
            out.push_str(&format!("\n- {d}/SKILL.md"));
        }
    }
    if !r.artifacts.is_empty() {
        out.push_str(
            "\n\n## Artifacts\n\nWrite these files, relative to your working directory:\n",
        );
        for x in &r.artifacts {
            let req = if x.required { ", required" } else { "" };
            out.push_str(&format!(
                "\n- {} (`{}`, stage {}{req})",
                x.path, x.name, x.stage
            ));
        }
    }
    if !r.success_predicates.is_empty() {
        out.push_str("\n\n## Checked when you claim success\n");
        for p in &r.success_predicates {
            out.push_str(&format!("\n- {} {}", p.kind.spelling(), p.path));
        }
    }
    out
}

//! `crucible runbook …`: prints what the runbook layer (`crucible_pack::runbook`) decides.

use crate::args::RunbookDirArgs;
use anyhow::Result;
use crucible_pack::runbook::{self, Checked};
use crucible_plan::diag::Diagnostic;
use crucible_plan::terminal::{escape, escape_lines};
use std::process::ExitCode;

fn warnings(ws: &[Diagnostic]) {
    for w in ws {
        eprintln!("{}\n", escape_lines(&w.render("warning")));
    }
}

/// The bundle's contract, or its errors printed (exit 1).
fn checked(dir: &std::path::Path) -> Result<Checked, ExitCode> {
    runbook::check(dir).map_err(|refused| {
        warnings(&refused.warnings);
        eprintln!("{}", escape_lines(&refused.errors.to_string()));
        eprintln!("\n{} error(s)", refused.errors.0.len());
        ExitCode::from(1)
    })
}

pub fn validate(a: &RunbookDirArgs) -> Result<ExitCode> {
    let c = match checked(&a.dir) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    warnings(&c.warnings);
    let r = &c.runbook;
    println!(
        "valid: {} {} (procedure {}, {} skill dependenc{}, {} warning(s))",
        escape(&r.name),
        escape(&r.version),
        escape(&r.procedure),
        r.skill_dependencies.len(),
        if r.skill_dependencies.len() == 1 {
            "y"
        } else {
            "ies"
        },
        c.warnings.len()
    );
    Ok(ExitCode::SUCCESS)
}

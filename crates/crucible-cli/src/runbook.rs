//! `crucible runbook …`: prints what the runbook layer (`crucible_pack::runbook`) decides.

use crate::args::{ConvertArgs, RunbookDirArgs, SealArgs};
use anyhow::Result;
use crucible_pack::runbook::{self, BundleError, Checked, Refused};
use crucible_plan::diag::Diagnostic;
use crucible_plan::terminal::{escape, escape_lines};
use std::process::ExitCode;

fn warnings(ws: &[Diagnostic]) {
    for w in ws {
        eprintln!("{}\n", escape_lines(&w.render("warning")));
    }
}

fn refused(r: &Refused) -> ExitCode {
    warnings(&r.warnings);
    eprintln!("{}", escape_lines(&r.errors.to_string()));
    eprintln!("\n{} error(s)", r.errors.0.len());
    ExitCode::from(1)
}

/// The value, or the failure printed (a refused contract as its diagnostics) and exit 1.
fn done<T>(result: Result<T, BundleError>) -> Result<T, ExitCode> {
    result.map_err(|e| match e {
        BundleError::Refused(r) => refused(&r),
        other => {
            eprintln!("error: {}", escape_lines(&other.to_string()));
            ExitCode::from(1)
        }
    })
}

fn summary(c: &Checked) -> String {
    let r = &c.runbook;
    let n = r.skill_dependencies.len();
    format!(
        "{} {} (procedure {}, {n} skill dependenc{}, {} warning(s))",
        escape(&r.name),
        escape(&r.version),
        escape(&r.procedure),
        if n == 1 { "y" } else { "ies" },
        c.warnings.len()
    )
}

pub fn validate(a: &RunbookDirArgs) -> Result<ExitCode> {
    let c = match runbook::check(&a.dir) {
        Ok(c) => c,
        Err(r) => return Ok(refused(&r)),
    };
    warnings(&c.warnings);
    println!("valid: {}", summary(&c));
    Ok(ExitCode::SUCCESS)
}

pub fn seal(a: &SealArgs) -> Result<ExitCode> {
    let (release, ws) = match done(runbook::seal(&a.dir)) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    warnings(&ws);
    if let Some(store) = &a.store {
        match done(runbook::store(&a.dir, &release, store)) {
            Ok(at) => eprintln!("stored: {}", escape(&at.display().to_string())),
            Err(code) => return Ok(code),
        }
    }
    println!("{}", serde_json::to_string_pretty(&release)?);
    Ok(ExitCode::SUCCESS)
}

pub fn from_skill(a: &ConvertArgs) -> Result<ExitCode> {
    let c = match done(runbook::from_skill(&a.from, &a.dest)) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    warnings(&c.warnings);
    println!(
        "wrote {}: {}",
        escape(&a.dest.display().to_string()),
        summary(&c)
    );
    println!(
        "review runbook.json before sealing: a skill declares no effects, capabilities, \
         predicates or gates, so it allows only filesystem.read and runs only when named"
    );
    Ok(ExitCode::SUCCESS)
}

pub fn to_skill(a: &ConvertArgs) -> Result<ExitCode> {
    if let Err(code) = done(runbook::to_skill(&a.from, &a.dest)) {
        return Ok(code);
    }
    println!(
        "wrote {}: the procedure is its SKILL.md; runbook.json was left out",
        escape(&a.dest.display().to_string())
    );
    Ok(ExitCode::SUCCESS)
}

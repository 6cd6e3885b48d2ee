//! `check`, `plan compile`, `plan params`, `plan show`, `pack digest`.

use crate::args::{CheckArgs, CompileArgs, DigestArgs, ParamsArgs, ShowArgs};
use anyhow::{bail, Result};
use std::process::ExitCode;

pub fn check(_: &CheckArgs) -> Result<ExitCode> {
    bail!("`crucible check` is not built yet")
}

pub fn compile(_: &CompileArgs) -> Result<ExitCode> {
    bail!("`crucible plan compile` is not built yet")
}

pub fn params(_: &ParamsArgs) -> Result<ExitCode> {
    bail!("`crucible plan params` is not built yet")
}

pub fn show(_: &ShowArgs) -> Result<ExitCode> {
    bail!("`crucible plan show` is not built yet")
}

pub fn pack_digest(_: &DigestArgs) -> Result<ExitCode> {
    bail!("`crucible pack digest` is not built yet")
}

//! `plan run`, `plan rerun`, `runs`.

use crate::args::{RerunArgs, RunArgs, RunsArgs};
use anyhow::{bail, Result};
use std::process::ExitCode;

pub fn plan_run(_: &RunArgs) -> Result<ExitCode> {
    bail!("`crucible plan run` is not built yet")
}

pub fn plan_rerun(_: &RerunArgs) -> Result<ExitCode> {
    bail!("`crucible plan rerun` is not built yet")
}

pub fn runs(_: &RunsArgs) -> Result<ExitCode> {
    bail!("`crucible runs` is not built yet")
}

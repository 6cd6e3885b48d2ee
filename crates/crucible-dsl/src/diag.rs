//! Compile diagnostics: the shared renderer (`crucible_plan::diag`) and the dialect's rule ids.

pub use crucible_plan::diag::{Diagnostic, Diagnostics};

/// The closest candidate, when near enough to be a likely misspelling.
pub fn did_you_mean<'s>(
    word: &str,
    candidates: impl IntoIterator<Item = &'s str>,
) -> Option<String> {
    crucible_plan::validate::did_you_mean(word, candidates).map(str::to_string)
}

/// Rule ids of the dialect itself (clause ids are used where a clause applies).
pub mod rules {
    pub const PARAMS: &str = "RFC-0002:C-PLAYBOOK-PARAMS";
    pub const LANE: &str = "RFC-0002:C-PLAYBOOK-LANE";
    pub const ROUTE: &str = "RFC-0001:C-ROUTE";
    pub const WORKFLOW: &str = "RFC-0001:C-WORKFLOW";
    pub const ARG: &str = "argument";
    pub const SYNTAX: &str = "syntax";
    pub const EVAL: &str = "evaluation";
    pub const LIMIT: &str = "limit";
    pub const FILE: &str = "file-access";
    pub const SCHEMA: &str = "schema_file";
    pub const LISTED: &str = "workflow-tasks";
    /// A runbook bundle that cannot run (issue 15).
    pub const RUNBOOK: &str = "runbook";
}

//! Runbooks (issue 15, Runbook contract v1): a `runbook.json` contract around a Markdown
//! procedure, kept in a bundle directory with optional skill dependencies.
//!
//! This layer is pure: it reads a bundle, checks the contract ([`validate`]), seals releases
//! ([`release`]) and converts to and from skills ([`skill`]); the CLI only prints what it
//! decides. It knows nothing of runs or processes.

mod jsonpos;
pub mod release;
pub mod select;
pub mod skill;
pub mod validate;

/// The contract's predicates and checkpoints are what a plan carries of it.
pub use crucible_plan::runbook::{Checkpoint, Gate, Predicate, PredicateKind};
pub use release::{seal, seal_checked, store, BundleError, Release};
pub use skill::{from_skill, to_skill};
pub use validate::{check, Checked, Refused};

/// The contract file at the bundle root.
pub const CONTRACT_FILE: &str = "runbook.json";

/// A contract that passed every rule, its procedure resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runbook {
    pub name: String,
    /// The author's label only: a release's identity is its content digest.
    pub version: String,
    pub description: String,
    pub invocation: Invocation,
    pub required_capabilities: Vec<String>,
    pub allowed_effect_classes: Vec<EffectClass>,
    /// The bundle-relative procedure file: `procedure`, else `RUNBOOK.md`, else `SKILL.md`.
    pub procedure: String,
    /// Bundle-relative directories, each holding a `SKILL.md`.
    pub skill_dependencies: Vec<String>,
    pub applicability: Applicability,
    pub artifacts: Vec<Artifact>,
    pub success_predicates: Vec<Predicate>,
    pub checkpoints: Vec<Checkpoint>,
    pub evidence_policy: EvidencePolicy,
}

/// Whether a runbook may be chosen automatically or only when named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invocation {
    Explicit,
    Auto,
}

/// One class of effect the procedure may request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EffectClass {
    FilesystemRead,
    FilesystemWrite,
    ProcessExec,
    Network,
    Governance,
    /// One named tool.
    Tool(String),
    /// Every effect (`*`): allowed, with a warning.
    Any,
}

impl EffectClass {
    /// The fixed classes by their contract spelling (`tool:<name>` and `*` aside).
    pub const NAMED: &'static [(&'static str, EffectClass)] = &[
        ("filesystem.read", EffectClass::FilesystemRead),
        ("filesystem.write", EffectClass::FilesystemWrite),
        ("process.exec", EffectClass::ProcessExec),
        ("network", EffectClass::Network),
        ("governance", EffectClass::Governance),
    ];

    /// The contract spelling.
    pub fn spelling(&self) -> String {
        match self {
            EffectClass::FilesystemRead => "filesystem.read".into(),
            EffectClass::FilesystemWrite => "filesystem.write".into(),
            EffectClass::ProcessExec => "process.exec".into(),
            EffectClass::Network => "network".into(),
            EffectClass::Governance => "governance".into(),
            EffectClass::Tool(name) => format!("tool:{name}"),
            EffectClass::Any => "*".into(),
        }
    }
}

/// Where an automatic runbook applies. Every list empty means anywhere.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applicability {
    pub cwd_globs: Vec<String>,
    pub required_files: Vec<String>,
    pub forbidden_files: Vec<String>,
}

/// A file the run produces, relative to the run's working directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    pub name: String,
    pub path: String,
    pub stage: String,
    pub required: bool,
}

/// What evidence of a run may be kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EvidencePolicy {
    /// Recorded as written; argument values are minimized to hashes whatever it says.
    pub retain_argument_values: bool,
    pub promotion_levels: Vec<String>,
}

//! What a plan carries of a runbook a `skill()` task runs (issue 15, Runbook contract v1): the
//! sealed release's identity and the parts of its contract the engine enforces on the turn.
//! The contract itself is read, checked and sealed by `crucible_pack::runbook`, which shares
//! these types; the plan records them so a resumed run keeps the release it began with.

use serde::{Deserialize, Serialize};

/// A runbook run by a `skill()` task (its bundle directory is the task's `skill`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskRunbook {
    pub name: String,
    /// The sealed release (`tree1:` over the bundle): its identity, never its version label.
    pub digest: String,
    /// `allowedEffectClasses` as the contract spells them.
    pub effects: Vec<String>,
    /// `requiredCapabilities`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub predicates: Vec<Predicate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<Checkpoint>,
}

impl TaskRunbook {
    /// Whether the contract allows the effect class spelt `class` (directly or through `*`).
    pub fn allows(&self, class: &str) -> bool {
        self.effects.iter().any(|e| e == class || e == "*")
    }

    /// The tools a turn may use, where the contract lists `tool:<name>` classes and does not
    /// allow everything (`*`): the harness is given exactly these. `None`: the harness's own.
    pub fn tools(&self) -> Option<Vec<String>> {
        if self.effects.iter().any(|e| e == "*") {
            return None;
        }
        let tools: Vec<String> = (self.effects.iter())
            .filter_map(|e| e.strip_prefix("tool:"))
            .map(str::to_string)
            .collect();
        (!tools.is_empty()).then_some(tools)
    }
}

/// A deterministic check on the run's files, made when the turn claims success.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Predicate {
    #[serde(rename = "type")]
    pub kind: PredicateKind,
    pub path: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PredicateKind {
    /// The file exists.
    ArtifactExists,
    /// The file exists and is not empty.
    ArtifactNonempty,
}

impl PredicateKind {
    pub const ALL: &'static [(&'static str, PredicateKind)] = &[
        ("artifact_exists", PredicateKind::ArtifactExists),
        ("artifact_nonempty", PredicateKind::ArtifactNonempty),
    ];

    /// The contract spelling.
    pub fn spelling(self) -> &'static str {
        match self {
            PredicateKind::ArtifactExists => "artifact_exists",
            PredicateKind::ArtifactNonempty => "artifact_nonempty",
        }
    }
}

/// A stage boundary: its artifacts are hashed there, and a gate pauses the run for a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Checkpoint {
    pub stage: String,
    pub summary: String,
    pub artifact_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<Gate>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub id: String,
    pub prompt: String,
}

//! The Plan IR and everything every layer shares about it: the status and outcome vocabulary,
//! the session-log wire types, canonical JSON, digests, validation and renderers.
//!
//! Nothing here knows about Starlark, processes or the file system: the DSL produces a [`Plan`],
//! validation checks it, and the engine runs only a validated plan.

pub mod canonical;
pub mod diag;
pub mod duration;
pub mod picture;
pub mod plan;
pub mod render;
pub mod runbook;
pub mod terminal;
pub mod validate;
pub mod validated;
pub mod vocab;
pub mod wire;

pub use plan::{
    FieldRef, FieldType, FileDecl, Label, Plan, Question, ReportSpec, RouteSpec, Task, When,
    PLAN_VERSION,
};
pub use validated::{Graph, ValidatedPlan};
pub use vocab::*;

//! The playbook executor: dispatch, declared files, git memory, session log, ceilings, resume.

pub mod files;
pub mod graph;

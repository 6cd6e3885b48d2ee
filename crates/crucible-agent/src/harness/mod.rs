//! The harness seam (issue 10): how one agent turn becomes a process and what comes back.
//!
//! A [`Harness`] builds a turn's [`Spawn`] (a first turn, a session's later turn and a repair
//! turn all take the same path: [`Turn::resume`] says which conversation to continue), reads the
//! turn's stdout line by line as it arrives ([`Progress`]: session id, spend so far, errors,
//! final text), and once the process exits on its own turns all of it into a [`TurnOutcome`].
//! The engine owns the process (its group, deadline and kill) and the grading; each harness is
//! one module here.

pub mod command;

use crate::spawn::Spawn;
use crate::{AgentError, TurnResult, TurnSettings};
use std::path::Path;

/// One agent turn, as the engine asks for it.
pub struct Turn<'a> {
    pub task: &'a str,
    pub prompt: &'a str,
    /// The same prompt in a file, for a harness (or stand-in) that reads it from there.
    pub prompt_file: &'a Path,
    /// The workspace the turn works in; its result file is written at its root.
    pub cwd: &'a Path,
    /// The environment the engine gives every turn (the task environment with the task
    /// contract, then `[agent].env`); a harness adds only what it needs.
    pub env: &'a [(String, String)],
    pub settings: &'a TurnSettings,
    /// The `session()` the task belongs to.
    pub session: Option<&'a Session>,
    /// The harness's id of the conversation to continue: a session's later turn, or a repair
    /// turn. `None` starts a new conversation.
    pub resume: Option<&'a str>,
    /// `(round, of)` on a repair turn.
    pub repair: Option<(u32, u32)>,
}

/// A `session()` of the playbook, within one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// Its name in the playbook.
    pub name: String,
    /// The engine's id for it: `<run-id>-<name>`.
    pub id: String,
}

/// What a turn's stream has said so far; updated line by line while the turn runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    /// The harness's id of the conversation, once it has said it.
    pub session_id: Option<String>,
    /// What the turn has spent so far, in USD.
    pub spent_usd: f64,
    /// Errors the stream reported (tool errors, non-fatal harness errors).
    pub errors: Vec<String>,
    /// The model's final answer text, once known.
    pub final_text: Option<String>,
    /// A failure of the harness, its stream or its model API (spawn, 429, 5xx): the attempt is
    /// retried, never graded.
    pub transport: Option<String>,
}

/// A finished turn: its result file, the conversation it is part of, and what it spent.
#[derive(Debug)]
pub struct TurnOutcome {
    /// The `PLAN_TASK_RESULT.json` object; its absence is a measured failure.
    pub result: Result<TurnResult, AgentError>,
    /// The conversation a repair or a session's next turn resumes.
    pub session_id: Option<String>,
    pub spent_usd: f64,
    /// Set when the turn failed in transport (see [`Progress::transport`]).
    pub transport: Option<String>,
}

/// One way of running agent turns.
pub trait Harness: Send + Sync {
    /// The process of `turn`.
    fn spawn(&self, turn: &Turn<'_>) -> Spawn;
    /// Reads one stdout line of the running turn, as it arrives.
    fn read_line(&self, line: &[u8], progress: &mut Progress);
    /// The outcome of a turn whose process exited on its own with `exit` (`None`: a signal).
    fn finish(&self, turn: &Turn<'_>, progress: Progress, exit: Option<i32>) -> TurnOutcome;
}

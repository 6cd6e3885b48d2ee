//! The harness seam (issue 10): how one agent turn becomes a process and what comes back.
//!
//! A [`Harness`] builds a turn's [`Spawn`] (a first turn, a session's later turn and a repair
//! turn all take the same path: [`Turn::resume`] says which conversation to continue), reads the
//! turn's stdout line by line as it arrives ([`Progress`]: session id, spend so far, errors,
//! final text), and once the process exits on its own turns all of it into a [`TurnOutcome`].
//! The engine owns the process (its group, deadline and kill) and the grading; each harness is
//! one module here.

pub mod claude;
pub mod codex;
pub mod command;
pub mod pi;

use crate::inference::{Binding, Protocol};
use crate::spawn::{Mount, Spawn};
use crate::{AgentError, TurnResult, TurnSettings};
use std::path::{Path, PathBuf};

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
    /// Why the harness says the turn failed, in place of its stderr tail.
    pub note: Option<String>,
}

/// One way of running agent turns.
pub trait Harness: Send + Sync {
    /// The process of `turn`.
    fn spawn(&self, turn: &Turn<'_>) -> Spawn;
    /// Reads one stdout line of the running `turn`, as it arrives.
    fn read_line(&self, turn: &Turn<'_>, line: &[u8], progress: &mut Progress);
    /// The outcome of a turn whose process exited on its own with `exit` (`None`: a signal).
    fn finish(&self, turn: &Turn<'_>, progress: Progress, exit: Option<i32>) -> TurnOutcome;
}

/// The coding-agent CLIs crucible drives (`[agent] backend = "local"`), each pinned to the
/// version it was tested with (docs/agents.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HarnessKind {
    Claude,
    Codex,
    Pi,
}

/// Every harness, for listings.
pub const HARNESSES: [HarnessKind; 3] = [HarnessKind::Claude, HarnessKind::Codex, HarnessKind::Pi];

impl HarnessKind {
    /// The harness a setting names (case-insensitive). A harness the spec lists but this engine
    /// does not drive is refused by name.
    pub fn parse(name: &str) -> Result<HarnessKind, String> {
        let lower = name.to_ascii_lowercase();
        if let Some(k) = HARNESSES.into_iter().find(|k| k.name() == lower) {
            return Ok(k);
        }
        let known: Vec<&str> = HARNESSES.iter().map(|k| k.name()).collect();
        Err(format!(
            "harness {name:?} is not built (this engine drives {})",
            known.join(", ")
        ))
    }

    pub fn name(self) -> &'static str {
        match self {
            HarnessKind::Claude => "claude",
            HarnessKind::Codex => "codex",
            HarnessKind::Pi => "pi",
        }
    }

    /// The built-in tools the harness can be limited to by its own allow-list flag (Claude
    /// Code's `--tools`/`--allowedTools`, pi's `--tools`), by the names it gives them; `None`
    /// where it has no such flag (codex offers its shell and patch tools whatever it is told).
    pub fn tools(self) -> Option<&'static [&'static str]> {
        match self {
            // Claude Code 2.1.197's built-in tools, as it offers them to the model.
            HarnessKind::Claude => Some(&[
                "Agent",
                "Bash",
                "CronCreate",
                "CronDelete",
                "CronList",
                "Edit",
                "EnterWorktree",
                "ExitWorktree",
                "NotebookEdit",
                "Read",
                "ReportFindings",
                "ScheduleWakeup",
                "SendMessage",
                "Skill",
                "TaskCreate",
                "TaskGet",
                "TaskList",
                "TaskOutput",
                "TaskStop",
                "TaskUpdate",
                "WebFetch",
                "WebSearch",
                "Workflow",
                "Write",
            ]),
            HarnessKind::Codex => None,
            HarnessKind::Pi => Some(&["read", "bash", "edit", "write", "grep", "find", "ls"]),
        }
    }

    /// `names` as the harness spells its tools (matched without regard to case), or why it
    /// cannot be limited to them.
    pub fn allow_list(self, names: &[String]) -> Result<Vec<&'static str>, String> {
        let Some(known) = self.tools() else {
            return Err(format!(
                "{} has no flag that limits its tools, so it cannot be held to an allow-list",
                self.name()
            ));
        };
        names
            .iter()
            .map(|n| {
                known
                    .iter()
                    .copied()
                    .find(|k| k.eq_ignore_ascii_case(n))
                    .ok_or_else(|| {
                        format!(
                            "{} has no tool `{n}` (its tools are {})",
                            self.name(),
                            known.join(", ")
                        )
                    })
            })
            .collect()
    }

    /// The npm package and version the harness is pinned to.
    pub fn package(self) -> (&'static str, &'static str) {
        match self {
            HarnessKind::Claude => ("@anthropic-ai/claude-code", "2.1.197"),
            HarnessKind::Codex => ("@openai/codex", "0.171.0"),
            HarnessKind::Pi => ("@mariozechner/pi-coding-agent", "0.73.1"),
        }
    }

    /// The wire protocols its model endpoint may speak.
    pub fn protocols(self) -> &'static [Protocol] {
        match self {
            HarnessKind::Claude => &[Protocol::Messages],
            HarnessKind::Codex => &[Protocol::Responses],
            HarnessKind::Pi => &[
                Protocol::ChatCompletions,
                Protocol::Responses,
                Protocol::Messages,
            ],
        }
    }

    /// Whether its spend is priced from tokens by the run's price table (its stream reports
    /// no money of its own, or prices from the table crucible gives it).
    pub fn priced_by_table(self) -> bool {
        match self {
            HarnessKind::Claude => false,
            HarnessKind::Codex | HarnessKind::Pi => true,
        }
    }
}

/// Where a harness's CLI is: the path the manifest names, else its name on the engine's PATH;
/// refused unless it runs and reports its pinned version.
pub fn locate(kind: HarnessKind, configured: Option<&Path>) -> Result<PathBuf, String> {
    let (package, pinned) = kind.package();
    let install = format!("install it with scripts/install-agents.sh ({package}@{pinned})");
    let program = match configured {
        Some(p) => p.to_path_buf(),
        None => std::env::var_os("PATH")
            .and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(kind.name()))
                    .find(|p| p.is_file())
            })
            .ok_or_else(|| format!("the {} CLI is not on PATH: {install}", kind.name()))?,
    };
    let out = std::process::Command::new(&program)
        .arg("--version")
        .env_clear()
        .envs(std::env::var_os("PATH").map(|p| ("PATH", p)))
        .env("HOME", std::env::temp_dir().join("crucible-version-probe"))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{} cannot run: {e}; {install}", program.display()))?;
    // pi prints its version on stderr.
    let text = format!(
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let version = text
        .split_whitespace()
        .find(|w| w.split('.').count() == 3 && w.split('.').all(|n| n.parse::<u32>().is_ok()));
    match version {
        Some(v) if v == pinned => Ok(program),
        Some(v) => Err(format!(
            "{} is {} {v}, and this engine is tested with {pinned} only: {install}",
            program.display(),
            kind.name()
        )),
        None => Err(format!(
            "{} did not report a version: {install}",
            program.display()
        )),
    }
}

/// The harness `name` (an agent task's resolved harness setting) on the local backend, with its
/// CLI at the path `cli` gives for it (the manifest's `[agent.cli]`), else on PATH: what `plan
/// run` refuses before dispatch and `check` reports alike.
pub fn resolve(
    name: Option<&str>,
    cli: impl Fn(HarnessKind) -> Option<PathBuf>,
) -> Result<(HarnessKind, PathBuf), String> {
    let name = name.ok_or(
        "it names no harness: set [agent] harness (or the task's), pass --harness, or use [agent] backend = \"command\" with agent_cmd",
    )?;
    let kind = HarnessKind::parse(name)?;
    Ok((kind, locate(kind, cli(kind).as_deref())?))
}

/// What a local harness is given for a run.
#[derive(Clone, Debug)]
pub struct Local {
    /// Its CLI, as [`locate`] found it.
    pub program: PathBuf,
    /// Its own directory under the run's state directory: its config, sessions and logs live
    /// here, never in the operator's own.
    pub home: PathBuf,
    /// The model endpoint (the `CRUCIBLE_INFERENCE` agent binding); `None` uses the CLI's own
    /// default endpoint.
    pub endpoint: Option<Binding>,
    /// The endpoint's key (the value of the binding's `key_env`).
    pub key: Option<String>,
    /// What tokens cost, for a harness whose stream reports no money.
    pub prices: crate::prices::Prices,
}

impl Local {
    /// The mounts a turn of this harness needs: its home (read-write), its install, and the
    /// prompt file when the prompt is passed by it.
    fn mounts(&self, turn: &Turn<'_>) -> Vec<Mount> {
        let mut mounts = vec![Mount {
            path: self.home.clone(),
            writable: true,
        }];
        // The install directory: the package the CLI resolves into (a node_modules tree).
        let real = std::fs::canonicalize(&self.program).unwrap_or_else(|_| self.program.clone());
        let install = real
            .ancestors()
            .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
            .or(real.parent())
            .map(Path::to_path_buf);
        mounts.extend(install.map(|path| Mount {
            path,
            writable: false,
        }));
        if turn.prompt.len() > command::PROMPT_ENV_MAX {
            mounts.push(Mount {
                path: turn.prompt_file.to_path_buf(),
                writable: false,
            });
        }
        mounts
    }

    /// The turn's model: its own setting, else the endpoint's.
    fn model<'a>(&'a self, turn: &'a Turn<'_>) -> Option<&'a str> {
        (turn.settings.model.as_deref()).or(self.endpoint.as_ref().map(|b| b.model.as_str()))
    }

    /// The process of `turn`: `argv` with `env`, in the turn's workspace, with its mounts.
    fn spawn(&self, turn: &Turn<'_>, argv: Vec<String>, env: Vec<(String, String)>) -> Spawn {
        Spawn {
            argv,
            env,
            cwd: turn.cwd.to_path_buf(),
            mounts: self.mounts(turn),
        }
    }

    /// The turn's base environment with `HOME` set to the harness's own directory, so nothing
    /// of the operator's own configuration is read or written.
    fn env(&self, turn: &Turn<'_>) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = (turn.env.iter())
            .filter(|(k, _)| k != "HOME")
            .cloned()
            .collect();
        env.push(("HOME".into(), self.home.to_string_lossy().into_owned()));
        env
    }
}

/// The harness of `kind` for a run; `Err` when its run directory cannot be set up.
pub fn local(kind: HarnessKind, setup: Local) -> Result<Box<dyn Harness>, String> {
    Ok(match kind {
        HarnessKind::Claude => Box::new(claude::Claude::new(setup)),
        HarnessKind::Codex => Box::new(codex::Codex::new(setup)?),
        HarnessKind::Pi => Box::new(pi::Pi::new(setup)?),
    })
}

/// A finished turn of a CLI harness: its result file and what its stream said. A CLI that
/// exited non-zero without a failure on its stream (`quiet`) failed in transport: `ended`
/// says how, after the exit.
fn outcome(
    ended: (&str, &str),
    turn: &Turn<'_>,
    progress: Progress,
    exit: Option<i32>,
    quiet: bool,
) -> TurnOutcome {
    let mut transport = progress.transport;
    if exit != Some(0) && transport.is_none() && quiet {
        let how = exit.map_or("by a signal".to_string(), |c| format!("exit {c}"));
        let (name, what) = ended;
        transport = Some(format!("{name} ended ({how}) {what}"));
    }
    TurnOutcome {
        result: crate::take_result(turn.task, turn.cwd),
        session_id: progress.session_id,
        spent_usd: progress.spent_usd,
        transport,
        note: (!progress.errors.is_empty()).then(|| progress.errors.join("; ")),
    }
}

/// The text of a long prompt that cannot go on the command line: a pointer to its file.
fn prompt_arg(turn: &Turn<'_>) -> String {
    if turn.prompt.len() <= command::PROMPT_ENV_MAX {
        turn.prompt.to_string()
    } else {
        format!(
            "Your task is too long for the command line: read the file {} and do what it says.",
            turn.prompt_file.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::HarnessKind;

    // Issue 15: a runbook's `tool:<name>` classes as each harness spells its tools, matched
    // without regard to case; a tool a harness lacks, or a harness with no allow-list flag, is
    // said so (admission refuses it before dispatch).
    #[test]
    fn allow_lists_in_each_harness_spelling() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            HarnessKind::Claude.allow_list(&names(&["read", "WRITE"])),
            Ok(vec!["Read", "Write"])
        );
        assert_eq!(
            HarnessKind::Pi.allow_list(&names(&["Read", "bash"])),
            Ok(vec!["read", "bash"])
        );
        assert!(HarnessKind::Pi
            .allow_list(&names(&["Glob"]))
            .unwrap_err()
            .starts_with("pi has no tool `Glob`"));
        assert_eq!(
            HarnessKind::Codex
                .allow_list(&names(&["read"]))
                .unwrap_err(),
            "codex has no flag that limits its tools, so it cannot be held to an allow-list"
        );
    }
}

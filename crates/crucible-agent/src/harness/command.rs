//! The command stand-in (`[agent] backend = "command"` or `--agent-cmd`): the turn is `sh -c
//! agent_cmd`, told everything through its environment, and answers in `PLAN_TASK_RESULT.json`
//! like any harness. Its spend is the result's own `cost_usd` (RFC-0001 notes §4).

use super::{Harness, Progress, Turn, TurnOutcome};
use crate::spawn::Spawn;

/// The largest prompt passed in `CRUCIBLE_PROMPT`: Linux refuses any single environment string
/// over 128 KiB, which would fail the spawn. A larger prompt is only in `CRUCIBLE_PROMPT_FILE`.
pub const PROMPT_ENV_MAX: usize = 120 * 1024;

/// Runs `agent_cmd` as every turn.
pub struct Command {
    pub agent_cmd: String,
}

impl Harness for Command {
    /// The turn's environment adds `CRUCIBLE_PROMPT` (up to [`PROMPT_ENV_MAX`]) and
    /// `CRUCIBLE_PROMPT_FILE`; `CRUCIBLE_HARNESS`, `CRUCIBLE_MODEL`, `CRUCIBLE_EFFORT` when set;
    /// in a session `CRUCIBLE_AGENT_SESSION` (its name), `CRUCIBLE_AGENT_SESSION_ID` and
    /// `CRUCIBLE_AGENT_SESSION_ACTION` (`start` or `resume`); on a repair turn
    /// `CRUCIBLE_REPAIR=<round>/<of>`.
    fn spawn(&self, turn: &Turn<'_>) -> Spawn {
        let mut env = turn.env.to_vec();
        let mut set = |k: &str, v: &str| env.push((k.to_string(), v.to_string()));
        if turn.prompt.len() <= PROMPT_ENV_MAX {
            set("CRUCIBLE_PROMPT", turn.prompt);
        }
        set("CRUCIBLE_PROMPT_FILE", &turn.prompt_file.to_string_lossy());
        let s = turn.settings;
        for (name, value) in [
            ("CRUCIBLE_HARNESS", &s.harness),
            ("CRUCIBLE_MODEL", &s.model),
            ("CRUCIBLE_EFFORT", &s.effort),
        ] {
            if let Some(v) = value {
                set(name, v);
            }
        }
        if let Some(session) = turn.session {
            set("CRUCIBLE_AGENT_SESSION", &session.name);
            set("CRUCIBLE_AGENT_SESSION_ID", &session.id);
            let action = if turn.resume.is_some() {
                "resume"
            } else {
                "start"
            };
            set("CRUCIBLE_AGENT_SESSION_ACTION", action);
        }
        if let Some((round, of)) = turn.repair {
            set("CRUCIBLE_REPAIR", &format!("{round}/{of}"));
        }
        Spawn::shell(&self.agent_cmd, turn.cwd, env)
    }

    /// The stand-in's stdout is its own; nothing in it is read.
    fn read_line(&self, _turn: &Turn<'_>, _line: &[u8], _progress: &mut Progress) {}

    /// The exit status is graded by the engine like any turn's; the conversation is the
    /// session's (the stand-in keeps its own state, if any).
    fn finish(&self, turn: &Turn<'_>, _progress: Progress, _exit: Option<i32>) -> TurnOutcome {
        let result = crate::take_result(turn.task, turn.cwd);
        let spent_usd = result.as_ref().map_or(0.0, |r| r.cost_usd);
        TurnOutcome {
            result,
            session_id: turn.session.map(|s| s.id.clone()),
            spent_usd,
            transport: None,
            note: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Session;
    use super::*;
    use crate::TurnSettings;
    use std::path::Path;

    fn turn<'a>(
        prompt: &'a str,
        settings: &'a TurnSettings,
        session: Option<&'a Session>,
        resume: Option<&'a str>,
    ) -> Turn<'a> {
        Turn {
            task: "t",
            prompt,
            prompt_file: Path::new("/run/t.prompt.md"),
            cwd: Path::new("/w"),
            env: &[],
            settings,
            session,
            resume,
            repair: None,
        }
    }

    fn names(s: &Spawn) -> Vec<&str> {
        s.env.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn env_sets_only_known_settings() {
        let h = Command {
            agent_cmd: "true".into(),
        };
        let settings = TurnSettings {
            model: Some("m".into()),
            ..Default::default()
        };
        let s = h.spawn(&turn("hi", &settings, None, None));
        assert_eq!(
            names(&s),
            ["CRUCIBLE_PROMPT", "CRUCIBLE_PROMPT_FILE", "CRUCIBLE_MODEL"]
        );
        assert_eq!(&s.argv[1..], ["-c", "true"]);
        let huge = "x".repeat(PROMPT_ENV_MAX + 1);
        let s = h.spawn(&turn(&huge, &TurnSettings::default(), None, None));
        assert_eq!(names(&s), ["CRUCIBLE_PROMPT_FILE"]);
    }

    #[test]
    fn a_session_turn_says_whether_it_starts_or_resumes() {
        let h = Command {
            agent_cmd: "true".into(),
        };
        let session = Session {
            name: "s1".into(),
            id: "run-s1".into(),
        };
        let settings = TurnSettings::default();
        let first = h.spawn(&turn("p", &settings, Some(&session), None));
        assert_eq!(first.var("CRUCIBLE_AGENT_SESSION"), Some("s1"));
        assert_eq!(first.var("CRUCIBLE_AGENT_SESSION_ID"), Some("run-s1"));
        assert_eq!(first.var("CRUCIBLE_AGENT_SESSION_ACTION"), Some("start"));
        let later = h.spawn(&turn("p", &settings, Some(&session), Some("run-s1")));
        assert_eq!(later.var("CRUCIBLE_AGENT_SESSION_ACTION"), Some("resume"));
    }
}

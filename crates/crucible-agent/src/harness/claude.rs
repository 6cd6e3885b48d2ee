//! Claude Code (`@anthropic-ai/claude-code`, pinned in [`super::HarnessKind::package`]) in
//! print mode with a `stream-json` stream (design/AGENT-HARNESSES.md §1):
//! `claude -p <prompt> --output-format stream-json --verbose --permission-mode acceptEdits
//! --allowedTools Bash [--model M] [--effort E] [--resume SID]`, cwd the workspace; a turn held
//! to an allow-list (a runbook's `tool:<name>` classes) gets `--tools L --allowedTools L`
//! instead of `--allowedTools Bash`.
//!
//! - Endpoint: `ANTHROPIC_BASE_URL` (the binding's URL, speaking `messages`) and
//!   `ANTHROPIC_API_KEY`; config in `CLAUDE_CONFIG_DIR` under the run's state directory.
//! - Its own retries are off (`CLAUDE_CODE_MAX_RETRIES=0`): crucible retries transport
//!   failures itself, and counts them; its telemetry is off.
//! - Stream: `system/init` and `result` carry the session id; `result` carries `total_cost_usd`
//!   (this process's spend only, also on resume), the final text and any API error.
//! - A resume must run in the same cwd, which a session's tasks share (the workspace).

use super::{prompt_arg, Harness, Local, Progress, Turn, TurnOutcome};
use crate::spawn::Spawn;
use serde_json::Value;

pub struct Claude {
    setup: Local,
}

impl Claude {
    pub fn new(setup: Local) -> Claude {
        Claude { setup }
    }
}

impl Harness for Claude {
    fn spawn(&self, turn: &Turn<'_>) -> Spawn {
        let mut argv: Vec<String> = vec![
            self.setup.program.to_string_lossy().into_owned(),
            "-p".into(),
            prompt_arg(turn),
            "--output-format".into(),
            "stream-json".into(),
            "--verbose".into(),
            "--permission-mode".into(),
            "acceptEdits".into(),
        ];
        match turn.settings.tools.as_deref() {
            // Only these tools are offered (`--tools`), and each is allowed without a prompt
            // (`--allowedTools`), so a turn never stalls on one it was given.
            Some(names) => {
                let list = super::HarnessKind::Claude
                    .allow_list(names)
                    .unwrap_or_default()
                    .join(",");
                argv.extend([
                    "--tools".into(),
                    list.clone(),
                    "--allowedTools".into(),
                    list,
                ]);
            }
            None => argv.extend(["--allowedTools".into(), "Bash".into()]),
        }
        if let Some(model) = self.setup.model(turn) {
            argv.extend(["--model".into(), model.to_string()]);
        }
        if let Some(effort) = &turn.settings.effort {
            // Claude's lowest level is `low`.
            let level = if effort == "minimal" { "low" } else { effort };
            argv.extend(["--effort".into(), level.to_string()]);
        }
        if let Some(id) = turn.resume {
            argv.extend(["--resume".into(), id.to_string()]);
        }
        let mut env = self.setup.env(turn);
        let config = self.setup.home.join("claude");
        let mut set = |k: &str, v: &str| env.push((k.to_string(), v.to_string()));
        set("CLAUDE_CONFIG_DIR", &config.to_string_lossy());
        set("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        set("CLAUDE_CODE_MAX_RETRIES", "0");
        set("DISABLE_AUTOUPDATER", "1");
        if let Some(url) = self.setup.endpoint.as_ref().and_then(|b| b.url.as_ref()) {
            // The CLI appends `/v1/messages` itself.
            set(
                "ANTHROPIC_BASE_URL",
                url.trim_end_matches('/').trim_end_matches("/v1"),
            );
        }
        if let Some(key) = &self.setup.key {
            set("ANTHROPIC_API_KEY", key);
        }
        self.setup.spawn(turn, argv, env)
    }

    fn read_line(&self, _turn: &Turn<'_>, line: &[u8], progress: &mut Progress) {
        let Ok(event) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        if let Some(id) = event.get("session_id").and_then(Value::as_str) {
            progress.session_id = Some(id.to_string());
        }
        if event.get("type").and_then(Value::as_str) != Some("result") {
            return;
        }
        if let Some(cost) = event.get("total_cost_usd").and_then(Value::as_f64) {
            if cost.is_finite() && cost >= 0.0 {
                progress.spent_usd = cost;
            }
        }
        let text = event
            .get("result")
            .and_then(Value::as_str)
            .map(str::to_string);
        if event.get("is_error").and_then(Value::as_bool) != Some(true) {
            progress.final_text = text;
            return;
        }
        let status = event.get("api_error_status").and_then(Value::as_u64);
        let what = text.unwrap_or_else(|| "the turn failed".into());
        // An API the model could not be reached at, overloaded or rate-limited: transport.
        let transport = match status {
            Some(s) => s == 429 || s >= 500,
            None => what.starts_with("API Error"),
        };
        if transport {
            progress.transport = Some(format!("claude: {what}"));
        } else {
            progress.errors.push(what);
        }
        for e in event
            .get("errors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(e) = e.as_str() {
                progress.errors.push(e.to_string());
            }
        }
    }

    fn finish(&self, turn: &Turn<'_>, progress: Progress, exit: Option<i32>) -> TurnOutcome {
        let quiet = progress.errors.is_empty();
        super::outcome(
            ("claude", "without a result event"),
            turn,
            progress,
            exit,
            quiet,
        )
    }
}

//! Codex CLI (`@openai/codex`, pinned in [`super::HarnessKind::package`]) in exec mode with a
//! JSON stream (design/AGENT-HARNESSES.md §2): `codex exec --json --skip-git-repo-check
//! --dangerously-bypass-approvals-and-sandbox [-m M] [-c model_reasoning_effort=E] [resume THREAD] <prompt>`, cwd the
//! workspace, `CODEX_HOME` under the run's state directory.
//!
//! - Endpoint: a `crucible` provider in `$CODEX_HOME/config.toml` at the binding's URL,
//!   speaking `responses` (codex speaks no other), its retries off, analytics, plugins and
//!   apps off. The key is in the variable the provider names.
//! - Stream: `thread.started` gives the thread (session) id; the last `agent_message` item is
//!   the final text; `turn.completed` carries token usage **cumulative per thread**, so the
//!   turn's spend is its difference from the thread's last total, priced from the run's price
//!   table (the totals are kept beside its home, so a resumed run after a crash goes on from
//!   them); `turn.failed` is an API failure (transport).

use super::{prompt_arg, Harness, Local, Progress, Turn, TurnOutcome};
use crate::spawn::Spawn;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// The environment variable codex reads the endpoint's key from (named in its config).
const KEY_ENV: &str = "CRUCIBLE_CODEX_API_KEY";

/// Token usage as codex reports it: input, cached input, output (reasoning included).
type Usage = (u64, u64, u64);

pub struct Codex {
    setup: Local,
    /// `CODEX_HOME`: its config, sessions and logs.
    dir: PathBuf,
    /// Each thread's last cumulative usage, to take differences from.
    totals: Mutex<HashMap<String, Usage>>,
    /// Where `totals` is kept across an engine crash, so a resumed run does not charge a
    /// thread's history again: beside the harness's home, out of every turn's reach.
    usage_file: PathBuf,
}

impl Codex {
    /// Writes the run's codex configuration: the endpoint as the `crucible` provider.
    pub fn new(setup: Local) -> Result<Codex, String> {
        let dir = setup.home.join("codex");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut config = String::from(
            "[analytics]\nenabled = false\n[features]\nplugins = false\napps = false\n",
        );
        if let Some(url) = setup.endpoint.as_ref().and_then(|b| b.url.as_ref()) {
            let quoted = |s: &str| Value::from(s).to_string();
            config = format!(
                "model_provider = \"crucible\"\n{config}[model_providers.crucible]\nname = \"crucible\"\n\
                 base_url = {}\nwire_api = \"responses\"\nenv_key = \"{KEY_ENV}\"\n\
                 request_max_retries = 0\nstream_max_retries = 0\n",
                quoted(url.trim_end_matches('/'))
            );
        }
        let path = dir.join("config.toml");
        std::fs::write(&path, config).map_err(|e| format!("{}: {e}", path.display()))?;
        let usage_file = setup.home.with_extension("usage.json");
        // Unreadable (absent, or torn by a crash): every thread is charged in full, never less.
        let totals = (std::fs::read(&usage_file).ok())
            .and_then(|t| serde_json::from_slice(&t).ok())
            .unwrap_or_default();
        Ok(Codex {
            setup,
            dir,
            totals: Mutex::new(totals),
            usage_file,
        })
    }
}

impl Harness for Codex {
    fn spawn(&self, turn: &Turn<'_>) -> Spawn {
        let mut argv: Vec<String> = vec![
            self.setup.program.to_string_lossy().into_owned(),
            "exec".into(),
            "--json".into(),
            "--skip-git-repo-check".into(),
            // The sandbox is crucible's (issue 11), not codex's own.
            "--dangerously-bypass-approvals-and-sandbox".into(),
        ];
        if let Some(model) = self.setup.model(turn) {
            argv.extend(["-m".into(), model.to_string()]);
        }
        if let Some(effort) = &turn.settings.effort {
            argv.extend(["-c".into(), format!("model_reasoning_effort={effort:?}")]);
        }
        if let Some(id) = turn.resume {
            argv.extend(["resume".into(), id.to_string()]);
        }
        argv.push(prompt_arg(turn));
        let mut env = self.setup.env(turn);
        env.push(("CODEX_HOME".into(), self.dir.to_string_lossy().into_owned()));
        if let Some(key) = &self.setup.key {
            env.push((KEY_ENV.into(), key.clone()));
        }
        self.setup.spawn(turn, argv, env)
    }

    fn read_line(&self, turn: &Turn<'_>, line: &[u8], progress: &mut Progress) {
        let Ok(event) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        match event.get("type").and_then(Value::as_str) {
            Some("thread.started") => {
                progress.session_id = event["thread_id"].as_str().map(str::to_string)
            }
            Some("item.completed") if event["item"]["type"] == "agent_message" => {
                progress.final_text = event["item"]["text"].as_str().map(str::to_string)
            }
            Some("turn.completed") => {
                let u = &event["usage"];
                let n = |k: &str| u[k].as_u64().unwrap_or(0);
                let now: Usage = (
                    n("input_tokens"),
                    n("cached_input_tokens"),
                    n("output_tokens") + n("reasoning_output_tokens"),
                );
                let thread = progress.session_id.clone().unwrap_or_default();
                let before = {
                    let mut totals = self.totals.lock().expect("totals");
                    let before = totals.insert(thread, now).unwrap_or_default();
                    let kept = serde_json::to_vec(&*totals).expect("totals serialize");
                    let _ = std::fs::write(&self.usage_file, kept);
                    before
                };
                // Priced by the model the turn ran on (`-m`), not the binding's default.
                let model = self.setup.model(turn).unwrap_or_default();
                let cost = self.setup.prices.of(model).cost(
                    now.0.saturating_sub(before.0),
                    now.1.saturating_sub(before.1),
                    now.2.saturating_sub(before.2),
                );
                progress.spent_usd += cost;
            }
            Some("turn.failed") => {
                let what = event["error"]["message"]
                    .as_str()
                    .unwrap_or("the turn failed");
                progress.transport = Some(format!("codex: {what}"));
            }
            _ => {}
        }
    }

    fn finish(&self, turn: &Turn<'_>, progress: Progress, exit: Option<i32>) -> TurnOutcome {
        let quiet = true;
        super::outcome(
            ("codex", "with no error on its stream"),
            turn,
            progress,
            exit,
            quiet,
        )
    }
}

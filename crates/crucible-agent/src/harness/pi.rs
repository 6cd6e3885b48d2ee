//! The pi coding agent (`@mariozechner/pi-coding-agent`, pinned in
//! [`super::HarnessKind::package`]) in JSON mode (design/AGENT-HARNESSES.md §3):
//! `pi -p --mode json [--provider crucible --model M] [--thinking E] [--session ID] [--tools L] <prompt>`, cwd the
//! workspace, `PI_CODING_AGENT_DIR` under the run's state directory.
//!
//! - Endpoint: a `crucible` provider in `<dir>/models.json` at the binding's URL, speaking its
//!   protocol (`chat_completions`, `responses` or `messages`), listing the binding's model and
//!   each model a turn runs on, priced from the price table, so pi's own per-call cost is the
//!   spend; its retries are off (`<dir>/settings.json`), `PI_OFFLINE=1`.
//! - Stream: line 1 `{"type":"session","id"}`; each assistant `message_end` carries
//!   `usage.cost.total`, summed as it arrives (spend in flight). pi exits 0 on an API error:
//!   the last assistant message's `stopReason: "error"` says so.

use super::{prompt_arg, Harness, Local, Progress, Turn, TurnOutcome};
use crate::inference::Protocol;
use crate::spawn::Spawn;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;

/// The environment variable pi reads the endpoint's key from (named in `models.json`).
const KEY_ENV: &str = "CRUCIBLE_PI_API_KEY";

pub struct Pi {
    setup: Local,
    /// `PI_CODING_AGENT_DIR`: its config, sessions and logs.
    dir: PathBuf,
    /// The binding's endpoint as pi's `crucible` provider (`models.json`), without its models;
    /// `None` without a URL (pi's own default endpoint).
    provider: Option<Value>,
    /// The models `models.json` lists so far: the binding's, and each a turn ran on.
    listed: Mutex<BTreeSet<String>>,
}

impl Pi {
    /// Writes the run's pi configuration: the endpoint as the `crucible` provider, retries off.
    pub fn new(setup: Local) -> Result<Pi, String> {
        let dir = setup.home.join("pi");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join("settings.json");
        let settings = json!({"retry": {"enabled": false, "provider": {"maxRetries": 0}}});
        std::fs::write(&path, settings.to_string())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut provider = None;
        if let Some((b, url)) = (setup.endpoint.as_ref()).and_then(|b| Some((b, b.url.as_ref()?))) {
            let url = url.trim_end_matches('/');
            let (api, base) = match b.protocol {
                Protocol::ChatCompletions => ("openai-completions", url.to_string()),
                Protocol::Responses => ("openai-responses", url.to_string()),
                Protocol::Messages => ("anthropic-messages", url.trim_end_matches("/v1").into()),
                Protocol::SystemOne | Protocol::Decisions => {
                    return Err(format!("pi cannot speak {:?}", b.protocol))
                }
            };
            provider = Some(json!({"baseUrl": base, "api": api, "apiKey": KEY_ENV,
                "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": true}}));
        }
        let pi = Pi {
            dir,
            provider,
            listed: Mutex::default(),
            setup,
        };
        if let Some(b) = &pi.setup.endpoint {
            pi.list(&b.model)?;
        }
        Ok(pi)
    }

    /// Lists `model` in `models.json` under the `crucible` provider, priced from the price
    /// table (so pi's own per-call cost is the spend), unless it is listed already.
    fn list(&self, model: &str) -> Result<(), String> {
        let Some(provider) = &self.provider else {
            return Ok(());
        };
        let mut listed = self.listed.lock().expect("listed");
        if !listed.insert(model.to_string()) {
            return Ok(());
        }
        let models: Vec<Value> = (listed.iter())
            .map(|id| {
                let p = self.setup.prices.of(id);
                // Marked as reasoning so that an effort reaches it (`--thinking`).
                json!({"id": id, "reasoning": true, "cost": {"input": p.input, "output": p.output,
                    "cacheRead": p.cached_input, "cacheWrite": p.input}})
            })
            .collect();
        let mut provider = provider.clone();
        provider["models"] = Value::from(models);
        let config = json!({"providers": {"crucible": provider}}).to_string();
        // Replaced whole: a pi starting meanwhile reads the old list or the new one.
        let (path, next) = (
            self.dir.join("models.json"),
            self.dir.join("models.json.next"),
        );
        std::fs::write(&next, config)
            .and_then(|()| std::fs::rename(&next, &path))
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

impl Harness for Pi {
    fn spawn(&self, turn: &Turn<'_>) -> Spawn {
        let mut argv: Vec<String> = vec![
            self.setup.program.to_string_lossy().into_owned(),
            "-p".into(),
            "--mode".into(),
            "json".into(),
        ];
        if let (Some(_), Some(model)) = (&self.provider, self.setup.model(turn)) {
            // The turn's model at the binding's endpoint; a failure to list it fails the turn
            // in pi, which says the model is unknown.
            let _ = self.list(model);
            argv.extend(["--provider".into(), "crucible".into()]);
            argv.extend(["--model".into(), model.to_string()]);
        } else if let Some(model) = self.setup.model(turn) {
            argv.extend(["--model".into(), model.to_string()]);
        }
        // The `crucible` provider's model is marked as reasoning so that an effort reaches it;
        // without an effort it is asked for none (no reasoning field on the wire).
        let ours = self
            .setup
            .endpoint
            .as_ref()
            .is_some_and(|b| b.url.is_some());
        let thinking = (turn.settings.effort.as_deref()).or(ours.then_some("off"));
        if let Some(level) = thinking {
            argv.extend(["--thinking".into(), level.to_string()]);
        }
        if let Some(id) = turn.resume {
            argv.extend(["--session".into(), id.to_string()]);
        }
        if let Some(names) = turn.settings.tools.as_deref() {
            // pi's allow-list: only these tools are enabled.
            let list = super::HarnessKind::Pi.allow_list(names).unwrap_or_default();
            argv.extend(["--tools".into(), list.join(",")]);
        }
        argv.push(prompt_arg(turn));
        let mut env = self.setup.env(turn);
        env.push((
            "PI_CODING_AGENT_DIR".into(),
            self.dir.to_string_lossy().into_owned(),
        ));
        env.push(("PI_OFFLINE".into(), "1".into()));
        if let Some(key) = &self.setup.key {
            env.push((KEY_ENV.into(), key.clone()));
        }
        self.setup.spawn(turn, argv, env)
    }

    fn read_line(&self, _turn: &Turn<'_>, line: &[u8], progress: &mut Progress) {
        let Ok(event) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        match event.get("type").and_then(Value::as_str) {
            Some("session") => {
                progress.session_id = event.get("id").and_then(Value::as_str).map(str::to_string)
            }
            Some("message_end") => {
                let m = &event["message"];
                if m["role"] != "assistant" {
                    return;
                }
                if let Some(cost) = m["usage"]["cost"]["total"].as_f64() {
                    if cost.is_finite() && cost > 0.0 {
                        progress.spent_usd += cost;
                    }
                }
                if m["stopReason"] == "error" {
                    let what = m["errorMessage"]
                        .as_str()
                        .unwrap_or("the model call failed");
                    // pi says an API error in words only: a status of 429 or 5xx, or no
                    // answer at all, is transport.
                    let transport = what.contains("429")
                        || (500..600).any(|s| what.contains(&s.to_string()))
                        || what.to_ascii_lowercase().contains("connect");
                    match transport {
                        true => progress.transport = Some(format!("pi: {what}")),
                        false => progress.errors.push(what.to_string()),
                    }
                    return;
                }
                let text: String = (m["content"].as_array().into_iter().flatten())
                    .filter(|c| c["type"] == "text")
                    .filter_map(|c| c["text"].as_str())
                    .collect();
                if !text.is_empty() {
                    progress.final_text = Some(text);
                }
            }
            _ => {}
        }
    }

    fn finish(&self, turn: &Turn<'_>, progress: Progress, exit: Option<i32>) -> TurnOutcome {
        let quiet = progress.errors.is_empty();
        super::outcome(
            ("pi", "with no error on its stream"),
            turn,
            progress,
            exit,
            quiet,
        )
    }
}

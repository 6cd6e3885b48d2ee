//! The harness's own overhead per agent turn (issue 10), per CLI: a one-task playbook whose turn
//! writes its result, run through the real binary and the real CLI against the scripted model
//! endpoint of the conformance suite, which answers at once (its model time is negligible), so
//! the attempt's time, spawn to result, is the harness's overhead. Median of REPS (default 5).
//!
//!   cargo bench -p crucible-cli --bench agent_turn     (bench/agents.sh wraps it)

#[allow(dead_code)]
#[path = "../../../tests/conformance/model_double.rs"]
mod model_double;

use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_crucible");

/// The CLI, its endpoint protocol and model.
const CLIS: [(&str, &str, &str); 3] = [
    ("claude", "messages", "claude-sonnet-4-5"),
    ("codex", "responses", "gpt-5.5"),
    ("pi", "chat_completions", "scripted-1"),
];

fn main() {
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let root = std::env::var_os("CRUCIBLE_AGENT_CLIS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/agent-clis"),
        Into::into,
    );
    println!(
        "harness  turns  median s/turn  min s/turn  (scripted endpoint, 2 model calls a turn)"
    );
    for (name, protocol, model_name) in CLIS {
        let cli = root.join("node_modules/.bin").join(name);
        if !cli.exists() {
            println!(
                "{name:<8} skipped: not installed at {} (scripts/install-agents.sh)",
                cli.display()
            );
            continue;
        }
        let model = model_double::ModelDouble::with_default(json!({
            "write": {"PLAN_TASK_RESULT.json": "{\"ok\": true}"}
        }));
        let mut secs: Vec<f64> = (0..reps)
            .map(|_| turn(&cli, name, protocol, model_name, &model.url()))
            .collect();
        secs.sort_by(f64::total_cmp);
        println!(
            "{name:<8} {reps:>5}  {:>13.3}  {:>10.3}",
            secs[secs.len() / 2],
            secs[0]
        );
    }
}

/// One run of a one-turn playbook; the turn's attempt time in seconds.
fn turn(cli: &Path, name: &str, protocol: &str, model: &str, url: &str) -> f64 {
    let dir = tempfile::tempdir().expect("a tempdir");
    let manifest = format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n[agent]\nharness = {name:?}\n\
         [agent.cli]\n{name} = {:?}\n",
        cli.to_string_lossy()
    );
    std::fs::write(dir.path().join("crucible.toml"), manifest).unwrap();
    std::fs::write(
        dir.path().join("workflow.star"),
        "t = agent(name = \"t\", prompt = \"Answer.\")\nworkflow([t])\n",
    )
    .unwrap();
    let binding = json!({"version": 1, "bindings": [{"role": "agent", "protocol": protocol,
        "url": url, "model": model, "key_env": "SCRIPTED_KEY"}]});
    let out = Command::new(BIN)
        .args(["plan", "run", "--max-cost", "5", "--max-time", "2m"])
        .current_dir(dir.path())
        .env("CRUCIBLE_INFERENCE", binding.to_string())
        .env("SCRIPTED_KEY", "sk-scripted")
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let current = std::fs::read_to_string(dir.path().join("state/current")).unwrap();
    let log = dir
        .path()
        .join("state/runs")
        .join(current.trim())
        .join("session.jsonl");
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["kind"] == "task_result" && l["task"] == "t")
        .and_then(|r| r["secs"].as_f64())
        .expect("the turn's row")
}

//! Agent tasks on Claude Code (issue 10; RFC-0002:C-TASK-FILES repair, C-PLAYBOOK-BUDGET spend
//! and deadlines, C-REVISE-LOOP sessions), the real CLI against a scripted Anthropic Messages
//! endpoint on loopback (`model_double`).

use crate::model_double::ModelDouble;
use crate::support::{agent_cli, process_gone, Pack, Ran};
use serde_json::{json, Value};

/// A pack running `workflow` with the claude harness against `model`.
fn pack(workflow: &str) -> Option<Pack> {
    let cli = agent_cli("claude")?;
    let p = Pack::with_manifest(&format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n\
         [agent]\nharness = \"claude\"\nmodel = \"claude-sonnet-4-5\"\n\
         [agent.cli]\nclaude = {:?}\n",
        cli.to_string_lossy()
    ));
    p.file("workflow.star", workflow);
    Some(p)
}

/// `plan run` with the model bound as the agent endpoint, and an ambient secret set.
fn run(p: &Pack, model: &ModelDouble, args: &[&str]) -> Ran {
    let binding = json!({"version": 1, "bindings": [{"role": "agent", "protocol": "messages",
        "url": model.url(), "model": "claude-sonnet-4-5", "key_env": "SCRIPTED_KEY"}]});
    p.command(&p.run_args(args))
        .env("CRUCIBLE_INFERENCE", &binding.to_string())
        .env("SCRIPTED_KEY", "sk-scripted")
        .env("AWS_SECRET_ACCESS_KEY", "ambient-secret")
        .run()
}

/// A prompt carrying the model's script.
fn scripted(text: &str, script: Value) -> String {
    format!("{text}\nSCRIPT:{script}\n")
}

fn agent(name: &str, prompt: &str, extra: &str) -> String {
    format!("{name} = agent(name = {name:?}, prompt = {prompt:?}{extra})\n")
}

// A turn writes a file and its result; its spend is Claude's own total_cost_usd; the key comes
// from the binding and nothing ambient reaches the turn.
#[test]
fn claude_turn_writes_a_file_and_its_result() {
    let model = ModelDouble::start();
    let prompt = scripted(
        "Write hello.txt.",
        json!({"write": {"hello.txt": "hi from claude", "PLAN_TASK_RESULT.json": "{\"greeting\": \"hi\"}"},
               "bash": "env > env.txt"}),
    );
    let Some(p) = pack(&format!(
        "{}workflow([hello])\n",
        agent("hello", &prompt, "")
    )) else {
        return;
    };
    let r = run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("hello");
    assert_eq!(row["status"], "pass", "{row}");
    assert_eq!(row["output"], json!({"greeting": "hi"}));
    let cost = row["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0, "Claude's total_cost_usd is the spend: {row}");
    assert_eq!(p.shutdown()["spent_usd"].as_f64().unwrap(), cost);
    let ws = p.workspace();
    assert_eq!(
        std::fs::read_to_string(ws.join("hello.txt")).unwrap(),
        "hi from claude"
    );
    let env = std::fs::read_to_string(ws.join("env.txt")).unwrap();
    assert!(!env.contains("ambient-secret"), "{env}");
    assert!(env.contains("CRUCIBLE_TASK=hello"), "{env}");
    let calls = model.scripted_calls();
    assert!(!calls.is_empty());
    assert!(
        calls
            .iter()
            .all(|c| c.key.as_deref() == Some("sk-scripted")),
        "{calls:?}"
    );
    // Its config is the run's own, never the operator's.
    assert!(p
        .state()
        .join("runs")
        .read_dir()
        .unwrap()
        .flatten()
        .any(|r| r.path().join("agents/claude/claude").is_dir()));
}

// A turn that never writes its result is a measured failure, not retried.
#[test]
fn claude_turn_without_a_result_fails() {
    let model = ModelDouble::start();
    let prompt = scripted("Be lazy.", json!({"write": {"notes.txt": "no result"}}));
    let Some(p) = pack(&format!("{}workflow([lazy])\n", agent("lazy", &prompt, ""))) else {
        return;
    };
    let r = run(&p, &model, &[]);
    assert_eq!(r.code, 3, "{r:?}");
    let row = p.row("lazy");
    assert_eq!(row["status"], "fail", "{row}");
    assert_eq!(row["attempts"], 1);
    assert_eq!(
        row["note"],
        "no result: the turn wrote no PLAN_TASK_RESULT.json"
    );
    assert!(row["cost_usd"].as_f64().unwrap() > 0.0, "{row}");
}

// An API error (HTTP 500) is a transport failure: retried, then settled `transport`.
#[test]
fn claude_api_error_is_transport_retried_then_failed() {
    let model = ModelDouble::start();
    let prompt = scripted("Try.", json!({"fail": 500}));
    let Some(p) = pack(&format!(
        "{}workflow([try_it])\n",
        agent("try_it", &prompt, "")
    )) else {
        return;
    };
    let r = run(&p, &model, &[]);
    assert_ne!(r.code, 0, "{r:?}");
    let row = p.row("try_it");
    assert_eq!(row["status"], "transport", "{row}");
    assert_eq!(row["attempts"], 3, "{row}");
    assert_eq!(
        model.scripted_calls().len(),
        3,
        "one model call per attempt, no CLI retries"
    );
}

// RFC-0002:C-REVISE-LOOP (sessions): tasks sharing a session resume one conversation, in
// dependency order: the second task's model call carries the first task's exchange.
#[test]
fn claude_session_resumes_across_tasks() {
    let model = ModelDouble::start();
    let first = scripted(
        "First: plan.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{\"step\": 1}"}}),
    );
    let second = scripted(
        "Second: build.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{\"step\": 2}"}}),
    );
    let wf = format!(
        "s = session(name = \"work\")\n{}{}workflow([plan, build])\n",
        agent("plan", &first, ", session = s"),
        agent("build", &second, ", session = s, depends_on = [plan]"),
    );
    let Some(p) = pack(&wf) else { return };
    let r = run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("build")["output"], json!({"step": 2}));
    let calls = model.scripted_calls();
    let build_first = calls
        .iter()
        .find(|c| c.body["messages"].to_string().contains("Second: build."))
        .expect("a call for the second task");
    assert!(
        build_first.body["messages"]
            .to_string()
            .contains("First: plan."),
        "the second task resumed the first one's conversation: {}",
        build_first.body["messages"]
    );
}

// RFC-0002:C-TASK-FILES: a result missing a declared field is repaired by resuming the same
// conversation with the masked notes; a repair is not a retry.
#[test]
fn claude_repair_fixes_a_missing_field() {
    let model = ModelDouble::start();
    let prompt = scripted(
        "Give a verdict.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{}"},
               "repair": {"PLAN_TASK_RESULT.json": "{\"verdict\": \"ok\"}"}}),
    );
    let wf = format!(
        "{}workflow([judge])\n",
        agent(
            "judge",
            &prompt,
            ", emits = {\"verdict\": \"string\"}, repair = 1"
        )
    );
    let Some(p) = pack(&wf) else { return };
    let r = run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("judge");
    assert_eq!(row["status"], "pass", "{row}");
    assert_eq!(row["attempts"], 1);
    assert_eq!(row["output"], json!({"verdict": "ok"}));
    let repairs = row["repairs"].as_array().unwrap();
    assert_eq!(repairs.len(), 1, "{row}");
    assert!(repairs[0]["cost_usd"].as_f64().unwrap() > 0.0, "{row}");
    let calls = model.scripted_calls();
    let repair = calls
        .iter()
        .find(|c| c.body["messages"].to_string().contains("# Repair 1 of 1"))
        .expect("a repair call");
    assert!(
        repair.body["messages"]
            .to_string()
            .contains("Give a verdict."),
        "resumed"
    );
}

// RFC-0002:C-PLAYBOOK-BUDGET: at its timeout the turn's whole process tree is killed and the
// task fails, measured.
#[test]
fn claude_timeout_kills_the_turn() {
    let model = ModelDouble::start();
    let prompt = scripted("Hang.", json!({"delay_ms": 30000}));
    let wf = format!(
        "{}workflow([hang])\n",
        agent("hang", &prompt, ", timeout = \"3s\"")
    );
    let Some(p) = pack(&wf) else { return };
    let began = std::time::Instant::now();
    let r = run(&p, &model, &[]);
    assert!(began.elapsed().as_secs() < 20, "killed at its limit");
    assert_eq!(r.code, 3, "{r:?}");
    let row = p.row("hang");
    assert!(
        row["note"].as_str().unwrap().starts_with("timed out"),
        "{row}"
    );
    // No process is left working in the workspace.
    let ws = std::fs::canonicalize(p.workspace()).unwrap();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(e.path().join("cwd")).ok().as_deref() == Some(ws.as_path()) {
            assert!(process_gone(pid), "pid {pid} still runs in the workspace");
        }
    }
}

// A harness CLI that is missing or not at its pinned version is refused before dispatch, and
// `check` says the same (no CLI needed: a stand-in reports a wrong version).
#[test]
fn a_missing_or_wrong_version_cli_is_refused_before_dispatch() {
    let agent = "a = agent(name = \"a\", prompt = \"x\")\nworkflow([a])\n";
    for (cli, why) in [
        ("missing/claude", "cannot run"),
        (
            "old-claude.sh",
            "is claude 1.0.0, and this engine is tested with 2.1.197 only",
        ),
    ] {
        let p = Pack::with_manifest(&format!(
            "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n\
             [agent]\nharness = \"claude\"\n[agent.cli]\nclaude = \"{cli}\"\n"
        ));
        p.file("workflow.star", agent);
        p.file("old-claude.sh", "#!/bin/sh\necho '1.0.0 (Claude Code)'\n");
        let script = p.path().join("old-claude.sh");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let r = p.run(&[]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains(why), "{}", r.stderr);
        assert!(
            !r.stdout.contains("started a"),
            "refused before dispatch: {r:?}"
        );
        let c = p.check().run();
        assert_eq!(c.code, 1, "{c:?}");
        assert!(c.stderr.contains(why), "{}", c.stderr);
    }
}

// RFC-0002:C-REVISE-LOOP: a body agent in a session resumes its conversation every round: the
// second round's model call carries the first round's exchange.
#[test]
fn claude_session_resumes_across_revise_rounds() {
    let model = ModelDouble::start();
    let prompt = scripted(
        "Draft it.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{\"draft\": 1}"}}),
    );
    // The reviewer never accepts: the draft gets its second round.
    let review = "echo '{}'; exit 1";
    let wf = format!(
        "s = session(name = \"writer\")\n{}review = command(name = \"review\", run = {review:?}, depends_on = [draft], revise = [draft], max_rounds = 2, required = False)\nworkflow([draft, review])\n",
        agent("draft", &prompt, ", session = s"),
    );
    let Some(p) = pack(&wf) else { return };
    let r = run(&p, &model, &[]);
    let calls = model.scripted_calls();
    let rounds: Vec<String> = calls
        .iter()
        .map(|c| c.body["messages"].to_string())
        .filter(|m| m.contains("Draft it."))
        .collect();
    let second = rounds
        .iter()
        .find(|m| m.matches("Draft it.").count() >= 2)
        .unwrap_or_else(|| {
            panic!(
                "no round-2 call resumed round 1 ({} calls): {r:?}",
                rounds.len()
            )
        });
    assert!(
        second.contains("revision"),
        "round 2 sees its revision input"
    );
}

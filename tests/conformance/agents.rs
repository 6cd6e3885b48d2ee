//! Agent tasks on the three real coding-agent CLIs (issue 10; RFC-0002:C-TASK-FILES repair,
//! C-PLAYBOOK-BUDGET spend and deadlines, C-REVISE-LOOP sessions, C-PLAYBOOK-RESUME), each case
//! run once per harness (`<case>::claude`, `::codex`, `::pi`, in parallel) against the scripted
//! model endpoint on loopback that speaks the harness's wire protocol (`model_double`). What
//! only one CLI does is tested in its own `agents_<harness>.rs`.

use crate::model_double::{ModelDouble, USAGE};
use crate::support::{
    agent_cli, assert_all_gone, marked_sleep, sleeping, wait_for_file, Cmd, Pack, Ran,
};
use serde_json::{json, Value};

/// One harness as the tests drive it: its CLI, the protocol and model of its endpoint, and
/// what the model costs per 1M input and output tokens (the pack's price table for codex and
/// pi; Claude's own built-in price for claude, which reports money itself).
#[derive(Clone, Copy)]
pub struct Cli {
    pub name: &'static str,
    pub protocol: &'static str,
    pub model: &'static str,
    pub price: (f64, f64),
    /// Where a model call's body carries the reasoning effort the CLI was given.
    pub effort_at: &'static [&'static str],
    /// A model the CLI sends an effort for (Claude sends none for Sonnet 4.5).
    pub effort_model: &'static str,
}

pub const CLAUDE: Cli = Cli {
    name: "claude",
    protocol: "messages",
    model: "claude-sonnet-4-5",
    price: (3.0, 15.0),
    effort_at: &["output_config", "effort"],
    effort_model: "claude-opus-4-5",
};

pub const CODEX: Cli = Cli {
    name: "codex",
    protocol: "responses",
    model: "gpt-5.5",
    price: (2.0, 10.0),
    effort_at: &["reasoning", "effort"],
    effort_model: "gpt-5.5",
};

pub const PI: Cli = Cli {
    name: "pi",
    protocol: "chat_completions",
    model: "scripted-1",
    price: (3.0, 15.0),
    effort_at: &["reasoning_effort"],
    effort_model: "scripted-1",
};

impl Cli {
    /// A pack running `workflow` on this harness, its model priced at [`Cli::price`]; `None`
    /// (the test skips, loudly) when the CLI is not installed.
    pub fn pack(&self, workflow: &str) -> Option<Pack> {
        self.pack_with(workflow, "", "")
    }

    /// [`Cli::pack`] with more `[agent]` keys, and more manifest tables after its own.
    pub fn pack_with(&self, workflow: &str, agent: &str, tables: &str) -> Option<Pack> {
        let cli = agent_cli(self.name)?;
        let p = Pack::with_manifest(&format!(
            "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n\
             [agent]\nharness = \"{}\"\n{agent}\n[agent.cli]\n{} = {:?}\n\
             [agent.prices.{:?}]\ninput = {}\noutput = {}\n{tables}",
            self.name,
            self.name,
            cli.to_string_lossy(),
            self.model,
            self.price.0,
            self.price.1
        ));
        p.file("workflow.star", workflow);
        Some(p)
    }

    /// `plan run` with the model bound as the agent endpoint, and an ambient secret set.
    pub fn launch(&self, p: &Pack, model: &ModelDouble, args: &[&str]) -> Cmd {
        let binding = json!({"version": 1, "bindings": [{"role": "agent", "protocol": self.protocol,
            "url": model.url(), "model": self.model, "key_env": "SCRIPTED_KEY"}]});
        p.command(&p.run_args(args))
            .env("CRUCIBLE_INFERENCE", &binding.to_string())
            .env("SCRIPTED_KEY", "sk-scripted")
            .env("AWS_SECRET_ACCESS_KEY", "ambient-secret")
    }

    pub fn run(&self, p: &Pack, model: &ModelDouble, args: &[&str]) -> Ran {
        self.launch(p, model, args).run()
    }

    /// What one model call costs (every answer reports [`USAGE`]).
    pub fn call_cost(&self) -> f64 {
        (USAGE.0 as f64 * self.price.0 + USAGE.1 as f64 * self.price.1) / 1e6
    }
}

/// A prompt carrying the model's script.
pub fn scripted(text: &str, script: Value) -> String {
    format!("{text}\nSCRIPT:{script}\n")
}

/// An `agent()` task named `name`, with more arguments in `extra` (`", session = s"`).
pub fn agent(name: &str, prompt: &str, extra: &str) -> String {
    format!("{name} = agent(name = {name:?}, prompt = {prompt:?}{extra})\n")
}

/// Asserts that `row` spent exactly what `calls` model calls cost.
fn assert_cost(cli: &Cli, row: &Value, calls: usize) {
    let cost = row["cost_usd"].as_f64().unwrap();
    let want = calls as f64 * cli.call_cost();
    assert!(
        (cost - want).abs() < 1e-9,
        "{}: {cost} spent for {calls} calls, want {want}: {row}",
        cli.name
    );
}

/// `case::claude`, `case::codex` and `case::pi` for each case.
macro_rules! each_harness {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[test]
            fn claude() {
                super::$case(&super::CLAUDE)
            }
            #[test]
            fn codex() {
                super::$case(&super::CODEX)
            }
            #[test]
            fn pi() {
                super::$case(&super::PI)
            }
        }
    )*};
}

each_harness!(
    turn_writes_a_file_and_its_result,
    turn_without_a_result_fails,
    api_error_is_transport_retried_then_failed,
    repair_fixes_a_missing_field,
    timeout_kills_the_whole_tree,
    session_resumes_across_tasks,
    session_survives_an_engine_crash,
    skill_files_are_readable_in_the_sandbox,
    effort_reaches_the_model,
);

// A turn writes a file and its result; its spend is what its calls cost; the key comes from
// the binding; nothing ambient reaches the turn (no AWS_SECRET_ACCESS_KEY), the task contract
// does; its config is the run's own, never the operator's.
fn turn_writes_a_file_and_its_result(cli: &Cli) {
    let model = ModelDouble::start();
    let content = format!("hi from {}", cli.name);
    let prompt = scripted(
        "Write hello.txt.",
        json!({"write": {"hello.txt": content, "PLAN_TASK_RESULT.json": "{\"greeting\": \"hi\"}"},
               "bash": "env > env.txt"}),
    );
    let Some(p) = cli.pack(&format!(
        "{}workflow([hello])\n",
        agent("hello", &prompt, "")
    )) else {
        return;
    };
    let r = cli.run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("hello");
    assert_eq!(row["status"], "pass", "{row}");
    assert_eq!(row["output"], json!({"greeting": "hi"}));
    let calls = model.scripted_calls();
    assert_cost(cli, &row, calls.len());
    assert_eq!(
        p.shutdown()["spent_usd"].as_f64().unwrap(),
        row["cost_usd"].as_f64().unwrap()
    );
    let ws = p.workspace();
    assert_eq!(
        std::fs::read_to_string(ws.join("hello.txt")).unwrap(),
        content
    );
    let env = std::fs::read_to_string(ws.join("env.txt")).unwrap();
    assert!(!env.contains("ambient-secret"), "{env}");
    assert!(!env.contains("AWS_SECRET_ACCESS_KEY"), "{env}");
    assert!(env.contains("CRUCIBLE_TASK=hello"), "{env}");
    assert!(
        calls
            .iter()
            .all(|c| c.key.as_deref() == Some("sk-scripted")),
        "{calls:?}"
    );
    let runs: Vec<_> = p
        .state()
        .join("runs")
        .read_dir()
        .unwrap()
        .flatten()
        .collect();
    assert!(
        runs.iter()
            .any(|r| r.path().join("agents").join(cli.name).is_dir()),
        "its home is under the run"
    );
}

// A turn that ends normally without writing its result is a measured failure: never retried,
// its spend counted.
fn turn_without_a_result_fails(cli: &Cli) {
    let model = ModelDouble::start();
    let prompt = scripted("Be lazy.", json!({"write": {"notes.txt": "no result"}}));
    let Some(p) = cli.pack(&format!("{}workflow([lazy])\n", agent("lazy", &prompt, ""))) else {
        return;
    };
    let r = cli.run(&p, &model, &[]);
    assert_eq!(r.code, 3, "{r:?}");
    let row = p.row("lazy");
    assert_eq!(row["status"], "fail", "{row}");
    assert_eq!(row["attempts"], 1);
    assert_eq!(
        row["note"],
        "no result: the turn wrote no PLAN_TASK_RESULT.json"
    );
    assert_cost(cli, &row, model.scripted_calls().len());
}

// An API error (HTTP 500) is a transport failure: retried twice (the CLI's own retries are
// off: one model call per attempt), then settled `transport` with its cause.
fn api_error_is_transport_retried_then_failed(cli: &Cli) {
    let model = ModelDouble::start();
    let prompt = scripted("Try.", json!({"fail": 500}));
    let Some(p) = cli.pack(&format!(
        "{}workflow([try_it])\n",
        agent("try_it", &prompt, "")
    )) else {
        return;
    };
    let r = cli.run(&p, &model, &[]);
    assert_ne!(r.code, 0, "{r:?}");
    let row = p.row("try_it");
    assert_eq!(row["status"], "transport", "{row}");
    assert_eq!(row["attempts"], 3, "{row}");
    assert!(
        row["transport"].as_str().is_some_and(|t| !t.is_empty()),
        "{row}"
    );
    assert_eq!(
        model.scripted_calls().len(),
        3,
        "one model call per attempt"
    );
}

// RFC-0002:C-TASK-FILES: a result missing a declared field is repaired by resuming the same
// conversation with the masked notes; a repair is not a retry, and its spend is its own.
fn repair_fixes_a_missing_field(cli: &Cli) {
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
    let Some(p) = cli.pack(&wf) else { return };
    let r = cli.run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("judge");
    assert_eq!(row["status"], "pass", "{row}");
    assert_eq!(row["attempts"], 1);
    assert_eq!(row["output"], json!({"verdict": "ok"}));
    let repairs = row["repairs"].as_array().unwrap();
    assert_eq!(repairs.len(), 1, "{row}");
    assert!(repairs[0]["cost_usd"].as_f64().unwrap() > 0.0, "{row}");
    let calls = model.scripted_calls();
    let repair = (calls.iter())
        .find(|c| c.conversation().contains("# Repair 1 of 1"))
        .expect("a repair call");
    assert!(
        repair.conversation().contains("Give a verdict."),
        "the repair resumed the conversation"
    );
}

// RFC-0002:C-PLAYBOOK-BUDGET: at its timeout the turn's whole process tree is killed, a
// process the agent started in its own session included, and the task fails, measured.
fn timeout_kills_the_whole_tree(cli: &Cli) {
    let model = ModelDouble::start();
    let mark = marked_sleep();
    // The agent leaves a detached sleeper behind, says so, then its model hangs.
    let bash = format!("setsid sleep {mark} >/dev/null 2>&1 < /dev/null & touch \"$PACK/slept\"");
    let prompt = scripted(
        "Hang.",
        json!({"write": {"started.txt": "x"}, "bash": bash, "final_delay_ms": 60000}),
    );
    let wf = format!(
        "{}workflow([hang])\n",
        agent("hang", &prompt, ", timeout = \"20s\"")
    );
    let Some(p) = cli.pack(&wf) else { return };
    let began = std::time::Instant::now();
    let r = cli.run(&p, &model, &[]);
    assert!(began.elapsed().as_secs() < 60, "killed at its limit");
    assert_eq!(r.code, 3, "{r:?}");
    let row = p.row("hang");
    assert!(
        row["note"].as_str().unwrap().starts_with("timed out"),
        "{row}"
    );
    assert!(
        p.probe().join("slept").exists(),
        "the sleeper was started: {r:?}"
    );
    assert_all_gone(&mark);
    assert!(sleeping(&mark).is_empty());
}

// RFC-0002:C-REVISE-LOOP (sessions): tasks sharing a session resume one conversation, in
// dependency order, with the harness's own resume: the second task's model call carries the
// first task's exchange, and its row says it resumed the first one's conversation.
fn session_resumes_across_tasks(cli: &Cli) {
    let model = ModelDouble::start();
    let Some(p) = cli.pack(&session_workflow()) else {
        return;
    };
    std::fs::write(p.probe().join("gate.open"), "").unwrap();
    let r = cli.run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_resumed(&p, &model);
}

/// Two tasks of session `work`, `plan` then `build`, with the command `gate` between them: it
/// passes once `$PACK/gate.open` exists, and until then hangs, for a crash test to kill the
/// engine there.
fn session_workflow() -> String {
    let first = scripted(
        "First: plan.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{\"step\": 1}"}}),
    );
    let second = scripted(
        "Second: build.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{\"step\": 2}"}}),
    );
    let gate = r#"if [ -e "$PACK/gate.open" ]; then echo '{}'; else touch "$PACK/gate.started"; sleep 60; fi"#;
    format!(
        "s = session(name = \"work\")\n{}gate = command(name = \"gate\", run = {gate:?}, depends_on = [plan])\n{}workflow([plan, gate, build])\n",
        agent("plan", &first, ", session = s"),
        agent("build", &second, ", session = s, depends_on = [gate]"),
    )
}

/// `build` resumed `plan`'s conversation: its first call carries plan's exchange, and the rows
/// say started, then resumed, the same conversation.
fn assert_resumed(p: &Pack, model: &ModelDouble) {
    assert_eq!(p.row("build")["output"], json!({"step": 2}));
    let calls = model.scripted_calls();
    let build = (calls.iter())
        .find(|c| c.conversation().contains("Second: build."))
        .expect("a call for the second task");
    assert!(
        build.conversation().contains("First: plan."),
        "the second task resumed the first one's conversation: {}",
        build.conversation()
    );
    let (plan, build) = (
        p.row("plan")["session"].clone(),
        p.row("build")["session"].clone(),
    );
    let id = plan["id"].as_str().expect("a conversation id");
    assert_eq!(
        plan,
        json!({"name": "work", "id": id, "action": "started", "turns": 1})
    );
    assert_eq!(
        build,
        json!({"name": "work", "id": id, "action": "resumed", "turns": 2})
    );
}

// RFC-0002:C-PLAYBOOK-RESUME with C-REVISE-LOOP: a session survives an engine crash. The engine
// is SIGKILLed after the session's first task settled; `plan run --resume` folds the
// conversation id from the log, and the session's next task resumes the same conversation.
fn session_survives_an_engine_crash(cli: &Cli) {
    let model = ModelDouble::start();
    let Some(p) = cli.pack(&session_workflow()) else {
        return;
    };
    let mut engine = cli
        .launch(&p, &model, &[])
        .0
        .spawn()
        .expect("the engine starts");
    wait_for_file(&p.probe().join("gate.started"), 60);
    engine.kill().expect("SIGKILL");
    engine.wait().unwrap();
    assert!(!p.has_row("build"));
    std::fs::write(p.probe().join("gate.open"), "").unwrap();
    let r = cli.run(&p, &model, &["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.log().iter().filter(|l| l["kind"] == "resumed").count(), 1);
    assert_resumed(&p, &model);
    // Only its own calls: a resumed conversation is not charged again for its history.
    let build = (model.scripted_calls().into_iter())
        .filter(|c| c.conversation().contains("Second: build."))
        .count();
    assert_cost(cli, &p.row("build"), build);
}

// DSL `skill`: a skill's SKILL.md and arguments are the prompt, and its files are readable by
// the turn inside the sandbox (the pack is otherwise hidden from it), read-only; the prompt and
// CRUCIBLE_SKILL_DIR say where they are.
fn skill_files_are_readable_in_the_sandbox(cli: &Cli) {
    let model = ModelDouble::start();
    let bash = r#"cat "$CRUCIBLE_SKILL_DIR/style.txt" > seen.txt; echo tampered > "$CRUCIBLE_SKILL_DIR/style.txt"; true"#;
    let skill = scripted(
        "Follow the house style.",
        json!({"write": {"PLAN_TASK_RESULT.json": "{}"}, "bash": bash}),
    );
    let wf = "styled = skill(name = \"styled\", skill = \"skills/house\", args = {\"topic\": \"tests\"})\nworkflow([styled])\n";
    let Some(p) = cli.pack(wf) else { return };
    p.file("skills/house/SKILL.md", &skill);
    p.file("skills/house/style.txt", "short sentences\n");
    let r = cli.run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(p.workspace().join("seen.txt")).unwrap(),
        "short sentences\n"
    );
    let style = p.path().join("skills/house/style.txt");
    assert_eq!(std::fs::read_to_string(style).unwrap(), "short sentences\n");
    let calls = model.scripted_calls();
    let dir = p.path().join("skills/house");
    assert!(
        calls[0].conversation().contains(&*dir.to_string_lossy()),
        "the prompt names the skill's directory"
    );
    assert!(calls[0].conversation().contains("topic: tests"));
}

// DSL `effort`: a task's reasoning effort reaches its CLI (claude `--effort`, codex
// `model_reasoning_effort`, pi `--thinking`) and, through it, the model: the wire carries it
// (Claude's `output_config.effort`, the Responses `reasoning.effort`, Chat Completions'
// `reasoning_effort`). A task without one is not given this one.
fn effort_reaches_the_model(cli: &Cli) {
    let cli = Cli {
        model: cli.effort_model,
        ..*cli
    };
    let model = ModelDouble::start();
    let script = json!({"write": {"PLAN_TASK_RESULT.json": "{}"}});
    let wf = format!(
        "{}{}workflow([low, plain])\n",
        agent(
            "low",
            &scripted("Think low.", script.clone()),
            ", effort = \"low\""
        ),
        agent("plain", &scripted("Think plainly.", script), ""),
    );
    let Some(p) = cli.pack(&wf) else { return };
    let r = cli.run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let calls = model.scripted_calls();
    let effort = |text: &str| -> Vec<Value> {
        (calls.iter())
            .filter(|c| c.conversation().contains(text))
            .map(|c| cli.effort_at.iter().fold(&c.body, |v, k| &v[*k]).clone())
            .collect()
    };
    let (low, plain) = (effort("Think low."), effort("Think plainly."));
    assert!(!low.is_empty() && !plain.is_empty(), "{calls:?}");
    assert!(low.iter().all(|e| e == "low"), "{}: {low:?}", cli.name);
    assert!(plain.iter().all(|e| e != "low"), "{}: {plain:?}", cli.name);
}

/// RFC-0002:C-PLAYBOOK-BUDGET, C-PLAYBOOK-PARAMS: a task naming its own model runs on it at the
/// binding's endpoint and is charged that model's price from the run's price table, not the
/// binding's model's (for a harness priced by the table: codex, pi).
pub fn spend_is_priced_by_the_tasks_model(cli: &Cli) {
    let cheap = Cli {
        model: "scripted-cheap",
        price: (0.5, 1.0),
        ..*cli
    };
    let model = ModelDouble::start();
    let script = json!({"write": {"PLAN_TASK_RESULT.json": "{}"}});
    let wf = format!(
        "{}{}workflow([dear, cheap])\n",
        agent("dear", &scripted("Dear.", script.clone()), ""),
        agent(
            "cheap",
            &scripted("Cheap.", script),
            &format!(", model = {:?}", cheap.model)
        ),
    );
    let prices = format!(
        "[agent.prices.{:?}]\ninput = {}\noutput = {}\n",
        cheap.model, cheap.price.0, cheap.price.1
    );
    let Some(p) = cli.pack_with(&wf, "", &prices) else {
        return;
    };
    let r = cli.run(&p, &model, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let calls = model.scripted_calls();
    let on = |m: &str| calls.iter().filter(|c| c.body["model"] == m).count() as f64;
    let (dear_calls, cheap_calls) = (on(cli.model), on(cheap.model));
    assert!(
        dear_calls > 0.0 && cheap_calls > 0.0,
        "both models called: {calls:?}"
    );
    let cost = |t: &str| p.row(t)["cost_usd"].as_f64().unwrap();
    assert!(
        (cost("dear") - dear_calls * cli.call_cost()).abs() < 1e-9,
        "{}",
        cost("dear")
    );
    assert!(
        (cost("cheap") - cheap_calls * cheap.call_cost()).abs() < 1e-9,
        "{}",
        cost("cheap")
    );
}

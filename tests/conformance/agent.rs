//! Agent tasks on the command backend (RFC-0001 notes §4): the prompt, the stand-in's
//! environment, the result file and its reported cost.

use crate::support::{command, Pack};
use serde_json::json;

const SPY: &str = r#"mkdir -p "$PACK/out"; printf '%s' "$CRUCIBLE_PROMPT" > "$PACK/out/$CRUCIBLE_TASK.prompt"; echo "{\"model\": \"$CRUCIBLE_MODEL\", \"harness\": \"$CRUCIBLE_HARNESS\", \"effort\": \"$CRUCIBLE_EFFORT\", \"key\": \"$API_KEY\", \"cost_usd\": 0.25}" > PLAN_TASK_RESULT.json"#;

#[test]
fn prompt_environment_result_and_cost() {
    let p = Pack::playbook(&format!(
        "[agent]\nbackend = \"command\"\nagent_cmd = '''{SPY}'''\nmodel = \"base-model\"\nharness = \"claude\"\ngoal = \"Keep the garden tidy.\"\nenv = {{ API_KEY = \"k-1\" }}\n\
         {}\
         [[workflow.task]]\nname = \"write\"\nkind = \"agent\"\nprompt = \"Write the plan.\"\ndepends_on = [\"scan\"]\neffort = \"high\"\nmodel = \"task-model\"\n",
        command("scan", r#"echo '{"weeds": 3}'"#, "")
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("write");
    assert_eq!(
        row["output"],
        json!({"model": "task-model", "harness": "claude", "effort": "high", "key": "k-1", "cost_usd": 0.25})
    );
    assert_eq!(row["cost_usd"], 0.25);
    assert_eq!(p.shutdown()["spent_usd"], 0.25);
    let prompt = std::fs::read_to_string(p.probe().join("out/write.prompt")).unwrap();
    for part in [
        "Keep the garden tidy.",
        "Write the plan.",
        "\"weeds\": 3",
        "PLAN_TASK_RESULT.json",
        "CRUCIBLE-EXTERNAL-INPUT",
    ] {
        assert!(prompt.contains(part), "prompt lacks {part:?}:\n{prompt}");
    }
    // RFC-0002:C-PLAYBOOK-PARAMS: an agent never gets the "params" input.
    assert!(!prompt.contains("\"params\""), "{prompt}");
    // The result file is the turn's answer, not work: it is never committed.
    assert!(!p.workspace().join("PLAN_TASK_RESULT.json").exists());

    // --model outranks the task's own setting.
    let r = p.run(&["--model", "flag-model"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("write")["output"]["model"], "flag-model");
}

// A turn that writes no result file is a measured failure.
#[test]
fn missing_result_file_fails() {
    let p = Pack::playbook(
        "[[workflow.task]]\nname = \"lazy\"\nkind = \"agent\"\nprompt = \"Do it.\"\n",
    );
    let r = p.run(&["--agent-cmd", "true"]);
    assert_eq!(r.code, 3, "{r:?}");
    let row = p.row("lazy");
    assert_eq!(row["status"], "fail");
    assert_eq!(
        row["note"],
        "no result: the turn wrote no PLAN_TASK_RESULT.json"
    );
}

// Agent tasks without a backend are refused before dispatch.
#[test]
fn agent_without_backend_is_refused() {
    let p = Pack::playbook("[[workflow.task]]\nname = \"a\"\nkind = \"agent\"\nprompt = \"x\"\n");
    let r = p.run(&[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("no agent backend"), "{}", r.stderr);
}

// RFC-0002:C-PLAYBOOK-PARAMS (run-time half): launch settings are checked against
// [agent.overrides] before dispatch and applied with <task> above `*`.
#[test]
fn launch_settings_are_checked_and_applied() {
    let body = |overrides: &str| {
        format!(
            "[agent]\nbackend = \"command\"\nagent_cmd = '''{SPY}'''\n{overrides}\n\
             [[workflow.task]]\nname = \"a\"\nkind = \"agent\"\nprompt = \"x\"\n\
             [[workflow.task]]\nname = \"b\"\nkind = \"agent\"\nprompt = \"x\"\n"
        )
    };
    let p = Pack::playbook(&body(""));
    let r = p.run(&["--param", "a.model=m1"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("a.model") && r.stderr.contains("does not allow"),
        "{}",
        r.stderr
    );

    let p = Pack::playbook(&body(
        "[agent.overrides]\nmodel = true\nmodels = [\"m1\", \"m2\"]",
    ));
    let r = p.run(&["--param", "a.model=m3"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("is not in [agent.overrides].models"),
        "{}",
        r.stderr
    );
    let r = p.run(&["--param", "nosuch.model=m1"]);
    assert_eq!(r.code, 1, "{r:?}");
    let r = p.run(&["--param", "*.model=m2", "--param", "a.model=m1"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("a")["output"]["model"], "m1");
    assert_eq!(p.row("b")["output"]["model"], "m2");
}

// Tasks sharing a session join one durable conversation: the same session id, one at a time;
// the first turn starts it and later ones resume it (CRUCIBLE_AGENT_SESSION_ACTION).
#[test]
fn tasks_in_a_session_share_its_id() {
    let turn = r#"echo "{\"session\": \"$CRUCIBLE_AGENT_SESSION_ID\", \"name\": \"$CRUCIBLE_AGENT_SESSION\", \"action\": \"$CRUCIBLE_AGENT_SESSION_ACTION\"}" > PLAN_TASK_RESULT.json"#;
    let p = Pack::playbook(&format!(
        "[agent]\nbackend = \"command\"\nagent_cmd = '''{turn}'''\n\
         [[workflow.task]]\nname = \"plan\"\nkind = \"agent\"\nprompt = \"x\"\nsession = \"s1\"\n\
         [[workflow.task]]\nname = \"build\"\nkind = \"agent\"\nprompt = \"y\"\nsession = \"s1\"\ndepends_on = [\"plan\"]\n\
         [[workflow.task]]\nname = \"solo\"\nkind = \"agent\"\nprompt = \"z\"\n"
    ));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let a = p.row("plan")["output"]["session"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(a.ends_with("-s1"), "{a}");
    assert_eq!(p.row("build")["output"]["session"], a.as_str());
    assert_eq!(p.row("plan")["output"]["name"], "s1");
    assert_eq!(p.row("plan")["output"]["action"], "start");
    assert_eq!(p.row("build")["output"]["action"], "resume");
    assert_eq!(p.row("solo")["output"]["session"], "");
    assert_eq!(p.row("solo")["output"]["action"], "");
}

// RFC-0002:C-REVISE-LOOP, C-RUN-HISTORY: each session task's row records what its turns did to
// the session's conversation (started or resumed, its id, the session's turns so far, repair
// turns included), never the transcript; a task outside every session records nothing.
#[test]
fn session_rows_record_started_resumed_and_turns() {
    // A repair turn fixes the missing field.
    let turn = r#"if [ -n "$CRUCIBLE_REPAIR" ]; then echo '{"verdict": "ok"}'; else echo '{}'; fi > PLAN_TASK_RESULT.json"#;
    let p = Pack::with_manifest(&format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n\
         [agent]\nbackend = \"command\"\nagent_cmd = '''{turn}'''\n"
    ));
    p.file(
        "workflow.star",
        r#"s = session(name = "s1")
plan = agent(name = "plan", prompt = "x", session = s)
build = agent(name = "build", prompt = "y", session = s, depends_on = [plan],
              emits = {"verdict": "string"}, repair = 1)
solo = agent(name = "solo", prompt = "z")
workflow([plan, build, solo])
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let plan = &p.row("plan")["session"];
    let id = plan["id"].as_str().unwrap();
    assert!(id.ends_with("-s1"), "{plan}");
    assert_eq!(
        *plan,
        json!({"name": "s1", "id": id, "action": "started", "turns": 1})
    );
    // Its first turn and its repair turn.
    assert_eq!(
        p.row("build")["session"],
        json!({"name": "s1", "id": id, "action": "resumed", "turns": 3})
    );
    assert!(p.row("solo").get("session").is_none(), "{}", p.row("solo"));
}

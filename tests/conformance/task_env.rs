//! A task's environment is an allowlist (issue 11, item 2): the fixed base, what the manifest's
//! `[env]` declares and the task contract, nothing else the engine was launched with; declared
//! secrets are masked wherever a task's text is stored or printed, and `check` says what each
//! kind of task receives.

use crate::support::{command, Pack};

/// Credentials an operator commonly has in the shell that launches the engine.
const AMBIENT: [(&str, &str); 3] = [
    ("ANTHROPIC_API_KEY", "sk-ant-ambient-0001"),
    ("AWS_SECRET_ACCESS_KEY", "aws-ambient-0002"),
    ("GITHUB_TOKEN", "ghp-ambient-0003"),
];

/// A shell test that passes only when none of the ambient credentials is set.
const NONE_SET: &str = r#"test -z "${ANTHROPIC_API_KEY}${AWS_SECRET_ACCESS_KEY}${GITHUB_TOKEN}""#;

// The ambient secret: credentials in the launching shell reach neither a command task nor an
// agent turn; a variable the manifest declares does.
#[test]
fn the_ambient_secret_reaches_no_task() {
    let agent_cmd =
        format!(r#"{NONE_SET} && test "$DECLARED" = yes && echo '{{}}' > PLAN_TASK_RESULT.json"#);
    let p = Pack::with_manifest(&format!(
        "[workflow]\ntype = \"playbook\"\n[env]\npass = [\"DECLARED\"]\n\
         [agent]\nbackend = \"command\"\nagent_cmd = '''{agent_cmd}'''\n{}\
         [[workflow.task]]\nname = \"turn\"\nkind = \"agent\"\nprompt = \"Look around.\"\n",
        command(
            "cmd",
            &format!(r#"{NONE_SET} && test "$DECLARED" = yes && echo '{{}}'"#),
            ""
        ),
    ));
    let mut run = p.command(&p.run_args(&[])).env("DECLARED", "yes");
    for (k, v) in AMBIENT {
        run = run.env(k, v);
    }
    let r = run.run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("cmd")["status"], "pass");
    assert_eq!(p.row("turn")["status"], "pass");
}

// A declared secret masked: the value of an `[env].secrets` variable and of an `[agent].env`
// entry, printed by a failing task on stderr and in its result, is `***` in the row's note and
// output, the session log and the terminal.
#[test]
fn a_declared_secret_is_masked_everywhere() {
    const TOKEN: &str = "tok-5ecret-value";
    const AGENT_KEY: &str = "agent-key-7777";
    let p = Pack::with_manifest(&format!(
        "[workflow]\ntype = \"playbook\"\n[env]\nsecrets = [\"SERVICE_TOKEN\"]\n\
         [agent]\nbackend = \"command\"\nagent_cmd = '''echo \"key $API_KEY\" >&2; exit 2'''\nenv = {{ API_KEY = \"{AGENT_KEY}\" }}\n{}{}\
         [[workflow.task]]\nname = \"turn\"\nkind = \"agent\"\nprompt = \"Leak it.\"\nrequired = false\n",
        command(
            "leak",
            r#"echo "token $SERVICE_TOKEN" >&2; exit 1"#,
            "required = false"
        ),
        command(
            "tell",
            r#"echo "{\"said\": \"token $SERVICE_TOKEN\", \"$SERVICE_TOKEN\": 1}""#,
            ""
        ),
    ));
    let r = p
        .command(&p.run_args(&[]))
        .env("SERVICE_TOKEN", TOKEN)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("leak")["note"], "exit 1: token ***");
    assert_eq!(p.row("turn")["note"], "exit 2: key ***");
    assert_eq!(
        p.row("tell")["output"],
        serde_json::json!({"said": "token ***", "***": 1})
    );
    let log = crate::resume::log_text(&p);
    for secret in [TOKEN, AGENT_KEY] {
        assert!(!log.contains(secret), "the log holds {secret}:\n{log}");
        assert!(!r.stdout.contains(secret), "stdout: {}", r.stdout);
        assert!(!r.stderr.contains(secret), "stderr: {}", r.stderr);
    }
    assert!(r.stdout.contains("token ***"), "{}", r.stdout);
    // The kept task logs (issue 19) are masked the same way.
    let logs = crate::logs::all_logs(&p);
    assert!(
        logs.contains("token ***") && logs.contains("key ***"),
        "{logs}"
    );
    for secret in [TOKEN, AGENT_KEY] {
        assert!(!logs.contains(secret), "a task log holds {secret}:\n{logs}");
    }
}

// `check` prints what each kind of task receives, by name, never a value.
#[test]
fn check_prints_each_kinds_environment() {
    let p = Pack::with_manifest(
        "[workflow]\ntype = \"playbook\"\n[env]\npass = [\"LEDGER\"]\nsecrets = [\"SERVICE_TOKEN\"]\n\
         [agent]\nenv = { API_KEY = \"agent-key-7777\" }\n[[workflow.task]]\nname = \"a\"\nkind = \"command\"\nrun = \"true\"\n",
    );
    let r = p.check().env("SERVICE_TOKEN", "tok-5ecret-value").run();
    assert_eq!(r.code, 0, "{r:?}");
    for part in [
        "command, evaluate and agent tasks: PATH, HOME, LANG, LC_ALL, TERM, TZ",
        "[env].pass: LEDGER",
        "[env].secrets (values masked as ***): SERVICE_TOKEN",
        "CRUCIBLE_TASK, CRUCIBLE_INPUTS_FILE, CRUCIBLE_INPUTS",
        "agent tasks also: [agent].env (values masked as ***): API_KEY",
    ] {
        assert!(r.stdout.contains(part), "missing {part:?}:\n{}", r.stdout);
    }
    assert!(!r.stdout.contains("tok-5ecret-value"));
    assert!(!r.stdout.contains("agent-key-7777"));
}

// The engine's own settings and task contract are never passed through by name.
#[test]
fn a_crucible_variable_cannot_be_declared() {
    let p = Pack::with_manifest(
        "[workflow]\ntype = \"playbook\"\n[env]\npass = [\"CRUCIBLE_INFERENCE\"]\n[[workflow.task]]\nname = \"a\"\nkind = \"command\"\nrun = \"true\"\n",
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("CRUCIBLE_INFERENCE"), "{}", r.stderr);
}

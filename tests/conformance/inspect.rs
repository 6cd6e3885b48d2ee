//! The inspector commands through the real binary: `check`, `plan compile|params|show`,
//! `pack digest`.

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::Path;

fn crucible() -> Command {
    Command::cargo_bin("crucible").expect("binary builds")
}

fn write(dir: &Path, rel: &str, body: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

fn pack() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "prompts/write.md", "Write about:\n");
    write(
        d.path(),
        "workflow.star",
        r#"params = {"topic": {"type": "string", "default": "slag", "description": "what about"}}
w = agent(name = "write", prompt = prompt_file("prompts/write.md") + param("topic"), timeout = "10m")
g = route(name = "gate", depends_on = [w], human = True, needs = "human", questions = {"ok": noul()})
ship = command(name = "ship", run = "true", depends_on = [g], when = g.ok)
hold = command(name = "hold", run = "true", depends_on = [g], when = g.ok, otherwise = True)
note = agent(name = "note", prompt = "note", needs = "gpu", required = False)
after = command(name = "after", run = "true", depends_on = [note], required = False)
sweep = command(name = "sweep", run = "true", depends_on = [note], join = "settled", required = False)
workflow([w, g, ship, hold, note, after, sweep])
"#,
    );
    write(
        d.path(),
        "crucible.toml",
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n[agent]\nbackend = \"command\"\nagent_cmd = \"cat\"\nmodel = \"m0\"\n[agent.env]\nAPI_KEY = \"sk-secret-value\"\n[agent.overrides]\nmodel = true\n",
    );
    d
}

// ARCHITECTURE.md: canonical JSON is byte-stable for the same inputs.
#[test]
fn plan_compile_is_byte_stable_and_renders_toml() {
    let d = pack();
    let file = d.path().join("workflow.star");
    let run = || {
        crucible()
            .args(["plan", "compile", "--file"])
            .arg(&file)
            .args(["--param", "topic=rust"])
            .output()
            .unwrap()
    };
    let (a, b) = (run(), run());
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(a.stdout, b.stdout);
    assert!(String::from_utf8_lossy(&a.stdout).contains("[param topic]\\nrust"));
    crucible()
        .args(["plan", "compile", "--format", "toml", "--file"])
        .arg(&file)
        .assert()
        .success()
        .stdout(predicate::str::contains("[[workflow.task]]"));
}

// RFC-0002:C-PLAYBOOK-PARAMS — launch settings are checked against the manifest.
#[test]
fn plan_compile_applies_launch_settings_with_a_manifest() {
    let d = pack();
    let out = crucible()
        .args(["plan", "compile", "--file"])
        .arg(d.path().join("workflow.star"))
        .arg("--manifest")
        .arg(d.path().join("crucible.toml"))
        .args(["--param", "write.model=m1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["tasks"][0]["model"], "m1");
    assert_eq!(plan["tasks"][4]["model"], "m0");
    crucible()
        .args(["plan", "compile", "--file"])
        .arg(d.path().join("workflow.star"))
        .args(["--param", "write.effort=high"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "`write.effort`: [agent.overrides] does not allow effort",
        ));
}

#[test]
fn plan_params_prints_a_schema_without_evaluating() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "w.star",
        "params = {\"n\": {\"type\": \"integer\", \"required\": True}}\nthis_would_fail_to_evaluate()\n",
    );
    crucible()
        .args(["plan", "params", "--file"])
        .arg(d.path().join("w.star"))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "\"$schema\": \"https://json-schema.org/draft/2020-12/schema\"",
        ))
        .stdout(predicate::str::contains("\"required\": [\n    \"n\"\n  ]"));
}

// RFC-0002:C-PLAYBOOK-CAPS — the truncation verdict before any spend, in the words the run's
// rows use; admission's refusals where the run would refuse.
#[test]
fn plan_show_prints_the_truncation_verdict() {
    let d = pack();
    let file = d.path().join("workflow.star");
    crucible()
        .args(["plan", "show", "--agent-cmd", "cat", "--file"])
        .arg(&file)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("timeout write: 10m"))
        .stdout(predicate::str::contains(
            "skipped: note: needs `gpu`, which this run does not provide\n",
        ))
        .stdout(predicate::str::contains(
            "skipped: after: skipped with `note`, whose capability is unavailable\n",
        ))
        .stdout(predicate::str::contains("skipped: sweep").not())
        .stdout(predicate::str::contains(
            "verdict: TRUNCATED — gate needs human",
        ));
    // Without a manifest or --agent-cmd, agent tasks have no backend: the run would refuse.
    crucible()
        .args(["plan", "show", "--file"])
        .arg(&file)
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "refused: the plan has agent tasks but no agent backend",
        ));
    // With `human` the route would dispatch to a person, and there is no one to ask: no
    // controller and no terminal (RFC-0002:C-HUMAN-DECISION).
    crucible()
        .args([
            "plan",
            "show",
            "--cap",
            "human",
            "--agent-cmd",
            "cat",
            "--file",
        ])
        .arg(&file)
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "refused: route `gate` is decided by a person, and this run has no one to ask",
        ));
    crucible()
        .args(["plan", "show", "--mermaid", "--file"])
        .arg(&file)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "t_gate -- \"gate.ok=yes\" --> t_ship",
        ));
}

#[test]
fn check_prints_bounds_and_env_names_only() {
    let d = pack();
    // Without --cap the verdict is information, not a finding.
    crucible()
        .args(["check", "--manifest"])
        .arg(d.path().join("crucible.toml"))
        .assert()
        .success()
        .stdout(predicate::str::contains("max_eval_steps = "))
        .stdout(predicate::str::contains(
            "--max-cost USD and --max-time DUR are required",
        ))
        .stdout(predicate::str::contains("[agent].env names: API_KEY"))
        .stdout(predicate::str::contains("sk-secret-value").not())
        .stdout(predicate::str::contains(
            "capabilities:\n  needed: gpu, human\n  given: none\n  skipped: note:",
        ))
        .stdout(predicate::str::contains(
            "  verdict: TRUNCATED — gate needs human (with no --cap given",
        ))
        .stdout(predicate::str::contains("check: ok"));
    crucible()
        .args(["check", "--cap", "gpu", "--manifest"])
        .arg(d.path().join("crucible.toml"))
        .assert()
        .code(1)
        .stdout(predicate::str::contains("check: 1 finding(s)"));
    crucible()
        .args(["check", "--cap", "human", "--manifest"])
        .arg(d.path().join("crucible.toml"))
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "error[admission]: route `gate` is decided by a person",
        ));
    write(
        d.path(),
        "bad/crucible.toml",
        "[workflow]\ntype = \"playbook\"\n[[workflow.task]]\nname = \"a\"\nkind = \"command\"\nrun = \"true\"\ndepends_on = [\"nope\"]\n",
    );
    crucible()
        .args(["check", "--manifest"])
        .arg(d.path().join("bad/crucible.toml"))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("unknown task `nope`"));
}

// C-INFERENCE: check names the decision model a run would ask (the key by variable name only)
// and finds a malformed CRUCIBLE_INFERENCE before any run.
#[test]
fn check_discloses_the_decision_model_and_refuses_a_bad_binding() {
    let d = pack();
    let binding = r#"{"version": 1, "bindings": [{"role": "decision", "protocol": "system_one", "url": "https://s1.example/v1/systemone", "model": "s1-small", "key_env": "S1_KEY"}]}"#;
    // The binding gives `decision`, so the human gate's truncation is a finding here.
    crucible()
        .args(["check", "--manifest"])
        .arg(d.path().join("crucible.toml"))
        .env("CRUCIBLE_INFERENCE", binding)
        .env("S1_KEY", "sk-decision-secret")
        .assert()
        .stdout(predicate::str::contains(
            "decision model: s1-small at https://s1.example/v1/systemone (key from $S1_KEY)",
        ))
        .stdout(predicate::str::contains("sk-decision-secret").not());
    crucible()
        .args(["check", "--manifest"])
        .arg(d.path().join("crucible.toml"))
        .env(
            "CRUCIBLE_INFERENCE",
            r#"{"version": 1, "bindings": [{"role": "oracle"}]}"#,
        )
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "error[C-INFERENCE]: CRUCIBLE_INFERENCE:",
        ));
}

// RFC-0002:C-PACK-BASE — the digest and the ignored paths.
#[test]
fn pack_digest_reports_ignored_paths() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "a.txt", "a\n");
    write(d.path(), "state/x", "ignored");
    crucible()
        .args(["pack", "digest"])
        .arg(d.path())
        .assert()
        .success()
        .stdout(predicate::str::starts_with("tree1:"))
        .stderr(predicate::str::contains("ignored: state/\n"));
    std::os::unix::fs::symlink("/etc/passwd", d.path().join("evil")).unwrap();
    crucible()
        .args(["pack", "digest"])
        .arg(d.path())
        .assert()
        .code(1);
}

#[test]
fn manifest_result_applies_where_the_source_names_none() {
    let d = pack();
    let manifest = d.path().join("crucible.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace(
            "file = \"workflow.star\"\n",
            "file = \"workflow.star\"\nresult = \"write\"\n",
        ),
    )
    .unwrap();
    let out = crucible()
        .args(["plan", "compile", "--file"])
        .arg(d.path().join("workflow.star"))
        .arg("--manifest")
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["result"], "write");
    let src = d.path().join("workflow.star");
    let body = std::fs::read_to_string(&src).unwrap();
    std::fs::write(
        &src,
        body.replace(
            "workflow([w, g, ship, hold, note, after, sweep])",
            "workflow([w, g, ship, hold, note, after, sweep], result = note)",
        ),
    )
    .unwrap();
    crucible()
        .args(["plan", "compile", "--file"])
        .arg(&src)
        .arg("--manifest")
        .arg(&manifest)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "disagrees with the manifest's [workflow].result",
        ));
}

// RFC-0002:C-PLAYBOOK-PARAMS: a supplied value violating its declared constraint is rejected
// before compilation: the source, which fails whenever it is evaluated, is never evaluated.
#[test]
fn a_value_breaking_its_constraint_is_rejected_before_compilation() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "workflow.star",
        r#"params = {"n": {"type": "integer", "maximum": 5, "default": 1}}
fail("the source was evaluated")
"#,
    );
    let file = d.path().join("workflow.star");
    let compile = |value: &str| {
        crucible()
            .args(["plan", "compile", "--file"])
            .arg(&file)
            .args(["--param", value])
            .output()
            .unwrap()
    };
    let bad = compile("n=9");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("parameter `n`: 9 is outside"), "{stderr}");
    assert!(!stderr.contains("the source was evaluated"), "{stderr}");
    let good = compile("n=2");
    assert!(String::from_utf8_lossy(&good.stderr).contains("the source was evaluated"));
}

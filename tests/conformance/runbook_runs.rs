//! Issue 15, running a runbook: `skill(runbook = ...)` on the command backend. The sealed
//! procedure is the turn's prompt and its skill dependencies are readable in the sandbox; the
//! row's ledger pins the release and hashes each checkpoint's artifacts; a claimed success with
//! a failing predicate fails by name; the effect classes bound the turn through the sandbox (no
//! network, a read-only workspace); what cannot be enforced is refused before dispatch by
//! `check` and `plan run` alike; a gate is a human decision (RFC-0002:C-HUMAN-DECISION) answered
//! at the terminal or through a controller, and folded on resume. The example runbook on the
//! command backend and on a real agent CLI is in `examples.rs`.

use crate::support::{Cmd, Pack, Ran, BIN};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

const EVERY_EFFECT: &[&str] = &[
    "filesystem.read",
    "filesystem.write",
    "process.exec",
    "network",
];

/// A `runbook.json` named `name` allowing `effects`, with the triage artifacts, predicates and
/// checkpoints when `staged`, and a gate on the plan checkpoint when `gate`.
fn contract(name: &str, effects: &[&str], staged: bool, gate: bool) -> String {
    let gate = if gate {
        r#", "gate": {"id": "approve-plan", "prompt": "Approve the plan before the report"}"#
    } else {
        ""
    };
    let stages = if staged {
        format!(
            r#",
  "artifacts": [
    {{"name": "plan", "path": "results/plan.md", "stage": "plan", "required": true}},
    {{"name": "report", "path": "results/report.md", "stage": "report", "required": true}}
  ],
  "successPredicates": [
    {{"type": "artifact_exists", "path": "results/plan.md"}},
    {{"type": "artifact_nonempty", "path": "results/report.md"}}
  ],
  "checkpoints": [
    {{"stage": "plan", "summary": "Plan ready", "artifactPaths": ["results/plan.md"]{gate}}},
    {{"stage": "report", "summary": "Report written", "artifactPaths": ["results/report.md"]}}
  ]"#
        )
    } else {
        String::new()
    };
    format!(
        r#"{{
  "schemaVersion": 1,
  "name": "{name}",
  "version": "1.0.0",
  "description": "Triage a bug",
  "invocation": "explicit",
  "requiredCapabilities": [],
  "allowedEffectClasses": {},
  "skillDependencies": ["skills/research"]{stages}
}}
"#,
        serde_json::to_string(effects).unwrap()
    )
}

/// Adds the bundle `runbooks/<name>` with `contract` to `p`.
fn bundle(p: &Pack, name: &str, contract: &str) {
    p.file(&format!("runbooks/{name}/runbook.json"), contract);
    p.file(
        &format!("runbooks/{name}/RUNBOOK.md"),
        "# Triage procedure\n\nWrite a plan, then a report.\n",
    );
    p.file(
        &format!("runbooks/{name}/skills/research/SKILL.md"),
        "# Research\n\nSearch the code for the symptom.\n",
    );
}

/// A pack with `agent` as its `[agent]` keys and one skill() task per bundle name, running
/// `runbooks/<name>`.
fn pack(tasks: &[&str], agent: &str) -> Pack {
    let p = Pack::with_manifest(&format!(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n\
         [agent]\n{agent}\n"
    ));
    let mut wf = String::new();
    for t in tasks {
        wf.push_str(&format!(
            "{t} = skill(name = \"{t}\", runbook = \"runbooks/{t}\")\n"
        ));
    }
    wf.push_str(&format!("workflow([{}])\n", tasks.join(", ")));
    p.file("workflow.star", &wf);
    p
}

fn command_backend(agent_cmd: &str) -> String {
    format!("backend = \"command\"\nagent_cmd = '''{agent_cmd}'''")
}

/// The stand-in that follows the procedure, one stage per turn: notes each stage it runs in
/// `$PACK/stages` and keeps its prompt (as `prompt.md` and `prompt-<stage>.md`) and the skill it
/// read in the probe; the plan stage writes the plan, the report stage (with the plan there)
/// writes `report` as the report; each answers with a spend of 0.25.
fn follows(report: &str) -> String {
    format!(
        r#"echo "$CRUCIBLE_RUNBOOK_STAGE" >> "$PACK/stages"; cp "$CRUCIBLE_PROMPT_FILE" "$PACK/prompt.md"; cp "$CRUCIBLE_PROMPT_FILE" "$PACK/prompt-$CRUCIBLE_RUNBOOK_STAGE.md"; cp "$CRUCIBLE_SKILL_DIR/skills/research/SKILL.md" "$PACK/skill.md"; mkdir -p results; case "$CRUCIBLE_RUNBOOK_STAGE" in plan) printf 'the plan' > results/plan.md;; report) test -f results/plan.md && printf '{report}' > results/report.md;; esac; echo '{{"summary": "done", "cost_usd": 0.25}}' > PLAN_TASK_RESULT.json"#
    )
}

fn sha256(bytes: &[u8]) -> String {
    let mut c = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = c.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// The release `crucible runbook seal` makes of `dir`.
fn sealed_digest(dir: &std::path::Path) -> String {
    let out = Command::new(BIN)
        .args(["runbook", "seal"])
        .arg(dir)
        .output()
        .unwrap();
    let release: Value = serde_json::from_slice(&out.stdout).unwrap();
    release["digest"].as_str().unwrap().to_string()
}

// The sealed procedure is the turn's prompt, followed by the skills it may read and what the
// contract checks; the skill dependency is readable in the sandbox; the row's ledger pins the
// release `crucible runbook seal` makes and hashes each checkpoint's artifact.
#[test]
fn a_runbook_turn_follows_its_sealed_procedure_and_its_ledger_pins_the_release() {
    let p = pack(&["triage"], &command_backend(&follows("the report")));
    bundle(&p, "triage", &contract("triage", EVERY_EFFECT, true, false));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("triage");
    assert_eq!(row["status"], "pass", "{row}");
    let prompt = std::fs::read_to_string(p.probe().join("prompt.md")).unwrap();
    assert!(prompt.contains("# Triage procedure"), "{prompt}");
    assert!(prompt.contains("- skills/research/SKILL.md"), "{prompt}");
    assert!(
        prompt.contains("- artifact_nonempty results/report.md"),
        "{prompt}"
    );
    assert_eq!(
        std::fs::read_to_string(p.probe().join("skill.md")).unwrap(),
        "# Research\n\nSearch the code for the symptom.\n"
    );
    let ledger = &row["runbook"];
    assert_eq!(ledger["name"], "triage");
    assert_eq!(
        ledger["digest"],
        sealed_digest(&p.path().join("runbooks/triage"))
    );
    let plan = &ledger["checkpoints"][0];
    assert_eq!(plan["stage"], "plan");
    assert_eq!(plan["artifacts"][0]["path"], "results/plan.md");
    assert_eq!(plan["artifacts"][0]["sha256"], sha256(b"the plan"));
    assert_eq!(plan["artifacts"][0]["bytes"], 8);
    assert_eq!(
        ledger["checkpoints"][1]["artifacts"][0]["sha256"],
        sha256(b"the report")
    );
    // Hashes only: no artifact's content is in the log.
    let log = crate::resume::log_text(&p);
    assert!(!log.contains("the report"), "{log}");
    assert!(ledger["predicates"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["holds"] == true));
}

// `runbook_finish` rejects a `success` while a predicate fails: a turn that claims success
// (it wrote its result) with an empty report fails, naming the predicate; the ledger says which
// predicate did not hold and what the checkpoint saw.
#[test]
fn a_claimed_success_with_a_failing_predicate_fails_naming_it() {
    let p = pack(&["triage"], &command_backend(&follows("")));
    bundle(&p, "triage", &contract("triage", EVERY_EFFECT, true, false));
    let r = p.run(&[]);
    assert_eq!(r.code, 3, "{r:?}");
    let row = p.row("triage");
    assert_eq!(row["status"], "fail", "{row}");
    assert_eq!(
        row["note"],
        "runbook `triage`: success claimed while predicate artifact_nonempty `results/report.md` fails"
    );
    let ledger = &row["runbook"];
    assert_eq!(ledger["predicates"][0]["holds"], true);
    assert_eq!(ledger["predicates"][1]["holds"], false);
    assert_eq!(ledger["checkpoints"][1]["artifacts"][0]["bytes"], 0);
}

// Without `network` the turn has none: it cannot reach a loopback server the test runs, while a
// turn whose runbook allows `network` can. Without `filesystem.write` its working directory is
// read-only: its write fails and leaves nothing, while its result file still reaches the engine.
#[test]
fn the_effect_classes_bound_the_turn_through_the_sandbox() {
    let port = crate::support::loopback_server();
    let turn = format!(
        r#"if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}; printf "GET / HTTP/1.0\r\n\r\n" >&3; head -c 15 <&3' >/tmp/reply 2>/dev/null; then net=$(cat /tmp/reply); else net=none; fi; if echo x > wrote.txt 2>/dev/null; then w=yes; else w=no; fi; echo "{{\"net\": \"$net\", \"wrote\": \"$w\"}}" > PLAN_TASK_RESULT.json"#
    );
    let p = pack(&["offline", "readonly", "open"], &command_backend(&turn));
    let read_exec = ["filesystem.read", "filesystem.write", "process.exec"];
    bundle(
        &p,
        "offline",
        &contract("offline", &read_exec, false, false),
    );
    let no_write = ["filesystem.read", "process.exec", "network"];
    bundle(
        &p,
        "readonly",
        &contract("readonly", &no_write, false, false),
    );
    bundle(&p, "open", &contract("open", EVERY_EFFECT, false, false));
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let out = |t: &str| p.row(t)["output"].clone();
    assert_eq!(out("offline")["net"], "none");
    assert_eq!(out("offline")["wrote"], "yes");
    assert_eq!(out("readonly")["net"], "HTTP/1.0 200 OK");
    assert_eq!(out("readonly")["wrote"], "no");
    assert_eq!(out("open")["net"], "HTTP/1.0 200 OK");
    assert_eq!(out("open")["wrote"], "yes");
}

// What a runbook forbids that nothing here can take away, or needs that nothing here can give,
// is refused before dispatch, by `plan run` and by `check` alike, in the same words: a turn that
// must not start processes, a sandbox opted out of, a harness CLI that needs the network for its
// model, a tool allow-list the harness has no flag for (codex) or a tool it does not have,
// required tools no harness reports, and a gate with no one to answer it (stdin here
// is not a terminal, and no controller is named).
#[test]
fn what_a_runbook_needs_that_cannot_be_enforced_is_refused_before_dispatch() {
    let read_write = ["filesystem.read", "filesystem.write", "network"];
    let read_exec = ["filesystem.read", "filesystem.write", "process.exec"];
    let with_caps = contract("triage", EVERY_EFFECT, false, false).replace(
        "\"requiredCapabilities\": []",
        "\"requiredCapabilities\": [\"read\"]",
    );
    let tools = |names: &[&str]| {
        let mut effects = EVERY_EFFECT.to_vec();
        effects.extend_from_slice(names);
        contract("triage", &effects, false, false)
    };
    let cases: [(String, &str, &[&str], &str); 7] = [
        (
            tools(&["tool:read"]),
            "harness = \"codex\"",
            &[],
            "task `triage` runs runbook `triage`, which allows only the tool(s) read: codex has no flag that limits its tools, so it cannot be held to an allow-list",
        ),
        (
            tools(&["tool:read", "tool:Glob"]),
            "harness = \"pi\"",
            &[],
            "task `triage` runs runbook `triage`, which allows only the tool(s) read, Glob: pi has no tool `Glob` (its tools are read, bash, edit, write, grep, find, ls)",
        ),
        (
            contract("triage", &read_write, false, false),
            "",
            &[],
            "task `triage` runs runbook `triage`, which leaves out `process.exec`",
        ),
        (
            contract("triage", &read_exec, false, false),
            "",
            &["--no-sandbox"],
            "task `triage` runs runbook `triage`, whose effect classes leave out network: only the task sandbox takes those away",
        ),
        (
            contract("triage", &read_exec, false, false),
            "harness = \"pi\"",
            &[],
            "task `triage` runs runbook `triage`, which leaves out `network`: a harness CLI reaches its model over the network",
        ),
        (
            with_caps,
            "",
            &[],
            "task `triage` runs runbook `triage`, which requires the tool(s) read",
        ),
        (
            contract("triage", EVERY_EFFECT, true, true),
            "",
            &[],
            "task `triage` runs runbook `triage`, which has the gate `approve-plan`: a gate waits for a person's decision, and no one answers this run's decisions",
        ),
    ];
    for (contract, agent, flags, reason) in cases {
        let agent = if agent.is_empty() {
            command_backend("echo '{}' > PLAN_TASK_RESULT.json")
        } else {
            agent.to_string()
        };
        let p = pack(&["triage"], &agent);
        bundle(&p, "triage", &contract);
        let run = p.run(flags);
        assert_eq!(run.code, 1, "{reason}: {run:?}");
        assert!(run.stderr.contains(reason), "{reason}: {run:?}");
        assert!(!p.state().join("runs").exists(), "nothing was dispatched");
        if flags.is_empty() {
            let check = p.check().run();
            assert_eq!(check.code, 1, "{reason}: {check:?}");
            assert!(check.stderr.contains(reason), "{reason}: {check:?}");
        }
    }
}

// An invalid contract is a compile error at its place in the bundle's runbook.json, naming the
// rule, then at the call; nothing runs.
#[test]
fn an_invalid_runbook_is_a_compile_error_naming_its_file_and_rule() {
    let p = pack(&["triage"], &command_backend("true"));
    bundle(
        &p,
        "triage",
        &contract("triage", &["filesystem.wirte"], false, false),
    );
    for r in [p.check().run(), p.run(&[])] {
        assert_eq!(r.code, 1, "{r:?}");
        assert!(
            r.stderr.contains(
                "error[runbook.effect]: `$.allowedEffectClasses[0]`: `filesystem.wirte` is not an effect class\n --> runbooks/triage/runbook.json:8:"
            ),
            "{r:?}"
        );
        assert!(
            r.stderr
                .contains("skill(): the runbook bundle `runbooks/triage` is refused"),
            "{r:?}"
        );
    }
    assert!(!p.state().join("runs").exists());
}

/// `command` (a shell command line) run in `dir` on a pseudo-terminal (`script`) with `env`,
/// `typed` typed ahead at it (the terminal keeps it until the gate reads it).
pub(crate) fn on_a_terminal(
    command: &str,
    dir: &std::path::Path,
    env: &[(&str, &str)],
    typed: &str,
) -> Ran {
    let mut child = Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .current_dir(dir)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) runs");
    (child.stdin.as_mut().unwrap())
        .write_all(typed.as_bytes())
        .unwrap();
    Ran::from(child.wait_with_output().unwrap())
}

/// The session log's `decision_opened` lines of `p`'s last run.
fn openings(p: &Pack) -> Vec<Value> {
    (p.log().into_iter())
        .filter(|l| l["kind"] == "decision_opened")
        .collect()
}

// RFC-0002:C-HUMAN-DECISION for a runbook gate at the terminal: the run pauses on a human
// decision over the stage's evidence (its summary, each artifact's digest and contents), logged
// `decision_opened` for the task's gate; `yes` approves and the task passes with the decision
// (principal, digest, note) in its ledger; `no` refuses and the task fails saying by whom; an
// answer outside the options is refused and asked again, as for any decision.
#[test]
fn a_gate_is_decided_at_the_terminal() {
    for (typed, status, approved) in [
        ("y\nyes\nlooks right\n", "pass", true),
        ("2\n\n", "fail", false),
    ] {
        let p = pack(&["triage"], &command_backend(&follows("the report")));
        bundle(&p, "triage", &contract("triage", EVERY_EFFECT, true, true));
        let command = format!("{BIN} {}", p.run_args(&[]).join(" "));
        let probe = p.probe().to_string_lossy().into_owned();
        let r = on_a_terminal(&command, p.path(), &[("PACK", &probe)], typed);
        let drawn = &r.stdout;
        assert!(
            drawn.contains("gate approve-plan of runbook triage (task triage): Approve the plan before the report"),
            "{r:?}"
        );
        assert!(drawn.contains("stage plan: Plan ready"), "{r:?}");
        assert!(
            drawn.contains(&format!(
                "artifact results/plan.md  sha256:{} (8 bytes)\r\n    | the plan",
                sha256(b"the plan")
            )),
            "{r:?}"
        );
        assert!(drawn.contains("question approve (noul): Approve the plan before the report"));
        let opened = openings(&p);
        assert_eq!(opened.len(), 1, "{opened:?}");
        assert_eq!(opened[0]["task"], "triage");
        assert_eq!(opened[0]["gate"], "approve-plan");
        assert_eq!(opened[0]["via"], "terminal");
        let digest = opened[0]["digest"].as_str().unwrap();
        assert!(drawn.contains(digest), "the digest is shown: {r:?}");
        let row = p.row("triage");
        assert_eq!(row["status"], status, "{row}");
        let gate = &row["runbook"]["checkpoints"][0]["gate"];
        assert_eq!(gate["approved"], approved, "{gate}");
        assert_eq!(gate["digest"], digest);
        let by = gate["by"].as_str().unwrap();
        assert!(by.starts_with("terminal:"), "{gate}");
        if approved {
            assert!(
                drawn
                    .contains("not an answer: question `approve`: \"y\" is not one of its options"),
                "{r:?}"
            );
            assert_eq!(gate["note"], "looks right");
        } else {
            assert_eq!(
                row["note"],
                format!("runbook `triage`: gate `approve-plan` was rejected by {by}")
            );
        }
    }
}

/// What `p`'s last run logged of its runbook's stages, in order: each `runbook_stage` line as
/// `stage <name> gate <approved>` (`null` before its gate is decided), `decision_opened`,
/// `runbook_stages_closed` and the task's row.
fn stage_lines(p: &Pack) -> Vec<String> {
    (p.log().iter())
        .filter_map(|l| match l["kind"].as_str()? {
            "runbook_stage" => Some(format!(
                "stage {} gate {}",
                l["checkpoint"]["stage"].as_str()?,
                l["checkpoint"]["gate"]["approved"]
            )),
            k @ ("decision_opened" | "runbook_stages_closed" | "task_result") => {
                Some(k.to_string())
            }
            _ => None,
        })
        .collect()
}

// Issue 15, RFC-0002:C-HUMAN-DECISION at stage boundaries, on the command backend: a runbook
// with two checkpoints runs as two turns, in order. The plan's turn ends, its checkpoint is
// hashed into the ledger and logged, and its gate is put to a person at the terminal before
// the report's turn starts: approved, the report's turn runs, told which stage it is in and
// that the plan's is done (with its hash and decision), the workspace carrying the plan; the
// row holds each stage's hash and the spend of both turns. Rejected, the report's stage never
// runs: no turn, no prompt, no report, one checkpoint in the ledger.
#[test]
fn c_human_decision_a_runbook_runs_a_turn_per_stage_with_its_gate_between_them() {
    for (typed, approved) in [("yes\n\n", true), ("no\n\n", false)] {
        let p = pack(&["triage"], &command_backend(&follows("the report")));
        bundle(&p, "triage", &contract("triage", EVERY_EFFECT, true, true));
        let command = format!("{BIN} {}", p.run_args(&[]).join(" "));
        let probe = p.probe().to_string_lossy().into_owned();
        let r = on_a_terminal(&command, p.path(), &[("PACK", &probe)], typed);
        assert!(
            r.stdout.contains("gate approve-plan of runbook triage"),
            "{r:?}"
        );
        let ran = std::fs::read_to_string(p.probe().join("stages")).unwrap();
        let first = std::fs::read_to_string(p.probe().join("prompt-plan.md")).unwrap();
        assert!(first.contains("# Triage procedure"), "{first}");
        assert!(first.contains("# Runbook stage `plan` (1 of 2)"), "{first}");
        assert!(first.contains("No stage is done yet."), "{first}");
        assert!(
            first.contains("Then a person decides the gate `approve-plan`"),
            "{first}"
        );
        let row = p.row("triage");
        let ledger = &row["runbook"];
        let plan = &ledger["checkpoints"][0];
        assert_eq!(plan["stage"], "plan");
        assert_eq!(plan["artifacts"][0]["sha256"], sha256(b"the plan"));
        assert_eq!(plan["gate"]["approved"], approved, "{plan}");
        if approved {
            assert_eq!(r.code, 0, "{r:?}");
            assert_eq!(row["status"], "pass", "{row}");
            assert_eq!(ran, "plan\nreport\n");
            assert_eq!(
                stage_lines(&p),
                [
                    "stage plan gate null",
                    "decision_opened",
                    "stage plan gate true",
                    "stage report gate null",
                    "runbook_stages_closed",
                    "task_result"
                ]
            );
            let report = &ledger["checkpoints"][1];
            assert_eq!(report["stage"], "report");
            assert_eq!(report["artifacts"][0]["sha256"], sha256(b"the report"));
            let second = std::fs::read_to_string(p.probe().join("prompt-report.md")).unwrap();
            assert!(second.contains("# Triage procedure"), "{second}");
            assert!(
                second.contains("# Runbook stage `report` (2 of 2)"),
                "{second}"
            );
            let by = plan["gate"]["by"].as_str().unwrap();
            assert!(
                second.contains(&format!(
                    "- `plan` (Plan ready): results/plan.md sha256:{} (8 bytes); gate `approve-plan` approved by {by}",
                    sha256(b"the plan")
                )),
                "{second}"
            );
            assert!(second.contains("This is the last stage"), "{second}");
            assert_eq!(row["cost_usd"], 0.5, "both turns' spend");
            assert_eq!(
                std::fs::read_to_string(p.workspace().join("results/report.md")).unwrap(),
                "the report"
            );
        } else {
            assert_eq!(r.code, 3, "{r:?}");
            assert_eq!(ran, "plan\n", "the report's stage never ran");
            assert_eq!(
                stage_lines(&p),
                [
                    "stage plan gate null",
                    "decision_opened",
                    "runbook_stages_closed",
                    "task_result"
                ]
            );
            assert_eq!(ledger["checkpoints"].as_array().unwrap().len(), 1);
            assert!(!p.probe().join("prompt-report.md").exists());
            assert!(!p.workspace().join("results/report.md").exists());
            assert_eq!(row["cost_usd"], 0.25);
            assert!(
                row["note"]
                    .as_str()
                    .unwrap()
                    .starts_with("runbook `triage`: gate `approve-plan` was rejected by terminal:"),
                "{row}"
            );
        }
    }
}

// Issue 15, RFC-0002:C-PLAYBOOK-RESUME between stages: an engine SIGKILLed while the report's
// turn runs (the plan's stage done and logged) resumes at the first unsettled stage. The plan's
// turn never runs again: its kept artifact is put back (the same bytes, so the same hash) and
// the report's turn runs on it; the row holds both stages and what both turns spent.
#[test]
fn c_playbook_resume_a_runbook_killed_between_stages_resumes_at_the_first_unsettled_stage() {
    let slow = r#"if [ "$CRUCIBLE_RUNBOOK_STAGE" = report ] && [ ! -e "$PACK/report-began" ]; then touch "$PACK/report-began"; sleep 60; fi; "#;
    let p = pack(
        &["triage"],
        &command_backend(&format!("{slow}{}", follows("the report"))),
    );
    bundle(&p, "triage", &contract("triage", EVERY_EFFECT, true, false));
    let mut child = p.command(&p.run_args(&[])).0.spawn().unwrap();
    crate::support::wait_for_file(&p.probe().join("report-began"), 30);
    let began = std::time::Instant::now();
    while stage_lines(&p).is_empty() {
        assert!(
            began.elapsed().as_secs() < 10,
            "the plan's stage was never logged"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(stage_lines(&p), ["stage plan gate null"]);
    child.kill().unwrap(); // SIGKILL: between the plan's stage and the report's
    child.wait().unwrap();

    let r = p.run(&["--resume"]);
    assert_eq!(r.code, 0, "{r:?}");
    let ran = std::fs::read_to_string(p.probe().join("stages")).unwrap();
    assert_eq!(ran, "plan\nreport\n", "the plan's turn ran once");
    let row = p.row("triage");
    assert_eq!(row["status"], "pass", "{row}");
    let ledger = &row["runbook"];
    assert_eq!(
        ledger["checkpoints"][0]["artifacts"][0]["sha256"],
        sha256(b"the plan")
    );
    assert_eq!(
        ledger["checkpoints"][1]["artifacts"][0]["sha256"],
        sha256(b"the report")
    );
    assert_eq!(
        row["cost_usd"], 0.5,
        "the plan's spend before the kill counts"
    );
    let second = std::fs::read_to_string(p.probe().join("prompt-report.md")).unwrap();
    assert!(
        second.contains(&format!(
            "- `plan` (Plan ready): results/plan.md sha256:{} (8 bytes)",
            sha256(b"the plan")
        )),
        "{second}"
    );
    assert_eq!(
        std::fs::read_to_string(p.workspace().join("results/plan.md")).unwrap(),
        "the plan"
    );
    assert_eq!(
        stage_lines(&p),
        [
            "stage plan gate null",
            "stage report gate null",
            "runbook_stages_closed",
            "task_result"
        ]
    );
}

/// A runbook pack with a gate whose decisions a scripted controller answers with `answer`.
fn gated_pack() -> Pack {
    let p = pack(&["triage"], &command_backend(&follows("the report")));
    bundle(&p, "triage", &contract("triage", EVERY_EFFECT, true, true));
    p
}

fn with_controller(p: &Pack, ctl: &crate::human::Controller, args: &[&str]) -> Cmd {
    p.command(&p.run_args(args))
        .env("CRUCIBLE_DECISIONS_URL", &ctl.http.url(""))
        .env("CRUCIBLE_DECISIONS_POLL_MS", "100")
}

// RFC-0002:C-HUMAN-DECISION, C-DECISION-EVIDENCE for a runbook gate through a controller (the
// scripted one speaking the polling protocol): one request for the run's task and gate, its one
// question `approve`, its evidence exactly the runbook, gate, stage and artifacts (with their
// contents) and its digest over them; an approver's `yes` passes the task, a `no` fails it, and
// an answer breaking the rules (`uncertain`) is refused, never taken for an approval.
#[test]
fn a_gate_is_answered_through_a_controller() {
    for (answer, status) in [("yes", "pass"), ("no", "fail"), ("uncertain", "fail")] {
        let p = gated_pack();
        let ctl = crate::human::Controller::start(move |r| {
            Some(crate::human::alice(
                &r["digest"],
                serde_json::json!({"approve": [answer]}),
            ))
        });
        let r = with_controller(&p, &ctl, &[]).run();
        let opens = ctl.opens();
        assert_eq!(opens.len(), 1, "{r:?}");
        let body = &opens[0].body;
        assert_eq!(body["route"], "triage:approve-plan");
        assert_eq!(
            body["questions"],
            serde_json::json!([{"id": "approve", "kind": "noul",
                "ask": "Approve the plan before the report", "options": ["yes", "no"],
                "multiple": false}])
        );
        let ev = &body["evidence"];
        assert_eq!(
            ev,
            &serde_json::json!({
                "task": "triage",
                "runbook": {"name": "triage", "digest": sealed_digest(&p.path().join("runbooks/triage"))},
                "gate": {"id": "approve-plan", "prompt": "Approve the plan before the report"},
                "stage": {"name": "plan", "summary": "Plan ready"},
                "artifacts": [{"path": "results/plan.md", "bytes": 8,
                    "sha256": format!("sha256:{}", sha256(b"the plan")), "text": "the plan"}],
            })
        );
        assert_eq!(body["digest"], crate::human::digest_of(ev));
        let opened = openings(&p);
        assert_eq!(opened[0]["via"], "controller");
        assert_eq!(opened[0]["digest"], body["digest"]);
        let row = p.row("triage");
        assert_eq!(row["status"], status, "{row}");
        let gate = &row["runbook"]["checkpoints"][0]["gate"];
        match answer {
            "yes" => {
                assert_eq!(r.code, 0, "{r:?}");
                assert_eq!(gate["approved"], true, "{gate}");
                assert_eq!(gate["by"], "user:alice");
                assert_eq!(gate["note"], "ship it <b>");
            }
            "no" => {
                assert_eq!(gate["approved"], false, "{gate}");
                assert_eq!(
                    row["note"],
                    "runbook `triage`: gate `approve-plan` was rejected by user:alice"
                );
            }
            _ => {
                assert!(gate.is_null(), "{gate}");
                assert_eq!(
                    row["note"],
                    "runbook `triage`: gate `approve-plan` got no decision: human answer refused: question `approve`: \"uncertain\" is not one of its options"
                );
            }
        }
    }
}

// RFC-0002:C-HUMAN-DECISION, C-PLAYBOOK-RESUME for a gate: an engine killed while its gate is
// open resumes with the gated stage's turn done (its kept artifacts put back, the turn not run
// again); with the same evidence it reopens the same request (same digest, same times: a resume
// never extends it), logged once, and settles on the answer given while it was down.
#[test]
fn a_resumed_run_settles_its_open_gate_on_the_answer_given_while_it_was_down() {
    let p = gated_pack();
    let answer_now = std::sync::Arc::new(std::sync::Mutex::new(false));
    let flag = answer_now.clone();
    let ctl = crate::human::Controller::start(move |r| {
        (*flag.lock().unwrap())
            .then(|| crate::human::alice(&r["digest"], serde_json::json!({"approve": ["yes"]})))
    });
    let mut child = with_controller(&p, &ctl, &[]).0.spawn().unwrap();
    let began = std::time::Instant::now();
    while ctl.opens().is_empty() {
        assert!(began.elapsed().as_secs() < 30, "the gate never opened");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL: no stop, so no withdrawal
    child.wait().unwrap();
    *answer_now.lock().unwrap() = true;

    let r = with_controller(&p, &ctl, &["--resume"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    let opens = ctl.opens();
    assert_eq!(opens.len(), 2, "opened again on resume");
    for field in ["route", "digest", "expires_at", "opened_at"] {
        assert_eq!(opens[1].body[field], opens[0].body[field], "{field}");
    }
    assert_eq!(openings(&p).len(), 1, "one request, logged once");
    assert_eq!(
        std::fs::read_to_string(p.probe().join("stages")).unwrap(),
        "plan\nreport\n",
        "the plan's turn was done before the kill and not run again"
    );
    let row = p.row("triage");
    assert_eq!(row["status"], "pass", "{row}");
    let gate = &row["runbook"]["checkpoints"][0]["gate"];
    assert_eq!(gate["by"], "user:alice");
    assert_eq!(gate["digest"], opens[0].body["digest"]);
}

/// The runbook example (`examples/runbook`) copied to a tempdir, changed by `edit(path, text)`
/// for each of its files.
fn example(edit: impl Fn(&str, String) -> String) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let root = crate::examples::repo_root().join("examples/runbook");
    crate::examples::copy_dir(&root, tmp.path());
    for rel in ["crucible.toml", "agent.sh", "runbooks/triage/runbook.json"] {
        let path = tmp.path().join(rel);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, edit(rel, text)).unwrap();
    }
    tmp
}

/// `runbook.json` with a gate on its plan checkpoint.
fn gated(text: String) -> String {
    text.replace(
        r#""summary": "Plan written", "artifactPaths": ["results/plan.md"]"#,
        r#""summary": "Plan written", "artifactPaths": ["results/plan.md"], "gate": {"id": "approve-plan", "prompt": "Approve the plan"}"#,
    )
}

/// `runbook.json` without `filesystem.write`.
fn read_only(text: String) -> String {
    text.replace(r#""filesystem.write", "#, "")
}

/// The example's `triage` row of its last run in `dir`.
fn triage_row(dir: &std::path::Path) -> Value {
    let current = std::fs::read_to_string(dir.join("state/current")).unwrap();
    let log = std::fs::read_to_string(
        dir.join("state/runs")
            .join(current.trim())
            .join("session.jsonl"),
    )
    .unwrap();
    log.lines()
        .rev()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["kind"] == "task_result" && l["task"] == "triage")
        .expect("a triage row")
}

/// `plan run` of the example in `dir` with `env`, on a terminal typing `typed` when given.
fn run_example(dir: &std::path::Path, env: &[(&str, &str)], typed: Option<&str>) -> Ran {
    let args = ["plan", "run", "--max-cost", "1", "--max-time", "5m"];
    match typed {
        Some(typed) => on_a_terminal(&format!("{BIN} {}", args.join(" ")), dir, env, typed),
        None => {
            let mut c = Command::new(BIN);
            c.args(args)
                .current_dir(dir)
                .envs(env.iter().copied())
                .stdin(Stdio::null());
            Cmd(c).run()
        }
    }
}

// The runbook example on the command backend (agent.sh stands in for the agent): it passes with
// its artifacts hashed; with an empty report it fails naming the predicate; with a gate it is
// approved at the terminal; without `filesystem.write` the sandbox refuses its writes.
#[test]
fn the_runbook_example_on_the_command_backend() {
    let pass = example(|_, t| t);
    let r = run_example(pass.path(), &[], None);
    assert_eq!(r.code, 0, "{r:?}");
    let plan = std::fs::read_to_string(pass.path().join("workspace/results/plan.md")).unwrap();
    assert!(plan.contains("Search the code for the symptom"), "{plan}");
    let row = triage_row(pass.path());
    assert_eq!(
        row["runbook"]["checkpoints"][0]["artifacts"][0]["sha256"],
        sha256(plan.as_bytes())
    );

    let empty = example(|rel, t| match rel {
        "agent.sh" => t.replace(
            "} > results/report.md",
            "} >/dev/null; : > results/report.md",
        ),
        _ => t,
    });
    let r = run_example(empty.path(), &[], None);
    assert_eq!(r.code, 3, "{r:?}");
    let row = triage_row(empty.path());
    assert_eq!(
        row["note"],
        "runbook `triage`: success claimed while predicate artifact_nonempty `results/report.md` fails"
    );

    let gate = example(|rel, t| match rel {
        "runbooks/triage/runbook.json" => gated(t),
        _ => t,
    });
    let r = run_example(gate.path(), &[], Some("yes\n\n"));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("gate approve-plan of runbook triage"),
        "{r:?}"
    );
    assert_eq!(
        triage_row(gate.path())["runbook"]["checkpoints"][0]["gate"]["approved"],
        true
    );

    let ro = example(|rel, t| match rel {
        "runbooks/triage/runbook.json" => read_only(t),
        _ => t,
    });
    let r = run_example(ro.path(), &[], None);
    assert_eq!(r.code, 3, "{r:?}");
    let row = triage_row(ro.path());
    assert_eq!(row["status"], "fail", "{row}");
    assert!(
        row["note"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{row}"
    );
    assert!(!ro.path().join("workspace/results").exists());
    // The plan's stage failed: the report's never ran.
    let stages = row["runbook"]["checkpoints"].as_array().unwrap();
    assert_eq!(stages.len(), 1, "{row}");
    assert_eq!(stages[0]["stage"], "plan");
}

// The runbook example on a real agent CLI (pi) against the scripted model endpoint, whose
// default script stands in for the model following the procedure: it passes with its artifacts
// hashed; writing no report, it fails naming the predicate; with a gate it is approved at the
// terminal; without `filesystem.write` the sandbox refuses the turn's writes (its shell says
// so to the model) and only its result reaches the engine.
/// The runbook example on pi against a scripted model endpoint following `script`, changed by
/// `edit`, run with `typed` typed at a terminal when given; `None` without the CLI.
fn example_on_pi(
    script: Value,
    edit: &dyn Fn(&str, String) -> String,
    typed: Option<&str>,
) -> Option<(tempfile::TempDir, Ran, crate::model_double::ModelDouble)> {
    let cli = crate::support::agent_cli("pi")?;
    let on_pi = |rel: &str, t: String| match rel {
        "crucible.toml" => {
            t.replace(
                "backend = \"command\"\nagent_cmd = \"sh agent.sh\"\n",
                "harness = \"pi\"\n",
            ) + &format!(
            "\n[agent.cli]\npi = {:?}\n[agent.prices.\"scripted-1\"]\ninput = 3.0\noutput = 15.0\n",
            cli.to_string_lossy()
        )
        }
        _ => t,
    };
    let model = crate::model_double::ModelDouble::with_default(script);
    let dir = example(|rel, t| edit(rel, on_pi(rel, t)));
    let binding = serde_json::json!({"version": 1, "bindings": [{"role": "agent",
        "protocol": "chat_completions", "url": model.url(), "model": "scripted-1",
        "key_env": "SCRIPTED_KEY"}]});
    let env = [
        ("CRUCIBLE_INFERENCE", binding.to_string()),
        ("SCRIPTED_KEY", "sk-scripted".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = run_example(dir.path(), &env, typed);
    Some((dir, r, model))
}

#[test]
fn the_runbook_example_on_a_real_agent_cli() {
    if crate::support::agent_cli("pi").is_none() {
        return;
    }
    let scenario = |script: Value, edit: &dyn Fn(&str, String) -> String, typed: Option<&str>| {
        example_on_pi(script, edit, typed).expect("the CLI is installed")
    };
    let follows = serde_json::json!({"write": {
        "results/plan.md": "# Plan\n1. Search the code for the symptom.\n",
        "results/report.md": "# Report\nThe comma is missing.\n",
        "PLAN_TASK_RESULT.json": "{\"summary\": \"planned and reported\"}"}});
    let same = |_: &str, t: String| t;

    let (dir, r, model) = scenario(follows.clone(), &same, None);
    assert_eq!(r.code, 0, "{r:?}");
    let row = triage_row(dir.path());
    assert_eq!(row["status"], "pass", "{row}");
    assert_eq!(
        row["runbook"]["checkpoints"][1]["artifacts"][0]["sha256"],
        sha256(b"# Report\nThe comma is missing.\n")
    );
    let calls = model.scripted_calls();
    assert!(calls[0].conversation().contains("Triage a bug report"));
    assert!(calls[0].conversation().contains("skills/research/SKILL.md"));

    let no_report = serde_json::json!({"write": {
        "results/plan.md": "# Plan\n",
        "PLAN_TASK_RESULT.json": "{\"summary\": \"done\"}"}});
    let (dir, r, _) = scenario(no_report, &same, None);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(
        triage_row(dir.path())["note"],
        "runbook `triage`: success claimed while predicate artifact_nonempty `results/report.md` fails"
    );

    let gate = |rel: &str, t: String| match rel {
        "runbooks/triage/runbook.json" => gated(t),
        _ => t,
    };
    let (dir, r, _) = scenario(follows, &gate, Some("yes\n\n"));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("gate approve-plan of runbook triage"),
        "{r:?}"
    );
    assert_eq!(
        triage_row(dir.path())["runbook"]["checkpoints"][0]["gate"]["approved"],
        true
    );

    let ro = |rel: &str, t: String| match rel {
        "runbooks/triage/runbook.json" => read_only(t),
        _ => t,
    };
    let tries = serde_json::json!({"write": {"PLAN_TASK_RESULT.json": "{\"summary\": \"tried\"}"},
        "bash": "mkdir -p results && echo '# Plan' > results/plan.md"});
    let (dir, r, model) = scenario(tries, &ro, None);
    assert_eq!(r.code, 3, "{r:?}");
    let row = triage_row(dir.path());
    assert_eq!(
        row["note"],
        "runbook `triage`: success claimed while predicate artifact_exists `results/plan.md` fails"
    );
    assert!(!dir.path().join("workspace/results").exists());
    let said = model
        .requests()
        .iter()
        .map(|s| s.conversation())
        .collect::<String>();
    assert!(said.contains("Read-only file system"), "{said}");
}

// Issue 15, `tool:<name>` classes on the real CLIs against the scripted endpoint: the runbook's
// allow-list reaches the CLI as its own flag (Claude Code's `--tools`/`--allowedTools`, pi's
// `--tools`), so the model is offered exactly those tools; a call to a tool left out (the
// shell) is refused by the CLI and never runs, while the allowed write does. The sandbox stays
// the boundary; the flags are a layer inside it.
#[test]
fn a_runbook_tool_allow_list_reaches_the_cli_and_holds() {
    use crate::agents::{CLAUDE, PI};
    for (cli, offered) in [(&CLAUDE, ["Read", "Write"]), (&PI, ["read", "write"])] {
        let wf = "triage = skill(name = \"triage\", runbook = \"runbooks/triage\")\nworkflow([triage])\n";
        let Some(p) = cli.pack(wf) else { continue };
        let mut effects = EVERY_EFFECT.to_vec();
        effects.extend(["tool:read", "tool:write"]);
        bundle(&p, "triage", &contract("triage", &effects, false, false));
        let model = crate::model_double::ModelDouble::with_default(serde_json::json!({
            "write": {"PLAN_TASK_RESULT.json": "{\"summary\": \"done\"}"},
            "bash": "touch bashed"}));
        let r = cli.run(&p, &model, &[]);
        assert_eq!(r.code, 0, "{}: {r:?}", cli.name);
        let calls = model.scripted_calls();
        assert!(!calls.is_empty(), "{}: no model call", cli.name);
        for c in &calls {
            let mut names: Vec<String> = (c.body["tools"].as_array().into_iter().flatten())
                .map(|t| {
                    t["name"]
                        .as_str()
                        .or(t["function"]["name"].as_str())
                        .unwrap_or_default()
                        .to_string()
                })
                .collect();
            names.sort();
            assert_eq!(names, offered, "{}: the tools offered", cli.name);
        }
        let mut stack = vec![p.path().to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                assert_ne!(e.file_name(), "bashed", "{}: the shell ran", cli.name);
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                }
            }
        }
        let said: String = model.requests().iter().map(|s| s.conversation()).collect();
        assert!(
            said.contains("touch bashed"),
            "{}: the shell was asked for",
            cli.name
        );
        assert_eq!(p.row("triage")["status"], "pass", "{}", cli.name);
    }
}

// Issue 15, RFC-0002:C-HUMAN-DECISION at stage boundaries, on a real agent CLI (pi) against the
// scripted endpoint, whose script follows the stage each turn's prompt names: the plan's turn,
// then its gate at the terminal, then (approved) the report's turn, which continues the same pi
// session (its conversation carries the plan's turn), each stage's hash in the row. Rejected,
// the model is never asked for the report's stage and no report is written.
#[test]
fn c_human_decision_runbook_stages_and_their_gate_on_a_real_agent_cli() {
    let plan = "# Plan\n1. Search the code for the symptom.\n";
    let report = "# Report\nThe comma is missing.\n";
    let staged = serde_json::json!({"stages": {
        "plan": {"write": {"results/plan.md": plan,
            "PLAN_TASK_RESULT.json": "{\"summary\": \"planned\"}"}},
        "report": {"write": {"results/report.md": report,
            "PLAN_TASK_RESULT.json": "{\"summary\": \"reported\"}"}}}});
    let gate = |rel: &str, t: String| match rel {
        "runbooks/triage/runbook.json" => gated(t),
        _ => t,
    };
    for (typed, approved) in [("yes\n\n", true), ("no\n\n", false)] {
        let Some((dir, r, model)) = example_on_pi(staged.clone(), &gate, Some(typed)) else {
            return;
        };
        assert!(
            r.stdout.contains("gate approve-plan of runbook triage"),
            "{r:?}"
        );
        let row = triage_row(dir.path());
        let ledger = &row["runbook"];
        assert_eq!(
            ledger["checkpoints"][0]["artifacts"][0]["sha256"],
            sha256(plan.as_bytes())
        );
        assert_eq!(ledger["checkpoints"][0]["gate"]["approved"], approved);
        let said: Vec<String> = (model.requests().iter())
            .map(|s| s.conversation())
            .collect();
        let in_stage = |name: &str| format!("# Runbook stage `{name}`");
        assert!(said.iter().any(|c| c.contains(&in_stage("plan"))));
        let reported = workspace_file(dir.path(), "results/report.md");
        if approved {
            assert_eq!(r.code, 0, "{r:?}");
            assert_eq!(row["status"], "pass", "{row}");
            assert_eq!(
                ledger["checkpoints"][1]["artifacts"][0]["sha256"],
                sha256(report.as_bytes())
            );
            assert_eq!(reported.as_deref(), Some(report));
            let second = (said.iter())
                .find(|c| c.contains(&in_stage("report")))
                .expect("the report's stage was asked for");
            assert!(
                second.contains(&in_stage("plan")),
                "the report's turn continues the plan's session: {second}"
            );
        } else {
            assert_eq!(r.code, 3, "{r:?}");
            assert!(!said.iter().any(|c| c.contains(&in_stage("report"))));
            assert_eq!(ledger["checkpoints"].as_array().unwrap().len(), 1);
            assert_eq!(reported, None);
        }
    }
}

/// The file `rel` of the example's workspace in `dir`, if it is there.
fn workspace_file(dir: &std::path::Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(dir.join("workspace").join(rel)).ok()
}

// Issue 15, stage turns on each real CLI against the scripted endpoint (no gate, so no terminal
// is needed): the runbook's two stages are two turns of one conversation, the second continuing
// the first (Claude Code `--resume`, codex `resume`, pi `--session`): the report stage's
// request carries the plan stage's turn, each stage wrote only its own file, and the row holds
// each stage's hash and the spend of every call of both turns.
#[test]
fn c_revise_loop_runbook_stage_turns_continue_one_conversation_on_each_cli() {
    use crate::agents::{CLAUDE, CODEX, PI};
    for cli in [&CLAUDE, &CODEX, &PI] {
        let wf = "triage = skill(name = \"triage\", runbook = \"runbooks/triage\")\nworkflow([triage])\n";
        let Some(p) = cli.pack(wf) else { continue };
        bundle(&p, "triage", &contract("triage", EVERY_EFFECT, true, false));
        let model = crate::model_double::ModelDouble::with_default(serde_json::json!({"stages": {
            "plan": {"write": {"results/plan.md": "the plan",
                "PLAN_TASK_RESULT.json": "{\"summary\": \"planned\"}"}},
            "report": {"write": {"results/report.md": "the report",
                "PLAN_TASK_RESULT.json": "{\"summary\": \"reported\"}"}}}}));
        let r = cli.run(&p, &model, &[]);
        assert_eq!(r.code, 0, "{}: {r:?}", cli.name);
        let row = p.row("triage");
        let ledger = &row["runbook"];
        for (k, text) in [(0, "the plan"), (1, "the report")] {
            assert_eq!(
                ledger["checkpoints"][k]["artifacts"][0]["sha256"],
                sha256(text.as_bytes()),
                "{}: {row}",
                cli.name
            );
        }
        let calls = model.scripted_calls();
        let stage_of = |c: &crate::model_double::Seen| {
            let text = c.conversation();
            ["report", "plan"]
                .into_iter()
                .find(|s| text.contains(&format!("# Runbook stage `{s}`")))
        };
        let first_report = (calls.iter())
            .position(|c| stage_of(c) == Some("report"))
            .unwrap_or_else(|| panic!("{}: the report stage was never asked for", cli.name));
        assert!(
            calls[..first_report]
                .iter()
                .all(|c| stage_of(c) == Some("plan")),
            "{}: the plan's turn came first",
            cli.name
        );
        assert!(
            calls[first_report]
                .conversation()
                .contains("# Runbook stage `plan`"),
            "{}: the report's turn continues the plan's conversation",
            cli.name
        );
        let spent = row["cost_usd"].as_f64().unwrap();
        let each = cli.call_cost();
        assert!(
            (spent - each * calls.len() as f64).abs() < 1e-9,
            "{}: {spent} for {} calls",
            cli.name,
            calls.len()
        );
    }
}

// Issue 15, RFC-0002:C-PLAYBOOK-BUDGET for stages: the attempt's deadline covers all its stage turns
// together. Each stage's turn alone (4s) is within the task's 6s limit; the two are not, so
// the report's turn is cut at the attempt's deadline, not given a fresh one (the attempt ends
// before the 8s two fresh deadlines would allow), and the task fails timed out, the plan's
// stage and the cut report's in its ledger.
#[test]
fn c_playbook_budget_one_deadline_covers_every_stage_turn_of_a_runbook() {
    let p = pack(
        &["triage"],
        &command_backend(&format!("sleep 4; {}", follows("the report"))),
    );
    p.file(
        "workflow.star",
        "triage = skill(name = \"triage\", runbook = \"runbooks/triage\", timeout = \"6s\")\nworkflow([triage])\n",
    );
    bundle(&p, "triage", &contract("triage", EVERY_EFFECT, true, false));
    let r = p.run(&[]);
    assert_eq!(r.code, 3, "{r:?}");
    let row = p.row("triage");
    assert_eq!(
        row["note"], "timed out: the task ran past its 6s limit",
        "{row}"
    );
    let stages = row["runbook"]["checkpoints"].as_array().unwrap();
    assert_eq!(stages.len(), 2, "{row}");
    assert_eq!(stages[0]["artifacts"][0]["sha256"], sha256(b"the plan"));
    assert_eq!(
        stages[1]["stage"], "report",
        "the stage that was cut: {row}"
    );
    assert!(row["secs"].as_f64().unwrap() < 8.0, "{row}");
}

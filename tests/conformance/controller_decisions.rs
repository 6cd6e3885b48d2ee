//! Human decisions on the controller (issue 14; RFC-0002:C-HUMAN-DECISION, C-DECISION-EVIDENCE):
//! a run under a real `crucible serve` has the `human` capability; its route's request is listed
//! to the approvers of its team, shown with its evidence to whoever may read the run, and
//! answered only by an approver naming its evidence digest; the first accepted answer is final.
//! On SQLite and on PostgreSQL.

use crate::controller::{file, tar_of, Server, Store};
use crate::controller_runs::{ended, events, launch, wait_run};
use crate::support::poll;
use serde_json::{json, Value};

const WORKFLOW: &str = r#"scan = command(name = "scan", run = "echo '{\"jobs\": [\"j1\", \"j2\"]}'", emits = ["jobs"])
gate = route(name = "gate", depends_on = [scan], human = True, timeout = "TIMEOUT",
    questions = {"go": noul(ask = "Deploy?"), "jobs": pick(source = scan.jobs, multiple = True)})
deploy = command(name = "deploy", run = "echo {}", depends_on = [gate], when = gate.go, answers = "yes")
hold = command(name = "hold", run = "echo {}", depends_on = [gate], when = gate.go, otherwise = True)
workflow([scan, gate, deploy, hold])
"#;

/// Registers the workflow in team red with the route's `timeout`: the pack's digest.
fn push(server: &Server, token: &str, name: &str, timeout: &str) -> String {
    let tar = tar_of(&[
        file(
            "crucible.toml",
            "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n",
        ),
        file("workflow.star", &WORKFLOW.replace("TIMEOUT", timeout)),
    ]);
    let (s, v) = server.call(
        "POST",
        &format!("/v1/packs?name={name}&team=red"),
        token,
        Some(&tar),
    );
    assert_eq!(s, 200, "{}: {v}", server.store);
    v["digest"].as_str().unwrap().to_string()
}

fn answer(server: &Server, run: &str, token: &str, body: Value) -> (u16, Value) {
    server.post_json(
        &format!("/v1/runs/{run}/decisions/gate/answer"),
        token,
        body,
    )
}

// RFC-0002:C-HUMAN-DECISION — the run waits on its route; the request is listed only to an
// approver of the run's team; a viewer cannot answer and another team cannot see it; an answer
// naming other evidence or outside the options is refused with the reason; the first accepted
// answer decides the route, an identical repeat is acknowledged, anything else is refused.
#[test]
fn an_approver_answers_a_runs_decision_through_the_api() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let rita = server.team_with_user("red", "rita", "editor");
        let ann = server.member("red", "ann", "approver");
        let vic = server.member("red", "vic", "viewer");
        let bo = server.team_with_user("blue", "bo", "approver");
        let digest = push(&server, &rita, "gated", "50s");
        let (s, v) = launch(
            &server,
            &rita,
            json!({ "pack": digest, "max_cost": 1, "max_time": "1m" }),
        );
        assert_eq!(s, 200, "{}: {v}", server.store);
        let run = v["id"].as_str().unwrap().to_string();

        let listed = poll(60, || {
            let (s, v) = server.get("/v1/decisions", &ann);
            assert_eq!(s, 200, "{v}");
            v["decisions"]
                .as_array()
                .and_then(|a| a.first())
                .cloned()
                .ok_or_else(|| format!("{}: the request never opened", server.store))
        });
        assert_eq!(listed["run"], run.as_str());
        assert_eq!(listed["route"], "gate");
        let evidence_digest = listed["digest"].clone();
        assert_eq!(server.get("/v1/decisions", &vic).1["decisions"], json!([]));
        assert_eq!(server.get("/v1/decisions", &bo).1["decisions"], json!([]));
        assert_eq!(
            server.get(&format!("/v1/runs/{run}/decisions/gate"), &bo).0,
            404
        );

        // Whoever may read the run sees the request with its evidence.
        let (s, shown) = server.get(&format!("/v1/runs/{run}/decisions/gate"), &vic);
        assert_eq!(s, 200, "{shown}");
        assert_eq!(shown["state"], "open");
        assert_eq!(shown["digest"], evidence_digest);
        assert_eq!(
            shown["evidence"]["inputs"],
            json!({"scan": {"status": "pass", "output": {"jobs": ["j1", "j2"]}}})
        );
        assert_eq!(shown["evidence"]["picks"], json!({"jobs": ["j1", "j2"]}));

        let good = json!({"digest": evidence_digest, "answers": {"go": ["yes"], "jobs": ["j2"]}, "note": "go"});
        let (s, v) = answer(&server, &run, &vic, good.clone());
        assert_eq!(s, 403, "{v}");
        assert_eq!(
            v["error"],
            "answering a decision needs the approver role in team `red`"
        );
        let (s, v) = answer(&server, &run, &bo, good.clone());
        assert_eq!(s, 404, "{v}");
        let (s, v) = answer(
            &server,
            &run,
            &ann,
            json!({"digest": "sha256:00", "answers": {"go": ["yes"], "jobs": ["j2"]}}),
        );
        assert_eq!(s, 422, "{v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("names evidence \"sha256:00\""),
            "{v}"
        );
        let (s, v) = answer(
            &server,
            &run,
            &ann,
            json!({"digest": evidence_digest, "answers": {"go": ["uncertain"], "jobs": ["j2"]}}),
        );
        assert_eq!(s, 422, "{v}");
        assert_eq!(
            v["error"],
            "question `go`: \"uncertain\" is not one of its options"
        );

        let (s, v) = answer(&server, &run, &ann, good.clone());
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["acknowledged"], false);
        let (s, v) = answer(&server, &run, &ann, good.clone());
        assert_eq!((s, &v["acknowledged"]), (200, &json!(true)), "{v}");
        let (s, v) = answer(
            &server,
            &run,
            &ann,
            json!({"digest": evidence_digest, "answers": {"go": ["no"], "jobs": ["j2"]}}),
        );
        assert_eq!(s, 422, "{v}");
        assert!(v["error"]
            .as_str()
            .unwrap()
            .contains("the first accepted answer is final"));

        let v = wait_run(&server, &run, ended);
        assert_eq!(v["verdict"], "valid", "{}: {v}", server.store);
        let rows = v["rows"].as_array().unwrap();
        let row = |t: &str| rows.iter().find(|r| r["task"] == t).unwrap().clone();
        let gate = row("gate");
        assert_eq!(gate["status"], "pass", "{gate}");
        assert_eq!(gate["output"]["go"]["label"], "yes");
        assert_eq!(gate["output"]["jobs"], json!(["j2"]));
        assert_eq!(gate["output"]["decision"]["principal"], "user:ann");
        assert_eq!(gate["output"]["decision"]["digest"], evidence_digest);
        assert_eq!(gate["output"]["decision"]["note"], "go");
        assert_eq!(row("deploy")["status"], "pass");
        assert_eq!(row("hold")["status"], "not_taken");
        assert_eq!(server.get("/v1/decisions", &ann).1["decisions"], json!([]));
        // The run's event stream says when the request opened and when the route settled on it,
        // only to whoever may read the run.
        let (s, seen) = events(&server, &run, &vic);
        assert_eq!(s, 200);
        let opened = seen
            .iter()
            .position(|(e, d)| e == "decision_opened" && d["task"] == "gate");
        let closed = (seen.iter())
            .position(|(e, d)| e == "task_result" && d["task"] == "gate" && d["status"] == "pass");
        assert!(opened.is_some() && opened < closed, "{seen:?}");
        assert_eq!(events(&server, &run, &bo).0, 404);
        let audit = server.get("/v1/audit", &server.admin).1;
        let answered: Vec<&Value> = (audit["entries"].as_array().unwrap().iter())
            .filter(|e| e["action"] == "decision.answer")
            .collect();
        assert_eq!(answered.len(), 1, "{audit}");
        assert_eq!(answered[0]["subject"], "ann");
        assert_eq!(answered[0]["target"], format!("decision:{run}/gate"));

        // Stopping a run withdraws its open request: every answer is refused after.
        let (_, v) = launch(
            &server,
            &rita,
            json!({ "pack": digest, "max_cost": 1, "max_time": "1m" }),
        );
        let run = v["id"].as_str().unwrap().to_string();
        let path = format!("/v1/runs/{run}/decisions/gate");
        poll(60, || match server.get(&path, &ann).0 {
            200 => Ok(()),
            _ => Err(format!("{}: the request never opened", server.store)),
        });
        let (s, v) = server.post_json(&format!("/v1/runs/{run}/stop"), &rita, json!({}));
        assert_eq!(s, 200, "{v}");
        let v = wait_run(&server, &run, ended);
        assert_eq!(v["outcome"], "stopped", "{v}");
        assert_eq!(server.get(&path, &ann).1["state"], "withdrawn");
        let (s, v) = answer(&server, &run, &ann, good.clone());
        assert_eq!(s, 422, "{v}");
        assert_eq!(v["error"], "the request was withdrawn: its run stopped");

        // An unanswered request expires: the route records uncertain and passes, the request
        // leaves the list and refuses every answer.
        let brief = push(&server, &rita, "brief", "1s");
        let (_, v) = launch(
            &server,
            &rita,
            json!({ "pack": brief, "max_cost": 1, "max_time": "1m" }),
        );
        let run = v["id"].as_str().unwrap().to_string();
        let v = wait_run(&server, &run, ended);
        assert_eq!(v["verdict"], "valid", "{v}");
        let gate = v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["task"] == "gate")
            .unwrap()
            .clone();
        assert_eq!(gate["output"]["go"]["label"], "uncertain", "{gate}");
        assert_eq!(gate["output"]["decision"]["outcome"], "expired");
        let (s, shown) = server.get(&format!("/v1/runs/{run}/decisions/gate"), &ann);
        assert_eq!((s, &shown["state"]), (200, &json!("expired")), "{shown}");
        assert_eq!(server.get("/v1/decisions", &ann).1["decisions"], json!([]));
        let mut late = good.clone();
        late["digest"] = shown["digest"].clone();
        let (s, v) = answer(&server, &run, &ann, late);
        assert_eq!(s, 422, "{v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .starts_with("the request expired at "),
            "{v}"
        );
    }
}

// RFC-0002:C-HUMAN-DECISION for a runbook's gate (issue 15) under a real `crucible serve`: the
// gate's request (`TASK:GATE`) is listed to the team's approvers with the stage's evidence,
// answered through the same endpoint and rules as a route's, and the task settles on it.
#[test]
fn an_approver_answers_a_runbook_gate_through_the_api() {
    const CONTRACT: &str = r#"{"schemaVersion": 1, "name": "triage", "version": "1.0.0",
  "description": "Triage", "invocation": "explicit", "requiredCapabilities": [],
  "allowedEffectClasses": ["filesystem.read", "filesystem.write", "process.exec", "network"],
  "artifacts": [{"name": "plan", "path": "results/plan.md", "stage": "plan"}],
  "checkpoints": [{"stage": "plan", "summary": "Plan ready", "artifactPaths": ["results/plan.md"],
    "gate": {"id": "approve-plan", "prompt": "Approve the plan"}}]}"#;
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let rita = server.team_with_user("red", "rita", "editor");
        let ann = server.member("red", "ann", "approver");
        let tar = tar_of(&[
            file(
                "crucible.toml",
                "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n[agent]\nbackend = \"command\"\nagent_cmd = '''mkdir -p results; printf 'the plan' > results/plan.md; echo '{\"summary\": \"done\"}' > PLAN_TASK_RESULT.json'''\n",
            ),
            file(
                "workflow.star",
                "triage = skill(name = \"triage\", runbook = \"runbooks/triage\")\nworkflow([triage])\n",
            ),
            file("runbooks/triage/runbook.json", CONTRACT),
            file("runbooks/triage/RUNBOOK.md", "# Triage\n\nWrite a plan.\n"),
        ]);
        let (s, v) = server.call("POST", "/v1/packs?name=rb&team=red", &rita, Some(&tar));
        assert_eq!(s, 200, "{}: {v}", server.store);
        let digest = v["digest"].as_str().unwrap().to_string();
        let (s, v) = launch(
            &server,
            &rita,
            json!({ "pack": digest, "max_cost": 1, "max_time": "1m" }),
        );
        assert_eq!(s, 200, "{}: {v}", server.store);
        let run = v["id"].as_str().unwrap().to_string();
        let path = format!("/v1/runs/{run}/decisions/triage:approve-plan");
        let shown = poll(60, || match server.get(&path, &ann) {
            (200, v) => Ok(v),
            _ => Err(format!("{}: the gate never opened", server.store)),
        });
        assert_eq!(shown["state"], "open", "{shown}");
        assert_eq!(
            shown["evidence"]["stage"],
            json!({"name": "plan", "summary": "Plan ready"})
        );
        assert_eq!(shown["evidence"]["artifacts"][0]["text"], "the plan");
        let (s, v) = server.post_json(
            &format!("{path}/answer"),
            &ann,
            json!({"digest": shown["digest"], "answers": {"approve": ["maybe"]}}),
        );
        assert_eq!(s, 422, "{v}");
        let (s, v) = server.post_json(
            &format!("{path}/answer"),
            &ann,
            json!({"digest": shown["digest"], "answers": {"approve": ["yes"]}, "note": "ok"}),
        );
        assert_eq!(s, 200, "{v}");
        let v = wait_run(&server, &run, ended);
        assert_eq!(v["verdict"], "valid", "{}: {v}", server.store);
        let row = (v["rows"].as_array().unwrap().iter())
            .find(|r| r["task"] == "triage")
            .unwrap()
            .clone();
        let gate = &row["runbook"]["checkpoints"][0]["gate"];
        assert_eq!(gate["approved"], true, "{row}");
        assert_eq!(gate["by"], "user:ann");
        assert_eq!(gate["digest"], shown["digest"]);
    }
}

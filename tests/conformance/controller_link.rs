//! Engines outside the controller (issue 14's remote engine, issue 17's Kubernetes Jobs): a run
//! recorded with the executor `remote` is executed elsewhere; its engine reaches `crucible serve`
//! only by requests it initiates, authenticated by a run token scoped to that one run
//! (docs/controller.md, "Engines outside the controller"; docs/security.md). A real
//! `crucible serve` on loopback, on SQLite and on PostgreSQL.

use crate::controller::{Server, Store};
use crate::controller_runs::push;
use crate::fanout::star;
use crate::support::{Pack, BIN};
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A human route between a scan and a deploy; `deploy` writes its whole environment to the
/// probe, where the test reads it.
const GATED: &str = r#"scan = command(name = "scan", run = "echo '{\"jobs\": [\"j1\", \"j2\"]}'", emits = ["jobs"])
gate = route(name = "gate", depends_on = [scan], human = True, timeout = "TIMEOUT",
    questions = {"go": noul(ask = "Deploy?"), "jobs": pick(source = scan.jobs, multiple = True)})
deploy = command(name = "deploy", run = "env > \"$PACK/deploy-env\"; echo {}", depends_on = [gate], when = gate.go, answers = "yes")
hold = command(name = "hold", run = "echo {}", depends_on = [gate], when = gate.go, otherwise = True)
workflow([scan, gate, deploy, hold])
"#;

/// The gated pack with the route's `timeout`, registered on the controller (platform team)
/// from the very directory the engine runs it from: the pack and its digest.
fn gated(server: &Server, name: &str, timeout: &str) -> (Pack, String) {
    let p = star(&GATED.replace("TIMEOUT", timeout));
    let out = server.remote(&["pack", "push", p.path().to_str().unwrap(), "--name", name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (p, digest)
}

/// `crucible plan run` of `p` as a pod would run it: linked to the controller by the three
/// variables the remote run's record gave, and nothing else (no `--cap human`, no
/// `CRUCIBLE_DECISIONS_URL`).
fn engine(p: &Pack, run: &Value) -> Child {
    let env = &run["env"];
    Command::new(BIN)
        .args(p.run_args(&[]))
        .current_dir(p.path())
        .env("PACK", p.probe())
        .env_remove("CRUCIBLE_DECISIONS_URL")
        .env(
            "CRUCIBLE_CONTROLLER_URL",
            env["CRUCIBLE_CONTROLLER_URL"].as_str().unwrap(),
        )
        .env(
            "CRUCIBLE_CONTROLLER_RUN",
            env["CRUCIBLE_CONTROLLER_RUN"].as_str().unwrap(),
        )
        .env(
            "CRUCIBLE_RUN_TOKEN",
            env["CRUCIBLE_RUN_TOKEN"].as_str().unwrap(),
        )
        .env("CRUCIBLE_DECISIONS_POLL_MS", "100")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The open request of run `id` as `approver` is listed it, within a minute.
fn listed(server: &Server, approver: &str, id: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, v) = server.get("/v1/decisions", approver);
        assert_eq!(s, 200, "{v}");
        let found = v["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["run"] == id);
        if let Some(d) = found {
            return d.clone();
        }
        assert!(
            Instant::now() < until,
            "{}: the request never opened",
            server.store
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for the engine to exit: its exit code, stdout and stderr.
fn finish(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const CHAIN: &str = "[workflow]\ntype = \"playbook\"\n\
     [[workflow.task]]\nname = \"a\"\nkind = \"command\"\nrun = \"echo '{}'\"\n";

/// Records a remote run of `digest` as `token`'s subject: the answer (`id`, `token`, `env`).
pub(crate) fn remote_run(server: &Server, token: &str, digest: &str) -> Value {
    let (s, v) = server.post_json(
        "/v1/remote-runs",
        token,
        json!({ "pack": digest, "team": "platform", "max_cost": 1, "max_time": "5m" }),
    );
    assert_eq!(s, 200, "{}: {v}", server.store);
    v
}

// A run token is minted only for a recorded remote run, stored hashed, scoped to its run (no API
// token, no other run's report), dead once the run is recorded ended; a restarted controller
// never executes a remote run itself.
#[test]
fn a_run_token_is_scoped_to_its_run_and_dies_with_it() {
    for store in Store::all() {
        let mut server = Server::start(&store, &[]);
        let digest = push(&server, "chain", CHAIN);
        let rita = server.team_with_user("red", "rita", "editor");
        let (s, v) = server.post_json(
            "/v1/remote-runs",
            &rita,
            json!({ "pack": digest, "team": "red", "max_cost": 1, "max_time": "5m" }),
        );
        assert_eq!(s, 422, "{}: another team's pack: {v}", server.store);
        let a = remote_run(&server, &server.admin, &digest);
        let b = remote_run(&server, &server.admin, &digest);
        let (a_id, a_token) = (a["id"].as_str().unwrap(), a["token"].as_str().unwrap());
        let (b_id, b_token) = (b["id"].as_str().unwrap(), b["token"].as_str().unwrap());
        assert_eq!(a["env"]["CRUCIBLE_CONTROLLER_URL"], server.url.as_str());
        assert_eq!(a["env"]["CRUCIBLE_CONTROLLER_RUN"], a_id);
        assert_eq!(a["env"]["CRUCIBLE_RUN_TOKEN"], a_token);
        assert_ne!(a_token, b_token);

        let report = |id: &str| format!("/v1/runs/{id}/report");
        let (s, v) = server.get(&report(a_id), a_token);
        assert_eq!(s, 200, "{}: {v}", server.store);
        assert_eq!(v["acknowledged"], 0);
        assert_eq!(server.get(&report(a_id), b_token).0, 403);
        assert_eq!(server.get(&report(a_id), &server.admin).0, 401);
        for path in ["/v1/whoami", "/v1/runs", "/v1/packs", "/v1/decisions"] {
            assert_eq!(server.get(path, a_token).0, 401, "{path}");
        }
        assert_eq!(server.get(&format!("/v1/runs/{a_id}"), a_token).0, 401);

        let (s, shown) = server.get(&format!("/v1/runs/{a_id}"), &server.admin);
        assert_eq!(s, 200, "{shown}");
        assert_eq!(shown["executor"], "remote");
        assert_eq!(shown["state"], "running");
        assert_eq!(shown["live"], true);
        assert_eq!(shown["digest"], digest.as_str());

        if let Store::Sqlite = store {
            let db = std::fs::read(server.state.path().join("controller.db")).unwrap();
            let has = |s: &str| db.windows(s.len()).any(|w| w == s.as_bytes());
            assert!(!has(a_token), "the token is stored in the clear");
            use sha2::Digest;
            assert!(has(&format!(
                "{:x}",
                sha2::Sha256::digest(a_token.as_bytes())
            )));
        }

        // Stopped on the controller: recorded ended, its token dead; the other run's lives.
        let (s, v) = server.post_json(&format!("/v1/runs/{a_id}/stop"), &server.admin, json!({}));
        assert_eq!(s, 200, "{v}");
        let (_, shown) = server.get(&format!("/v1/runs/{a_id}"), &server.admin);
        assert_eq!(shown["state"], "finished");
        assert_eq!(shown["outcome"], "stopped");
        assert_eq!(shown["live"], false);
        assert_eq!(server.get(&report(a_id), a_token).0, 401);
        assert_eq!(server.get(&report(b_id), b_token).0, 200);

        // A restart resumes local runs only: the remote one stays as it was, its token live.
        server.restart(&store);
        let (_, shown) = server.get(&format!("/v1/runs/{b_id}"), &server.admin);
        assert_eq!(shown["state"], "running", "{shown}");
        assert_eq!(shown["dispatches"], 1);
        assert_eq!(shown["engine_run"], Value::Null);
        assert_eq!(server.get(&report(b_id), b_token).0, 200);
    }
}

// RFC-0002:C-HUMAN-DECISION — `crucible serve` serves the engine's decisions polling protocol to
// an engine outside it, through the store and rules of its own runs: a real `plan run` linked by
// CRUCIBLE_CONTROLLER_URL/_RUN and CRUCIBLE_RUN_TOKEN opens its route's request on the
// controller, an approver answers it through the API, and the run goes on with the answer. An
// open for a pair that has one returns it unchanged (expiry from the first open); a digest that
// is not the evidence's is refused; another run's token is refused; the run token reaches no
// task.
#[test]
fn a_remote_engine_is_answered_by_the_controllers_approvers() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let ann = server.member("platform", "ann", "approver");
        let (p, digest) = gated(&server, "gated", "60s");
        let run = remote_run(&server, &server.admin, &digest);
        let other = remote_run(&server, &server.admin, &digest);
        let id = run["id"].as_str().unwrap();
        let (token, other_token) = (
            run["token"].as_str().unwrap(),
            other["token"].as_str().unwrap(),
        );
        let child = engine(&p, &run);

        let request = listed(&server, &ann, id);
        assert_eq!(request["route"], "gate");
        let path = format!("/v1/decisions/{id}/gate");
        let (s, polled) = server.get(&path, token);
        assert_eq!(s, 200, "{polled}");
        assert_eq!(polled["state"], "open");
        assert_eq!(polled["run"], id);
        assert_eq!(polled["digest"], request["digest"]);
        assert_eq!(server.get(&path, other_token).0, 403);
        assert_eq!(server.get(&path, &ann).0, 401);
        assert_eq!(server.call("DELETE", &path, other_token, None).0, 403);

        // The engine's open again, later and with a later expiry: the first one, unchanged.
        let (_, shown) = server.get(&format!("/v1/runs/{id}/decisions/gate"), &ann);
        let mut again = json!({
            "run": "engine-run", "route": "gate", "questions": shown["questions"],
            "evidence": shown["evidence"], "digest": shown["digest"],
            "opened_at": "2030-01-01T00:00:00Z", "expires_at": "2030-01-01T01:00:00Z",
            "max_note_bytes": shown["max_note_bytes"],
        });
        let (s, v) = server.post_json("/v1/decisions", token, again.clone());
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["expires_at"], shown["expires_at"]);
        assert_eq!(v["opened_at"], shown["opened_at"]);
        // Under another route, the digest must be the evidence's.
        again["route"] = json!("other");
        again["digest"] = json!("sha256:00");
        let (s, v) = server.post_json("/v1/decisions", token, again.clone());
        assert_eq!(s, 422, "{v}");
        assert!(
            v["error"].as_str().unwrap().contains("its evidence's is"),
            "{v}"
        );
        assert_eq!(server.post_json("/v1/decisions", &ann, again).0, 401);

        let (s, v) = server.post_json(
            &format!("/v1/runs/{id}/decisions/gate/answer"),
            &ann,
            json!({"digest": request["digest"], "answers": {"go": ["yes"], "jobs": ["j2"]}, "note": "ship"}),
        );
        assert_eq!(s, 200, "{v}");
        let (code, stdout, stderr) = finish(child);
        assert_eq!(code, 0, "{}: {stdout}\n{stderr}", server.store);
        let gate = p.row("gate");
        assert_eq!(gate["status"], "pass", "{gate}");
        assert_eq!(gate["output"]["go"]["label"], "yes");
        assert_eq!(gate["output"]["jobs"], json!(["j2"]));
        assert_eq!(gate["output"]["decision"]["principal"], "user:ann");
        assert_eq!(gate["output"]["decision"]["note"], "ship");
        assert_eq!(p.row("deploy")["status"], "pass");
        assert_eq!(p.row("hold")["status"], "not_taken");
        let opened: Vec<Value> = p
            .log()
            .into_iter()
            .filter(|l| l["kind"] == "decision_opened")
            .collect();
        assert_eq!(opened.len(), 1);
        assert_eq!(opened[0]["via"], "controller");

        let (_, answered) = server.get(&path, token);
        assert_eq!(answered["state"], "answered");
        let env = std::fs::read_to_string(p.probe().join("deploy-env")).unwrap();
        assert!(!env.contains(token), "the run token reached a task");
        assert!(
            !env.contains("CRUCIBLE_CONTROLLER") && !env.contains("CRUCIBLE_RUN_TOKEN"),
            "{env}"
        );
    }
}

// RFC-0002:C-HUMAN-DECISION — failing to reach the controller is a transport failure: with
// `crucible serve` gone, the linked engine's route fails `transport` (retried, no output, never
// `uncertain`), and the controller, back, holds the request still open and unanswered.
#[test]
fn a_controller_that_is_down_neither_answers_nor_expires_the_request() {
    for store in Store::all() {
        let mut server = Server::start(&store, &[]);
        let ann = server.member("platform", "ann", "approver");
        let (p, digest) = gated(&server, "gated", "60s");
        let run = remote_run(&server, &server.admin, &digest);
        let id = run["id"].as_str().unwrap();
        let child = engine(&p, &run);
        listed(&server, &ann, id);
        server.kill();
        let (code, stdout, stderr) = finish(child);
        assert_eq!(code, 3, "{}: {stdout}\n{stderr}", server.store);
        let gate = p.row("gate");
        assert_eq!(gate["status"], "transport", "{gate}");
        assert_eq!(gate["output"], Value::Null);
        assert!(
            gate["note"]
                .as_str()
                .unwrap()
                .contains("the controller cannot be reached"),
            "{gate}"
        );
        assert!(!p.has_row("deploy") || p.row("deploy")["status"] != "pass");

        server.restart(&store);
        let (s, shown) = server.get(&format!("/v1/runs/{id}/decisions/gate"), &ann);
        assert_eq!(s, 200, "{shown}");
        assert_eq!(shown["state"], "open");
        assert_eq!(shown["answer"], Value::Null);
    }
}

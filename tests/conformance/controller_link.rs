//! Engines outside the controller (issue 14's remote engine, issue 17's Kubernetes Jobs): a run
//! recorded with the executor `remote` is executed elsewhere; its engine reaches `crucible serve`
//! only by requests it initiates, authenticated by a run token scoped to that one run
//! (docs/controller.md, "Engines outside the controller"; docs/security.md). A real
//! `crucible serve` on loopback, on SQLite and on PostgreSQL.

use crate::controller::{Server, Store};
use crate::controller_runs::push;
use crate::fanout::star;
use crate::support::{poll, Pack, BIN};
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
    let digest = crate::controller_runs::push_dir(server, name, p.path());
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
pub(crate) fn listed(server: &Server, approver: &str, id: &str) -> Value {
    poll(60, || {
        let (s, v) = server.get("/v1/decisions", approver);
        assert_eq!(s, 200, "{v}");
        let found = v["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["run"] == id);
        found
            .cloned()
            .ok_or_else(|| format!("{}: the request never opened", server.store))
    })
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

/// Stops a linked run through `stop` and waits for its engine: exit 3 within 30 s, saying it was
/// stopped on the controller.
fn stopped(store: &str, stop: impl FnOnce(), child: Child) {
    let began = Instant::now();
    stop();
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 3, "{store}: {stdout}\n{stderr}");
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    assert!(stderr.contains("stopped on the controller"), "{stderr}");
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
        // Its engine is told it was stopped (410, `stopped`), never by a plain 401.
        let (s, v) = server.get(&report(a_id), a_token);
        assert_eq!((s, &v["stopped"]), (410, &json!(true)), "{v}");
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

        let (_, answered) = server.get(&format!("/v1/runs/{id}/decisions/gate"), &ann);
        assert_eq!(answered["state"], "answered");
        // The engine reported its end: the run is recorded finished and its token is dead.
        let shown = crate::controller_runs::wait_run(&server, id, crate::controller_runs::ended);
        assert_eq!(shown["verdict"], "valid", "{shown}");
        assert_eq!(server.get(&path, token).0, 401);
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

/// Three command tasks; `b` sleeps while `$PACK/slow` exists. `a` prints lines shaped like
/// session log lines (a shutdown among them): a task's output is never a report.
const THREE: &str = r#"a = command(name = "a", run = "echo '{\"v\":1,\"ts\":\"2026-01-01T00:00:00Z\",\"kind\":\"shutdown\",\"outcome\":\"completed\",\"verdict\":\"valid\",\"reason\":null,\"spent_usd\":9,\"elapsed_secs\":1}' >&2; echo '{}'")
b = command(name = "b", run = "while [ -e \"$PACK/slow\" ]; do sleep 0.2; done; echo '{}'", depends_on = [a])
c = command(name = "c", run = "echo '{}'", depends_on = [b])
workflow([a, b, c])
"#;

/// The run as its engine wrote it: the session log of the pack's latest run, as bytes.
fn engine_log(p: &Pack) -> String {
    let current = std::fs::read_to_string(p.state().join("current")).unwrap();
    std::fs::read_to_string(
        p.state()
            .join("runs")
            .join(current.trim())
            .join("session.jsonl"),
    )
    .unwrap()
}

/// The run's session log as the controller serves it.
fn controller_log(server: &Server, id: &str) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    agent
        .get(format!("{}/v1/runs/{id}/log", server.url))
        .header("Authorization", format!("Bearer {}", server.admin))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

/// Waits until `check` holds of the controller's log of run `id`, for at most a minute.
fn wait_log(server: &Server, id: &str, check: impl Fn(&str) -> bool) -> String {
    poll(60, || {
        let log = controller_log(server, id);
        if check(&log) {
            Ok(log)
        } else {
            Err(format!("{}: the log never got there: {log}", server.store))
        }
    })
}

/// Registers the three-task pack: the pack and its digest.
fn three(server: &Server) -> (Pack, String) {
    let p = star(THREE);
    let digest = crate::controller_runs::push_dir(server, "three", p.path());
    (p, digest)
}

// The engine reports its session log to the controller, in order, from the engine itself: a
// remote run is listed, shown (rows, spend, outcome, verdict), its log served and streamed
// exactly as its engine wrote it, and recorded ended from its reported shutdown, as a local run
// is; then its token is dead.
#[test]
fn a_remote_run_reports_its_session_log_and_reads_as_a_local_run() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let (p, digest) = three(&server);
        let run = remote_run(&server, &server.admin, &digest);
        let id = run["id"].as_str().unwrap();
        std::fs::write(p.probe().join("slow"), "").unwrap();
        let child = engine(&p, &run);
        // Live: `a` settled and reported while `b` waits; the run reads running.
        wait_log(&server, id, |l| l.contains("\"task_result\""));
        let (_, shown) = server.get(&format!("/v1/runs/{id}"), &server.admin);
        assert_eq!(shown["state"], "running", "{shown}");
        assert_eq!(shown["live"], true);
        assert_eq!(shown["rows"].as_array().unwrap().len(), 1, "{shown}");
        std::fs::remove_file(p.probe().join("slow")).unwrap();
        let (code, stdout, stderr) = finish(child);
        assert_eq!(code, 0, "{}: {stdout}\n{stderr}", server.store);

        let shown = crate::controller_runs::wait_run(&server, id, crate::controller_runs::ended);
        let local = engine_log(&p);
        assert_eq!(controller_log(&server, id), local, "{}", server.store);
        let shutdown: Value = serde_json::from_str(local.lines().last().unwrap()).unwrap();
        assert_eq!(shutdown["kind"], "shutdown");
        assert_eq!(shown["state"], "finished", "{shown}");
        assert_eq!(shown["executor"], "remote");
        assert_eq!(shown["outcome"], shutdown["outcome"]);
        assert_eq!(shown["verdict"], shutdown["verdict"]);
        assert_eq!(shown["verdict"], "valid");
        assert_eq!(shown["spent_usd"], shutdown["spent_usd"]);
        assert_eq!(shown["rows"].as_array().unwrap().len(), 3);
        assert_eq!(shown["shutdown"]["outcome"], shutdown["outcome"]);
        assert_eq!(shown["live"], false);
        let (_, listed) = server.get("/v1/runs", &server.admin);
        let row = listed["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap()
            .clone();
        assert_eq!(row["state"], "finished");
        assert_eq!(row["executor"], "remote");

        // The event stream: every line, in order, then the end.
        let (s, events) = crate::controller_runs::events(&server, id, &server.admin);
        assert_eq!(s, 200);
        let kinds: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
        let logged: Vec<String> = local
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["kind"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            kinds[..kinds.len() - 1],
            logged.iter().map(String::as_str).collect::<Vec<_>>()[..]
        );
        assert_eq!(events.last().unwrap().0, "end");
        assert_eq!(events.last().unwrap().1["state"], "finished");

        // Ended: the token is dead.
        let token = run["token"].as_str().unwrap();
        assert_eq!(server.get(&format!("/v1/runs/{id}/report"), token).0, 401);
    }
}

// Resumable: an engine killed mid-run and a controller restarted meanwhile; the resumed engine
// agrees the last acknowledged line with the controller and reports from it, so the controller's
// log is exactly the engine's, no line lost or repeated. A report that repeats held lines is
// acknowledged without keeping them twice; one that differs from them, or starts past them, is
// refused.
#[test]
fn a_resumed_engine_and_a_restarted_controller_neither_lose_nor_repeat_lines() {
    for store in Store::all() {
        let mut server = Server::start(&store, &[]);
        let (p, digest) = three(&server);
        let run = remote_run(&server, &server.admin, &digest);
        let (id, token) = (run["id"].as_str().unwrap(), run["token"].as_str().unwrap());
        std::fs::write(p.probe().join("slow"), "").unwrap();
        let mut child = engine(&p, &run);
        let held = wait_log(&server, id, |l| l.contains("\"task_result\""));
        child.kill().unwrap();
        let _ = child.wait();

        // Held lines again: acknowledged, not kept twice; a different or a gapped one refused.
        let (_, ack) = server.get(&format!("/v1/runs/{id}/report"), token);
        let n = ack["acknowledged"].as_u64().unwrap();
        assert_eq!(n as usize, held.lines().count());
        let engine_run = ack["engine_run"].as_str().unwrap().to_string();
        let lines: Vec<&str> = held.lines().collect();
        let path = format!("/v1/runs/{id}/report");
        let (s, v) = server.post_json(
            &path,
            token,
            json!({"engine_run": engine_run, "from": 0, "lines": lines}),
        );
        assert_eq!((s, v["acknowledged"].as_u64()), (200, Some(n)), "{v}");
        let mut changed: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        changed[0] = changed[0].replace("\"start\"", "\"start\" ");
        let (s, v) = server.post_json(
            &path,
            token,
            json!({"engine_run": engine_run, "from": 0, "lines": changed}),
        );
        assert_eq!(s, 422, "{v}");
        let (s, v) = server.post_json(
            &path,
            token,
            json!({"engine_run": engine_run, "from": n + 1, "lines": [lines[0]]}),
        );
        assert_eq!(s, 422, "{v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains(&format!("report from line {n}")),
            "{v}"
        );
        let (s, _) = server.post_json(
            &path,
            token,
            json!({"engine_run": engine_run, "from": n, "lines": ["not a log line"]}),
        );
        assert_eq!(s, 422);
        assert_eq!(controller_log(&server, id), held);

        server.kill();
        server.restart(&store);
        std::fs::remove_file(p.probe().join("slow")).unwrap();
        let mut resumed = run.clone();
        resumed["env"]["CRUCIBLE_CONTROLLER_URL"] = json!(server.url);
        let child = Command::new(BIN)
            .args(p.run_args(&["--resume"]))
            .current_dir(p.path())
            .env("PACK", p.probe())
            .env("CRUCIBLE_CONTROLLER_URL", &server.url)
            .env("CRUCIBLE_CONTROLLER_RUN", id)
            .env("CRUCIBLE_RUN_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (code, stdout, stderr) = finish(child);
        assert_eq!(code, 0, "{}: {stdout}\n{stderr}", server.store);
        let shown = crate::controller_runs::wait_run(&server, id, crate::controller_runs::ended);
        assert_eq!(shown["state"], "finished", "{shown}");
        let local = engine_log(&p);
        assert!(local.contains("\"resumed\""), "{local}");
        assert_eq!(controller_log(&server, id), local, "{}", server.store);
    }
}

// A controller that cannot be reached never fails nor holds up the run: the engine runs to its
// end, gives its report up after a bounded grace and keeps its log; the controller, back, holds
// the run still running with nothing reported.
#[test]
fn an_unreachable_controller_neither_fails_nor_blocks_the_run() {
    for store in Store::all() {
        let mut server = Server::start(&store, &[]);
        let (p, digest) = three(&server);
        let run = remote_run(&server, &server.admin, &digest);
        let id = run["id"].as_str().unwrap();
        server.kill();
        let began = Instant::now();
        let (code, stdout, stderr) = finish(engine(&p, &run));
        assert_eq!(code, 0, "{}: {stdout}\n{stderr}", server.store);
        assert!(
            began.elapsed() < Duration::from_secs(40),
            "{:?}",
            began.elapsed()
        );
        let local = engine_log(&p);
        assert!(local.lines().last().unwrap().contains("\"shutdown\""));

        server.restart(&store);
        let (_, shown) = server.get(&format!("/v1/runs/{id}"), &server.admin);
        assert_eq!(shown["state"], "running", "{shown}");
        assert_eq!(shown["engine_run"], Value::Null);
        assert_eq!(controller_log(&server, id), "");
    }
}

/// The engine's last session log line: its shutdown.
fn shutdown_of(p: &Pack) -> Value {
    let log = engine_log(p);
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(last["kind"], "shutdown", "{log}");
    last
}

// A run stopped on the controller stops its engine, which only the engine's own connections can
// tell it: the decisions poll of a run waiting on a person, and the report exchange (asked every
// few seconds even while the log is quiet) of a run whose task is busy, each answer 410
// `stopped`, and the real `plan run` stops as on SIGTERM: the attempt in flight killed, the open
// request withdrawn, the shutdown `stopped`, within seconds. A refused token (401) is no stop:
// that run goes on to its end.
#[test]
fn a_remote_run_stopped_on_the_controller_stops_its_engine() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let ann = server.member("platform", "ann", "approver");
        let stop = |id: &str| {
            let (s, v) = server.post_json(&format!("/v1/runs/{id}/stop"), &server.admin, json!({}));
            assert_eq!(s, 200, "{}: {v}", server.store);
        };

        // Waiting on a human route: the decisions poll says so.
        let (p, digest) = gated(&server, "gated", "60s");
        let run = remote_run(&server, &server.admin, &digest);
        let id = run["id"].as_str().unwrap();
        let child = engine(&p, &run);
        listed(&server, &ann, id);
        stopped(server.store, || stop(id), child);
        let s = shutdown_of(&p);
        assert_eq!(
            (s["outcome"].as_str(), s["verdict"].as_str()),
            (Some("stopped"), Some("invalid")),
            "{s}"
        );
        assert!(!p.has_row("gate") || p.row("gate")["status"] != "pass");
        assert!(!p.has_row("deploy") && !p.has_row("hold"));
        assert!(!p.probe().join("deploy-env").exists());
        let (_, shown) = server.get(&format!("/v1/runs/{id}/decisions/gate"), &ann);
        assert_eq!(shown["state"], "withdrawn", "{shown}");

        // A busy task and a quiet log: the report exchange says so.
        let (p, digest) = three(&server);
        let run = remote_run(&server, &server.admin, &digest);
        let id = run["id"].as_str().unwrap();
        std::fs::write(p.probe().join("slow"), "").unwrap();
        let child = engine(&p, &run);
        wait_log(&server, id, |l| l.contains("\"task_result\""));
        stopped(server.store, || stop(id), child);
        assert_eq!(shutdown_of(&p)["outcome"], "stopped");
        let b = p.row("b");
        assert_eq!(b["status"], "fail", "{b}");
        assert_eq!(b["note"], "stopped by the operator", "{b}");
        assert!(!p.has_row("c"));
        let (_, shown) = server.get(&format!("/v1/runs/{id}"), &server.admin);
        assert_eq!(shown["outcome"], "stopped", "{shown}");

        // A token the controller refuses (401) is not a stop: the run goes on to its end.
        let (p, digest) = three(&server);
        let mut run = remote_run(&server, &server.admin, &digest);
        run["env"]["CRUCIBLE_RUN_TOKEN"] = json!("cru_not-a-token");
        std::fs::write(p.probe().join("slow"), "").unwrap();
        let child = engine(&p, &run);
        std::thread::sleep(Duration::from_secs(2));
        std::fs::remove_file(p.probe().join("slow")).unwrap();
        let (code, stdout, stderr) = finish(child);
        assert_eq!(code, 0, "{}: {stdout}\n{stderr}", server.store);
        assert!(!stderr.contains("stopped on the controller"), "{stderr}");
        assert_eq!(shutdown_of(&p)["outcome"], "finished");
    }
}

//! The controller's launches and runs (issue 12; RFC-0002:C-PACK-BASE for what a launch records
//! and is delivered, RFC-0002:C-PLAYBOOK-RESUME for a restart): a real `crucible serve` on
//! loopback runs command playbooks on its embedded engine, on SQLite and on PostgreSQL.

use crate::controller::{file, noise, pack_digest, tar_of, Server, Store};
use crate::support::{poll, BIN};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

/// A command playbook: `a`, then `b` (which sleeps `b_secs`), then `c`.
fn chain(b_secs: u32) -> String {
    chain_after(0, b_secs)
}

/// The same, with `a` sleeping `a_secs` first.
fn chain_after(a_secs: u32, b_secs: u32) -> String {
    format!(
        "[workflow]\ntype = \"playbook\"\n\
         [[workflow.task]]\nname = \"a\"\nkind = \"command\"\nrun = \"sleep {a_secs}; echo a-says-hello; echo '{{}}'\"\n\
         [[workflow.task]]\nname = \"b\"\nkind = \"command\"\nrun = \"sleep {b_secs}; echo '{{}}'\"\ndepends_on = [\"a\"]\n\
         [[workflow.task]]\nname = \"c\"\nkind = \"command\"\nrun = \"echo '{{}}'\"\ndepends_on = [\"b\"]\n"
    )
}

/// Registers a pack of one manifest in the platform team; returns its digest.
pub(crate) fn push(server: &Server, name: &str, manifest: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("crucible.toml"), manifest).unwrap();
    push_dir(server, name, dir.path())
}

/// Registers the pack directory `dir` in the platform team with `crucible remote pack push`;
/// returns its digest, which is `crucible pack digest DIR`.
pub(crate) fn push_dir(server: &Server, name: &str, dir: &std::path::Path) -> String {
    let out = server.remote(&["pack", "push", dir.to_str().unwrap(), "--name", name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(digest, pack_digest(dir));
    digest
}

/// The settled row of `task` in a run as `GET /v1/runs/{id}` shows it.
pub(crate) fn row<'a>(run: &'a Value, task: &str) -> &'a Value {
    run["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["task"] == task)
        .unwrap_or_else(|| panic!("no row of {task}: {run}"))
}

pub(crate) fn launch(server: &Server, token: &str, body: Value) -> (u16, Value) {
    server.post_json("/v1/launches", token, body)
}

/// Polls the run until `done` holds of it, for at most a minute.
pub(crate) fn wait_run(server: &Server, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    wait_run_as(server, &server.admin, id, done)
}

/// The same, read as the subject holding `token` (a run of a team the admin is not in).
pub(crate) fn wait_run_as(
    server: &Server,
    token: &str,
    id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    poll(60, || {
        let (s, v) = server.get(&format!("/v1/runs/{id}"), token);
        assert_eq!(s, 200, "{}: {v}", server.store);
        if done(&v) {
            Ok(v)
        } else {
            Err(format!("{}: the run never got there: {v}", server.store))
        }
    })
}

pub(crate) fn ended(v: &Value) -> bool {
    v["state"] != "running"
}

/// The run's event stream read to its end: (event, data) pairs.
pub(crate) fn events(server: &Server, id: &str, token: &str) -> (u16, Vec<(String, Value)>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let response = agent
        .get(format!("{}/v1/runs/{id}/events", server.url))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .unwrap();
    let status = response.status().as_u16();
    if status != 200 {
        return (status, Vec::new());
    }
    let mut out = Vec::new();
    let mut event = String::new();
    for line in BufReader::new(response.into_body().into_reader()).lines() {
        let line = line.unwrap();
        if let Some(e) = line.strip_prefix("event: ") {
            event = e.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            out.push((event.clone(), serde_json::from_str(d).unwrap()));
        }
    }
    (status, out)
}

/// The session log's lines as JSON.
fn session_log(server: &Server, id: &str) -> Vec<Value> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let text = agent
        .get(format!("{}/v1/runs/{id}/log", server.url))
        .header("Authorization", format!("Bearer {}", server.admin))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn kinds(log: &[Value], kind: &str) -> usize {
    log.iter().filter(|l| l["kind"] == kind).count()
}

// Issue 12 — launch → run → valid verdict, the log streamed over SSE; RFC-0002:C-PACK-BASE: the
// launch records the digest it ran, the stored tree is delivered (mode 0755) and the run's own
// state is kept beside it, never in it.
#[test]
fn launch_runs_to_a_valid_verdict_with_the_log_streamed_over_sse() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let digest = push(&server, "chain", &chain(0));
        // The client: --follow streams the rows and exits as `plan run` does.
        let out = server.remote(&[
            "launch",
            &digest,
            "--max-cost",
            "1",
            "--max-time",
            "1m",
            "--follow",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {stdout}{}",
            server.store,
            String::from_utf8_lossy(&out.stderr)
        );
        for want in ["a pass", "b pass", "c pass", "verdict: valid"] {
            assert!(stdout.contains(want), "{}: {stdout}", server.store);
        }
        let id = stdout
            .lines()
            .find_map(|l| l.strip_prefix("run: "))
            .unwrap()
            .to_string();
        let run = wait_run(&server, &id, ended);
        assert_eq!(run["state"], "finished");
        assert_eq!(run["verdict"], "valid");
        assert_eq!(run["digest"], digest.as_str());
        assert_eq!(run["source"], "pack");
        assert_eq!(run["rows"].as_array().unwrap().len(), 3, "{run}");
        assert_eq!(run["spent_usd"], 0.0);
        assert_eq!(run["shutdown"]["verdict"], "valid");
        // The event stream of an ended run replays its log and says how it ended.
        let (s, evs) = events(&server, &id, &server.admin);
        assert_eq!(s, 200);
        let names: Vec<&str> = evs.iter().map(|(e, _)| e.as_str()).collect();
        assert_eq!(names.first(), Some(&"start"), "{names:?}");
        assert_eq!(names.iter().filter(|n| **n == "task_result").count(), 3);
        assert!(names.contains(&"shutdown"), "{names:?}");
        let (last, data) = evs.last().unwrap();
        assert_eq!(
            (last.as_str(), &data["state"], &data["verdict"]),
            ("end", &json!("finished"), &json!("valid"))
        );
        // The recorded digest was delivered: the files with mode 0755, the engine's state beside.
        let run_dir = server.state.path().join("runs").join(&id);
        assert_eq!(pack_digest(&run_dir.join("pack")), digest);
        let mode = std::fs::metadata(run_dir.join("pack/crucible.toml"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(!run_dir.join("pack/state").exists());
        assert!(run_dir.join("state/current").is_file());
        let log = session_log(&server, &id);
        assert_eq!(log[0]["pack"], digest.as_str());
        assert_eq!(kinds(&log, "shutdown"), 1);
        // The listing, `runs show` and a task's log over the client.
        let out = server.remote(&["runs"]);
        assert!(String::from_utf8_lossy(&out.stdout).contains(&id));
        let out = server.remote(&["runs", "show", &id]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("verdict: valid"));
        let out = server.remote(&["logs", &id, "a"]);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("a-says-hello"));
    }
}

// Issue 12 — while a run goes, its event stream delivers its tasks as they start and settle;
// a stop ends it `stopped` with every attempt killed.
#[test]
fn a_live_run_streams_its_events_and_stops() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        // `a` takes a second, so the stream below is listening before `b` starts.
        let digest = push(&server, "slow", &chain_after(1, 30));
        let (s, v) = launch(
            &server,
            &server.admin,
            json!({ "pack": digest, "max_cost": 1, "max_time": "2m" }),
        );
        assert_eq!(s, 200, "{v}");
        let id = v["id"].as_str().unwrap().to_string();
        let reader = {
            let (server_url, token, id) = (server.url.clone(), server.admin.clone(), id.clone());
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
                let response = agent
                    .get(format!("{server_url}/v1/runs/{id}/events"))
                    .header("Authorization", format!("Bearer {token}"))
                    .call()
                    .unwrap();
                let lines: Vec<String> = BufReader::new(response.into_body().into_reader())
                    .lines()
                    .map(Result::unwrap)
                    .collect();
                lines
            })
        };
        wait_run(&server, &id, |v| {
            v["rows"].as_array().is_some_and(|r| r.len() == 1)
        });
        std::thread::sleep(Duration::from_millis(300));
        let out = server.remote(&["stop", &id]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = wait_run(&server, &id, ended);
        assert_eq!(run["outcome"], "stopped", "{run}");
        assert_ne!(run["verdict"], "valid");
        let lines = reader.join().unwrap();
        let started: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("data: {\"task\""))
            .collect();
        assert!(
            started.iter().any(|l| l.contains("\"b\"")),
            "{}: {lines:?}",
            server.store
        );
        assert!(lines.iter().any(|l| l == "event: shutdown"), "{lines:?}");
        assert_eq!(lines.iter().filter(|l| *l == "event: end").count(), 1);
        // A stopped run cannot be stopped again: it says why.
        let (s, v) = server.post_json(&format!("/v1/runs/{id}/stop"), &server.admin, json!({}));
        assert_eq!(s, 422, "{v}");
    }
}

// Issue 12 — `draft:NAME` runs the draft's latest saved version that compiles, and the launch
// records that version's digest (RFC-0002:C-PACK-BASE).
#[test]
fn launch_of_a_draft_runs_its_latest_version_that_compiles() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let good = tar_of(&[file("crucible.toml", &chain(0))]);
        let (s, v1) = server.save_draft("d", None, &good, &server.admin);
        assert_eq!(s, 200, "{v1}");
        let broken = chain(0).replace("depends_on = [\"b\"]", "depends_on = [\"nosuch\"]");
        let (s, v2) = server.save_draft(
            "d",
            None,
            &tar_of(&[file("crucible.toml", &broken)]),
            &server.admin,
        );
        assert_eq!(s, 200, "{v2}");
        let (s, v) = launch(
            &server,
            &server.admin,
            json!({ "pack": "draft:d", "max_cost": 1, "max_time": "1m" }),
        );
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["digest"], v1["digest"]);
        assert_eq!(v["source"], "draft:d version 1");
        let run = wait_run(&server, v["id"].as_str().unwrap(), ended);
        assert_eq!(run["verdict"], "valid", "{run}");
        assert_eq!(run["digest"], v1["digest"]);
    }
}

// Issue 12 — a launch is checked as `plan run` checks it, before it is accepted: each refusal
// says why (exit 1 over the client) and leaves no run, no directory and no audit row.
#[test]
fn refused_launch_leaves_nothing() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let digest = push(&server, "chain", &chain(0));
        let slow = push(
            &server,
            "slow",
            &format!("{}timeout_secs = 600\n", chain(0)),
        );
        let refusals: Vec<(Vec<&str>, &str)> = vec![
            (vec![&digest, "--max-cost", "1"], "--max-time is required"),
            (vec![&digest, "--max-time", "1m"], "--max-cost is required"),
            (
                vec![&slow, "--max-cost", "1", "--max-time", "1m"],
                "above --max-time",
            ),
            (
                vec![
                    "tree1:0000000000000000000000000000000000000000000000000000000000000000",
                    "--max-cost",
                    "1",
                    "--max-time",
                    "1m",
                ],
                "is not available",
            ),
            (
                vec!["draft:nosuch", "--max-cost", "1", "--max-time", "1m"],
                "is not available",
            ),
            (
                vec![
                    &digest,
                    "--max-cost",
                    "1",
                    "--max-time",
                    "1m",
                    "--param",
                    "nosuch=1",
                ],
                "compile",
            ),
        ];
        for (args, why) in refusals {
            let mut all = vec!["launch"];
            all.extend(args);
            let out = server.remote(&all);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{}: {all:?}: {stderr}",
                server.store
            );
            assert!(stderr.contains(why), "{}: {all:?}: {stderr}", server.store);
        }
        assert_eq!(server.get("/v1/runs", &server.admin).1["runs"], json!([]));
        let left: Vec<_> = std::fs::read_dir(server.state.path().join("runs"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{}: {left:?}", server.store);
        let (_, audit) = server.get("/v1/audit", &server.admin);
        assert!(!audit.to_string().contains("run.launch"), "{audit}");
    }
}

// Issue 12 — read scoping: another team lists no run, and every answer about one (show, the
// session log, task logs, the event stream, stop) equals the answer for a run that does not
// exist; it cannot launch the first team's pack either, nor tell it from a missing one.
#[test]
fn runs_are_read_scoped_another_team_sees_nothing_and_cannot_tell() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let red = server.team_with_user("red", "rita", "editor");
        let blue = server.team_with_user("blue", "bo", "editor");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("crucible.toml"), chain(0)).unwrap();
        let out = Command::new(BIN)
            .args(["remote", "--server", &server.url, "pack", "push"])
            .arg(dir.path())
            .args(["--team", "red"])
            .env("CRUCIBLE_TOKEN", &red)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let digest = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let (s, v) = launch(
            &server,
            &red,
            json!({ "pack": digest, "max_cost": 1, "max_time": "1m" }),
        );
        assert_eq!(s, 200, "{v}");
        let id = v["id"].as_str().unwrap().to_string();
        wait_run(&server, &id, ended);
        assert_eq!(server.get("/v1/runs", &red).1["runs"][0]["id"], id.as_str());
        assert_eq!(server.get("/v1/runs", &blue).1["runs"], json!([]));
        let missing = "01900000-0000-7000-8000-000000000000";
        for path in ["", "/log", "/logs", "/logs/a"] {
            let (s1, e1) = server.get(&format!("/v1/runs/{id}{path}"), &blue);
            let (s2, e2) = server.get(&format!("/v1/runs/{missing}{path}"), &blue);
            assert_eq!((s1, s2), (404, 404), "{path}");
            assert_eq!(
                e1["error"].as_str().unwrap().replace(&id, "ID"),
                e2["error"].as_str().unwrap().replace(missing, "ID")
            );
        }
        assert_eq!(events(&server, &id, &blue).0, 404);
        assert_eq!(events(&server, &id, &red).0, 200);
        let (s1, e1) = server.post_json(&format!("/v1/runs/{id}/stop"), &blue, json!({}));
        let (s2, e2) = server.post_json(&format!("/v1/runs/{missing}/stop"), &blue, json!({}));
        assert_eq!((s1, s2), (404, 404));
        assert_eq!(
            e1["error"].as_str().unwrap().replace(&id, "ID"),
            e2["error"].as_str().unwrap().replace(missing, "ID")
        );
        // Red's digest, launched by blue, is refused exactly as a digest nobody registered.
        let other = "tree1:0000000000000000000000000000000000000000000000000000000000000000";
        let (s1, e1) = launch(
            &server,
            &blue,
            json!({ "pack": digest, "max_cost": 1, "max_time": "1m" }),
        );
        let (s2, e2) = launch(
            &server,
            &blue,
            json!({ "pack": other, "max_cost": 1, "max_time": "1m" }),
        );
        assert_eq!((s1, s2), (422, 422));
        assert_eq!(
            e1["error"].as_str().unwrap().replace(&digest, "D"),
            e2["error"].as_str().unwrap().replace(other, "D")
        );
    }
}

// RFC-0002:C-PLAYBOOK-RESUME — a controller killed mid-run resumes the run on its next start,
// exactly once: what settled is not dispatched again, the run ends once with one shutdown, and
// a further restart does not start it again.
#[test]
fn restart_mid_run_resumes_the_run_exactly_once() {
    for store in Store::all() {
        let mut server = Server::start(&store, &[]);
        let digest = push(&server, "chain", &chain(3));
        let (s, v) = launch(
            &server,
            &server.admin,
            json!({ "pack": digest, "max_cost": 1, "max_time": "2m" }),
        );
        assert_eq!(s, 200, "{v}");
        let id = v["id"].as_str().unwrap().to_string();
        // `a` settled, `b` (3 s) is running: kill the controller (SIGKILL) and start it again.
        wait_run(&server, &id, |v| {
            v["rows"].as_array().is_some_and(|r| r.len() == 1)
        });
        std::thread::sleep(Duration::from_millis(300));
        server.restart(&store);
        let run = wait_run(&server, &id, ended);
        assert_eq!(run["state"], "finished", "{}: {run}", server.store);
        assert_eq!(run["verdict"], "valid", "{run}");
        assert_eq!(run["dispatches"], 2, "{run}");
        let log = session_log(&server, &id);
        assert_eq!(kinds(&log, "start"), 1);
        assert_eq!(kinds(&log, "resumed"), 1);
        assert_eq!(kinds(&log, "shutdown"), 1);
        let rows: Vec<&str> = log
            .iter()
            .filter(|l| l["kind"] == "task_result")
            .map(|l| l["task"].as_str().unwrap())
            .collect();
        assert_eq!(rows, ["a", "b", "c"], "{}", server.store);
        // A finished run is not started again by the next restart.
        server.restart(&store);
        let (_, again) = server.get(&format!("/v1/runs/{id}"), &server.admin);
        assert_eq!(again["dispatches"], 2);
        assert_eq!(again["live"], false);
        assert_eq!(kinds(&session_log(&server, &id), "resumed"), 1);
    }
}

// RFC-0002:C-PACK-BASE — the delivery budget in force at dispatch is enforced: a pack stored
// under a larger budget is refused at launch, naming the budget and the size, leaving nothing.
#[test]
fn pack_base_delivery_budget_enforced_at_dispatch() {
    for store in Store::all() {
        let mut server = Server::start(&store, &[]);
        let manifest = chain(0);
        let tar = tar_of(&[file("crucible.toml", &manifest), file("noise", &noise())]);
        let (s, v) = server.call("POST", "/v1/packs?name=big", &server.admin, Some(&tar));
        assert_eq!(s, 200, "{v}");
        let digest = v["digest"].as_str().unwrap().to_string();
        server.restart_with(&store, &["--delivery-budget", "2048"]);
        let (s, v) = launch(
            &server,
            &server.admin,
            json!({ "pack": digest, "max_cost": 1, "max_time": "1m" }),
        );
        assert_eq!(s, 422, "{v}");
        let why = v["error"].as_str().unwrap();
        assert!(why.contains("delivery budget of 2048 bytes"), "{why}");
        assert_eq!(server.get("/v1/runs", &server.admin).1["runs"], json!([]));
        assert_eq!(
            std::fs::read_dir(server.state.path().join("runs"))
                .unwrap()
                .count(),
            0
        );
    }
}

// Issue 12 — the API is described by an OpenAPI document the controller serves without a token;
// every operation it lists is one the controller routes (none answers the router's own empty
// 404 or a 405), and the router is built from the same table, so none is left out.
#[test]
fn the_openapi_document_lists_every_route() {
    let store = Store::all().remove(0);
    let server = Server::start(&store, &[]);
    let (s, doc) = server.get("/v1/openapi.json", "");
    assert_eq!(s, 200, "{doc}");
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    for want in [
        "/v1/launches",
        "/v1/runs/{id}/events",
        "/v1/drafts",
        "/v1/packs/{id}/archive",
        "/v1/packs/import",
        "/v1/drafts/{id}/publish",
    ] {
        assert!(paths.contains_key(want), "{want}");
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    for (path, item) in paths {
        let concrete = path
            .replace("{id}", "01900000-0000-7000-8000-000000000000")
            .replace("{team}", "nosuch")
            .replace("{name}", "nosuch")
            .replace("{task}", "a");
        for method in item.as_object().unwrap().keys() {
            let url = format!("{}{concrete}", server.url);
            let auth = format!("Bearer {}", server.admin);
            let mut r = match method.as_str() {
                "get" => agent.get(&url).header("Authorization", &auth).call(),
                "post" => agent.post(&url).header("Authorization", &auth).send_empty(),
                "delete" => agent.delete(&url).header("Authorization", &auth).call(),
                other => panic!("{other} {path}"),
            }
            .unwrap();
            let status = r.status().as_u16();
            let body = if path.ends_with("/events") && status == 200 {
                Vec::new()
            } else {
                r.body_mut().read_to_vec().unwrap()
            };
            assert_ne!(status, 405, "{method} {path}");
            assert!(
                !(status == 404 && body.is_empty()),
                "{method} {path} is not routed"
            );
        }
    }
}

// RFC-0002:C-PACK-BASE — a launch records the digest it ran, and that keeps the stored tree:
// deleting the only pack that held it leaves the tree (and a draft of it deleted too), and the
// run still reads as it ran.
#[test]
fn pack_base_a_launch_keeps_its_tree_after_the_pack_is_deleted() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let digest = push(&server, "chain", &chain(0));
        let (s, v) = launch(
            &server,
            &server.admin,
            json!({"pack": digest, "max_cost": 1, "max_time": "1m"}),
        );
        assert_eq!(s, 200, "{v}");
        let run = v["id"].as_str().unwrap().to_string();
        wait_run(&server, &run, ended);
        let (_, packs) = server.get("/v1/packs", &server.admin);
        let pack = packs["packs"][0]["id"].as_str().unwrap().to_string();
        let (s, v) = server.call("DELETE", &format!("/v1/packs/{pack}"), &server.admin, None);
        assert_eq!(s, 200, "{v}");
        assert!(
            server.tree(&digest).is_dir(),
            "{}: the run records it",
            server.store
        );
        let (_, shown) = server.get(&format!("/v1/runs/{run}"), &server.admin);
        assert_eq!(shown["digest"], digest.as_str());
        assert_eq!(shown["verdict"], "valid", "{shown}");
    }
}

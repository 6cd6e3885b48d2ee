//! Standing launches on the controller (issue 13) and the history of their launch series
//! (RFC-0002:C-RUN-HISTORY; RFC-0002:C-PACK-BASE for what a firing of a draft records): a real
//! `crucible serve` on loopback, on SQLite and on PostgreSQL. Schedules are driven by the
//! controller's test clock (`--test-clock`, moved by `POST /v1/clock`, which runs one scheduler
//! pass before answering), so no test sleeps on wall time for a schedule.

use crate::controller::{file, tar_of, Server, Store};
use crate::controller_runs::{ended, push, wait_run};
use serde_json::{json, Value};

/// The history reader every series pack has: `reader` declares depth 30 and outputs the
/// reserved input `history` it was given.
const READER: &str = "[[workflow.task]]\nname = \"reader\"\nkind = \"command\"\nhistory = 30\n\
     run = '''python3 -c 'import json, os; print(json.dumps({\"history\": json.load(open(os.environ[\"CRUCIBLE_INPUTS_FILE\"]))[\"history\"]}))' '''\n";

/// A series pack: `head` (tables before the workflow, e.g. `[agent]`), the record task `rec`
/// running `rec`, `tasks` (more task tables) and the reader.
fn series_pack(head: &str, rec: &str, tasks: &str) -> String {
    format!(
        "{head}[workflow]\ntype = \"playbook\"\nhistory_record = \"rec\"\n\
         [[workflow.task]]\nname = \"rec\"\nkind = \"command\"\nrun = '''{rec}'''\n{tasks}{READER}"
    )
}

/// The record task passing with `{"i": i}`.
fn passing(i: usize) -> String {
    series_pack("", &format!("echo '{{\"i\": {i}}}'"), "")
}

/// The record task sleeping (stopped or killed before it settles), after the reader.
fn sleeping(secs: u32) -> String {
    series_pack("", &format!("sleep {secs}; echo '{{}}'"), "").replace(
        "run = '''sleep",
        "depends_on = [\"reader\"]\nrun = '''sleep",
    )
}

/// Saves `manifest` as the next version of draft `name`; its digest.
fn save(server: &Server, name: &str, manifest: &str) -> String {
    let (s, v) = server.save_draft(
        name,
        None,
        &tar_of(&[file("crucible.toml", manifest)]),
        &server.admin,
    );
    assert_eq!(s, 200, "{}: {v}", server.store);
    v["digest"].as_str().unwrap().to_string()
}

fn create(server: &Server, token: &str, body: Value) -> (u16, Value) {
    server.post_json("/v1/standing", token, body)
}

/// Creates a standing launch as the admin; its id.
fn standing(server: &Server, body: Value) -> String {
    let (s, v) = create(server, &server.admin, body);
    assert_eq!(s, 200, "{}: {v}", server.store);
    v["id"].as_str().unwrap().to_string()
}

/// Fires it by hand; the firing.
fn fire(server: &Server, id: &str) -> Value {
    let (s, v) = server.post_json(&format!("/v1/standing/{id}/fire"), &server.admin, json!({}));
    assert_eq!(s, 200, "{}: {v}", server.store);
    v
}

/// Fires it by hand and waits for the run it launched to be where `until` says; the run.
fn fire_run(server: &Server, id: &str, until: impl Fn(&Value) -> bool) -> Value {
    let f = fire(server, id);
    assert_eq!(f["result"], "launched", "{}: {f}", server.store);
    wait_run(server, f["run"].as_str().unwrap(), until)
}

/// Whether the run's `task` row has settled.
fn settled(task: &'static str) -> impl Fn(&Value) -> bool {
    move |v: &Value| {
        v["rows"]
            .as_array()
            .is_some_and(|rows| rows.iter().any(|r| r["task"] == task))
    }
}

/// The history the run's reader was given.
fn read_history(run: &Value) -> Value {
    let row = run["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["task"] == "reader")
        .unwrap_or_else(|| panic!("no reader row: {run}"));
    row["output"]["history"].clone()
}

/// Sets the test clock (one scheduler pass runs); the firings it made.
fn clock(server: &Server, now: &str) -> Vec<Value> {
    let (s, v) = server.post_json("/v1/clock", &server.admin, json!({ "now": now }));
    assert_eq!(s, 200, "{}: {v}", server.store);
    v["firings"].as_array().unwrap().clone()
}

fn show(server: &Server, id: &str) -> Value {
    let (s, v) = server.get(&format!("/v1/standing/{id}"), &server.admin);
    assert_eq!(s, 200, "{}: {v}", server.store);
    v
}

fn stop(server: &Server, run: &str) {
    let (s, v) = server.post_json(&format!("/v1/runs/{run}/stop"), &server.admin, json!({}));
    let shown = || server.get(&format!("/v1/runs/{run}"), &server.admin).1;
    assert_eq!(s, 200, "{}: {v}: {}", server.store, shown());
    wait_run(server, run, ended);
}

/// Runs `test` once per store, the stores in parallel.
fn each_store(test: impl Fn(Store) + Sync) {
    std::thread::scope(|scope| {
        for store in Store::all() {
            let test = &test;
            scope.spawn(move || test(store));
        }
    });
}

/// What each of the 35 firings does.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Pass,
    Fail,
    Stop,
    Ceiling,
    Killed,
}

fn mode(i: usize) -> Mode {
    match i {
        20 => Mode::Killed,
        9 | 24 => Mode::Stop,
        4 | 14 | 29 => Mode::Ceiling,
        3 | 12 | 22 | 31 | 35 => Mode::Fail,
        _ => Mode::Pass,
    }
}

// RFC-0002:C-RUN-HISTORY — a series fired 35 times with mixed outcomes (passed, failed, stopped,
// ended on a ceiling, and an engine killed with no shutdown, which the controller recorded
// ended) gives run 36 exactly the 30 most recent terminal runs by end time, oldest first, each
// with exactly the record's fields: its id, times, outcome and verdict (null where it wrote no
// shutdown), the revision it ran (RFC-0002:C-PACK-BASE: the draft version's digest), a
// controller-owned link, and the record task's entry.
#[test]
fn run_history_run_36_gets_the_30_most_recent_terminal_runs() {
    each_store(|store| {
        let mut server = Server::start(&store, &[]);
        save(&server, "chore", &passing(0));
        let id = standing(
            &server,
            json!({ "name": "chore", "pack": "draft:chore", "max_cost": 0.5, "max_time": "1m" }),
        );
        // (run, digest, mode, i) per firing.
        let mut fired: Vec<(String, String, Mode, usize)> = Vec::new();
        for i in 1..=35 {
            let m = mode(i);
            let manifest = match m {
                Mode::Pass => passing(i),
                Mode::Fail => series_pack("", &format!("echo '{{\"i\": {i}}}'; exit 1"), ""),
                Mode::Stop | Mode::Killed => sleeping(20),
                Mode::Ceiling => series_pack(
                    "[agent]\nbackend = \"command\"\n\
                     agent_cmd = '''echo '{\"cost_usd\": 0.6}' > PLAN_TASK_RESULT.json'''\n",
                    &format!("echo '{{\"i\": {i}}}'"),
                    "[[workflow.task]]\nname = \"spend\"\nkind = \"agent\"\nprompt = \"p\"\n\
                     [[workflow.task]]\nname = \"more\"\nkind = \"agent\"\nprompt = \"p\"\n\
                     depends_on = [\"spend\"]\n",
                ),
            };
            let digest = save(&server, "chore", &manifest);
            let f = fire(&server, &id);
            assert_eq!(f["result"], "launched", "{}: {i}: {f}", server.store);
            let run = f["run"].as_str().unwrap().to_string();
            match m {
                Mode::Stop => {
                    wait_run(&server, &run, settled("reader"));
                    stop(&server, &run);
                }
                Mode::Killed => {
                    // The controller dies mid-run and its run cannot be resumed (its delivered
                    // manifest is gone): the restarted controller records it ended, and its
                    // engine never wrote a shutdown.
                    wait_run(&server, &run, settled("reader"));
                    server.kill();
                    let pack = server.state.path().join("runs").join(&run).join("pack");
                    std::fs::remove_file(pack.join("crucible.toml")).unwrap();
                    server.restart(&store);
                    let v = wait_run(&server, &run, ended);
                    assert_eq!(v["state"], "refused", "{v}");
                    assert_eq!(v["shutdown"], Value::Null, "{v}");
                }
                _ => {
                    wait_run(&server, &run, ended);
                }
            }
            fired.push((run, digest, m, i));
        }
        save(&server, "chore", &passing(36));
        let run36 = fire_run(&server, &id, ended);
        let history = read_history(&run36);
        assert_eq!(history["dropped"], 0, "{}", server.store);
        let records = history["records"].as_array().unwrap();
        let want: Vec<&str> = fired[5..].iter().map(|f| f.0.as_str()).collect();
        let got: Vec<&str> = records.iter().map(|r| r["run"].as_str().unwrap()).collect();
        assert_eq!(
            got, want,
            "{}: the 30 most recent, oldest first",
            server.store
        );
        for (record, (run, digest, m, i)) in records.iter().zip(&fired[5..]) {
            let keys: Vec<&str> = record
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, crate::series::RECORD_FIELDS, "{record}");
            let (_, recorded) = server.get(&format!("/v1/runs/{run}"), &server.admin);
            assert_eq!(record["revision"], digest.as_str(), "{record}");
            assert_eq!(record["link"], format!("{}/v1/runs/{run}", server.url));
            assert_eq!(record["outcome"], recorded["outcome"], "{m:?}: {record}");
            assert_eq!(record["verdict"], recorded["verdict"], "{m:?}: {record}");
            assert_eq!(record["entry"]["task"], "rec", "{record}");
            let (outcome, status, output) = match m {
                Mode::Pass => (json!("finished"), json!("pass"), json!({ "i": i })),
                Mode::Fail => (json!("error"), json!("fail"), Value::Null),
                Mode::Ceiling => (json!("budget"), json!("pass"), json!({ "i": i })),
                Mode::Stop => (
                    json!("stopped"),
                    record["entry"]["status"].clone(),
                    Value::Null,
                ),
                Mode::Killed => (Value::Null, Value::Null, Value::Null),
            };
            assert_eq!(record["outcome"], outcome, "{m:?}: {record}");
            assert_eq!(record["entry"]["status"], status, "{m:?}: {record}");
            assert_eq!(record["entry"]["output"], output, "{m:?}: {record}");
            if *m == Mode::Killed {
                assert_eq!(record["verdict"], Value::Null, "{record}");
            } else {
                assert_ne!(record["verdict"], Value::Null, "{record}");
            }
        }
    });
}

// RFC-0002:C-RUN-HISTORY — a running run never appears in its series' history, and a firing
// while it runs is skipped and recorded (no overlapping runs of one series); a run resumed after
// a restart gets the same history it was started with; the operator's size bound is
// discoverable before a run starts (GET /v1/settings) and drops whole records from the oldest
// end, reporting how many.
#[test]
fn run_history_skips_running_runs_keeps_it_across_a_resume_and_bounds_its_size() {
    each_store(|store| {
        let mut server = Server::start(&store, &[]);
        save(&server, "s", &passing(1));
        let id = standing(
            &server,
            json!({ "name": "s", "pack": "draft:s", "max_cost": 1, "max_time": "1m" }),
        );
        let a = fire_run(&server, &id, ended);
        assert_eq!(read_history(&a), json!({ "records": [], "dropped": 0 }));
        // B: the reader runs after a 3 s task.
        save(
            &server,
            "s",
            &series_pack(
                "",
                "echo '{}'",
                "[[workflow.task]]\nname = \"slow\"\nkind = \"command\"\nrun = \"sleep 3; echo '{}'\"\n",
            )
            .replace("history = 30\n", "history = 30\ndepends_on = [\"slow\"]\n"),
        );
        let b = fire_run(&server, &id, settled("rec"));
        let b_id = b["id"].as_str().unwrap().to_string();
        let (_, before) = server.get(&format!("/v1/standing/{id}/history"), &server.admin);
        let runs: Vec<&Value> = before["records"].as_array().unwrap().iter().collect();
        assert_eq!(runs.len(), 1, "{before}");
        assert_eq!(runs[0]["run"], a["id"], "only the ended run: {before}");
        let skipped = fire(&server, &id);
        assert_eq!(skipped["result"], "skipped", "{skipped}");
        assert!(
            skipped["reason"].as_str().unwrap().contains(&b_id),
            "{skipped}"
        );
        assert_eq!(show(&server, &id)["firings"][0], skipped);
        // The controller dies while B's slow task runs; B resumes with the history it had.
        server.restart(&store);
        let b = wait_run(&server, &b_id, ended);
        assert_eq!(b["dispatches"], 2, "{b}");
        assert_eq!(b["verdict"], "valid", "{b}");
        assert_eq!(
            read_history(&b),
            json!({ "records": before["records"], "dropped": 0 }),
            "{}: the resumed run's history",
            server.store
        );
        // A bound that holds B's record but not A's as well.
        let (_, full) = server.get(&format!("/v1/standing/{id}/history"), &server.admin);
        let records = full["records"].as_array().unwrap();
        assert_eq!(records.len(), 2, "{full}");
        let one = json!({ "records": [records[1]], "dropped": 1 })
            .to_string()
            .len();
        let bound = one + 8;
        server.restart_with(&store, &["--history-max-bytes", &bound.to_string()]);
        let (_, settings) = server.get("/v1/settings", &server.admin);
        assert_eq!(settings["history_max_bytes"], bound, "{settings}");
        assert_eq!(settings["history_max_records"], 30, "{settings}");
        let (_, full) = server.get(&format!("/v1/standing/{id}/history"), &server.admin);
        assert_eq!(full["max_bytes"], bound);
        save(&server, "s", &passing(3));
        let c = fire_run(&server, &id, ended);
        assert_eq!(
            read_history(&c),
            json!({ "records": [full["records"][1]], "dropped": 1 }),
            "{}: whole records dropped from the oldest end",
            server.store
        );
    });
}

// Issue 13 — the scheduler's policies, on the test clock: a schedule fires at its times; a
// firing while the series' run is running is skipped and recorded; after downtime the missed
// times are fired once (a catch-up naming how many it stands for), never in a burst; a paused
// schedule does not fire and, resumed, does not fire the times it was paused over.
#[test]
fn standing_schedule_overlap_catch_up_and_pause() {
    each_store(|store| {
        let server = Server::start(&store, &["--test-clock", "2026-12-01T00:00:00Z"]);
        let digest = push(&server, "sleepy", &sleeping(30));
        let id = standing(
            &server,
            json!({ "name": "every5", "pack": digest, "max_cost": 1, "max_time": "1m",
                    "schedule": "*/5 * * * *", "timezone": "Europe/Paris" }),
        );
        assert_eq!(show(&server, &id)["next_at"], "2026-12-01T00:05:00.000Z");
        assert!(clock(&server, "2026-12-01T00:04:59Z").is_empty());
        let f = clock(&server, "2026-12-01T00:05:00Z");
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (&f[0]["trigger"], &f[0]["result"], &f[0]["scheduled_for"]),
            (
                &json!("schedule"),
                &json!("launched"),
                &json!("2026-12-01T00:05:00.000Z")
            ),
            "{f:?}"
        );
        let first = f[0]["run"].as_str().unwrap().to_string();
        assert_eq!(
            server.get(&format!("/v1/runs/{first}"), &server.admin).1["series"],
            id.as_str()
        );
        // Overlap: the first run is still running at 00:10.
        let f = clock(&server, "2026-12-01T00:10:00Z");
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0]["result"], "skipped", "{f:?}");
        assert!(f[0]["reason"].as_str().unwrap().contains(&first), "{f:?}");
        stop(&server, &first);
        // Downtime: from 00:10 to 03:00, 34 times were missed; one catch-up firing.
        let f = clock(&server, "2026-12-01T03:00:30Z");
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (
                &f[0]["trigger"],
                &f[0]["result"],
                &f[0]["missed"],
                &f[0]["scheduled_for"]
            ),
            (
                &json!("catch-up"),
                &json!("launched"),
                &json!(34),
                &json!("2026-12-01T03:00:00.000Z")
            ),
            "{f:?}"
        );
        stop(&server, f[0]["run"].as_str().unwrap());
        assert!(clock(&server, "2026-12-01T03:01:00Z").is_empty());
        // Paused: nothing fires; resumed, the paused-over times are not fired.
        let (s, v) = server.post_json(
            &format!("/v1/standing/{id}/pause"),
            &server.admin,
            json!({}),
        );
        assert_eq!((s, &v["paused"]), (200, &json!(true)), "{v}");
        assert!(clock(&server, "2026-12-01T04:00:00Z").is_empty());
        let (s, _) = server.post_json(
            &format!("/v1/standing/{id}/resume"),
            &server.admin,
            json!({}),
        );
        assert_eq!(s, 200);
        assert!(clock(&server, "2026-12-01T04:04:00Z").is_empty());
        let f = clock(&server, "2026-12-01T04:05:00Z");
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (&f[0]["trigger"], &f[0]["missed"]),
            (&json!("schedule"), &json!(1)),
            "{f:?}"
        );
        stop(&server, f[0]["run"].as_str().unwrap());
        // Every firing is on the standing launch, newest first: 4 launched, 1 skipped.
        let firings = show(&server, &id)["firings"].as_array().unwrap().clone();
        let results: Vec<&str> = firings
            .iter()
            .map(|f| f["result"].as_str().unwrap())
            .collect();
        assert_eq!(
            results,
            ["launched", "launched", "skipped", "launched"],
            "{}",
            server.store
        );
        let (_, audit) = server.get("/v1/audit", &server.admin);
        for action in ["standing.create", "standing.pause", "standing.resume"] {
            assert!(audit.to_string().contains(action), "{action}: {audit}");
        }
    });
}

// Issue 13 — the per-series spend cap per day, on top of each run's ceiling: each run's cost
// ceiling is lowered to what is left of the day's cap; once the day's runs spent it, a firing is
// skipped and recorded; the next day (in the schedule's time zone) it fires again.
#[test]
fn standing_daily_spend_cap_clamps_then_skips() {
    each_store(|store| {
        let server = Server::start(&store, &["--test-clock", "2026-12-01T08:00:00Z"]);
        let spender = series_pack(
            "[agent]\nbackend = \"command\"\n\
             agent_cmd = '''echo '{\"cost_usd\": 0.6}' > PLAN_TASK_RESULT.json'''\n",
            "echo '{}'",
            "[[workflow.task]]\nname = \"spend\"\nkind = \"agent\"\nprompt = \"p\"\n",
        );
        let digest = push(&server, "spender", &spender);
        let id = standing(
            &server,
            json!({ "name": "capped", "pack": digest, "max_cost": 5, "max_time": "1m",
                    "daily_max_cost": 1.0, "timezone": "America/New_York" }),
        );
        // RFC-0002:C-PACK-BASE: the pinned digest's tree is kept while the standing launch
        // records it, after its pack is deleted (and the store collected) too.
        let (_, packs) = server.get("/v1/packs", &server.admin);
        let pack = packs["packs"][0]["id"].as_str().unwrap().to_string();
        let (s, v) = server.call("DELETE", &format!("/v1/packs/{pack}"), &server.admin, None);
        assert_eq!(s, 200, "{v}");
        let one = fire_run(&server, &id, ended);
        assert_eq!(one["request"]["max_cost"], 1.0, "{one}");
        assert_eq!(one["spent_usd"], 0.6, "{one}");
        let two = fire_run(&server, &id, ended);
        assert_eq!(two["request"]["max_cost"], 0.4, "{two}");
        let skipped = fire(&server, &id);
        assert_eq!(skipped["result"], "skipped", "{skipped}");
        assert!(
            skipped["reason"].as_str().unwrap().contains("daily cap"),
            "{skipped}"
        );
        // 04:59 the next morning in UTC is still Dec 1 in New York; 05:00 is Dec 2.
        clock(&server, "2026-12-02T04:59:00Z");
        assert_eq!(fire(&server, &id)["result"], "skipped");
        clock(&server, "2026-12-02T05:00:00Z");
        let three = fire_run(&server, &id, ended);
        assert_eq!(three["request"]["max_cost"], 1.0, "{three}");
    });
}

// Issue 13, RFC-0002:C-PACK-BASE — a standing launch of `draft:NAME` is stored without a digest;
// each firing runs the draft's latest saved version that compiles (skipping a newer one that
// does not) and its run records that version's digest. A standing launch is checked at creation
// as its launch would be, scoped to its team (another team cannot tell it from a missing one, a
// viewer reads but cannot change or fire it), and its changes are audited.
#[test]
fn standing_draft_latest_skips_a_broken_version_and_is_scoped() {
    each_store(|store| {
        let server = Server::start(&store, &[]);
        let v1 = save(&server, "d", &passing(1));
        let id = standing(
            &server,
            json!({ "name": "latest", "pack": "draft:d", "max_cost": 1, "max_time": "1m" }),
        );
        let shown = show(&server, &id);
        assert_eq!(shown["pack"], "draft:d");
        assert!(
            !shown.to_string().contains(&v1),
            "no digest stored: {shown}"
        );
        save(
            &server,
            "d",
            &format!("{}depends_on = [\"nosuch\"]\n", passing(2)),
        );
        let run = fire_run(&server, &id, ended);
        assert_eq!(run["digest"], v1.as_str(), "{run}");
        assert_eq!(run["source"], "draft:d version 1", "{run}");
        let v3 = save(&server, "d", &passing(3));
        let run = fire_run(&server, &id, ended);
        assert_eq!(run["digest"], v3.as_str(), "{run}");
        assert_eq!(run["source"], "draft:d version 3", "{run}");
        // Checked at creation: no ceiling, a bad schedule, a pack nobody registered.
        let base = json!({ "name": "x", "pack": "draft:d", "max_cost": 1, "max_time": "1m" });
        for (change, status, why) in [
            (json!({ "max_time": null }), 422, "--max-time is required"),
            (json!({ "schedule": "0 0 9 * * *" }), 400, "five-field"),
            (json!({ "timezone": "Mars/Olympus" }), 400, "Mars/Olympus"),
            (json!({ "pack": "draft:nosuch" }), 422, "is not available"),
            (json!({ "name": "latest" }), 422, "already has"),
        ] {
            let mut body = base.clone();
            for (k, v) in change.as_object().unwrap() {
                body[k] = v.clone();
            }
            let (s, v) = create(&server, &server.admin, body);
            assert_eq!(s, status, "{change}: {v}");
            assert!(v["error"].as_str().unwrap().contains(why), "{change}: {v}");
        }
        // Scoping: another team sees nothing and cannot tell it from a missing one; a viewer of
        // the team reads it but cannot fire, pause or delete it.
        let blue = server.team_with_user("blue", "bo", "editor");
        let viewer = {
            let (s, v) = server.post_json(
                "/v1/teams/platform/members",
                &server.admin,
                json!({ "name": "vic", "role": "viewer" }),
            );
            assert_eq!(s, 200, "{v}");
            v["token"].as_str().unwrap().to_string()
        };
        assert_eq!(server.get("/v1/standing", &blue).1["standing"], json!([]));
        let missing = "01900000-0000-7000-8000-000000000000";
        for path in ["", "/history"] {
            let (s1, e1) = server.get(&format!("/v1/standing/{id}{path}"), &blue);
            let (s2, e2) = server.get(&format!("/v1/standing/{missing}{path}"), &blue);
            assert_eq!((s1, s2), (404, 404));
            assert_eq!(
                e1["error"].as_str().unwrap().replace(&id, "ID"),
                e2["error"].as_str().unwrap().replace(missing, "ID")
            );
        }
        let (s, _) = server.post_json(&format!("/v1/standing/{id}/fire"), &blue, json!({}));
        assert_eq!(s, 404);
        assert_eq!(server.get(&format!("/v1/standing/{id}"), &viewer).0, 200);
        for action in ["fire", "pause"] {
            let (s, v) =
                server.post_json(&format!("/v1/standing/{id}/{action}"), &viewer, json!({}));
            assert_eq!(s, 403, "{action}: {v}");
        }
        assert_eq!(
            server
                .call("DELETE", &format!("/v1/standing/{id}"), &viewer, None)
                .0,
            403
        );
        let (s, v) = server.call("DELETE", &format!("/v1/standing/{id}"), &server.admin, None);
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            server.get(&format!("/v1/standing/{id}"), &server.admin).0,
            404
        );
        assert_eq!(
            server.get("/v1/standing", &server.admin).1["standing"],
            json!([])
        );
        let (_, audit) = server.get("/v1/audit", &server.admin);
        for action in ["standing.create", "standing.fire", "standing.delete"] {
            assert!(audit.to_string().contains(action), "{action}");
        }
        // The client: create, list, pause, fire and delete.
        let out = server.remote(&[
            "standing",
            "create",
            "nightly",
            "draft:d",
            "--max-cost",
            "1",
            "--max-time",
            "1m",
            "--schedule",
            "0 3 * * *",
            "--timezone",
            "Europe/Paris",
            "--team",
            "platform",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let nightly = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let listed = server.remote(&["standing", "list"]);
        let listed = String::from_utf8_lossy(&listed.stdout);
        assert!(
            listed.contains(&nightly) && listed.contains("0 3 * * * (Europe/Paris) active"),
            "{listed}"
        );
        let out = server.remote(&["standing", "pause", &nightly]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("paused"));
        let out = server.remote(&["standing", "fire", &nightly]);
        let fired = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && fired.contains("manual   launched run"),
            "{fired}"
        );
        let run = fired.trim().rsplit(' ').next().unwrap().to_string();
        wait_run(&server, &run, ended);
        assert!(server
            .remote(&["standing", "delete", &nightly])
            .status
            .success());
        // The test clock is for tests only: a controller on the system clock has none.
        let (s, _) = server.post_json(
            "/v1/clock",
            &server.admin,
            json!({ "now": "2030-01-01T00:00:00Z" }),
        );
        assert_eq!(s, 404);
    });
}

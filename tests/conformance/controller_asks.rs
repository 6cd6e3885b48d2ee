//! Asks, the receiving side (RFC-0002:C-ASKS; issue 12): a real `crucible serve` runs command
//! playbooks that emit asks, and decides each under the operator's policy, on SQLite and on
//! PostgreSQL: validated against the named workflow's parameter schema (rejected otherwise),
//! deduplicated by key, admitted as a new launch or held for a person, both visible.

use crate::controller::{Server, Store};
use crate::controller_runs::{ended, launch, wait_run};
use serde_json::{json, Value};

/// The workflow asks name: one parameter, required, with a pattern.
const FIX_STAR: &str = r#"params = {"issue": {"type": "string", "required": True, "pattern": "^repo#[0-9]+$"}}

fix = command(name = "fix", run = "echo '{}'")

workflow(type = "playbook", tasks = [fix])
"#;

/// Registers the pack `name` holding the `fix` workflow in the platform team.
fn push_fix(server: &Server, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("crucible.toml"),
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("workflow.star"), FIX_STAR).unwrap();
    let out = server.remote(&["pack", "push", dir.path().to_str().unwrap(), "--name", name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Registers a pack whose one command task emits `asks`; returns its digest.
fn push_emitter(server: &Server, asks: &Value) -> String {
    let dir = tempfile::tempdir().unwrap();
    let manifest = format!(
        "[workflow]\ntype = \"playbook\"\n[[workflow.task]]\nname = \"scan\"\nkind = \"command\"\n\
         run = '''echo '{asks}' > PLAN_ASKS.json; echo '{{}}' '''\n"
    );
    std::fs::write(dir.path().join("crucible.toml"), manifest).unwrap();
    let out = server.remote(&[
        "pack",
        "push",
        dir.path().to_str().unwrap(),
        "--name",
        "emitter",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Launches `digest` and waits for its run to end (its asks are decided by then).
fn run_to_end(server: &Server, digest: &str) -> String {
    let (s, v) = launch(
        server,
        &server.admin,
        json!({"pack": digest, "max_cost": 1, "max_time": "1m"}),
    );
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let run = wait_run(server, &id, ended);
    assert_eq!(run["verdict"], "valid", "{}: {run}", server.store);
    id
}

/// The asks one run emitted, in emission order.
fn asks_of(server: &Server, run: &str, token: &str) -> Vec<Value> {
    let (s, v) = server.get(&format!("/v1/asks?run={run}"), token);
    assert_eq!(s, 200, "{v}");
    v["asks"].as_array().unwrap().clone()
}

fn ask(key: &str, workflow: &str, params: Value) -> Value {
    json!({"key": key, "workflow": workflow, "params": params})
}

// RFC-0002:C-ASKS — an ask whose parameters do not satisfy the named workflow's declared
// schema is rejected (a wrong type, a pattern, an undeclared name, a missing required value,
// a workflow that is no pack of the team); a valid ask on the operator's allow-list is admitted
// as a new launch, once across two runs emitting the same key; one off the allow-list is held
// for a person, and admitted by an approver only. What was proposed and what was decided are
// both read at /v1/asks, by the run's team only.
#[test]
fn asks_validated_deduplicated_by_key_admitted_once_or_held() {
    for store in Store::all() {
        let server = Server::start(
            &store,
            &[
                "--ask-allow",
                "fix",
                "--ask-max-cost",
                "1",
                "--ask-max-time",
                "1m",
            ],
        );
        push_fix(&server, "fix");
        push_fix(&server, "review");
        let emitted = json!([
            ask("repo#1", "fix", json!({"issue": "repo#1"})),
            ask("typed", "fix", json!({"issue": 7})),
            ask("pattern", "fix", json!({"issue": "nope"})),
            ask("extra", "fix", json!({"issue": "repo#2", "zzz": "1"})),
            ask("missing", "fix", json!({})),
            ask("ghost", "nosuch", json!({})),
            ask("look", "review", json!({"issue": "repo#3"})),
        ]);
        let emitter = push_emitter(&server, &emitted);
        let first = run_to_end(&server, &emitter);
        let second = run_to_end(&server, &emitter);

        let one = asks_of(&server, &first, &server.admin);
        let states: Vec<&str> = one.iter().map(|a| a["state"].as_str().unwrap()).collect();
        assert_eq!(
            states,
            ["admitted", "rejected", "rejected", "rejected", "rejected", "rejected", "held"],
            "{}: {one:#?}",
            server.store
        );
        // What was proposed is kept as emitted, beside what was decided.
        assert_eq!(one[0]["key"], "repo#1");
        assert_eq!(one[0]["task"], "scan");
        assert_eq!(one[1]["params"], json!({"issue": 7}));
        let reasons: Vec<&str> = one[1..6]
            .iter()
            .map(|a| a["reason"].as_str().unwrap())
            .collect();
        for (reason, want) in reasons.iter().zip([
            "is not a string",
            "does not match the pattern",
            "`zzz` is not a declared parameter",
            "required parameter `issue` has no value",
            "`nosuch` is not a pack of the team",
        ]) {
            assert!(reason.contains(want), "{reason} lacks {want}");
        }
        assert!(
            one[6]["reason"].as_str().unwrap().contains("allow-list"),
            "{}",
            one[6]
        );

        // The second run proposed the same: its repeats are duplicates of the first's.
        let two = asks_of(&server, &second, &server.admin);
        assert_eq!(two[0]["state"], "duplicate", "{two:#?}");
        assert_eq!(two[0]["duplicate_of"], one[0]["id"]);
        assert_eq!(two[6]["state"], "duplicate");
        assert_eq!(two[6]["duplicate_of"], one[6]["id"]);
        assert_eq!(two[1]["state"], "rejected");

        // Admitted once: one run launched from an ask, with the ask's parameters, and valid.
        let launched = one[0]["launched_run"].as_str().unwrap();
        let run = wait_run(&server, launched, ended);
        assert_eq!(run["verdict"], "valid", "{run}");
        assert_eq!(run["request"]["params"], json!({"issue": "repo#1"}));
        assert_eq!(run["request"]["max_time"], "1m");
        let (_, runs) = server.get("/v1/runs", &server.admin);
        let from_asks: Vec<&Value> = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["source"].as_str().unwrap().starts_with("ask"))
            .collect();
        assert_eq!(from_asks.len(), 1, "{runs}");

        // Another team sees none of it and cannot tell; a viewer of the team may not decide.
        let blue = server.team_with_user("blue", "bo", "editor");
        assert!(asks_of(&server, &first, &blue).is_empty());
        let held = one[6]["id"].as_str().unwrap();
        let admit = format!("/v1/asks/{held}/admit");
        let (s, _) = server.call("POST", &admit, &blue, None);
        assert_eq!(s, 404);
        let (s, v) = server.post_json(
            "/v1/teams/platform/members",
            &server.admin,
            json!({"name": "vic", "role": "viewer"}),
        );
        assert_eq!(s, 200, "{v}");
        let (s, _) = server.call("POST", &admit, v["token"].as_str().unwrap(), None);
        assert_eq!(s, 403);
        // An approver admits the held ask: launched like any other, decided by that person.
        let (s, v) = server.call("POST", &admit, &server.admin, None);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["state"], "admitted");
        let run = wait_run(&server, v["launched_run"].as_str().unwrap(), ended);
        assert_eq!(run["verdict"], "valid", "{run}");
        let (s, _) = server.call("POST", &admit, &server.admin, None);
        assert_eq!(s, 422, "only a held ask is admitted");
        let (_, decided) = server.get("/v1/asks?state=admitted", &server.admin);
        let by: Vec<&Value> = decided["asks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| &a["decided_by"])
            .collect();
        assert_eq!(by, [&Value::Null, &json!("admin")], "{decided}");
    }
}

// RFC-0002:C-ASKS — the operator's rate limit: past the team's admissions per hour, a valid
// ask on the allow-list is held for a person, who may dismiss it; the policy is discoverable.
#[test]
fn asks_past_the_hourly_limit_are_held_and_may_be_dismissed() {
    for store in Store::all() {
        let server = Server::start(&store, &["--ask-allow", "fix", "--asks-per-hour", "1"]);
        let (_, settings) = server.get("/v1/settings", &server.admin);
        assert_eq!(settings["asks"]["allow"], json!(["fix"]));
        assert_eq!(settings["asks"]["per_hour"], 1);
        push_fix(&server, "fix");
        let emitter = push_emitter(
            &server,
            &json!([
                ask("repo#1", "fix", json!({"issue": "repo#1"})),
                ask("repo#2", "fix", json!({"issue": "repo#2"})),
            ]),
        );
        let run = run_to_end(&server, &emitter);
        let asks = asks_of(&server, &run, &server.admin);
        assert_eq!(asks[0]["state"], "admitted", "{asks:#?}");
        assert_eq!(asks[1]["state"], "held");
        assert!(
            asks[1]["reason"].as_str().unwrap().contains("limit of 1"),
            "{}",
            asks[1]
        );
        let id = asks[1]["id"].as_str().unwrap();
        let (s, v) = server.call(
            "POST",
            &format!("/v1/asks/{id}/dismiss"),
            &server.admin,
            None,
        );
        assert_eq!(s, 200, "{v}");
        let asks = asks_of(&server, &run, &server.admin);
        assert_eq!(asks[1]["state"], "dismissed");
        assert_eq!(asks[1]["decided_by"], "admin");
        let (_, audit) = server.get("/v1/audit", &server.admin);
        assert!(audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "ask.dismiss"));
    }
}

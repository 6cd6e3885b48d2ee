//! Engines outside the controller (issue 14's remote engine, issue 17's Kubernetes Jobs): a run
//! recorded with the executor `remote` is executed elsewhere; its engine reaches `crucible serve`
//! only by requests it initiates, authenticated by a run token scoped to that one run
//! (docs/controller.md, "Engines outside the controller"; docs/security.md). A real
//! `crucible serve` on loopback, on SQLite and on PostgreSQL.

use crate::controller::{Server, Store};
use crate::controller_runs::push;
use serde_json::{json, Value};

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

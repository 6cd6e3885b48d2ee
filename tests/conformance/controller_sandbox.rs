//! A controller's runs against a hostile pack (issue 11 on the controller, issue 12): a team's
//! tasks cannot read the controller's own state, and a team's manifest cannot loosen the sandbox
//! the controller runs it in.

use crate::controller::{Server, Store};
use crate::controller_runs::{ended, launch, push, wait_run};
use crate::support::probe_dir;
use serde_json::json;

fn one_command(run: &str, tables: &str) -> String {
    format!(
        "[workflow]\ntype = \"playbook\"\n\
         [[workflow.task]]\nname = \"peek\"\nkind = \"command\"\nrun = {run:?}\n{tables}"
    )
}

// The controller's state directory (its admin token, its store, every team's packs and runs)
// is hidden from its runs' tasks like the pack and the run's state, even where the host's file
// system is otherwise readable (outside `/tmp`, which every sandbox empties).
#[test]
fn a_task_cannot_read_the_controllers_state() {
    for store in Store::all() {
        let server = Server::start_in(probe_dir(), &store, &[]);
        let state = server.state.path().canonicalize().unwrap();
        assert!(state.join("admin.token").is_file());
        // All it finds there is the way to its own run: not the token, the store, the trees,
        // nor the run launched before it.
        let run = format!(
            "test ! -e '{0}/admin.token' || exit 7; test \"$(ls -A '{0}')\" = runs || exit 8; \
             test \"$(ls -A '{0}/runs' | wc -l)\" = 1 || exit 9; echo '{{}}'",
            state.display()
        );
        let digest = push(&server, "peek", &one_command(&run, ""));
        for _ in 0..2 {
            let (s, v) = launch(
                &server,
                &server.admin,
                json!({ "pack": digest, "max_cost": 1, "max_time": "1m" }),
            );
            assert_eq!(s, 200, "{}: {v}", server.store);
            let run = wait_run(&server, v["id"].as_str().unwrap(), ended);
            assert_eq!(run["verdict"], "valid", "{}: {run}", server.store);
        }
    }
}

// A team's manifest is not the operator: opting out of the sandbox or exposing host paths to
// its tasks is refused at launch, naming the key, and nothing runs.
#[test]
fn a_pack_cannot_loosen_the_controllers_sandbox() {
    let store = Store::Sqlite;
    let server = Server::start(&store, &[]);
    for (name, tables, key) in [
        (
            "off",
            "[sandbox]\nenabled = false\n",
            "[sandbox] enabled = false",
        ),
        ("wide", "[sandbox]\nexpose = [\"/\"]\n", "[sandbox] expose"),
    ] {
        let digest = push(&server, name, &one_command("echo '{}'", tables));
        let (s, v) = launch(
            &server,
            &server.admin,
            json!({ "pack": digest, "max_cost": 1, "max_time": "1m" }),
        );
        assert_eq!(s, 422, "{name}: {v}");
        assert!(v.to_string().contains(key), "{name}: {v}");
    }
    let (_, runs) = server.get("/v1/runs", &server.admin);
    assert_eq!(runs["runs"].as_array().unwrap().len(), 0, "{runs}");
}

//! Sharing a pack with another team (issue 12; docs/decisions.md "Sharing a pack"): an admin of
//! the pack's team shares it, every revision, read-only with another team, whose members then
//! read it and whose editors may launch it; everything else of the owning team stays invisible,
//! and an unshare makes the pack "not found" again, exactly as a missing one. RFC-0002:C-PACK-BASE:
//! reading, launching or sharing a pack saved on a base needs no action on the base. A real
//! `crucible serve` over HTTP and `crucible remote`, on SQLite and on PostgreSQL.

use crate::controller::{file, tar_of, Server, Store};
use crate::controller_runs::{ended, launch, wait_run_as};
use crate::support::BIN;
use serde_json::{json, Value};
use std::process::Command;

/// A one-task command playbook's manifest.
const PLAYBOOK: &str = "[workflow]\ntype = \"playbook\"\n\
    [[workflow.task]]\nname = \"a\"\nkind = \"command\"\nrun = \"echo '{}'\"\n";

/// `crucible remote` as the subject holding `token`.
fn remote_as(server: &Server, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["remote", "--server", &server.url])
        .args(args)
        .env("CRUCIBLE_TOKEN", token)
        .output()
        .unwrap()
}

fn launch_of(server: &Server, token: &str, digest: &str, team: &str) -> (u16, Value) {
    launch(
        server,
        token,
        json!({ "pack": digest, "team": team, "max_cost": 1, "max_time": "60s" }),
    )
}

/// The error text with `id` replaced, to compare two refusals' wording.
fn wording(v: &Value, id: &str) -> String {
    v["error"].as_str().unwrap().replace(id, "ID")
}

fn actions(server: &Server) -> Vec<(String, String, String)> {
    let (_, audit) = server.get("/v1/audit", &server.admin);
    audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap().to_string();
            (s("subject"), s("action"), s("detail"))
        })
        .collect()
}

// Issue 12 — a pack shared read-only with another team: its viewers read it (list, show,
// archive), its editors launch it, nothing else of the owning team's shows; only an admin of the
// pack's team shares or unshares; an unshare makes it not found again, indistinguishable from a
// missing pack, while the receiving team's runs of it stay its runs; audited.
#[test]
fn pack_share_is_read_only_launchable_and_revoked_as_not_found() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let rita = server.team_with_user("red", "rita", "admin");
        let ed = server.member("red", "ed", "editor");
        let bo = server.team_with_user("blue", "bo", "editor");
        let val = server.member("blue", "val", "viewer");
        server.team_with_user("green", "gus", "editor");
        let tar = tar_of(&[file("crucible.toml", PLAYBOOK)]);
        let (s, pushed) = server.push_tar("shared", "red", &tar, &rita);
        assert_eq!(s, 200, "{pushed}");
        let id = pushed["id"].as_str().unwrap().to_string();
        let digest = pushed["digest"].as_str().unwrap().to_string();
        let other = tar_of(&[file("crucible.toml", PLAYBOOK), file("x", "private")]);
        let (s, private) = server.push_tar("private", "red", &other, &rita);
        assert_eq!(s, 200, "{private}");
        let private_id = private["id"].as_str().unwrap().to_string();
        let (s, red_run) = launch_of(&server, &ed, &digest, "red");
        assert_eq!(s, 200, "{red_run}");
        let red_run = red_run["id"].as_str().unwrap().to_string();
        let missing = "01900000-0000-7000-8000-000000000000";
        let unknown = format!("tree1:{}", "0".repeat(64));

        // Before any share: blue cannot tell the pack from a missing one, nor launch it.
        let (s, before) = server.get(&format!("/v1/packs/{id}"), &bo);
        assert_eq!(s, 404, "{}: {before}", server.store);
        let (_, refused) = launch_of(&server, &bo, &digest, "blue");
        let (_, refused_unknown) = launch_of(&server, &bo, &unknown, "blue");
        assert_eq!(
            wording(&refused, &digest),
            wording(&refused_unknown, &unknown)
        );

        // Only an admin of the pack's team shares it: an editor there may not, and blue, which
        // cannot read it, is told it is not found.
        let share = |token: &str, team: &str| {
            server.post_json(
                &format!("/v1/packs/{id}/shares"),
                token,
                json!({ "team": team }),
            )
        };
        let (s, v) = share(&ed, "blue");
        assert_eq!(s, 403, "{}: {v}", server.store);
        let (s, v) = share(&bo, "blue");
        assert_eq!(s, 404, "{}: {v}", server.store);
        let (s, v) = share(&rita, "red");
        assert_eq!(s, 422, "{}: {v}", server.store);
        let (s, v) = share(&rita, "nosuch");
        assert_eq!(
            (s, v["error"].as_str()),
            (404, Some("team `nosuch` not found"))
        );

        // Shared over the command line, by the pack's digest.
        let out = remote_as(
            &server,
            &rita,
            &["pack", "share", &digest, "--team", "blue"],
        );
        assert!(
            out.status.success(),
            "{}: {}",
            server.store,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "shared with: blue\n");
        let (s, again) = share(&rita, "blue");
        assert_eq!((s, &again["changed"]), (200, &json!(false)), "{again}");

        // Blue's members read it: listed as shared, shown with every revision, its archive.
        for token in [&bo, &val] {
            let (_, list) = server.get("/v1/packs", token);
            let names: Vec<(&str, bool)> = list["packs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p["name"].as_str().unwrap(), p["shared"].as_bool().unwrap()))
                .collect();
            assert_eq!(names, [("shared", true)], "{}", server.store);
            let (s, shown) = server.get(&format!("/v1/packs/{id}"), token);
            assert_eq!(s, 200, "{shown}");
            assert_eq!(shown["revisions"][0]["digest"], json!(digest));
            assert_eq!(shown["shared"], json!(true));
            // Which teams it is shared with is the owning team's business.
            assert_eq!(shown["shared_with"], Value::Null);
            assert_eq!(server.archive(&id, "", token).0, 200);
        }
        let (_, owners_view) = server.get(&format!("/v1/packs/{id}"), &rita);
        assert_eq!(owners_view["shared_with"], json!(["blue"]));
        assert_eq!(owners_view["shared"], json!(false));
        // Nothing else of red's: its other pack, its run of this pack, its audit trail.
        let (s, v) = server.get(&format!("/v1/packs/{private_id}"), &bo);
        assert_eq!(s, 404, "{v}");
        let (s, v) = server.get(&format!("/v1/runs/{red_run}"), &bo);
        assert_eq!(s, 404, "{v}");
        assert_eq!(server.get("/v1/runs", &bo).1["runs"], json!([]));
        // Green, not shared with, still sees nothing.
        let gus_list = server
            .get("/v1/packs", &server.member("green", "gwen", "viewer"))
            .1;
        assert_eq!(gus_list["packs"], json!([]));

        // Read-only: blue may not change it, delete it or pass it on.
        let (s, v) = server.call("DELETE", &format!("/v1/packs/{id}"), &bo, None);
        assert_eq!(s, 403, "{v}");
        let (s, v) = share(&bo, "green");
        assert_eq!(s, 403, "{v}");
        // Launching needs an editor of the receiving team, as any launch does; the run is blue's.
        let (s, v) = launch_of(&server, &val, &digest, "blue");
        assert_eq!(s, 403, "{v}");
        let (s, blue_run) = launch_of(&server, &bo, &digest, "blue");
        assert_eq!(s, 200, "{}: {blue_run}", server.store);
        let blue_run = blue_run["id"].as_str().unwrap().to_string();
        let run = wait_run_as(&server, &bo, &blue_run, ended);
        assert_eq!(run["verdict"], "valid", "{}: {run}", server.store);
        assert_eq!(run["team"], "blue");
        assert_eq!(server.get(&format!("/v1/runs/{blue_run}"), &rita).0, 404);

        // Revoked: not found again, in the same words as a missing pack, and not launchable;
        // blue's own run of it stays blue's.
        let out = remote_as(
            &server,
            &rita,
            &["pack", "unshare", &digest, "--team", "blue"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "shared with: no team\n"
        );
        let (s1, e1) = server.get(&format!("/v1/packs/{id}"), &bo);
        let (s2, e2) = server.get(&format!("/v1/packs/{missing}"), &bo);
        assert_eq!((s1, s2), (404, 404));
        assert_eq!(wording(&e1, &id), wording(&e2, missing));
        assert_eq!(server.archive(&id, "", &bo).0, 404);
        assert_eq!(server.get("/v1/packs", &bo).1["packs"], json!([]));
        let (s, refused) = launch_of(&server, &bo, &digest, "blue");
        let (_, refused_unknown) = launch_of(&server, &bo, &unknown, "blue");
        assert_eq!(s, 422, "{refused}");
        assert_eq!(
            wording(&refused, &digest),
            wording(&refused_unknown, &unknown)
        );
        let out = remote_as(&server, &bo, &["pack", "share", &digest, "--team", "green"]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(server.get(&format!("/v1/runs/{blue_run}"), &bo).0, 200);

        let audit = actions(&server);
        for action in ["pack.share", "pack.unshare"] {
            let want = (
                "rita".to_string(),
                action.to_string(),
                "team:blue".to_string(),
            );
            assert_eq!(
                audit.iter().filter(|a| **a == want).count(),
                1,
                "{}: {audit:?}",
                server.store
            );
        }
    }
}

// RFC-0002:C-PACK-BASE — "reading, launching, sharing, or approving the saved pack MUST NOT
// require any action on the base", and losing access to the base or its deletion does not
// affect a pack saved on it: red saves a draft on green's pack (readable to red because green
// shared it), publishes it, green unshares and deletes its base, and red still shares the saved
// pack with blue, who reads it (the base's files inside) and launches it without ever being
// able to read the base. (Approval of packs is RFC-0003's and not built.)
#[test]
fn pack_base_sharing_a_pack_saved_on_a_base_needs_nothing_of_the_base() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let gus = server.team_with_user("green", "gus", "admin");
        let rita = server.team_with_user("red", "rita", "admin");
        let bo = server.team_with_user("blue", "bo", "editor");
        let base_tar = tar_of(&[file("crucible.toml", PLAYBOOK), file("lib/base.txt", "b1")]);
        let (s, base) = server.push_tar("base", "green", &base_tar, &gus);
        assert_eq!(s, 200, "{base}");
        let (base_id, base_digest) = (
            base["id"].as_str().unwrap().to_string(),
            base["digest"].as_str().unwrap().to_string(),
        );
        // Shared with red, the base is available to red's drafts.
        let (s, v) = server.post_json(
            &format!("/v1/packs/{base_id}/shares"),
            &gus,
            json!({ "team": "red" }),
        );
        assert_eq!(s, 200, "{v}");
        let overlay = tar_of(&[file("notes.md", "red's")]);
        let (s, saved) = server.save_draft("derived", Some(&base_digest), &overlay, &rita);
        assert_eq!(s, 200, "{}: {saved}", server.store);
        let draft = saved["id"].as_str().unwrap();
        let (s, published) =
            server.call("POST", &format!("/v1/drafts/{draft}/publish"), &rita, None);
        assert_eq!(s, 200, "{published}");
        let derived = published["id"].as_str().unwrap().to_string();
        let derived_digest = published["digest"].as_str().unwrap().to_string();

        // Red loses the base: green unshares it and deletes it.
        let (s, v) = server.call(
            "DELETE",
            &format!("/v1/packs/{base_id}/shares/red"),
            &gus,
            None,
        );
        assert_eq!((s, &v["changed"]), (200, &json!(true)), "{v}");
        let (s, v) = server.call("DELETE", &format!("/v1/packs/{base_id}"), &gus, None);
        assert_eq!(s, 200, "{v}");
        let (s, v) = server.save_draft("again", Some(&base_digest), &overlay, &rita);
        assert_eq!(s, 422, "{v}");

        // Red still shares what it saved; blue reads it, the base's files inside, and runs it.
        let (s, v) = server.post_json(
            &format!("/v1/packs/{derived}/shares"),
            &rita,
            json!({ "team": "blue" }),
        );
        assert_eq!(s, 200, "{}: {v}", server.store);
        let (s, shown) = server.get(&format!("/v1/packs/{derived}"), &bo);
        assert_eq!(s, 200, "{shown}");
        assert_eq!(
            shown["revisions"][0]["provenance"]["base_digest"],
            json!(base_digest)
        );
        let (s, gz) = server.archive(&derived, "", &bo);
        assert_eq!(s, 200);
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(&gz[..]));
        let paths: Vec<String> = a
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(paths, ["crucible.toml", "lib/base.txt", "notes.md"]);
        let (s, run) = launch_of(&server, &bo, &derived_digest, "blue");
        assert_eq!(s, 200, "{}: {run}", server.store);
        let run = wait_run_as(&server, &bo, run["id"].as_str().unwrap(), ended);
        assert_eq!(run["verdict"], "valid", "{}: {run}", server.store);
        assert_eq!(run["digest"], json!(derived_digest));
        // Blue never could read the base, and still cannot.
        let (s, v) = launch_of(&server, &bo, &base_digest, "blue");
        assert_eq!(s, 422, "{v}");
        let (s, v) = server.save_draft("on-base", Some(&base_digest), &overlay, &bo);
        assert_eq!(
            (s, v["error"].as_str().map(str::to_string)),
            (
                422,
                Some(format!("the base `{base_digest}` is not available"))
            )
        );
    }
}

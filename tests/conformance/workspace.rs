//! Workspace setup from the manifest (RFC-0001:C-MANIFEST as recovered; issue: the playbook
//! runner): `[repo]` by URL, glob injects, and a failing `setup_cmd` refused before any dispatch.

use crate::support::{command, Pack};
use serde_json::json;

fn git(dir: &std::path::Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "git {args:?}");
}

fn with_header(p: &Pack, header: &str) {
    let manifest = std::fs::read_to_string(p.path().join("crucible.toml")).unwrap();
    std::fs::write(
        p.path().join("crucible.toml"),
        format!("{header}\n{manifest}"),
    )
    .unwrap();
}

// `[repo] url` clones through git's own transport (a file:// URL here: no network), at `ref`.
#[test]
fn a_repo_by_url_is_cloned_at_its_ref() {
    let p = Pack::playbook(&command(
        "look",
        r#"printf '{"v": "%s"}' "$(cat v.txt)""#,
        "",
    ));
    let src = tempfile::tempdir().unwrap();
    git(src.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(src.path().join("v.txt"), "one").unwrap();
    git(src.path(), &["add", "."]);
    git(src.path(), &["commit", "-qm", "one"]);
    git(src.path(), &["branch", "release"]);
    std::fs::write(src.path().join("v.txt"), "two").unwrap();
    git(src.path(), &["commit", "-qam", "two"]);
    with_header(
        &p,
        &format!(
            "[repo]\nurl = \"file://{}\"\nref = \"release\"",
            src.path().display()
        ),
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("look")["output"], json!({"v": "one"}));
}

// A glob inject expands to every matching regular file, in sorted order; one matching nothing
// is an error before any dispatch.
#[test]
fn glob_injects_expand_and_an_empty_glob_is_refused() {
    let p = Pack::playbook(&command(
        "look",
        r#"printf '{"files": "%s"}' "$(ls data | tr '\n' ' ')""#,
        "",
    ));
    p.file("in/a.csv", "a\n")
        .file("in/b.csv", "b\n")
        .file("in/c.txt", "c\n");
    with_header(
        &p,
        "[workspace]\ninject = [{ src = \"in/*.csv\", dst = \"data\" }]",
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(p.row("look")["output"], json!({"files": "a.csv b.csv "}));

    let q = Pack::playbook(&command("never", "touch \"$PACK/ran\"; echo '{}'", ""));
    with_header(&q, "[workspace]\ninject = [\"nothing/*.csv\"]");
    let r = q.run(&[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("nothing/*.csv"), "{}", r.stderr);
    assert!(!q.probe().join("ran").exists());
}

// A failing setup_cmd is a refusal before any dispatch: exit 1, nothing run, no run recorded.
#[test]
fn a_failing_setup_cmd_is_refused_before_dispatch() {
    let p = Pack::playbook(&command("never", "touch \"$PACK/ran\"; echo '{}'", ""));
    with_header(
        &p,
        "[workspace]\nsetup_cmd = \"echo said-on-stdout; echo broken >&2; exit 7\"",
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 1, "{r:?}");
    // Both streams: git, for one, writes much of its reason to stdout (issue 16).
    assert!(
        r.stderr.contains(
            "[workspace].setup_cmd failed (exit status: 7): stdout: said-on-stdout; stderr: broken"
        ),
        "{}",
        r.stderr
    );
    assert!(!p.probe().join("ran").exists());
    assert!(!p.state().join("current").exists());
}

/// A setup command that makes and commits the workspace itself, as packs written for the
/// original engine do: `fresh` removes any workspace first and makes a repository of its own.
fn self_made_workspace(fresh: bool) -> String {
    format!(
        "{}mkdir -p workspace && cd workspace && git init -q && echo made > made.txt && git add made.txt && git -c user.name=t -c user.email=t@t commit -qm made",
        if fresh { "rm -rf workspace && " } else { "" }
    )
}

// RFC-0001 notes §3 (issue 16): cloning `[repo]` is the default setup, and a `setup_cmd`
// replaces it, outside a git repository and inside one. Tasks see what the command made and
// nothing of the clone; check and run both say the clone is not made.
#[test]
fn a_setup_cmd_builds_the_workspace_in_place_of_the_repo_clone() {
    let look = command(
        "look",
        r#"test ! -e pack.txt && printf '{"made": "%s"}' "$(cat made.txt)""#,
        "",
    );
    for (inside_git, fresh) in [(false, false), (true, true)] {
        let p = Pack::playbook(&look);
        p.file("pack.txt", "a pack file, never cloned\n");
        if inside_git {
            git(p.path(), &["init", "-q"]);
            git(p.path(), &["add", "."]);
            git(p.path(), &["commit", "-qm", "pack"]);
        }
        with_header(
            &p,
            &format!(
                "[repo]\npath = \".\"\n[workspace]\nsetup_cmd = '{}'",
                self_made_workspace(fresh)
            ),
        );
        let r = p.run(&[]);
        assert_eq!(r.code, 0, "inside git {inside_git}: {r:?}");
        assert_eq!(p.row("look")["output"], json!({"made": "made"}));
        let not_cloned = "not applied: [repo] is not cloned: [workspace].setup_cmd builds the workspace in its place";
        assert!(r.stderr.contains(not_cloned), "{}", r.stderr);
        let c = p.check().run();
        assert_eq!(c.code, 0, "{c:?}");
        assert!(c.stdout.contains(not_cloned), "{}", c.stdout);
    }
}

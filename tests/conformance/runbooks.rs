//! Issue 15, runbooks: the `crucible runbook` commands on real bundle directories (the contract
//! rules themselves are the corpus, `crates/crucible-pack/tests/runbook_corpus.rs`).

use crate::support::{Cmd, Ran, BIN};
use std::path::Path;
use std::process::Command;

fn crucible(args: &[&str]) -> Ran {
    let mut c = Command::new(BIN);
    c.args(args);
    Cmd(c).run()
}

fn corpus(case: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/corpus/runbooks")
        .join(case)
        .display()
        .to_string()
}

// A valid bundle exits 0 naming what it found; a `*` effect is a warning, not a refusal.
#[test]
fn validate_accepts_and_warns() {
    let r = crucible(&[
        "runbook",
        "validate",
        &corpus("contract/accept_every_field"),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stdout,
        "valid: triage-bug 1.0.0 (procedure procedure/triage.md, 2 skill dependencies, 0 warning(s))\n"
    );
    let r = crucible(&["runbook", "validate", &corpus("effect/accept_star_warns")]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .starts_with("warning[runbook.effect]: `$.allowedEffectClasses[0]`: `*` allows every effect\n --> runbook.json:12:5"),
        "{}",
        r.stderr
    );
}

// A refused bundle exits 1 with every error, rustc-style, and their count.
#[test]
fn validate_refuses_with_every_error() {
    let r = crucible(&[
        "runbook",
        "validate",
        &corpus("required/reject_empty_object"),
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.is_empty());
    assert_eq!(r.stderr.matches("error[runbook.required]").count(), 7);
    assert!(r.stderr.ends_with("\n8 error(s)\n"), "{}", r.stderr);
}

// Contract text reaches the terminal escaped: a control character in a value is shown, not sent.
#[test]
fn validate_escapes_contract_text() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("runbook.json"),
        r#"{"schemaVersion": 1, "name": "bad\u001b[2Jname", "version": "1", "description": "d",
            "invocation": "explicit", "requiredCapabilities": [], "allowedEffectClasses": []}"#,
    )
    .unwrap();
    std::fs::write(d.path().join("RUNBOOK.md"), "# Steps\n").unwrap();
    let r = crucible(&["runbook", "validate", &d.path().display().to_string()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("error[runbook.name]"), "{}", r.stderr);
    assert!(!r.stderr.contains('\u{1b}'), "{:?}", r.stderr);
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn write(root: &Path, files: &[(&str, &str)]) {
    for (rel, text) in files {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

fn digest(dir: &Path) -> String {
    let r = crucible(&["pack", "digest", &s(dir)]);
    assert_eq!(r.code, 0, "{r:?}");
    r.stdout.trim().to_string()
}

// `seal` prints the release: its identity is the `tree1:` digest of the whole bundle, pinned
// here for a corpus bundle so that any machine (any checkout order, umask or clock) agrees.
#[test]
fn seal_prints_a_content_addressed_release() {
    let dir = corpus("contract/accept_every_field");
    let r = crucible(&["runbook", "seal", &dir]);
    assert_eq!(r.code, 0, "{r:?}");
    let release: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(release["digest"], digest(Path::new(&dir)));
    assert_eq!(
        release["digest"],
        "tree1:4fc602bdcdee82b5ee8415d121bb551d489e1f560a849f7f1f2d4f970573074a"
    );
    assert_eq!(release["name"], "triage-bug");
    assert_eq!(release["procedure"], "procedure/triage.md");
    assert_eq!(
        release["skillDependencies"][0]["path"], "skills/research",
        "{release}"
    );
    assert_eq!(
        release["files"].as_array().unwrap().len(),
        4,
        "the contract, the procedure and two SKILL.md: {release}"
    );
    let refused = crucible(&["runbook", "seal", &corpus("name/reject_uppercase")]);
    assert_eq!(refused.code, 1);
    assert!(refused.stdout.is_empty());
    assert!(refused.stderr.contains("error[runbook.name]"));
}

// `seal --store` writes the release read-only under STORE/<name>/<hex>/.
#[test]
fn seal_stores_the_release() {
    let store = tempfile::tempdir().unwrap();
    let dir = corpus("skill-dependency/accept_two");
    let r = crucible(&["runbook", "seal", &dir, "--store", &s(store.path())]);
    assert_eq!(r.code, 0, "{r:?}");
    let release: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let hex = release["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("tree1:");
    let at = store.path().join("triage-bug").join(hex);
    assert_eq!(r.stderr, format!("stored: {}\n", at.display()));
    assert_eq!(digest(&at), release["digest"]);
}

// A skill becomes a bundle with the least contract, and exporting it again gives the skill
// back exactly: the same files, executable bits kept, no runbook.json.
#[test]
fn skill_to_runbook_and_back_is_exact() {
    let d = tempfile::tempdir().unwrap();
    let skill = d.path().join("Web Research");
    write(
        &skill,
        &[
            (
                "SKILL.md",
                "---\nname: web-research\ndescription: Look things up.\n---\n# Steps\n",
            ),
            ("scripts/fetch.sh", "#!/bin/sh\necho hi\n"),
            ("reference/notes.md", "notes\n"),
        ],
    );
    use std::os::unix::fs::PermissionsExt;
    let script = skill.join("scripts/fetch.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bundle = d.path().join("bundle");
    let r = crucible(&["runbook", "from-skill", &s(&skill), &s(&bundle)]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("review runbook.json before sealing"),
        "{}",
        r.stdout
    );
    let contract: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("runbook.json")).unwrap())
            .unwrap();
    assert_eq!(
        contract,
        serde_json::json!({
            "schemaVersion": 1, "name": "web-research", "version": "0.1.0",
            "description": "Look things up.", "invocation": "explicit",
            "requiredCapabilities": [], "allowedEffectClasses": ["filesystem.read"],
            "procedure": "SKILL.md"
        })
    );
    assert_eq!(crucible(&["runbook", "validate", &s(&bundle)]).code, 0);
    let back = d.path().join("back");
    let r = crucible(&["runbook", "to-skill", &s(&bundle), &s(&back)]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(digest(&back), digest(&skill));
    assert!(!back.join("runbook.json").exists());
    let mode = std::fs::metadata(back.join("scripts/fetch.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111);
    // Without a front-matter name, the directory's name is made into one.
    let bare = d.path().join("Bare Skill!");
    write(&bare, &[("SKILL.md", "# Steps\n")]);
    let out = d.path().join("bare-bundle");
    assert_eq!(
        crucible(&["runbook", "from-skill", &s(&bare), &s(&out)]).code,
        0
    );
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("runbook.json")).unwrap()).unwrap();
    assert_eq!(c["name"], "bare-skill");
}

// A runbook exported as a skill and converted back keeps its procedure (now SKILL.md, given
// front matter naming it), its support files and its skill dependencies' files.
#[test]
fn runbook_to_skill_and_back_keeps_the_procedure() {
    let d = tempfile::tempdir().unwrap();
    let skill = d.path().join("skill");
    let r = crucible(&[
        "runbook",
        "to-skill",
        &corpus("contract/accept_every_field"),
        &s(&skill),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let text = std::fs::read_to_string(skill.join("SKILL.md")).unwrap();
    let procedure = std::fs::read_to_string(
        Path::new(&corpus("contract/accept_every_field")).join("procedure/triage.md"),
    )
    .unwrap();
    assert_eq!(
        text,
        format!(
            "---\nname: triage-bug\ndescription: \"Triage a bug report into a plan.\"\n---\n{procedure}"
        )
    );
    assert!(!skill.join("runbook.json").exists());
    assert!(!skill.join("procedure/triage.md").exists());
    assert!(skill.join("skills/research/SKILL.md").is_file());
    let bundle = d.path().join("bundle");
    let r = crucible(&["runbook", "from-skill", &s(&skill), &s(&bundle)]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("triage-bug 0.1.0 (procedure SKILL.md"),
        "{}",
        r.stdout
    );
    assert_eq!(
        std::fs::read_to_string(bundle.join("SKILL.md")).unwrap(),
        text
    );
}

// Conversions never overwrite: a non-empty destination, a skill that is already a bundle, and
// an export whose procedure would replace the bundle's own SKILL.md are refused.
#[test]
fn conversions_refuse_to_overwrite() {
    let d = tempfile::tempdir().unwrap();
    let skill = d.path().join("skill");
    write(&skill, &[("SKILL.md", "# Steps\n")]);
    let taken = d.path().join("taken");
    write(&taken, &[("keep.txt", "mine\n")]);
    let r = crucible(&["runbook", "from-skill", &s(&skill), &s(&taken)]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("the destination is not empty"),
        "{}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_to_string(taken.join("keep.txt")).unwrap(),
        "mine\n"
    );
    let r = crucible(&[
        "runbook",
        "from-skill",
        &corpus("contract/accept_minimal"),
        &s(&d.path().join("x")),
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("already holds runbook.json"),
        "{}",
        r.stderr
    );
    let r = crucible(&[
        "runbook",
        "to-skill",
        &corpus("procedure/accept_runbook_md_before_skill_md"),
        &s(&d.path().join("y")),
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("would be overwritten"), "{}", r.stderr);
    assert!(!d.path().join("y").exists());
}

/// A bundle named `name` with `invocation` and `applicability` (JSON text).
fn bundle(root: &Path, name: &str, invocation: &str, applicability: &str) {
    write(
        root,
        &[
            (
                "runbook.json",
                &format!(
                    r#"{{"schemaVersion": 1, "name": "{name}", "version": "1", "description": "d",
                        "invocation": "{invocation}", "requiredCapabilities": [],
                        "allowedEffectClasses": ["filesystem.read"],
                        "applicability": {applicability}}}"#
                ),
            ),
            ("RUNBOOK.md", "# Steps\n"),
        ],
    );
}

// `select` explains every candidate and picks the one applicable automatic release left after
// personal-over-team precedence; with none or several it selects nothing and exits 1.
#[test]
fn select_explains_each_candidate() {
    let d = tempfile::tempdir().unwrap();
    let (team, personal, work) = (
        d.path().join("team"),
        d.path().join("personal"),
        d.path().join("src/my-project"),
    );
    write(&work, &[("package.json", "{}")]);
    let node = r#"{"cwdGlobs": ["**/my-project"], "requiredFiles": ["package.json"],
                   "forbiddenFiles": [".production-only"]}"#;
    bundle(&team.join("build"), "build", "auto", node);
    bundle(&team.join("deploy"), "deploy", "explicit", "{}");
    bundle(
        &team.join("python"),
        "python",
        "auto",
        r#"{"requiredFiles": ["pyproject.toml"]}"#,
    );
    write(&team.join("broken"), &[("runbook.json", "{}")]);
    bundle(&personal.join("build"), "build", "auto", node);
    let run = |extra: &[&str]| {
        let mut args = vec!["runbook", "select", "--cwd"];
        let w = s(&work);
        args.push(&w);
        args.extend_from_slice(extra);
        crucible(&args)
    };
    let t = s(&team);
    let p = s(&personal);
    let r = run(&["--personal", &p, &t]);
    assert_eq!(r.code, 0, "{r:?}");
    let line = |name: &str, dir: &Path| {
        r.stdout
            .lines()
            .find(|l| l.contains(&format!(" {name}  {}:", dir.display())))
            .unwrap_or_else(|| panic!("no line for {name} in\n{}", r.stdout))
            .to_string()
    };
    let pb = personal.join("build");
    assert!(
        line("build", &pb).starts_with("selected      personal  "),
        "{}",
        r.stdout
    );
    assert!(line("build", &pb).ends_with(
        ": applicable (cwd matches `**/my-project`; package.json present; .production-only absent)"
    ));
    assert!(line("build", &team.join("build")).ends_with(&format!(
        "shadowed by the personal release of the same name at {}",
        pb.display()
    )));
    assert!(
        line("deploy", &team.join("deploy")).ends_with("explicit invocation: runs only when named")
    );
    assert!(line("python", &team.join("python"))
        .ends_with("not applicable: required file pyproject.toml is absent"));
    assert!(line("-", &team.join("broken")).contains("invalid: 8 error(s)"));
    assert!(r
        .stdout
        .ends_with(&format!("selected: build (personal) {}\n", pb.display())));
    // Without the personal release, the team's applies alone.
    let r = run(&[&t]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("selected: build (team)"), "{}", r.stdout);
    // A forbidden file present (the attribute is observed) makes it not apply: nothing left.
    write(&work, &[(".production-only", "")]);
    let r = run(&[&t]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r
        .stdout
        .contains("not applicable: forbidden file .production-only is present"));
    assert!(r
        .stdout
        .ends_with("selected: none (no valid automatic runbook applies)\n"));
    // Two team releases that both apply: neither is chosen.
    std::fs::remove_file(work.join(".production-only")).unwrap();
    bundle(&team.join("other"), "other", "auto", "{}");
    let r = run(&[&t]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.stdout
            .matches("applicable, but 2 applicable automatic releases remain")
            .count(),
        2
    );
    assert!(r
        .stdout
        .ends_with("selected: none (more than one applies: name the runbook explicitly)\n"));
    // A linked required file is not a trusted attribute: it never authorizes.
    std::fs::remove_dir_all(team.join("other")).unwrap();
    std::fs::remove_file(work.join("package.json")).unwrap();
    std::fs::write(d.path().join("elsewhere.json"), "{}").unwrap();
    std::os::unix::fs::symlink(d.path().join("elsewhere.json"), work.join("package.json")).unwrap();
    let r = run(&[&t]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout
            .contains("required file package.json could not be observed"),
        "{}",
        r.stdout
    );
}

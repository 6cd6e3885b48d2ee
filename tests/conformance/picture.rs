//! `plan show --format svg` through the real binary (issue 19, "A picture of the graph"): each
//! example drawn with one node per task, its `when` answers and revise loops labelled and its
//! epilogue below the main graph; and a run's picture colouring each task by its row.

use crate::examples::{copy_dir, repo_root, run_in};
use crate::support::BIN;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn crucible(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The graph of the pack in `dir` as `plan show --format svg` draws it.
fn drawn(dir: &Path) -> String {
    crucible(
        dir,
        &[
            "plan",
            "show",
            "--manifest",
            "crucible.toml",
            "--format",
            "svg",
        ],
    )
}

/// Each task node's attributes, by task name, and the lowest edge of each node's box.
struct Picture {
    nodes: BTreeMap<String, BTreeMap<String, String>>,
    bottoms: BTreeMap<String, (f64, f64)>,
    text: String,
}

fn picture(svg: &str) -> Picture {
    let doc = roxmltree::Document::parse(svg).expect("a well-formed SVG document");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let mut nodes = BTreeMap::new();
    let mut bottoms = BTreeMap::new();
    for g in doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("task"))
    {
        let name = g
            .attribute("data-task")
            .expect("a task node names its task");
        let attrs = g
            .attributes()
            .map(|a| (a.name().to_string(), a.value().to_string()))
            .collect();
        assert!(
            nodes.insert(name.to_string(), attrs).is_none(),
            "{name} drawn twice"
        );
        let rect = g
            .children()
            .find(|c| c.has_tag_name("rect"))
            .expect("a box");
        let y: f64 = rect.attribute("y").unwrap().parse().unwrap();
        let h: f64 = rect.attribute("height").unwrap().parse().unwrap();
        bottoms.insert(name.to_string(), (y, y + h));
    }
    let text = doc
        .descendants()
        .filter(|n| n.is_text())
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join("\n");
    Picture {
        nodes,
        bottoms,
        text,
    }
}

#[test]
fn every_example_is_drawn_with_one_node_per_task() {
    for example in ["playbook", "triage", "repo-audit", "agents"] {
        let dir = repo_root().join("examples").join(example);
        let plan: Value = serde_json::from_str(&crucible(
            &dir,
            &[
                "plan",
                "compile",
                "--file",
                "workflow.star",
                "--format",
                "json",
            ],
        ))
        .unwrap();
        let pic = picture(&drawn(&dir));
        let tasks = plan["tasks"].as_array().unwrap();
        let names: Vec<&str> = tasks.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(
            pic.nodes.keys().map(String::as_str).collect::<Vec<_>>(),
            {
                let mut n = names.clone();
                n.sort();
                n
            },
            "{example}"
        );
        let mut main_bottom = f64::MIN;
        let mut epilogue_top = f64::MAX;
        for t in tasks {
            let name = t["name"].as_str().unwrap();
            let node = &pic.nodes[name];
            let stage = t["stage"].as_str().unwrap_or("iteration");
            assert_eq!(node["data-stage"], stage, "{example}: {name}");
            let (top, bottom) = pic.bottoms[name];
            if stage == "epilogue" {
                epilogue_top = epilogue_top.min(top);
            } else {
                main_bottom = main_bottom.max(bottom);
            }
            if let Some(w) = t.get("when").filter(|w| !w.is_null()) {
                let answers: Vec<&str> = w["answers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap())
                    .collect();
                let label = format!(
                    "{}.{} = {}",
                    w["route"].as_str().unwrap(),
                    w["question"].as_str().unwrap(),
                    answers.join("|")
                );
                assert!(
                    pic.text.contains(&label),
                    "{example}: no `{label}` in\n{}",
                    pic.text
                );
            }
            if let Some(n) = t
                .get("max_rounds")
                .and_then(Value::as_u64)
                .filter(|n| *n > 0)
            {
                assert!(
                    pic.text.contains(&format!("revise ≤{n}")),
                    "{example}: {name}"
                );
            }
        }
        assert!(
            epilogue_top > main_bottom,
            "{example}: the epilogue is drawn below the main graph"
        );
    }
}

// The README's picture is what the binary draws today.
#[test]
fn the_readme_picture_is_current() {
    let dir = repo_root().join("examples/triage");
    let drawn = drawn(&dir);
    let kept = std::fs::read_to_string(repo_root().join("docs/triage.svg")).unwrap();
    assert!(
        drawn == kept,
        "docs/triage.svg is stale: redraw it with `crucible plan show --manifest examples/triage/crucible.toml --format svg`"
    );
}

#[test]
fn a_run_is_drawn_with_each_task_coloured_by_its_status() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&repo_root().join("examples/triage"), tmp.path());
    let (code, out) = run_in(tmp.path(), &["--max-cost", "1", "--max-time", "2m"]);
    assert_eq!(code, 0, "{out}");
    let pic = picture(&crucible(
        tmp.path(),
        &[
            "plan",
            "show",
            "latest",
            "--manifest",
            "crucible.toml",
            "--format",
            "svg",
        ],
    ));
    let status = |t: &str| pic.nodes[t].get("data-status").map(String::as_str);
    // Own rows, the last round of the revise loop (draft has round rows only), not taken.
    assert_eq!(status("discover"), Some("pass"));
    assert_eq!(status("inspect"), Some("pass"));
    assert_eq!(status("draft"), Some("pass"));
    assert_eq!(status("review"), Some("pass"));
    assert_eq!(status("log"), Some("not_taken"));
    assert!(
        pic.text.contains("log\ncommand · not_taken"),
        "{}",
        pic.text
    );
    // An unknown run is refused with its name.
    let bad = Command::new(BIN)
        .args([
            "plan",
            "show",
            "no-such-run",
            "--manifest",
            "crucible.toml",
            "--format",
            "svg",
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-run"));
}

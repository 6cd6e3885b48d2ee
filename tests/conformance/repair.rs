//! Repair turns (RFC-0002:C-TASK-FILES, the DSL's `repair`): a passing agent turn whose result
//! misses a declared field or file, or breaks its type or schema, is resumed with the masked
//! notes and checked again, within the same attempt (its deadline and its spend).

use crate::support::Pack;
use serde_json::json;

/// The stand-in agent: records each turn's prompt, then answers per task and turn
/// (`CRUCIBLE_REPAIR` is `<round>/<of>` on a repair turn, unset on the first).
const AGENT: &str = r#"
turn=${CRUCIBLE_REPAIR:-0}
mkdir -p "$PACK/out"
printf '%s' "$CRUCIBLE_PROMPT" > "$PACK/out/$CRUCIBLE_TASK.turn-${turn%%/*}.prompt"
case "$CRUCIBLE_TASK:$turn" in
  fixer:0)   echo '{"n": "SECRET-VALUE"}' > c.json
             echo '{"cost_usd": 0.5}' > PLAN_TASK_RESULT.json ;;
  fixer:1/2) echo '{"n": 3}' > c.json
             echo '{"verdict": "ok", "cost_usd": 0.25}' > PLAN_TASK_RESULT.json ;;
  stubborn:*) echo '{"cost_usd": 0.125}' > PLAN_TASK_RESULT.json ;;
  fine:*)    echo '{}' > f.json; echo '{"verdict": "ok"}' > PLAN_TASK_RESULT.json ;;
  slow:0)    echo '{}' > PLAN_TASK_RESULT.json ;;
  slow:*)    sleep 30 ;;
esac
"#;

fn pack(workflow: &str) -> Pack {
    let p = Pack::with_manifest(
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n\
         [agent]\nbackend = \"command\"\nagent_cmd = 'sh \"$PACK/agent.sh\"'\n",
    );
    p.file("agent.sh", AGENT);
    p.file(
        "schemas/count.json",
        r#"{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": {"n": {"type": "integer"}}, "required": ["n"]}"#,
    );
    p.file("workflow.star", workflow);
    p
}

fn prompt(p: &Pack, task: &str, turn: u32) -> String {
    std::fs::read_to_string(p.probe().join(format!("out/{task}.turn-{turn}.prompt"))).unwrap()
}

// RFC-0002:C-TASK-FILES: an absent or mismatched file (and a missing declared field) is shown to
// an agent task that declares repair as a masked note; the repaired result passes, in one
// attempt whose spend is every turn's.
#[test]
fn a_repair_turn_fixes_a_missing_field_and_a_mismatched_file() {
    let p = pack(
        r#"
fixer = agent(name = "fixer", prompt = "Count the weeds.", emits = {"verdict": "string"},
              emits_files = {"c.json": schema_file("schemas/count.json")}, repair = 2)
fine = agent(name = "fine", prompt = "Nothing to repair.", emits = {"verdict": "string"},
             emits_files = ["f.json"], repair = 1)
use = command(name = "use", run = "cat inputs/fixer/c.json > $PACK/seen; echo '{}'",
              depends_on = [fixer])
workflow([fixer, fine, use])
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("fixer");
    assert_eq!(row["status"], "pass", "{row}");
    assert_eq!(row["attempts"], 1, "a repair is not a retry");
    assert_eq!(row["cost_usd"], 0.75);
    assert_eq!(row["files"], true);
    let repairs = row["repairs"].as_array().expect("repairs on the row");
    assert_eq!(repairs.len(), 1, "{row}");
    let rep = &repairs[0];
    assert_eq!(rep["label"], "fixer repair 1/2");
    assert_eq!(
        (rep["round"].clone(), rep["of"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(rep["cost_usd"], 0.25);
    let notes: Vec<&str> = rep["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(notes[0], "declared output field `verdict` is missing");
    assert!(
        notes[1].starts_with("declared file `c.json` does not match its schema: at /n"),
        "{notes:?}"
    );
    let shown = prompt(&p, "fixer", 1);
    for part in [
        "Repair 1 of 2",
        "`verdict` is missing",
        "`c.json`",
        "PLAN_TASK_RESULT.json",
    ] {
        assert!(
            shown.contains(part),
            "repair prompt lacks {part:?}:\n{shown}"
        );
    }
    // Masked: neither the notes nor the prompt carry the value the file held.
    assert!(!row.to_string().contains("SECRET-VALUE"), "{row}");
    assert!(!shown.contains("SECRET-VALUE"), "{shown}");
    // The repaired file is what was captured and staged.
    assert_eq!(
        std::fs::read_to_string(p.probe().join("seen"))
            .unwrap()
            .trim(),
        r#"{"n": 3}"#
    );
    // A turn that meets its contract is not repaired, and its row has no `repairs`.
    assert_eq!(p.row("fine")["status"], "pass");
    assert!(p.row("fine").get("repairs").is_none());
    assert!(!p.probe().join("out/fine.turn-1.prompt").exists());
}

// RFC-0002:C-TASK-FILES: repairs are bounded by the declared number; a result still broken after
// the last one is the measured failure an unrepaired one is, every turn's spend counted.
#[test]
fn repairs_exhausted_fail_the_task_naming_what_is_missing() {
    let p = pack(
        r#"
stubborn = agent(name = "stubborn", prompt = "Write s.json.", emits_files = ["s.json"],
                 repair = 2, required = False)
workflow([stubborn])
"#,
    );
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = p.row("stubborn");
    assert_eq!(row["status"], "fail");
    assert_eq!(row["attempts"], 1);
    assert_eq!(row["cost_usd"], 0.375);
    let labels: Vec<&str> = row["repairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["stubborn repair 1/2", "stubborn repair 2/2"]);
    let note = row["note"].as_str().unwrap();
    assert!(note.contains("declared file `s.json`"), "{note}");
    assert!(!p.probe().join("out/stubborn.turn-3.prompt").exists());
}

// DSL `repair`: repairs share the attempt's timeout: a repair turn that outlives it is killed
// at the attempt's deadline, not given a fresh one.
#[test]
fn repairs_share_the_attempts_deadline() {
    let p = pack(
        r#"
slow = agent(name = "slow", prompt = "Answer.", emits = {"verdict": "string"}, repair = 3,
             timeout = "2s", required = False)
workflow([slow])
"#,
    );
    let began = std::time::Instant::now();
    let r = p.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(began.elapsed().as_secs() < 10, "{:?}", began.elapsed());
    let row = p.row("slow");
    assert_eq!(row["status"], "fail");
    assert!(
        row["note"].as_str().unwrap().starts_with("timed out"),
        "{row}"
    );
    assert_eq!(row["repairs"].as_array().unwrap().len(), 1, "{row}");
}

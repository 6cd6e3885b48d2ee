//! Mapping a task over a dependency's list (`over`, `max_fanout`, `keyed`) and folding its
//! instances back into one node (RFC-0002:C-SETTLED-JOIN mapping parts, C-PLAYBOOK-BUDGET lanes;
//! RFC-0001-NOTES §5 "Mapped routes").
//!
//! Readings chosen (docs/decisions.md):
//! - A repeated item fails the node naming it. An item is an instance's identity on rows, in
//!   file-set directories and on resume, so two instances with one key cannot both be recorded;
//!   dropping the repeat silently would hide data the producer emitted.
//! - A `keyed` field's entry missing for an item gives that instance `null` in place of the
//!   field: a producer may know nothing about some items, and the instance decides what that
//!   means. A keyed field that is not an object on a passing producer fails the node.
//! - The node's output, which a consumer joining `all` or `passed` receives under the node's
//!   name, is an object keyed by item holding each passing instance's output. Failed, skipped,
//!   blocked and not-taken instances are absent from it; their status is in `per_instance`.

use super::{json_type, Entry, GraphError, GraphErrorKind, Shown};
use crucible_plan::vocab::{ceilings, inputs::ITEM};
use crucible_plan::{FieldRef, Join, Status, Task};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashSet};

/// An instance's row and set name: the node's name with the key, raw, in brackets.
pub fn instance_name(node: &str, key: &str) -> String {
    format!("{node}[{key}]")
}

/// The instance cap in force: the task's `max_fanout`, never above the engine ceiling.
pub fn cap(task: &Task) -> u32 {
    match task.max_fanout {
        0 => ceilings::MAX_FANOUT,
        n => n.min(ceilings::MAX_FANOUT),
    }
}

/// One lane of a mapped task.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// The item, raw: it may hold separators or dots (RFC-0002:C-TASK-FILES escapes it only in
    /// directory names).
    pub key: String,
    /// `node[key]`.
    pub name: String,
    keyed: Vec<FieldRef>,
}

impl Instance {
    /// Writes this instance's reserved `item` input and replaces each `keyed` field in the
    /// dependency inputs with this item's entry. `inputs` is the node's inputs object as its
    /// join builds it: outputs directly under `all`/`passed`, entries under `settled`.
    pub fn apply(&self, inputs: &mut Map<String, Value>, join: Join) {
        for field in &self.keyed {
            let Some(dep) = inputs.get_mut(&field.task) else {
                continue; // no entry for this producer under this join
            };
            let output = match join {
                Join::Settled => dep.get_mut("output"),
                Join::All | Join::Passed => Some(dep),
            };
            let Some(Value::Object(out)) = output else {
                continue;
            };
            if let Some(whole) = out.get_mut(&field.field) {
                let own = whole.get(&self.key).cloned().unwrap_or(Value::Null);
                *whole = own;
            }
        }
        inputs.insert(ITEM.to_string(), Value::from(self.key.clone()));
    }
}

/// Expands `task` over its `over` source. `deps` holds the settled entries of the task's
/// dependencies by name (the source and every `keyed` producer among them).
///
/// Fails the node, naming what is wrong, when the source did not pass, lacks the field, is not
/// a list of strings, holds more items than the cap, or repeats an item; or when a passing
/// `keyed` producer's field is not an object.
pub fn expand(task: &Task, deps: &BTreeMap<String, Entry>) -> Result<Vec<Instance>, GraphError> {
    let fail = |kind| GraphError::new(&task.name, kind);
    let over = task
        .over
        .as_ref()
        .expect("expand is called only for a mapped task");
    let items = source_list(over, deps.get(&over.task)).map_err(fail)?;
    let cap = cap(task);
    if items.len() > cap as usize {
        return Err(fail(GraphErrorKind::OverCap {
            origin: over.to_string(),
            items: items.len(),
            cap,
        }));
    }
    let mut seen = HashSet::with_capacity(items.len());
    for item in &items {
        if !seen.insert(item.as_str()) {
            return Err(fail(GraphErrorKind::DuplicateItem {
                origin: over.to_string(),
                item: Shown(item).to_string(),
            }));
        }
    }
    for field in &task.keyed {
        let passing = deps
            .get(&field.task)
            .and_then(super::passing_object)
            .and_then(|out| out.get(&field.field));
        if let Some(v) = passing {
            if !v.is_object() {
                return Err(fail(GraphErrorKind::KeyedNotObject {
                    field: field.to_string(),
                    found: json_type(v),
                }));
            }
        }
    }
    Ok(items
        .into_iter()
        .map(|key| Instance {
            name: instance_name(&task.name, &key),
            key,
            keyed: task.keyed.clone(),
        })
        .collect())
}

/// Reads `over` out of its producer's entry: a list of strings, and only from a passing
/// producer. Also used for a pick's or a dynamic choice's list.
pub(crate) fn source_list(
    over: &FieldRef,
    entry: Option<&Entry>,
) -> Result<Vec<String>, GraphErrorKind> {
    let absent = |status| GraphErrorKind::AbsentSource {
        origin: over.to_string(),
        task: over.task.clone(),
        status,
    };
    let entry = entry.ok_or_else(|| absent(Status::Blocked))?;
    if !entry.status.is_pass() {
        return Err(absent(entry.status));
    }
    let value = entry
        .output
        .as_ref()
        .and_then(|o| o.get(&over.field))
        .ok_or_else(|| GraphErrorKind::MissingField {
            origin: over.to_string(),
            task: over.task.clone(),
        })?;
    let Value::Array(list) = value else {
        return Err(GraphErrorKind::NotAList {
            origin: over.to_string(),
            found: json_type(value).to_string(),
        });
    };
    list.iter()
        .enumerate()
        .map(|(index, v)| match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(GraphErrorKind::NotAString {
                origin: over.to_string(),
                index,
                found: json_type(other),
            }),
        })
        .collect()
}

/// A node's status from its instances' (RFC-0001-NOTES §5): pass when every instance passed or
/// was not taken, not_taken when all were not taken, fail otherwise; no instances pass.
pub fn node_status<'a>(instances: impl IntoIterator<Item = &'a Status>) -> Status {
    let mut any = false;
    let mut all_not_taken = true;
    for s in instances {
        any = true;
        match s {
            Status::Pass => all_not_taken = false,
            Status::NotTaken => {}
            _ => return Status::Fail,
        }
    }
    if any && all_not_taken {
        Status::NotTaken
    } else {
        Status::Pass
    }
}

/// How many instances a failing fold's note names before summarising the rest.
const NOTE_NAMES: usize = 5;

/// Folds a node's settled instances, in item order, into its entry: the node status, a note
/// naming the instances that did not pass, the output object of passing instances by item, the
/// files flag (any instance's set staged) and `per_instance` (RFC-0002:C-SETTLED-JOIN).
pub fn fold(instances: Vec<(String, Entry)>) -> Entry {
    let status = node_status(instances.iter().map(|(_, e)| &e.status));
    let failed: Vec<String> = instances
        .iter()
        .filter(|(_, e)| !matches!(e.status, Status::Pass | Status::NotTaken))
        .map(|(k, e)| format!("{} ({})", Shown(k), e.status))
        .collect();
    let note = (!failed.is_empty()).then(|| {
        let mut note = format!(
            "{} of {} instances did not pass: {}",
            failed.len(),
            instances.len(),
            failed[..failed.len().min(NOTE_NAMES)].join(", ")
        );
        if failed.len() > NOTE_NAMES {
            note.push_str(&format!(" and {} more", failed.len() - NOTE_NAMES));
        }
        note
    });
    let mut output = Map::new();
    for (key, e) in &instances {
        if e.status.is_pass() {
            output.insert(key.clone(), e.output.clone().unwrap_or(Value::Null));
        }
    }
    let files = instances.iter().any(|(_, e)| e.files);
    Entry {
        status,
        note,
        output: Some(Value::Object(output)),
        files,
        per_instance: Some(instances.into_iter().collect()),
    }
}

/// The entry of a mapped node that never expanded (its source was absent, it was blocked or not
/// taken): no output and an empty `per_instance`, so a consumer tells it from an empty fan-out
/// by its status.
pub fn unexpanded(status: Status, note: Option<String>) -> Entry {
    Entry {
        status,
        note,
        output: None,
        files: false,
        per_instance: Some(BTreeMap::new()),
    }
}

/// The run's spend as the cost ceiling sees it (RFC-0002:C-PLAYBOOK-BUDGET): settled spend plus
/// what attempts in flight have reported so far.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spend {
    pub settled: f64,
    pub in_flight: f64,
    pub max_cost: f64,
}

impl Spend {
    pub fn reached(&self) -> bool {
        self.settled + self.in_flight >= self.max_cost
    }
}

/// What to do with the next lane of a fan-out.
#[derive(Clone, Debug, PartialEq)]
pub enum Lane {
    /// Dispatch this instance now.
    Start(Instance),
    /// Settle this instance blocked on the cost ceiling without dispatch.
    Blocked(Instance),
    /// The width is full: wait for a lane to settle.
    Wait,
    /// Every lane has started or been blocked, and none is in flight.
    Done,
}

/// Admits a mapped node's lanes one at a time under a bounded width, each a dispatch of its
/// own for the cost ceiling (RFC-0002:C-PLAYBOOK-BUDGET). Once the ceiling refuses a lane,
/// every later lane that can spend is refused, even if an in-flight figure later settles lower.
#[derive(Clone, Debug)]
pub struct Lanes {
    pending: std::collections::VecDeque<Instance>,
    width: usize,
    in_flight: usize,
    can_spend: bool,
}

impl Lanes {
    /// `width` is at least 1; `can_spend` is the mapped task's [`Task::can_spend`].
    pub fn new(instances: Vec<Instance>, width: usize, can_spend: bool) -> Lanes {
        Lanes {
            pending: instances.into(),
            width: width.max(1),
            in_flight: 0,
            can_spend,
        }
    }

    /// The next lane decision. `refused` is the run's sticky "the cost ceiling refused a
    /// dispatch" flag: set here when this call refuses, and honoured when already set.
    pub fn next(&mut self, spend: Spend, refused: &mut bool) -> Lane {
        if self.pending.is_empty() {
            return if self.in_flight == 0 {
                Lane::Done
            } else {
                Lane::Wait
            };
        }
        if self.can_spend && (*refused || spend.reached()) {
            *refused = true;
            let inst = self.pending.pop_front().expect("checked non-empty");
            return Lane::Blocked(inst);
        }
        if self.in_flight >= self.width {
            return Lane::Wait;
        }
        self.in_flight += 1;
        Lane::Start(self.pending.pop_front().expect("checked non-empty"))
    }

    /// One started lane settled.
    pub fn settled(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Lanes neither started nor refused yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Takes every lane not yet started: dispatch stopped for good (a ceiling, a required
    /// failure) and the caller settles them without dispatch.
    pub fn drain(&mut self) -> Vec<Instance> {
        self.pending.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::TaskKind;
    use serde_json::json;

    fn mapped(cap: u32, keyed: &[&str]) -> Task {
        let mut t = Task::new("fix", TaskKind::Command);
        t.depends_on = vec!["find".into(), "meta".into()];
        t.over = FieldRef::parse("find.items");
        t.max_fanout = cap;
        t.keyed = keyed.iter().map(|k| FieldRef::parse(k).unwrap()).collect();
        t
    }

    fn deps(find: Entry) -> BTreeMap<String, Entry> {
        BTreeMap::from([("find".to_string(), find)])
    }

    fn passing(output: Value) -> Entry {
        Entry::new(Status::Pass, None, Some(output), false)
    }

    fn items(n: usize) -> Value {
        Value::from((0..n).map(|i| format!("i{i}")).collect::<Vec<_>>())
    }

    // RFC-0002:C-SETTLED-JOIN (mapping) — 0, 1 and 200 items under the engine ceiling.
    #[test]
    fn expands_zero_one_and_two_hundred() {
        for n in [0, 1, 200] {
            let got = expand(&mapped(0, &[]), &deps(passing(json!({"items": items(n)})))).unwrap();
            assert_eq!(got.len(), n);
            if n > 0 {
                assert_eq!(got[0].name, "fix[i0]");
                assert_eq!(got[n - 1].key, format!("i{}", n - 1));
            }
        }
    }

    // DSL max_fanout — more items than the cap fails the node naming both numbers.
    #[test]
    fn over_the_cap_names_both_numbers() {
        let table = [(3, 4, 3), (0, 257, 256), (300, 257, 256), (256, 256, 0)];
        for (declared, n, cap) in table {
            let r = expand(
                &mapped(declared, &[]),
                &deps(passing(json!({"items": items(n)}))),
            );
            if cap == 0 {
                assert_eq!(r.unwrap().len(), n);
                continue;
            }
            let e = r.unwrap_err();
            assert_eq!(e.task, "fix");
            assert_eq!(
                e.note(),
                format!("source `find.items` holds {n} items, more than max_fanout {cap}")
            );
        }
    }

    // RFC-0002:C-SETTLED-JOIN — a retained failure output is never a source list.
    #[test]
    fn a_failed_source_is_absent_even_with_a_list() {
        let failed = Entry::new(Status::Fail, None, Some(json!({"items": ["a"]})), false);
        let e = expand(&mapped(0, &[]), &deps(failed)).unwrap_err();
        assert_eq!(
            e.note(),
            "source `find.items` is absent: `find` settled fail, not pass"
        );
        let e = expand(&mapped(0, &[]), &BTreeMap::new()).unwrap_err();
        assert!(matches!(
            e.kind,
            GraphErrorKind::AbsentSource {
                status: Status::Blocked,
                ..
            }
        ));
    }

    #[test]
    fn bad_source_shapes_fail_naming_the_field() {
        let table = [
            (
                json!({}),
                "source `find.items` is absent from `find`'s output",
            ),
            (
                json!({"items": "a"}),
                "source `find.items` is a string, not a list of strings",
            ),
            (
                json!({"items": ["a", 3]}),
                "source `find.items` item 1 is a number, not a string",
            ),
            (
                json!({"items": ["a", "b", "a"]}),
                "source `find.items` repeats item \"a\"; each item names one instance",
            ),
        ];
        for (out, want) in table {
            let e = expand(&mapped(0, &[]), &deps(passing(out))).unwrap_err();
            assert_eq!(e.note(), want);
        }
    }

    // RFC-0002:C-TASK-FILES — the key stays raw in names and inputs.
    #[test]
    fn keys_stay_raw() {
        let got = expand(
            &mapped(0, &[]),
            &deps(passing(json!({"items": ["a/b.c", ".x"]}))),
        )
        .unwrap();
        assert_eq!(got[0].name, "fix[a/b.c]");
        assert_eq!(got[1].name, "fix[.x]");
        let mut inputs = Map::new();
        got[0].apply(&mut inputs, Join::All);
        assert_eq!(inputs["item"], json!("a/b.c"));
    }

    // DSL keyed — each instance receives only its own item's entry in place of the whole field;
    // a missing entry is null.
    #[test]
    fn keyed_fields_give_each_instance_its_own_entry() {
        let task = mapped(0, &["meta.owners"]);
        let mut d = deps(passing(json!({"items": ["a", "b"]})));
        let meta = json!({"owners": {"a": "ann"}, "other": 1});
        d.insert("meta".into(), passing(meta.clone()));
        let inst = expand(&task, &d).unwrap();

        let mut base = Map::new();
        base.insert("meta".into(), meta.clone());
        let mut a = base.clone();
        inst[0].apply(&mut a, Join::All);
        assert_eq!(a["meta"], json!({"owners": "ann", "other": 1}));
        assert_eq!(a["item"], json!("a"));
        let mut b = base.clone();
        inst[1].apply(&mut b, Join::Passed);
        assert_eq!(b["meta"]["owners"], Value::Null);

        // Under a settled join the entry carries the output, which is what is narrowed.
        let mut s = Map::new();
        s.insert(
            "meta".into(),
            passing(meta).to_value(), // {status, note, output, files}
        );
        inst[0].apply(&mut s, Join::Settled);
        assert_eq!(s["meta"]["output"]["owners"], json!("ann"));
        assert_eq!(s["meta"]["status"], json!("pass"));
    }

    #[test]
    fn a_keyed_field_that_is_not_an_object_fails_the_node() {
        let task = mapped(0, &["meta.owners"]);
        let mut d = deps(passing(json!({"items": ["a"]})));
        d.insert("meta".into(), passing(json!({"owners": ["ann"]})));
        assert_eq!(
            expand(&task, &d).unwrap_err().note(),
            "keyed field `meta.owners` is a list, not an object keyed by item"
        );
        // A failed keyed producer is not checked: its entry is not forwarded under all/passed.
        d.insert(
            "meta".into(),
            Entry::new(Status::Fail, None, Some(json!({"owners": 1})), false),
        );
        assert!(expand(&task, &d).is_ok());
    }

    // RFC-0001-NOTES §5 — the node fold.
    #[test]
    fn node_status_table() {
        use Status::*;
        let table: &[(&[Status], Status)] = &[
            (&[], Pass),
            (&[Pass], Pass),
            (&[Pass, NotTaken], Pass),
            (&[NotTaken, NotTaken], NotTaken),
            (&[Pass, Fail], Fail),
            (&[NotTaken, Skipped], Fail),
            (&[Transport], Fail),
            (&[Pass, Blocked], Fail),
        ];
        for (given, want) in table {
            assert_eq!(node_status(given.iter()), *want, "{given:?}");
        }
    }

    // RFC-0002:C-SETTLED-JOIN — a mapped entry carries per_instance, present and empty for an
    // empty fan-out; a failing instance is named in the note and absent from the output.
    #[test]
    fn fold_entry_shape() {
        let empty = fold(Vec::new());
        assert_eq!(
            empty.to_value(),
            json!({"status": "pass", "note": null, "output": {}, "files": false, "per_instance": {}})
        );
        let lossy = fold(vec![
            ("a".into(), passing(json!({"n": 1}))),
            (
                "b".into(),
                Entry::new(Status::Fail, Some("exit 1".into()), None, true),
            ),
        ]);
        assert_eq!(lossy.status, Status::Fail);
        assert_eq!(
            lossy.note.as_deref(),
            Some("1 of 2 instances did not pass: \"b\" (fail)")
        );
        assert_eq!(lossy.output, Some(json!({"a": {"n": 1}})));
        assert!(lossy.files);
        let v = lossy.to_value();
        assert_eq!(v["per_instance"]["b"]["note"], json!("exit 1"));
        assert_eq!(v["per_instance"]["a"]["output"], json!({"n": 1}));
    }

    #[test]
    fn fold_note_is_bounded() {
        let many = (0..9)
            .map(|i| (format!("k{i}"), Entry::new(Status::Fail, None, None, false)))
            .collect();
        let note = fold(many).note.unwrap();
        assert!(note.starts_with("9 of 9 instances did not pass: \"k0\" (fail)"));
        assert!(note.ends_with(" and 4 more"));
    }

    #[test]
    fn an_unexpanded_node_has_empty_per_instance_and_no_output() {
        let e = unexpanded(Status::Fail, Some("source absent".into()));
        assert_eq!(e.per_instance, Some(BTreeMap::new()));
        assert_eq!(e.to_value()["output"], Value::Null);
    }
    fn lanes(n: usize, width: usize, can_spend: bool) -> Lanes {
        let task = mapped(0, &[]);
        let inst = expand(&task, &deps(passing(json!({"items": items(n)})))).unwrap();
        Lanes::new(inst, width, can_spend)
    }

    fn spend(total: f64) -> Spend {
        Spend {
            settled: total,
            in_flight: 0.0,
            max_cost: 1.0,
        }
    }

    // RFC-0002:C-PLAYBOOK-BUDGET — lanes start one at a time under the width.
    #[test]
    fn lanes_respect_the_width() {
        let mut l = lanes(3, 2, true);
        let mut refused = false;
        assert!(matches!(l.next(spend(0.0), &mut refused), Lane::Start(i) if i.key == "i0"));
        assert!(matches!(l.next(spend(0.0), &mut refused), Lane::Start(i) if i.key == "i1"));
        assert_eq!(l.next(spend(0.0), &mut refused), Lane::Wait);
        l.settled();
        assert!(matches!(l.next(spend(0.0), &mut refused), Lane::Start(i) if i.key == "i2"));
        assert_eq!(l.next(spend(0.0), &mut refused), Lane::Wait);
        l.settled();
        l.settled();
        assert_eq!(l.next(spend(0.0), &mut refused), Lane::Done);
        assert!(!refused);
    }

    // RFC-0002:C-PLAYBOOK-BUDGET — in-flight spend counts; a refusal is sticky even when the
    // in-flight figure later settles lower; a lane that cannot spend is never held.
    #[test]
    fn the_ceiling_refuses_later_lanes_for_good() {
        let mut l = lanes(3, 3, true);
        let mut refused = false;
        assert!(matches!(l.next(spend(0.5), &mut refused), Lane::Start(_)));
        let in_flight = Spend {
            settled: 0.5,
            in_flight: 0.5,
            max_cost: 1.0,
        };
        assert!(matches!(l.next(in_flight, &mut refused), Lane::Blocked(i) if i.key == "i1"));
        assert!(refused);
        assert!(matches!(l.next(spend(0.1), &mut refused), Lane::Blocked(i) if i.key == "i2"));
        assert_eq!(l.next(spend(0.1), &mut refused), Lane::Wait);
        l.settled();
        assert_eq!(l.next(spend(0.1), &mut refused), Lane::Done);

        let mut free = lanes(2, 1, false);
        let mut refused = true;
        assert!(matches!(
            free.next(spend(5.0), &mut refused),
            Lane::Start(_)
        ));
    }
}

//! Canonical JSON and digests.
//!
//! Canonical JSON is serde_json's compact encoding of a value whose objects are key-sorted
//! (serde_json's map is a `BTreeMap` here), so the same plan always encodes to the same bytes.
//! Definition digests follow RFC-0002:C-PLAYBOOK-RERUN: over the compiled task with its
//! parameters bound and over its dependencies' digests.

use crate::plan::{Plan, Task};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Compact, key-sorted JSON of any serializable value.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(&sorted(value)).expect("a JSON value always serializes")
}

/// Pretty, key-sorted JSON for people (`plan compile` prints this; it is equally stable).
pub fn to_pretty<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string_pretty(&sorted(value)).expect("a JSON value always serializes")
}

/// The value with every object's keys in byte order, whether or not serde_json's
/// `preserve_order` feature is on somewhere in the build.
pub fn sorted<T: Serialize + ?Sized>(value: &T) -> Value {
    let v = serde_json::to_value(value).expect("plan types always serialize");
    if maps_are_sorted() {
        v
    } else {
        sort_value(v)
    }
}

/// Whether serde_json's map keeps its keys in byte order (its default `BTreeMap`), so that a
/// value needs no second pass to be canonical: a plan's value has a map per task.
fn maps_are_sorted() -> bool {
    static SORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SORTED.get_or_init(|| {
        let map: serde_json::Map<String, Value> = [("b", 0), ("a", 0)]
            .map(|(k, v)| (k.into(), v.into()))
            .into_iter()
            .collect();
        map.keys().map(String::as_str).eq(["a", "b"])
    })
}

fn sort_value(v: Value) -> Value {
    match v {
        Value::Object(map) => {
            let entries: BTreeMap<String, Value> =
                map.into_iter().map(|(k, v)| (k, sort_value(v))).collect();
            Value::Object(entries.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sort_value).collect()),
        other => other,
    }
}

/// `sha256:` followed by the lowercase hex SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The plan digest: over the canonical JSON of the whole plan, hashed as it is written (a
/// plan of 100,000 tasks is tens of megabytes of JSON, never held whole).
pub fn plan_digest(plan: &Plan) -> String {
    let mut out = std::io::BufWriter::with_capacity(64 << 10, Sha256::new());
    serde_json::to_writer(&mut out, &sorted(plan)).expect("a JSON value always serializes");
    let hash = out
        .into_inner()
        .map_err(|_| ())
        .expect("hashing never fails");
    format!("sha256:{}", hex::encode(hash.finalize()))
}

/// Every task's definition digest, keyed by task name.
///
/// A task's digest covers its compiled definition (parameters are already bound into it, and
/// the plan's bound `params` are folded in for command tasks, which read them at run time) and
/// the digests of its dependencies, so an edit upstream changes every digest downstream.
/// Tasks whose dependencies form a cycle or name unknown tasks get a digest over their own
/// definition only; validation refuses such plans anyway.
pub fn task_digests(plan: &Plan) -> BTreeMap<String, String> {
    let by_name: BTreeMap<&str, &Task> = plan.tasks.iter().map(|t| (t.name.as_str(), t)).collect();
    let params = to_string(&plan.params);
    let mut done: BTreeMap<String, String> = BTreeMap::new();
    for task in &plan.tasks {
        digest_of(task, &by_name, &params, &mut done, &mut Vec::new());
    }
    done
}

fn digest_of(
    task: &Task,
    by_name: &BTreeMap<&str, &Task>,
    params: &str,
    done: &mut BTreeMap<String, String>,
    stack: &mut Vec<String>,
) -> String {
    if let Some(d) = done.get(&task.name) {
        return d.clone();
    }
    stack.push(task.name.clone());
    let mut deps: BTreeMap<String, String> = BTreeMap::new();
    for dep in &task.depends_on {
        let digest = match by_name.get(dep.as_str()) {
            Some(t) if !stack.contains(dep) => digest_of(t, by_name, params, done, stack),
            _ => String::new(),
        };
        deps.insert(dep.clone(), digest);
    }
    stack.pop();
    let reads_params = task.run.is_some();
    let body = serde_json::json!({
        "task": serde_json::to_value(task).expect("task serializes"),
        "depends": deps,
        "params": if reads_params { Value::String(params.to_string()) } else { Value::Null },
    });
    let digest = sha256(to_string(&body).as_bytes());
    done.insert(task.name.clone(), digest.clone());
    digest
}

#[cfg(test)]
mod tests {
    use super::*;

    // The digest hashed as the JSON is written is the digest of the canonical text, and that
    // text is key-sorted at every level (serde_json's map here, or the second pass).
    #[test]
    fn the_plan_digest_is_over_the_canonical_text() {
        let plan: Plan = serde_json::from_value(serde_json::json!({
            "version": 1,
            "type": "playbook",
            "params": {"zeta": {"b": 1, "a": [{"y": 1, "x": 2}]}, "alpha": 0},
            "tasks": [{"name": "t", "kind": "command", "run": "true"}],
        }))
        .unwrap();
        let text = to_string(&plan);
        assert_eq!(plan_digest(&plan), sha256(text.as_bytes()));
        let at = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
        assert!(
            at("alpha") < at("zeta") && at("a") < at("b") && at("x") < at("y"),
            "{text}"
        );
        assert_eq!(to_string(&sort_value(sorted(&plan))), text);
    }
}

//! Compiles a generated 1,000-task workflow and prints how long it took (not a timed test:
//! run it with `cargo bench -p crucible-dsl`; the target is under 100 ms in a release build).

use crucible_dsl::{compile, CompileRequest};
use std::time::Instant;

const TASKS: usize = 1000;

fn source() -> String {
    format!(
        r#"params = {{"topic": {{"type": "string", "default": "slag"}}}}

def step(i, deps):
    if i % 3 == 0:
        return agent(name = "t%d" % i, prompt = "Work on " + param("topic"), depends_on = deps, emits = {{"out": "string"}})
    return command(name = "t%d" % i, run = "true", depends_on = deps, emits = ["out"])

tasks = []
for i in range({n}):
    deps = [tasks[i - 1]] if i % 10 != 0 else []
    if i >= 20 and i % 10 == 5:
        deps = deps + [tasks[i - 20]]
    tasks.append(step(i, deps))
gate = route(name = "gate", depends_on = [tasks[-1]], min_confidence = 0.5, questions = {{"ok": noul()}})
yes = command(name = "yes", run = "true", depends_on = [gate], when = gate.ok)
no = command(name = "no", run = "true", depends_on = [gate], when = gate.ok, otherwise = True)
workflow(tasks + [gate, yes, no])
"#,
        n = TASKS - 3
    )
}

fn main() {
    let dir = std::env::temp_dir().join(format!("crucible-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("workflow.star"), source()).expect("write source");
    let req = CompileRequest {
        pack_root: dir.clone(),
        file: "workflow.star".into(),
        ..Default::default()
    };
    // One warm-up, then the best and the median of ten.
    let plan = compile(&req).unwrap_or_else(|d| panic!("{d}")).plan;
    assert_eq!(plan.tasks.len(), TASKS);
    let mut times: Vec<f64> = (0..10)
        .map(|_| {
            let start = Instant::now();
            compile(&req).unwrap_or_else(|d| panic!("{d}"));
            start.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    println!(
        "compile {TASKS} tasks: best {:.1} ms, median {:.1} ms",
        times[0],
        times[times.len() / 2]
    );
    std::fs::remove_dir_all(&dir).ok();
}

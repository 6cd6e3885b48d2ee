//! The conformance corpus: every `accept_*.star` / `reject_*.star` under
//! `tests/corpus/compile/<rule>/` compiles, and its canonical plan (accepts) or its diagnostics
//! (rejects) are snapshotted. A case may start with header comments:
//! `# param: name=value` (a `--param`, repeatable) and
//! `# allow: model harness effort ref models=a,b sandbox=name default_model=m` (the manifest's
//! `[agent.overrides]`, sandboxes and default model).

use crucible_dsl::{compile, CompileRequest, Limits};
use crucible_pack::manifest::AgentConfig;
use std::path::Path;

fn request(path: &Path) -> CompileRequest {
    let text = std::fs::read_to_string(path).expect("case is readable");
    let mut params = Vec::new();
    let mut agent: Option<AgentConfig> = None;
    for line in text.lines().take_while(|l| l.starts_with('#')) {
        if let Some(p) = line.strip_prefix("# param: ") {
            params.push(p.to_string());
        } else if let Some(allow) = line.strip_prefix("# allow: ") {
            let a = agent.get_or_insert_with(AgentConfig::default);
            for word in allow.split_whitespace() {
                match word {
                    "model" => a.overrides.model = true,
                    "harness" => a.overrides.harness = true,
                    "effort" => a.overrides.effort = true,
                    "ref" => a.overrides.git_ref = true,
                    w if w.starts_with("models=") => {
                        a.overrides.models = w["models=".len()..]
                            .split(',')
                            .map(str::to_string)
                            .collect()
                    }
                    w if w.starts_with("sandbox=") => {
                        a.sandbox
                            .insert(w["sandbox=".len()..].to_string(), Default::default());
                    }
                    w if w.starts_with("default_model=") => {
                        a.model = Some(w["default_model=".len()..].to_string())
                    }
                    other => panic!("{}: unknown allow word {other}", path.display()),
                }
            }
        }
    }
    CompileRequest {
        pack_root: path.parent().expect("case has a directory").to_path_buf(),
        file: path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 name")
            .to_string(),
        params,
        agent,
        workflow_type: None,
        result: None,
        history_record: None,
        limits: Limits::default(),
    }
}

#[test]
fn corpus() {
    insta::glob!(
        "../../../tests/corpus/compile",
        "*/[ar][ce]*_*.star",
        |path| {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let result = compile(&request(path));
            if name.starts_with("accept_") {
                match result {
                    Ok(c) => insta::assert_snapshot!(crucible_plan::canonical::to_pretty(&c.plan)),
                    Err(d) => panic!("{} should compile:\n{d}", path.display()),
                }
            } else {
                match result {
                    Ok(c) => panic!(
                        "{} should be refused, compiled to {:?}",
                        path.display(),
                        c.plan.tasks.iter().map(|t| &t.name).collect::<Vec<_>>()
                    ),
                    Err(d) => insta::assert_snapshot!(d.to_string()),
                }
            }
        }
    );
}

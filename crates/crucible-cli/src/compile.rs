//! `check`, `plan compile`, `plan params`, `plan show`, `pack digest`: the inspectors. They
//! print to stdout, diagnostics to stderr, and exit 0 when clean, 1 on errors or findings.

use crate::args::{
    CheckArgs, CompileArgs, DigestArgs, Format, LaunchPlanArgs, ParamsArgs, PictureFormat, ShowArgs,
};
use anyhow::{anyhow, Context, Result};
use crucible_dsl::{CompileRequest, Compiled, Diagnostics, Limits};
use crucible_engine::files;
use crucible_engine::{admission, Substrate};
use crucible_pack::files::{pack_files, tree1_of};
use crucible_pack::manifest::{self, LoadedManifest};
use crucible_plan::picture;
use crucible_plan::terminal::{escape, escape_lines};
use crucible_plan::vocab::ceilings;
use crucible_plan::{canonical, duration, render, Plan, ValidatedPlan};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Splits a workflow path into its pack root and its pack-relative name. With a manifest the
/// root is the manifest's directory; otherwise the file's own directory.
fn locate(file: &Path, manifest_dir: Option<&Path>) -> Result<(PathBuf, String)> {
    match manifest_dir {
        Some(root) => {
            let abs_root = root
                .canonicalize()
                .with_context(|| format!("{}", root.display()))?;
            let abs_file = file
                .canonicalize()
                .with_context(|| format!("{}", file.display()))?;
            let rel = abs_file.strip_prefix(&abs_root).map_err(|_| {
                anyhow!(
                    "{} is not below the pack directory {}",
                    file.display(),
                    root.display()
                )
            })?;
            Ok((root.to_path_buf(), rel.to_string_lossy().into_owned()))
        }
        None => {
            let root = file
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| anyhow!("{} names no file", file.display()))?;
            Ok((root.to_path_buf(), name.to_string()))
        }
    }
}

fn report(d: &Diagnostics) -> ExitCode {
    eprintln!("{}", escape_lines(&d.to_string()));
    eprintln!("\n{} error(s)", d.0.len());
    ExitCode::from(1)
}

/// A compiled plan that passed validation, and the launch's `repo.ref`.
pub(crate) struct Loaded {
    pub plan: ValidatedPlan,
    pub repo_ref: Option<String>,
}

/// The validated plan of a compiled one; validation already passed inside the compiler, so a
/// problem here is reported as the compiler's own would be.
fn validated(c: Compiled) -> Result<Loaded> {
    let Compiled { plan, repo_ref } = c;
    let plan = ValidatedPlan::new(plan).map_err(|problems| {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        anyhow!("{}", lines.join("\n"))
    })?;
    Ok(Loaded { plan, repo_ref })
}

/// The graph a manifest names: `[workflow].file` compiled, or the inline tables validated.
pub(crate) fn manifest_plan(
    m: &LoadedManifest,
    params: &[String],
) -> Result<Result<Loaded, Diagnostics>> {
    let ty = m.workflow_type().map_err(|e| anyhow!("{e}"))?;
    let wf = m
        .manifest
        .workflow
        .as_ref()
        .expect("workflow_type checked it");
    if let Some(file) = &wf.file {
        return match crate::bounded::compile(&CompileRequest {
            pack_root: m.dir.clone(),
            file: file.clone(),
            params: params.to_vec(),
            agent: Some(m.manifest.agent.clone()),
            workflow_type: Some(ty),
            result: wf.result.clone(),
            history_record: wf.history_record.clone(),
            limits: Limits::default(),
        }) {
            Ok(c) => validated(c).map(Ok),
            Err(d) => Ok(Err(d)),
        };
    }
    let mut plan = m
        .inline_plan()
        .map_err(|e| anyhow!("{e}"))?
        .ok_or_else(|| {
            anyhow!(
                "{}: [workflow] names no file and has no [[workflow.task]] tables",
                m.path.display()
            )
        })?;
    // Validated once, with the launch settings applied (settings refused change nothing); the
    // tables' own problems are named before a refused setting, as a source's would be.
    let settings = crucible_dsl::apply_launch_settings(&mut plan, params, Some(&m.manifest.agent));
    let problems = match ValidatedPlan::new(plan) {
        Ok(plan) => return Ok(settings.map(|repo_ref| Loaded { plan, repo_ref })),
        Err(problems) => problems,
    };
    for p in &problems {
        eprintln!("{}", escape(&format!("{}: {p}", m.path.display())));
    }
    Err(anyhow!(
        "{} error(s) in the [[workflow.task]] tables",
        problems.len()
    ))
}

/// A `[workflow]` key of an optional manifest.
fn wf_field(
    m: &Option<LoadedManifest>,
    f: impl Fn(&manifest::WorkflowConfig) -> Option<String>,
) -> Option<String> {
    m.as_ref()
        .and_then(|m| m.manifest.workflow.as_ref())
        .and_then(f)
}

/// `crucible __launch-plan`: the plan a launch of the manifest runs, printed as a `Compiled`'s
/// JSON, or its diagnostics on stderr (exit 1). The controller compiles each launch in this
/// child process: the compile's memory limit (`bounded`) forks, which only a process with one
/// thread may do, and the controller has many.
pub fn launch_plan(a: &LaunchPlanArgs) -> Result<ExitCode> {
    let m = manifest::load(&a.manifest).map_err(|e| anyhow!("{e}"))?;
    match manifest_plan(&m, &a.params)? {
        Ok(loaded) => {
            let compiled = Compiled {
                plan: Plan::clone(&loaded.plan),
                repo_ref: loaded.repo_ref,
            };
            println!("{}", serde_json::to_string(&compiled)?);
            Ok(ExitCode::SUCCESS)
        }
        Err(d) => Ok(report(&d)),
    }
}

pub fn compile(a: &CompileArgs) -> Result<ExitCode> {
    let loaded = a
        .manifest
        .as_deref()
        .map(manifest::load)
        .transpose()
        .map_err(|e| anyhow!("{e}"))?;
    let (root, file) = locate(&a.file, loaded.as_ref().map(|m| m.dir.as_path()))?;
    let workflow_type = loaded
        .as_ref()
        .map(|m| m.workflow_type())
        .transpose()
        .map_err(|e| anyhow!("{e}"))?;
    let req = CompileRequest {
        pack_root: root,
        file,
        params: a.params.clone(),
        agent: loaded.as_ref().map(|m| m.manifest.agent.clone()),
        workflow_type,
        result: wf_field(&loaded, |w| w.result.clone()),
        history_record: wf_field(&loaded, |w| w.history_record.clone()),
        limits: Limits::default(),
    };
    match crate::bounded::compile(&req) {
        Err(d) => Ok(report(&d)),
        Ok(c) => {
            match a.format {
                Format::Json => println!("{}", canonical::to_pretty(&c.plan)),
                Format::Toml => print!("{}", render::to_toml(&c.plan)?),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub fn params(a: &ParamsArgs) -> Result<ExitCode> {
    match crucible_dsl::params_schema(&a.file) {
        Err(d) => Ok(report(&d)),
        Ok(schema) => {
            println!("{}", canonical::to_pretty(&schema));
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_table(plan: &Plan) {
    println!(
        "plan v{} type={} tasks={}",
        plan.version,
        plan.workflow_type,
        plan.tasks.len()
    );
    println!(
        "{:<24} {:<9} {:<10} {:<8} {:<8} {:<9} {:<8} depends_on",
        "task", "kind", "stage", "join", "required", "needs", "timeout"
    );
    for t in &plan.tasks {
        let deps: Vec<String> = t
            .depends_on
            .iter()
            .map(|d| {
                if t.is_optional_dep(d) {
                    format!("optional({d})")
                } else {
                    d.clone()
                }
            })
            .collect();
        let kind = if t.skill.is_some() {
            "skill"
        } else {
            t.kind.as_str()
        };
        println!(
            "{:<24} {:<9} {:<10} {:<8} {:<8} {:<9} {:<8} {}",
            t.name,
            kind,
            t.stage.as_str(),
            t.join.as_str(),
            t.required,
            t.needs,
            t.timeout_secs
                .map(duration::format)
                .unwrap_or_else(|| "-".into()),
            deps.join(", ")
        );
        if let Some(w) = &t.when {
            println!(
                "{:<24}   when {}.{} in [{}]",
                "",
                w.route,
                w.question,
                w.answers.join(", ")
            );
        }
        if let Some(o) = &t.over {
            println!("{:<24}   over {o} (max_fanout {})", "", t.max_fanout);
        }
        if !t.revise.is_empty() {
            println!(
                "{:<24}   revise [{}] max_rounds {}",
                "",
                t.revise.join(", "),
                t.max_rounds
            );
        }
    }
    let digests = canonical::task_digests(plan);
    println!("plan digest: {}", canonical::plan_digest(plan));
    for t in &plan.tasks {
        println!("  {} {}", digests[&t.name], t.name);
    }
}

/// Prints the ceilings, deadlines and the operator's bounds; returns each operator setting
/// `plan run` would refuse (a malformed environment variable).
fn print_deadlines(plan: &Plan) -> Vec<String> {
    let mut problems = Vec::new();
    println!("ceilings and deadlines:");
    println!("  --max-cost USD and --max-time DUR are required at launch; a pack cannot set them");
    println!("  a task timeout longer than --max-time is refused before any dispatch");
    for t in plan.tasks.iter().filter(|t| t.timeout_secs.is_some()) {
        println!(
            "  timeout {}: {}",
            t.name,
            duration::format(t.timeout_secs.unwrap_or_default())
        );
    }
    let unbounded = plan
        .tasks
        .iter()
        .filter(|t| t.timeout_secs.is_none())
        .count();
    if unbounded > 0 {
        // RFC-0002:C-PLAYBOOK-BUDGET: the ceiling is every attempt's default deadline.
        println!("  every attempt of the other {unbounded} task(s): the --max-time ceiling");
    }
    println!(
        "  engine: max_fanout <= {}, revise rounds {}..={}, repair <= {}, history <= {}, transport retries {}",
        ceilings::MAX_FANOUT,
        ceilings::MIN_ROUNDS,
        ceilings::MAX_ROUNDS,
        ceilings::MAX_REPAIR,
        ceilings::MAX_HISTORY,
        ceilings::TRANSPORT_RETRIES
    );
    // RFC-0002:C-RUN-HISTORY: the bound is discoverable before a run starts.
    match crate::run::history_bound() {
        Ok(b) => {
            println!(
                "  history: at most {b} bytes per task ({})",
                crucible_engine::history::HISTORY_MAX_BYTES_ENV
            );
            if let Err(e) = crate::run::launch_history() {
                problems.push(e.to_string());
            }
        }
        Err(e) => problems.push(e.to_string()),
    }
    // RFC-0002:C-ASKS: the bound is discoverable before a run starts.
    match crate::run::asks_bound() {
        Ok(n) => println!(
            "  asks: at most {n} per run ({})",
            crucible_engine::asks::MAX_ASKS_ENV
        ),
        Err(e) => problems.push(e.to_string()),
    }
    // RFC-0002:C-HUMAN-DECISION, C-DECISION-EVIDENCE: the bounds, and who would answer.
    match crate::decide::bounds() {
        Ok(b) => println!(
            "  human decisions: evidence at most {} bytes ({}), notes at most {} bytes ({}); answered by {}",
            b.evidence_bytes,
            crucible_engine::decision::MAX_EVIDENCE_BYTES_ENV,
            b.note_bytes,
            crucible_engine::decision::MAX_NOTE_BYTES_ENV,
            match crate::decide::decider() {
                Ok(Some(d)) => escape(&d.describe()).into_owned(),
                Ok(None) => "no one: no controller and no terminal".into(),
                Err(e) => {
                    problems.push(e.to_string());
                    "no one".into()
                }
            }
        ),
        Err(e) => problems.push(e.to_string()),
    }
    // RFC-0002:C-REPORTS: the operator's report bounds, and whether a destination is set.
    match crate::run::report_config() {
        Ok(r) => println!(
            "  reports: result at most {} bytes, body at most {} bytes, Slack webhook {}",
            r.result_max_bytes,
            r.body_max_bytes,
            if r.slack_webhook.is_some() {
                "configured"
            } else {
                "not configured"
            }
        ),
        Err(e) => problems.push(e.to_string()),
    }
    problems
}

pub fn show(a: &ShowArgs) -> Result<ExitCode> {
    let (manifest, compiled) = match (&a.manifest, &a.file) {
        (Some(m), _) => {
            let m = manifest::load(m).map_err(|e| anyhow!("{e}"))?;
            let compiled = manifest_plan(&m, &a.params)?;
            (m, compiled)
        }
        (None, Some(f)) => {
            let (root, file) = locate(f, None)?;
            let compiled = crate::bounded::compile(&CompileRequest {
                pack_root: root.clone(),
                file,
                params: a.params.clone(),
                ..Default::default()
            });
            // No manifest: the prediction is for a pack whose manifest sets nothing.
            let m = LoadedManifest {
                manifest: Default::default(),
                path: root.join("crucible.toml"),
                dir: root,
                variant: String::new(),
            };
            let compiled = match compiled {
                Ok(c) => Ok(validated(c)?),
                Err(d) => Err(d),
            };
            (m, compiled)
        }
        (None, None) => unreachable!("clap requires one of --manifest and --file"),
    };
    let plan = match compiled {
        Err(d) => return Ok(report(&d)),
        Ok(c) => c.plan,
    };
    if a.mermaid {
        print!("{}", render::to_mermaid(&plan));
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(PictureFormat::Svg) = a.format {
        let statuses = match &a.run {
            Some(run) => Some(run_statuses(&manifest.dir.join("state"), run)?),
            None => None,
        };
        // A local run's session log says what settled, not what is in flight: every task
        // not settled is drawn pending.
        let running = std::collections::BTreeSet::new();
        let colouring = match &statuses {
            Some(s) => picture::Colouring::Run {
                settled: s,
                running: &running,
            },
            None => picture::Colouring::Kind,
        };
        print!("{}", picture::svg(&plan, &colouring));
        return Ok(ExitCode::SUCCESS);
    }
    print_table(&plan);
    for e in print_deadlines(&plan) {
        eprintln!("warning: {}", escape(&e));
    }
    // A malformed binding is check's and run's to report; here it only adds no capability.
    let inference = crate::run::inference_bindings().unwrap_or_default();
    let caps = crucible_engine::substrate_caps(&a.caps, &inference);
    let decider = crate::decide::describe();
    let sub = Substrate {
        caps: &caps,
        inference: &inference,
        agent_cmd: a.agent_cmd.as_deref(),
        harness: None,
        max_secs: None,
        state_dir: None,
        no_sandbox: false,
        decider: decider.as_deref(),
    };
    for n in manifest.not_applied() {
        println!("not applied: {}", escape(&n));
    }
    match admission(&plan, &manifest, sub) {
        Err(reasons) => {
            for r in reasons {
                println!("refused: {}", escape(&r));
            }
            Ok(ExitCode::from(1))
        }
        Ok(adm) => {
            for line in adm.caps.lines(&plan) {
                println!("{line}");
            }
            Ok(if adm.caps.truncating.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// The run-total bound on captured declared files: the flag, else the environment variable,
/// else the default (RFC-0002:C-TASK-FILES).
pub(crate) fn files_bound(flag: Option<&str>) -> Result<u64> {
    let env = std::env::var(files::MAX_FILES_BYTES_ENV).ok();
    files::max_files_bytes(flag, env.as_deref()).map_err(|e| anyhow!("{e}"))
}

pub fn check(a: &CheckArgs) -> Result<ExitCode> {
    let m = manifest::load(&a.manifest).map_err(|e| anyhow!("{e}"))?;
    let mut findings = 0;
    println!(
        "manifest: {} (variant: {})",
        m.path.display(),
        if m.variant.is_empty() {
            "default"
        } else {
            &m.variant
        }
    );
    match pack_files(&m.dir) {
        Err(e) => {
            eprintln!("error[RFC-0002:C-PACK-BASE]: {}", escape(&e.to_string()));
            findings += 1;
        }
        Ok(listing) => {
            println!(
                "pack: {} files, digest {}",
                listing.files.len(),
                tree1_of(&m.dir, &listing)?
            );
            for p in &listing.ignored {
                println!("  ignored: {}", escape(p));
            }
        }
    }
    let agent = &m.manifest.agent;
    println!("dsl limits:");
    for (name, value, what) in Limits::default().describe() {
        println!("  {name} = {value}  ({what})");
    }
    let plan = match manifest_plan(&m, &a.params) {
        Err(e) => {
            eprintln!("error: {}", escape_lines(&format!("{e:#}")));
            findings += 1;
            None
        }
        Ok(Err(d)) => {
            eprintln!("{}", escape_lines(&d.to_string()));
            findings += d.0.len();
            None
        }
        Ok(Ok(c)) => Some(c.plan),
    };
    for n in m.not_applied() {
        println!("not applied: {}", escape(&n));
    }
    if let Some(plan) = &plan {
        println!(
            "graph: {} tasks, type {}",
            plan.tasks.len(),
            plan.workflow_type
        );
        // What `plan run` refuses of the operator's settings, before any work.
        for e in print_deadlines(plan) {
            eprintln!("error[launch]: {}", escape(&e));
            findings += 1;
        }
        match files_bound(a.max_files_bytes.as_deref()) {
            Ok(bound) => println!(
                "  captured files: at most {bound} bytes per run (--{} or {})",
                files::MAX_FILES_BYTES_FLAG,
                files::MAX_FILES_BYTES_ENV
            ),
            Err(e) => {
                eprintln!("error[RFC-0002:C-TASK-FILES]: {e:#}");
                findings += 1;
            }
        }
        let inference = crate::run::inference_bindings().unwrap_or_default();
        let caps = crucible_engine::substrate_caps(&a.caps, &inference);
        // `plan run`'s default state directory, unless the operator names another.
        let state_dir = a.state_dir.clone().unwrap_or_else(|| m.dir.join("state"));
        // `plan run` reads the harness without regard to case.
        let harness = a.harness.as_deref().map(str::to_ascii_lowercase);
        let max_secs = match a.max_time.as_deref().map(duration::parse).transpose() {
            Ok(secs) => secs,
            Err(e) => {
                eprintln!("error[launch]: --max-time: {}", escape(&e.to_string()));
                findings += 1;
                None
            }
        };
        // RFC-0002:C-PLAYBOOK-CAPS: what the plan needs, what the run gives, and the verdict.
        println!("capabilities:");
        let needed: BTreeSet<&str> = plan
            .tasks
            .iter()
            .map(|t| t.needs.as_str())
            .filter(|n| *n != "any")
            .collect();
        let list = |items: Vec<&str>| match items.is_empty() {
            true => "none".to_string(),
            false => items.join(", "),
        };
        println!("  needed: {}", list(needed.into_iter().collect()));
        println!(
            "  given: {}",
            list(caps.iter().map(String::as_str).collect())
        );
        let decider = crate::decide::describe();
        let sub = Substrate {
            caps: &caps,
            inference: &inference,
            agent_cmd: a.agent_cmd.as_deref(),
            harness: harness.as_deref(),
            max_secs,
            state_dir: Some(&state_dir),
            no_sandbox: false,
            decider: decider.as_deref(),
        };
        match admission(plan, &m, sub) {
            Err(reasons) => {
                // What `plan run` would refuse, in its words.
                findings += reasons.len();
                for r in reasons {
                    eprintln!("error[admission]: {}", escape(&r));
                }
            }
            Ok(adm) => {
                for (task, named) in &adm.sandboxes {
                    let secrets = match named.secrets.is_empty() {
                        true => "none".to_string(),
                        false => named.secrets.join(", "),
                    };
                    let line = format!(
                        "  task {task}: sandbox {}: network none, declared secrets: {secrets}",
                        named.name
                    );
                    println!("{}", escape(&line));
                }
                for (kind, program) in &adm.harnesses {
                    let (package, version) = kind.package();
                    let line = format!(
                        "  harness {}: {} ({package}@{version})",
                        kind.name(),
                        program.display()
                    );
                    println!("{}", escape(&line));
                }
                // The spend of a harness priced from tokens: the agent binding's model's price.
                let model = inference.agent.as_ref().map(|b| b.model.as_str());
                if let Some(model) =
                    model.filter(|_| adm.harnesses.keys().any(|k| k.priced_by_table()))
                {
                    let (p, from) = crucible_engine::prices(&m).source(model);
                    let line = format!(
                        "  price of {model}: ${} in, ${} cached in, ${} out per 1M tokens ({from})",
                        p.input, p.cached_input, p.output
                    );
                    println!("{}", escape(&line));
                }
                let truncated = !adm.caps.truncating.is_empty();
                for line in adm.caps.lines(plan) {
                    match line.starts_with("verdict: TRUNCATED") {
                        // Without --cap (or a binding) the substrate is unknown: the verdict
                        // is shown, not held against the pack.
                        true if caps.is_empty() => println!(
                            "  {line} (with no --cap given; pass the substrate's capabilities to check it)"
                        ),
                        _ => println!("  {line}"),
                    }
                }
                if truncated && !caps.is_empty() {
                    findings += 1;
                }
            }
        }
    }
    println!("egress and credentials:");
    println!(
        "  backend: {}",
        escape(agent.backend.as_deref().unwrap_or("local"))
    );
    if agent.env.is_empty() {
        println!("  [agent].env: none");
    } else {
        // Names only: values are credentials.
        println!(
            "  [agent].env names: {}",
            escape(&agent.env.keys().cloned().collect::<Vec<_>>().join(", "))
        );
    }
    match crate::run::inference_bindings() {
        Ok(inf) => match &inf.decision {
            Some(d) => println!(
                "  decision model: {} at {} ({})",
                d.model,
                d.url.as_deref().unwrap_or("its default URL"),
                d.key_env
                    .as_ref()
                    .map_or("no key".to_string(), |k| format!("key from ${k}"))
            ),
            None => println!("  decision model: none"),
        },
        Err(e) => {
            eprintln!("error[C-INFERENCE]: {e}");
            findings += 1;
        }
    }
    let o = &agent.overrides;
    println!(
        "  launch settings allowed: model={} harness={} effort={} ref={}{}",
        o.model,
        o.harness,
        o.effort,
        o.git_ref,
        if o.models.is_empty() {
            String::new()
        } else {
            format!(" models=[{}]", o.models.join(", "))
        }
    );
    if !print_sandbox(&m.manifest) {
        findings += 1;
    }
    print_task_env(&m.manifest);
    if findings == 0 {
        println!("check: ok");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("check: {findings} finding(s)");
        Ok(ExitCode::from(1))
    }
}

/// Where tasks run (issue 11): the sandbox `plan run` uses, or why it would refuse, or the
/// opt-out; decided by the same function `plan run` calls. False when `plan run` would refuse.
fn print_sandbox(m: &crucible_pack::Manifest) -> bool {
    use crucible_engine::sandbox::{mode, Mode, FLAG};
    let runs = match mode(false, m.sandbox.enabled) {
        Ok(Mode::Namespaces) => {
            println!(
                "sandbox: namespaces: workspace read-write, staged inputs read-only, pack and state hidden, own PID namespace, private /tmp, network shared; {FLAG} runs unsandboxed"
            );
            true
        }
        Ok(Mode::Off(why)) => {
            println!("sandbox: off ({why}): tasks run as the engine's own user");
            true
        }
        Err(refusal) => {
            eprintln!("error[sandbox]: plan run would refuse: {refusal}");
            false
        }
    };
    if !m.sandbox.expose.is_empty() {
        println!(
            "  exposed read-write to every task: {}",
            m.sandbox.expose.join(", ")
        );
    }
    runs
}

/// What each kind of task receives in its environment (issue 11: an allowlist, nothing else the
/// engine was launched with); names only, and which of them are masked as secrets.
fn print_task_env(m: &crucible_pack::Manifest) {
    use crucible_engine::taskenv::{BASE, CONTRACT, MASK, MASK_MIN_LEN};
    let list = |names: &[String]| {
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    let unset: Vec<String> = (m.env.names())
        .filter(|n| std::env::var_os(n.as_str()).is_none())
        .cloned()
        .collect();
    println!("task environment (nothing else from the launch reaches a task):");
    println!(
        "  command, evaluate and agent tasks: {} where set at launch; [env].pass: {}; [env].secrets (values masked as {MASK}): {}; the contract {}",
        BASE.join(", "),
        list(&m.env.pass),
        list(&m.env.secrets),
        CONTRACT.join(", ")
    );
    if !unset.is_empty() {
        println!("  unset now, so not given: {}", unset.join(", "));
    }
    let agent_env: Vec<String> = m.agent.env.keys().cloned().collect();
    println!(
        "  agent tasks also: [agent].env (values masked as {MASK}): {}; the harness's turn variables (CRUCIBLE_PROMPT, CRUCIBLE_PROMPT_FILE, and its settings, session and repair)",
        list(&agent_env)
    );
    println!("  secret values shorter than {MASK_MIN_LEN} characters are not masked");
}

pub fn pack_digest(a: &DigestArgs) -> Result<ExitCode> {
    let listing = pack_files(&a.dir).map_err(|e| anyhow!("{}: {e}", a.dir.display()))?;
    for p in &listing.ignored {
        eprintln!("ignored: {}", escape(p));
    }
    println!("{}", tree1_of(&a.dir, &listing)?);
    Ok(ExitCode::SUCCESS)
}

/// The statuses of a run's tasks, from its session log in the state directory: `run` is a run
/// id, a unique prefix of one, or `latest` (the most recent run).
fn run_statuses(
    state_dir: &Path,
    run: &str,
) -> Result<std::collections::BTreeMap<String, crucible_plan::Status>> {
    let (id, dir) = crate::inspect::resolve(state_dir, run)?;
    let log_path = dir.join("session.jsonl");
    let text = std::fs::read_to_string(&log_path)
        .with_context(|| format!("no run {id} in {}", state_dir.display()))?;
    let lines = crucible_plan::wire::decode_log(&text)
        .map_err(|e| anyhow!("{}: {e}", log_path.display()))?;
    let rows: Vec<(String, crucible_plan::Status)> = lines
        .into_iter()
        .filter_map(|l| match l.event {
            crucible_plan::wire::Event::TaskResult(r) => Some((r.task, r.status)),
            _ => None,
        })
        .collect();
    Ok(picture::node_statuses(
        rows.iter().map(|(t, s)| (t.as_str(), *s)),
    ))
}

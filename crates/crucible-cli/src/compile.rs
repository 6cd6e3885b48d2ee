//! `check`, `plan compile`, `plan params`, `plan show`, `pack digest`: the inspectors. They
//! print to stdout, diagnostics to stderr, and exit 0 when clean, 1 on errors or findings.

use crate::args::{CheckArgs, CompileArgs, DigestArgs, Format, ParamsArgs, ShowArgs};
use anyhow::{anyhow, Context, Result};
use crucible_dsl::{CompileRequest, Compiled, Diagnostics, Limits};
use crucible_engine::files;
use crucible_pack::files::{pack_files, tree1_of};
use crucible_pack::manifest::{self, LoadedManifest};
use crucible_plan::terminal::{escape, escape_lines};
use crucible_plan::vocab::ceilings;
use crucible_plan::{canonical, duration, render, validate, Plan};
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

/// The graph a manifest names: `[workflow].file` compiled, or the inline tables validated.
pub(crate) fn manifest_plan(
    m: &LoadedManifest,
    params: &[String],
) -> Result<Result<Compiled, Diagnostics>> {
    let ty = m.workflow_type().map_err(|e| anyhow!("{e}"))?;
    let wf = m
        .manifest
        .workflow
        .as_ref()
        .expect("workflow_type checked it");
    if let Some(file) = &wf.file {
        return Ok(crate::bounded::compile(&CompileRequest {
            pack_root: m.dir.clone(),
            file: file.clone(),
            params: params.to_vec(),
            agent: Some(m.manifest.agent.clone()),
            workflow_type: Some(ty),
            result: wf.result.clone(),
            history_record: wf.history_record.clone(),
            limits: Limits::default(),
        }));
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
    let problems = validate::validate(&plan);
    if problems.is_empty() {
        let agent = &m.manifest.agent;
        return Ok(
            crucible_dsl::apply_launch_settings(&mut plan, params, Some(agent))
                .map(|repo_ref| Compiled { plan, repo_ref }),
        );
    }
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

/// The truncation verdict (RFC-0002:C-PLAYBOOK-CAPS): a required task needing a missing
/// capability truncates the plan; an advisory one is skipped with its dependents.
pub fn verdict(plan: &Plan, caps: &[String]) -> (Option<String>, Vec<String>) {
    let missing = |needs: &str| needs != "any" && !caps.iter().any(|c| c == needs);
    let mut skipped = Vec::new();
    for t in &plan.tasks {
        if !missing(&t.needs) {
            continue;
        }
        if t.required {
            return (
                Some(format!("verdict: TRUNCATED — {} needs {}", t.name, t.needs)),
                Vec::new(),
            );
        }
        let mut below: BTreeSet<&str> = BTreeSet::from([t.name.as_str()]);
        // Dependents in any order: repeat until no new one appears.
        loop {
            let before = below.len();
            for d in &plan.tasks {
                // A settled join runs whatever its dependencies settled as (RFC-0002:C-SETTLED-JOIN).
                if d.join != crucible_plan::Join::Settled
                    && d.depends_on.iter().any(|x| below.contains(x.as_str()))
                {
                    below.insert(d.name.as_str());
                }
            }
            if below.len() == before {
                break;
            }
        }
        let dependents: Vec<&str> = below.into_iter().filter(|n| *n != t.name).collect();
        skipped.push(format!(
            "skipped: {} needs {} (advisory), with {}",
            t.name,
            t.needs,
            if dependents.is_empty() {
                "no dependents".to_string()
            } else {
                dependents.join(", ")
            }
        ));
    }
    (None, skipped)
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

fn print_deadlines(plan: &Plan) {
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
        Ok(b) => println!(
            "  history: at most {b} bytes per task ({})",
            crucible_engine::history::HISTORY_MAX_BYTES_ENV
        ),
        Err(e) => eprintln!("warning: {e}"),
    }
    // RFC-0002:C-ASKS: the bound is discoverable before a run starts.
    match crate::run::asks_bound() {
        Ok(n) => println!(
            "  asks: at most {n} per run ({})",
            crucible_engine::asks::MAX_ASKS_ENV
        ),
        Err(e) => eprintln!("warning: {e}"),
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
        Err(e) => eprintln!("warning: {e}"),
    }
}

pub fn show(a: &ShowArgs) -> Result<ExitCode> {
    let compiled = match (&a.manifest, &a.file) {
        (Some(m), _) => {
            let m = manifest::load(m).map_err(|e| anyhow!("{e}"))?;
            manifest_plan(&m, &a.params)?
        }
        (None, Some(f)) => {
            let (root, file) = locate(f, None)?;
            crate::bounded::compile(&CompileRequest {
                pack_root: root,
                file,
                params: a.params.clone(),
                ..Default::default()
            })
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
    print_table(&plan);
    print_deadlines(&plan);
    // A malformed binding is check's and run's to report; here it only adds no capability.
    let inference = crate::run::inference_bindings().unwrap_or_default();
    let (truncated, skipped) = verdict(&plan, &crate::run::substrate_caps(&a.caps, &inference));
    for s in &skipped {
        println!("{s}");
    }
    match truncated {
        Some(v) => {
            println!("{v}");
            Ok(ExitCode::from(1))
        }
        None => {
            println!("verdict: runnable");
            Ok(ExitCode::SUCCESS)
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
    if let Some(goal_file) = &agent.goal_file {
        let dir = crucible_pack::files::PackDir::open(&m.dir)?;
        if let Err(e) = dir.read(goal_file, Limits::default().max_file_bytes) {
            eprintln!(
                "error[RFC-0001:C-MANIFEST]: [agent].goal_file {}",
                escape(&e.to_string())
            );
            findings += 1;
        }
    }
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
    if let Some(plan) = &plan {
        println!(
            "graph: {} tasks, type {}",
            plan.tasks.len(),
            plan.workflow_type
        );
        print_deadlines(plan);
        let needed: BTreeSet<&str> = plan
            .tasks
            .iter()
            .map(|t| t.needs.as_str())
            .filter(|n| *n != "any")
            .collect();
        if !needed.is_empty() {
            println!(
                "capabilities needed: {}",
                needed.into_iter().collect::<Vec<_>>().join(", ")
            );
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
        let caps = crate::run::substrate_caps(&a.caps, &inference);
        let (truncated, skipped) = verdict(plan, &caps);
        for s in &skipped {
            println!("{s}");
        }
        match truncated {
            // Without --cap (or a binding) the substrate is unknown: the verdict is shown, not
            // held against the pack.
            Some(v) if caps.is_empty() => {
                println!("{v} (with no --cap given; pass the substrate's capabilities to check it)")
            }
            Some(v) => {
                println!("{v}");
                findings += 1;
            }
            None => println!("verdict: runnable"),
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
    for (name, sb) in &agent.sandbox {
        let line = format!(
            "  sandbox {name}: image {}, secrets [{}], endpoints [{}]",
            sb.image.as_deref().unwrap_or("default"),
            sb.secrets.join(", "),
            sb.endpoints.join(", ")
        );
        println!("{}", escape(&line));
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
    if findings == 0 {
        println!("check: ok");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("check: {findings} finding(s)");
        Ok(ExitCode::from(1))
    }
}

pub fn pack_digest(a: &DigestArgs) -> Result<ExitCode> {
    let listing = pack_files(&a.dir).map_err(|e| anyhow!("{}: {e}", a.dir.display()))?;
    for p in &listing.ignored {
        eprintln!("ignored: {}", escape(p));
    }
    println!("{}", tree1_of(&a.dir, &listing)?);
    Ok(ExitCode::SUCCESS)
}

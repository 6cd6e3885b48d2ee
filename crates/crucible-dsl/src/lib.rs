//! The workflow compiler: `workflow.star` (a Starlark dialect) → a static, validated [`Plan`].
//!
//! This is the only crate that sees Starlark values; everything it hands back is owned plan
//! data. Evaluation has no processes, network, clock, randomness or environment: the only file
//! access is `prompt_file`, `schema_file`, `skill` and `load`, all through [`PackDir`].

mod builtins;
mod ctx;
pub mod diag;
mod nesting;
pub mod params;
mod runbook;
pub mod settings;
pub mod signature;
mod values;

use crate::ctx::{Ctx, Loc, Pending};
use crate::diag::rules;
pub use crate::diag::{Diagnostic, Diagnostics};
use crucible_pack::files::PackDir;
use crucible_pack::manifest::AgentConfig;
use crucible_plan::validate::{source_answers, validate};
use crucible_plan::vocab::UNCERTAIN;
use crucible_plan::{Plan, QuestionKind, WorkflowType, PLAN_VERSION};
use starlark::environment::{FrozenModule, Globals, GlobalsBuilder, Module};
use starlark::eval::{Evaluator, FileLoader};
use starlark::syntax::ast::{ArgumentP, AstLiteral, ExprP};
use starlark::syntax::{AstModule, Dialect, DialectTypes};
use starlark::values::ValueLike;
use starlark_syntax::syntax::uniplate::Visit;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Evaluation ceilings. Every one is printed by `crucible check`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest `.star` source, the workflow or a loaded module, in bytes.
    pub max_source_bytes: u64,
    /// Largest file `prompt_file`, `schema_file`, `skill` or a template may read, in bytes.
    pub max_file_bytes: u64,
    /// Most tasks one workflow may construct.
    pub max_tasks: usize,
    /// Evaluation steps (function calls and loop iterations) per module.
    pub max_eval_steps: u64,
    /// Largest rendered prompt, in bytes.
    pub max_prompt_bytes: u64,
    /// Deepest nesting of brackets, operators and blocks a source may hold (see `nesting`).
    pub max_nesting: usize,
    /// Most memory one compile may use, in bytes. The compiler cannot bound one evaluation
    /// step's allocation from inside, so whoever runs the compile enforces it: the CLI runs
    /// every compile in a child process under this limit (`RLIMIT_DATA`).
    pub max_eval_memory: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_source_bytes: 1024 * 1024,
            max_file_bytes: crucible_pack::files::MAX_FILE_BYTES,
            max_tasks: 5_000,
            max_eval_steps: 10_000_000,
            max_prompt_bytes: 256 * 1024,
            max_nesting: 200,
            max_eval_memory: 512 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// `(name, value, meaning)` for printing.
    pub fn describe(&self) -> Vec<(&'static str, String, &'static str)> {
        vec![
            (
                "max_source_bytes",
                self.max_source_bytes.to_string(),
                "largest .star source or loaded module",
            ),
            (
                "max_file_bytes",
                self.max_file_bytes.to_string(),
                "largest prompt_file/schema_file/skill/template file",
            ),
            (
                "max_tasks",
                self.max_tasks.to_string(),
                "most tasks one workflow constructs",
            ),
            (
                "max_eval_steps",
                self.max_eval_steps.to_string(),
                "evaluation steps (calls and loop iterations) per module",
            ),
            (
                "max_prompt_bytes",
                self.max_prompt_bytes.to_string(),
                "largest rendered prompt",
            ),
            (
                "max_nesting",
                self.max_nesting.to_string(),
                "deepest nesting of brackets, operators and blocks in a source",
            ),
            (
                "max_eval_memory",
                self.max_eval_memory.to_string(),
                "most memory one compile may use, in bytes",
            ),
        ]
    }
}

/// What to compile.
#[derive(Clone, Debug, Default)]
pub struct CompileRequest {
    /// The pack directory; every file access is confined below it.
    pub pack_root: PathBuf,
    /// The workflow source, relative to the pack root.
    pub file: String,
    /// Raw `--param` values: `name=value` parameters and dotted launch settings.
    pub params: Vec<String>,
    /// The manifest's `[agent]`: launch-setting permissions and defaults. `None` refuses every
    /// launch setting and applies no default.
    pub agent: Option<AgentConfig>,
    /// The manifest's `[workflow].type`, which the source must agree with.
    pub workflow_type: Option<WorkflowType>,
    /// The manifest's `[workflow].result` and `history_record`: they apply where the source's
    /// `workflow()` names none, and must agree where it does.
    pub result: Option<String>,
    pub history_record: Option<String>,
    pub limits: Limits,
}

/// A compiled plan with the launch settings that are not task fields.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Compiled {
    pub plan: Plan,
    /// `repo.ref` from the launch, when supplied and allowed.
    pub repo_ref: Option<String>,
}

pub(crate) fn dialect() -> Dialect {
    Dialect {
        enable_def: true,
        enable_lambda: true,
        enable_load: true,
        enable_keyword_only_arguments: true,
        enable_positional_only_arguments: false,
        enable_types: DialectTypes::Disable,
        // A loaded module cannot re-export what it loaded.
        enable_load_reexport: false,
        enable_top_level_stmt: true,
        // An f-string could interpolate an external value: `+` into a prompt is the only way.
        enable_f_strings: false,
        ..Dialect::Standard
    }
}

/// The globals a lane has in scope: scored-lane names do not exist in a playbook at all, so no
/// did-you-mean can offer one.
pub(crate) fn globals(lane: WorkflowType) -> Globals {
    let mut b = GlobalsBuilder::standard().with(builtins::common);
    if lane != WorkflowType::Autoresearch {
        b = b.with(builtins::routes);
    }
    if lane != WorkflowType::Playbook {
        b = b.with(builtins::scored);
    }
    b.build()
}

fn file_diag(file: &str, rule: &str, message: String, fix: &str) -> Diagnostic {
    Diagnostic {
        file: file.to_string(),
        line: 1,
        col: 1,
        rule: rule.to_string(),
        message,
        fix: fix.to_string(),
        source_line: None,
        did_you_mean: None,
    }
}

/// Reads and parses a pack source under the size limit.
fn parse_source(
    pack: &PackDir,
    file: &str,
    limits: &Limits,
) -> Result<(AstModule, String), Diagnostics> {
    let bytes = pack.read(file, limits.max_source_bytes).map_err(|e| {
        file_diag(
            file,
            rules::FILE,
            format!("cannot read `{file}`: {}", e.kind),
            "name a regular .star file below the pack directory, within the source size limit",
        )
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        file_diag(
            file,
            rules::FILE,
            format!("`{file}` is not UTF-8"),
            "store the source as UTF-8",
        )
    })?;
    if let Some((offset, depth)) = nesting::too_deep(file, &text, &dialect(), limits.max_nesting) {
        let (line, col) = nesting::line_col(&text, offset);
        return Err(Diagnostics::from(Diagnostic {
            file: file.to_string(),
            line,
            col,
            rule: rules::LIMIT.to_string(),
            message: format!(
                "nesting {depth} deep passes the limit max_nesting = {}",
                limits.max_nesting
            ),
            fix: "flatten the expression: name intermediate values, or build lists in a loop"
                .to_string(),
            // A bomb is often one enormous line: quote it only when it is short.
            source_line: text
                .lines()
                .nth(line - 1)
                .filter(|l| l.len() <= 240)
                .map(str::to_string),
            did_you_mean: None,
        }));
    }
    let ast = AstModule::parse(file, text.clone(), &dialect()).map_err(|e| {
        Diagnostics::from(starlark_diag(
            &e,
            &HashMap::from([(file.to_string(), text.clone())]),
            file,
        ))
    })?;
    Ok((ast, text))
}

/// A starlark error (syntax, unknown name, type, ceiling) as a diagnostic.
fn starlark_diag(e: &starlark::Error, sources: &HashMap<String, String>, main: &str) -> Diagnostic {
    let msg = e.without_diagnostic().to_string();
    let first = msg.lines().next().unwrap_or("").trim().to_string();
    let (file, line, col) = match e.span() {
        Some(s) => {
            let p = s.resolve_span().begin;
            (s.filename().to_string(), p.line + 1, p.column + 1)
        }
        None => (main.to_string(), 1, 1),
    };
    let source_line = sources
        .get(&file)
        .and_then(|s| s.lines().nth(line - 1))
        .map(str::to_string);
    let (rule, fix) = if first.contains("external_value") {
        (rules::PARAMS, "a value from outside the pack takes no method or operator but +: concatenate it into a prompt, or read `params` from $CRUCIBLE_INPUTS_FILE in a command")
    } else if first.contains("not found") {
        (
            "unknown-name",
            "check the spelling; lanes decide which constructors exist",
        )
    } else if first.contains("tick") || first.contains("Exceeded") {
        (
            rules::LIMIT,
            "the source takes too many evaluation steps: simplify its loops",
        )
    } else if matches!(e.kind(), starlark::ErrorKind::Parser(_)) {
        (rules::SYNTAX, "fix the syntax")
    } else {
        (rules::EVAL, "fix the expression")
    };
    let did_you_mean = first
        .split("did you mean `")
        .nth(1)
        .and_then(|r| r.split('`').next())
        .map(str::to_string);
    Diagnostic {
        file,
        line,
        col,
        rule: rule.to_string(),
        message: first,
        fix: fix.to_string(),
        source_line,
        did_you_mean,
    }
}

/// The lane the source declares in `workflow(type = "...")`, read before evaluation so the
/// right constructors are in scope.
fn declared_lane(ast: &AstModule, file: &str) -> Result<Option<WorkflowType>, Box<Diagnostic>> {
    let mut found: Result<Option<WorkflowType>, Box<Diagnostic>> = Ok(None);
    fn walk(
        v: Visit<'_, starlark::syntax::ast::AstNoPayload>,
        f: &mut dyn FnMut(&starlark::syntax::ast::AstExpr),
    ) {
        if let Visit::Expr(e) = &v {
            f(e);
        }
        v.visit_children(|c| walk(c, f));
    }
    walk(Visit::Stmt(ast.statement()), &mut |e| {
        let ExprP::Call(callee, args) = &e.node else {
            return;
        };
        if !matches!(&callee.node, ExprP::Identifier(id) if id.node.ident == "workflow") {
            return;
        }
        for a in &args.args {
            if let ArgumentP::Named(n, v) = &a.node {
                if n.node != "type" {
                    continue;
                }
                let pos = ast.file_span(v.span).resolve_span().begin;
                let at = |message: String, fix: &str| {
                    Box::new(Diagnostic {
                        file: file.to_string(),
                        line: pos.line + 1,
                        col: pos.column + 1,
                        rule: rules::LANE.into(),
                        message,
                        fix: fix.into(),
                        source_line: None,
                        did_you_mean: None,
                    })
                };
                let lane = match &v.node {
                    ExprP::Literal(AstLiteral::String(s)) => WorkflowType::parse(&s.node)
                        .ok_or_else(|| {
                            at(
                                format!("type = \"{}\" is not a workflow type", s.node),
                                "use \"playbook\", \"custom\" or \"autoresearch\"",
                            )
                        }),
                    _ => Err(at(
                        "workflow(type = ...) is not a string literal".into(),
                        "write the lane as a literal: it decides which constructors exist",
                    )),
                };
                found = match (found.clone(), lane) {
                    (Err(e), _) | (_, Err(e)) => Err(e),
                    (Ok(Some(a)), Ok(b)) if a != b => Err(at(
                        "two workflow() calls name different lanes".into(),
                        "name one lane",
                    )),
                    (_, Ok(b)) => Ok(Some(b)),
                };
            }
        }
    });
    found
}

/// Loads `.star` modules below the pack for `load()`.
struct PackLoader<'c> {
    ctx: &'c Ctx,
    globals: &'c Globals,
}

impl FileLoader for PackLoader<'_> {
    fn load(&self, path: &str) -> starlark::Result<FrozenModule> {
        let site = self.ctx.load_sites.borrow().get(path).cloned();
        let at_site = |rule: &str, message: String, fix: &str| match &site {
            Some(loc) => self.ctx.diag(loc, None, rule, message, fix.to_string()),
            None => file_diag(path, rule, message, fix),
        };
        let fail = |message: String, fix: &str| {
            self.ctx
                .diags
                .borrow_mut()
                .push(at_site(rules::FILE, message, fix));
            starlark::Error::new_other(anyhow::Error::new(ctx::Recorded))
        };
        if let Some(m) = self.ctx.modules.borrow().get(path) {
            return Ok(m.clone());
        }
        if !path.ends_with(".star") {
            return Err(fail(
                format!("load(\"{path}\") is not a .star module"),
                "load a .star file below the pack",
            ));
        }
        if self.ctx.loading.borrow().iter().any(|p| p == path) {
            return Err(fail(
                format!("load(\"{path}\") is a cycle"),
                "modules may not load each other in a cycle",
            ));
        }
        let (ast, text) = parse_source(&self.ctx.pack, path, &self.ctx.limits).map_err(|d| {
            // A module that cannot be read is reported at its load(); a syntax error inside it
            // at its own line.
            let mut ds = d.0;
            for x in ds.iter_mut().filter(|x| x.rule == rules::FILE) {
                *x = at_site(rules::FILE, x.message.clone(), &x.fix);
            }
            self.ctx.diags.borrow_mut().extend(ds);
            starlark::Error::new_other(anyhow::Error::new(ctx::Recorded))
        })?;
        if let Ok(Some(_)) | Err(_) = params::read_block(&ast, path, &text) {
            self.ctx.diags.borrow_mut().push(at_site(
                rules::PARAMS,
                format!("loaded module `{path}` declares params"),
                "only the source a run names may declare parameters: move the block there",
            ));
            return Err(starlark::Error::new_other(anyhow::Error::new(
                ctx::Recorded,
            )));
        }
        self.ctx.sources.borrow_mut().insert(path.to_string(), text);
        self.ctx.index_calls(path, &ast);
        self.ctx.loading.borrow_mut().push(path.to_string());
        let result = Module::with_temp_heap(|module| {
            {
                let mut eval = Evaluator::new(&module);
                eval.extra = Some(self.ctx);
                eval.set_loader(self);
                eval.set_max_tick_count(self.ctx.limits.max_eval_steps)
                    .map_err(starlark::Error::new_other)?;
                eval.eval_module(ast, self.globals)?;
            }
            module.freeze().map_err(starlark::Error::from)
        });
        self.ctx.loading.borrow_mut().pop();
        let m = result?;
        self.ctx
            .modules
            .borrow_mut()
            .insert(path.to_string(), m.clone());
        Ok(m)
    }
}

/// `name=value` parameters, and dotted launch settings with their position.
type SplitParams = (Vec<(String, String)>, Vec<(usize, String, String)>);

/// Splits raw `--param` strings into parameters and dotted launch settings.
fn split_params(raw: &[String]) -> Result<SplitParams, Diagnostics> {
    let mut plain = Vec::new();
    let mut dotted = Vec::new();
    let mut errors = Vec::new();
    for (i, p) in raw.iter().enumerate() {
        let Some((k, v)) = p.split_once('=') else {
            errors.push(Diagnostic {
                line: i + 1,
                ..file_diag(
                    "--param",
                    rules::PARAMS,
                    format!("`{p}` is not name=value"),
                    "write --param name=value",
                )
            });
            continue;
        };
        if k.contains('.') {
            dotted.push((i, k.to_string(), v.to_string()));
        } else {
            plain.push((k.to_string(), v.to_string()));
        }
    }
    if errors.is_empty() {
        Ok((plain, dotted))
    } else {
        Err(Diagnostics(errors))
    }
}

/// Applies launch settings to a plan that no source compiled (a manifest's inline
/// `[[workflow.task]]` tables), with exactly the checks a compile makes. Such a plan declares no
/// parameters, so an undotted name is refused. Returns the launch's `repo.ref`, if any.
pub fn apply_launch_settings(
    plan: &mut Plan,
    raw: &[String],
    agent: Option<&AgentConfig>,
) -> Result<Option<String>, Diagnostics> {
    let (plain, dotted) = split_params(raw)?;
    if let Some((name, _)) = plain.first() {
        return Err(file_diag(
            "--param",
            rules::PARAMS,
            format!("`{name}` is not a parameter: an inline [[workflow.task]] plan declares none"),
            "bind values in [workflow.params], or compile the graph from a workflow.star with a params block",
        )
        .into());
    }
    let overrides = agent.map(|a| a.overrides.clone()).unwrap_or_default();
    let launch = settings::parse(&dotted, &overrides).map_err(Diagnostics)?;
    settings::apply(plan, &launch, agent).map_err(Diagnostics)?;
    Ok(launch.repo_ref)
}

/// The params block of a source as a JSON Schema (draft 2020-12), without evaluating it.
pub fn params_schema(path: &Path) -> Result<serde_json::Value, Diagnostics> {
    let root = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let pack = PackDir::open(root).map_err(|e| {
        file_diag(
            name,
            rules::FILE,
            e.to_string(),
            "name a readable source file",
        )
    })?;
    let (ast, text) = parse_source(&pack, name, &Limits::default())?;
    let block = params::read_block(&ast, name, &text).map_err(Diagnostics)?;
    Ok(params::to_schema(block.as_ref()))
}

/// Checks parameter values given as JSON (an ask's, RFC-0002:C-ASKS) against the params block
/// of the source `file` under `pack_root`, read without evaluating it: every value names a
/// declared parameter and satisfies its type and constraint, and every required parameter
/// without a default has one. Returns each name with its value as the text `--param` takes,
/// which binds to the same value; or why the values do not satisfy the schema.
pub fn check_supplied(
    pack_root: &Path,
    file: &str,
    values: &BTreeMap<String, serde_json::Value>,
) -> Result<Vec<(String, String)>, String> {
    let pack = PackDir::open(pack_root).map_err(|e| e.to_string())?;
    let (ast, text) = parse_source(&pack, file, &Limits::default()).map_err(|d| d.to_string())?;
    let block = params::read_block(&ast, file, &text)
        .map_err(|d| Diagnostics(d).to_string())?
        .unwrap_or_default();
    let mut out = Vec::with_capacity(values.len());
    for (name, v) in values {
        let Some(d) = block.decls.iter().find(|d| &d.name == name) else {
            return Err(format!("`{name}` is not a declared parameter"));
        };
        params::check_value(d, v).map_err(|why| format!("parameter `{name}`: {why}"))?;
        let raw = match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push((name.clone(), raw));
    }
    if let Some(d) = block
        .decls
        .iter()
        .find(|d| d.required && d.default.is_none() && !values.contains_key(&d.name))
    {
        return Err(format!("required parameter `{}` has no value", d.name));
    }
    Ok(out)
}

/// Compiles a workflow source into a validated plan, with parameters bound and launch
/// settings applied.
pub fn compile(req: &CompileRequest) -> Result<Compiled, Diagnostics> {
    let pack = PackDir::open(&req.pack_root).map_err(|e| {
        file_diag(
            &req.file,
            rules::FILE,
            format!("cannot open the pack directory: {e}"),
            "name an existing pack directory",
        )
    })?;
    let (ast, text) = parse_source(&pack, &req.file, &req.limits)?;
    let block = params::read_block(&ast, &req.file, &text).map_err(Diagnostics)?;
    let (plain, dotted) = split_params(&req.params)?;
    let overrides = req
        .agent
        .as_ref()
        .map(|a| a.overrides.clone())
        .unwrap_or_default();
    let mut errors = Vec::new();
    let bound = params::bind(block.as_ref(), &plain, &req.file).unwrap_or_else(|mut e| {
        errors.append(&mut e);
        BTreeMap::new()
    });
    let launch = settings::parse(&dotted, &overrides).unwrap_or_else(|mut e| {
        errors.append(&mut e);
        Default::default()
    });
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    let declared = declared_lane(&ast, &req.file).map_err(|d| Diagnostics::from(*d))?;
    let lane = match (declared, req.workflow_type) {
        (Some(d), Some(m)) if d != m => {
            return Err(file_diag(
                &req.file,
                rules::LANE,
                format!("the source declares type \"{d}\" but the manifest says \"{m}\""),
                "make [workflow].type and workflow(type = ...) agree",
            )
            .into());
        }
        (Some(d), _) => d,
        (None, Some(m)) => m,
        (None, None) => WorkflowType::Playbook,
    };
    let ctx = Ctx {
        pack,
        pack_root: req.pack_root.clone(),
        main_file: req.file.clone(),
        limits: req.limits.clone(),
        lane,
        params: bound.clone(),
        declares_params: block.is_some(),
        sources: RefCell::new(HashMap::from([(req.file.clone(), text)])),
        calls: RefCell::default(),
        tasks: RefCell::default(),
        questions: RefCell::default(),
        schemas: RefCell::default(),
        diags: RefCell::default(),
        workflow: RefCell::default(),
        modules: RefCell::default(),
        loading: RefCell::default(),
        load_sites: RefCell::default(),
    };
    ctx.index_calls(&req.file, &ast);
    let globals = globals(lane);
    let loader = PackLoader {
        ctx: &ctx,
        globals: &globals,
    };
    let evaluated = Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        eval.extra = Some(&ctx);
        eval.set_loader(&loader);
        eval.set_max_tick_count(req.limits.max_eval_steps)
            .map_err(starlark::Error::new_other)?;
        eval.eval_module(ast, &globals)
            .map(|v| v.downcast_ref::<values::WorkflowValue>().is_some())
    });
    let recorded = ctx.diags.take();
    if !recorded.is_empty() {
        return Err(Diagnostics(recorded));
    }
    let ends_with_workflow = evaluated
        .map_err(|e| Diagnostics::from(starlark_diag(&e, &ctx.sources.borrow(), &req.file)))?;
    let Some(wf) = ctx.workflow.take() else {
        return Err(file_diag(
            &req.file,
            rules::LISTED,
            "the source never calls workflow(...)".into(),
            "end the source with workflow([...tasks], type = \"playbook\")",
        )
        .into());
    };
    if !ends_with_workflow {
        return Err(file_diag(
            &req.file,
            rules::LISTED,
            "workflow(...) is not the source's final expression".into(),
            "make workflow(...) the last statement",
        )
        .into());
    }
    let mut plan = finish(&ctx, wf, lane, bound, req)?;
    settings::apply(&mut plan, &launch, req.agent.as_ref()).map_err(Diagnostics)?;
    Ok(Compiled {
        plan,
        repo_ref: launch.repo_ref,
    })
}

/// The source's selection, or the manifest's where the source names none; they must agree.
fn merge_selection(
    ctx: &Ctx,
    key: &str,
    source: Option<String>,
    manifest: &Option<String>,
) -> Result<Option<String>, Diagnostics> {
    match (source, manifest) {
        (Some(s), Some(m)) if &s != m => Err(file_diag(
            &ctx.main_file,
            rules::WORKFLOW,
            format!(
                "workflow({key} = {s}) disagrees with the manifest's [workflow].{key} = \"{m}\""
            ),
            "name the task in one place",
        )
        .into()),
        (Some(s), _) => Ok(Some(s)),
        (None, m) => Ok(m.clone()),
    }
}

/// Expands `when`, assembles the plan in `workflow()` order, and validates it, mapping each
/// validation error back to the constructor call (or argument) it concerns.
fn finish(
    ctx: &Ctx,
    wf: crate::ctx::WorkflowDecl,
    lane: WorkflowType,
    params: BTreeMap<String, serde_json::Value>,
    req: &CompileRequest,
) -> Result<Plan, Diagnostics> {
    let agent = req.agent.as_ref();
    let pending: Vec<Pending> = ctx.tasks.borrow().clone();
    let mut errors = Vec::new();
    // A sandbox names an [agent.sandbox.<name>]; without a manifest there is nothing to check.
    if let Some(agent) = agent {
        for p in &pending {
            if let Some(sb) = p
                .task
                .sandbox
                .as_deref()
                .filter(|sb| !agent.sandbox.contains_key(*sb))
            {
                let mut d = ctx.diag(
                    &p.loc,
                    Some("sandbox"),
                    rules::WORKFLOW,
                    format!("sandbox `{sb}` is not declared in the manifest"),
                    format!("declare [agent.sandbox.{sb}], or name a declared one"),
                );
                d.did_you_mean =
                    crate::diag::did_you_mean(sb, agent.sandbox.keys().map(String::as_str));
                errors.push(d);
            }
        }
    }
    let listed: BTreeSet<usize> = wf.tasks.iter().copied().collect();
    for (i, p) in pending.iter().enumerate() {
        if !listed.contains(&i) {
            errors.push(ctx.diag(
                &p.loc,
                Some("name"),
                rules::LISTED,
                format!(
                    "task `{}` is constructed but not listed in workflow()",
                    p.task.name
                ),
                format!(
                    "add `{}` to workflow([...]), or do not construct it",
                    p.task.name
                ),
            ));
        }
    }
    // Answers every non-otherwise `when` lists, per route question: a noul's `when` with no
    // answers lists its default, "yes", so an `otherwise` beside it never takes "yes" too.
    let mut listed_answers: BTreeMap<(usize, String), BTreeSet<String>> = BTreeMap::new();
    for p in &pending {
        if let Some(w) = &p.when {
            let noul = (pending[w.route].task.route.as_ref())
                .and_then(|r| r.questions.get(&w.question))
                .is_some_and(|q| q.kind == QuestionKind::Noul);
            let listed = match (&w.answers, w.otherwise) {
                (Some(ans), _) => ans.clone(),
                (None, false) if noul => vec!["yes".to_string()],
                (None, _) => continue,
            };
            listed_answers
                .entry((w.route, w.question.clone()))
                .or_default()
                .extend(listed);
        }
    }
    let mut tasks = Vec::new();
    for &i in &wf.tasks {
        let p = &pending[i];
        let mut t = p.task.clone();
        if let Some(w) = &p.when {
            let route = &pending[w.route];
            let q = route
                .task
                .route
                .as_ref()
                .and_then(|r| r.questions.get(&w.question));
            // `otherwise` on a choice read from a field also stands for every option the
            // choice resolves to: only the decision knows them, so the engine matches them.
            let every_option = w.otherwise && q.is_some_and(|q| q.options_from.is_some());
            let answers = match (q, &w.answers, w.otherwise) {
                (_, Some(a), _) => a.clone(),
                (Some(q), None, true) => {
                    let taken = listed_answers
                        .get(&(w.route, w.question.clone()))
                        .cloned()
                        .unwrap_or_default();
                    // A typed source narrows what the question can answer.
                    let given = route
                        .task
                        .route
                        .as_ref()
                        .and_then(|r| r.source.as_ref())
                        .and_then(|s| pending.iter().find(|p| &p.task.name == s))
                        .and_then(|s| s.task.emits.get(&w.question))
                        .and_then(|ty| source_answers(ty, q));
                    let rest: Vec<String> = q
                        .answers()
                        .into_iter()
                        .filter(|a| !taken.contains(a) && !q.drop.contains(a))
                        .filter(|a| a == UNCERTAIN || given.as_ref().is_none_or(|g| g.contains(a)))
                        .collect();
                    if rest.is_empty() && !every_option {
                        errors.push(ctx.diag(&p.loc, Some("otherwise"), rules::ROUTE, format!("otherwise on `{}.{}` is unreachable: every answer is listed or dropped", route.task.name, w.question), "remove the task's when, or free an answer for it".into()));
                    }
                    rest
                }
                (Some(q), None, false) if q.kind == QuestionKind::Noul => vec!["yes".to_string()],
                (Some(q), None, false) => {
                    errors.push(ctx.diag(&p.loc, Some("when"), rules::ROUTE, format!("when on {} `{}.{}` lists no answers", q.kind, route.task.name, w.question), "add answers = [...] or otherwise = True: only a noul defaults to \"yes\"".into()));
                    Vec::new()
                }
                // An unknown question: validation names it with a did-you-mean.
                (None, None, _) => Vec::new(),
            };
            t.when = Some(crucible_plan::When {
                route: route.task.name.clone(),
                question: w.question.clone(),
                answers,
                every_option,
            });
        }
        tasks.push(t);
    }
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    let plan = Plan {
        version: PLAN_VERSION,
        workflow_type: lane,
        result: merge_selection(
            ctx,
            "result",
            wf.result.map(|i| pending[i].task.name.clone()),
            &req.result,
        )?,
        history_record: merge_selection(
            ctx,
            "history_record",
            wf.history_record.map(|i| pending[i].task.name.clone()),
            &req.history_record,
        )?,
        params,
        tasks,
    };
    let problems = validate(&plan);
    if problems.is_empty() {
        return Ok(plan);
    }
    let wf_loc = Loc {
        file: ctx.main_file.clone(),
        line: 1,
        col: 1,
        call: None,
    };
    Err(Diagnostics(
        problems
            .into_iter()
            .map(|e| {
                let loc = e
                    .task
                    .as_ref()
                    .and_then(|n| pending.iter().find(|p| &p.task.name == n))
                    .map(|p| p.loc.clone());
                let mut d = match &loc {
                    Some(l) => ctx.diag(
                        l,
                        e.arg.as_deref(),
                        &e.rule,
                        e.message.clone(),
                        e.fix.clone(),
                    ),
                    None => ctx.diag(&wf_loc, None, &e.rule, e.message.clone(), e.fix.clone()),
                };
                if let Some(s) = e
                    .fix
                    .strip_prefix("did you mean `")
                    .and_then(|r| r.split('`').next())
                {
                    d.did_you_mean = Some(s.to_string());
                    d.fix = "name one the workflow defines".into();
                }
                d
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(src: &str) -> (tempfile::TempDir, CompileRequest) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("w.star"), src).unwrap();
        let req = CompileRequest {
            pack_root: d.path().to_path_buf(),
            file: "w.star".into(),
            ..Default::default()
        };
        (d, req)
    }

    #[test]
    fn task_count_and_prompt_size_are_bounded() {
        let (_d, mut req) =
            pack("workflow([command(name = \"t%d\" % i, run = \"true\") for i in range(5)])\n");
        req.limits.max_tasks = 4;
        let e = compile(&req).unwrap_err();
        assert!(e.0[0].message.contains("more than 4 tasks"), "{e}");
        assert_eq!(e.0[0].rule, rules::LIMIT);
        let (_d, mut req) = pack("workflow([agent(name = \"a\", prompt = \"x\" * 100)])\n");
        req.limits.max_prompt_bytes = 99;
        let e = compile(&req).unwrap_err();
        assert!(e.0[0].message.contains("over the limit of 99"), "{e}");
        req.limits.max_source_bytes = 10;
        let e = compile(&req).unwrap_err();
        assert!(
            e.0[0].message.contains("exceeds the limit of 10 bytes"),
            "{e}"
        );
    }

    // RFC-0002:C-PLAYBOOK-SHAPE — the same pack at the same parameters compiles identically.
    #[test]
    fn compiling_is_deterministic() {
        let (_d, req) = pack(
            "xs = {\"b\": 1, \"a\": 2}\nworkflow([command(name = k, run = \"true\", emits = {\"n\": \"integer\"}) for k in xs])\n",
        );
        let a = compile(&req).unwrap();
        let b = compile(&req).unwrap();
        assert_eq!(
            crucible_plan::canonical::to_string(&a.plan),
            crucible_plan::canonical::to_string(&b.plan)
        );
        assert_eq!(a.plan.tasks[0].name, "b");
    }

    #[test]
    fn diagnostics_render_rustc_style() {
        let (_d, req) =
            pack("a = agent(name = \"a\", prompt = \"x\", repiar = 1)\nworkflow([a])\n");
        let text = compile(&req).unwrap_err().to_string();
        assert_eq!(
            text,
            "error[argument]: agent() has no argument `repiar`\n --> w.star:1:37\n  | a = agent(name = \"a\", prompt = \"x\", repiar = 1)\n  |                                     ^\n  = did you mean `repair`?\n  = help: use one of: name, prompt, harness, model, effort, sandbox, session, repair, depends_on, needs, join, required, isolated, emits, emits_files, over, max_fanout, keyed, revise, max_rounds, timeout, stage, history, when, answers, otherwise"
        );
    }
}

//! The compile context every constructor writes into, and argument parsing with spans.

use crate::diag::{did_you_mean, rules, Diagnostic};
use crate::signature::{Ctor, Read, Ty};
use crate::values::{FieldRefValue, Marked, OptionalDep, TaskRef, SENTINEL};
use crate::Limits;
use crucible_pack::files::PackDir;
use crucible_plan::{Question, Task, WorkflowType};
use serde_json::Value as Json;
use starlark::collections::SmallMap;
use starlark::environment::FrozenModule;
use starlark::eval::Evaluator;
use starlark::syntax::ast::{ArgumentP, AstNoPayload, ExprP};
use starlark::syntax::AstModule;
use starlark::values::dict::DictRef;
use starlark::values::float::StarlarkFloat;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{ProvidesStaticType, Value, ValueLike};
use starlark_syntax::syntax::uniplate::Visit;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

/// A position in a pack source.
#[derive(Clone, Debug)]
pub struct Loc {
    pub file: String,
    pub line: usize,
    pub col: usize,
    /// The call's key in [`Ctx::calls`], for argument positions.
    pub call: Option<(String, u32)>,
}

/// Where each argument of one call starts.
#[derive(Clone, Debug, Default)]
pub struct CallInfo {
    /// Named arguments by name; positional ones as `#0`, `#1`, ...
    pub args: Vec<(String, usize, usize)>,
}

/// A `when` as written, expanded once every task is known.
#[derive(Clone, Debug)]
pub struct WhenDecl {
    pub route: usize,
    pub question: String,
    pub answers: Option<Vec<String>>,
    pub otherwise: bool,
}

/// A constructed task with where it was constructed.
#[derive(Clone, Debug)]
pub struct Pending {
    pub task: Task,
    pub loc: Loc,
    pub when: Option<WhenDecl>,
}

/// The `workflow(...)` call.
#[derive(Clone, Debug)]
pub struct WorkflowDecl {
    pub tasks: Vec<usize>,
    pub result: Option<usize>,
    pub history_record: Option<usize>,
}

/// Aborts evaluation after a diagnostic was recorded.
#[derive(Debug, thiserror::Error)]
#[error("compile error (recorded)")]
pub struct Recorded;

#[derive(ProvidesStaticType)]
pub struct Ctx {
    pub pack: PackDir,
    /// The pack's directory, where a runbook bundle below it is checked and sealed.
    pub pack_root: std::path::PathBuf,
    /// The source the run names.
    pub main_file: String,
    pub limits: Limits,
    pub lane: WorkflowType,
    /// Bound parameter values by name.
    pub params: BTreeMap<String, Json>,
    pub declares_params: bool,
    pub sources: RefCell<HashMap<String, String>>,
    pub calls: RefCell<HashMap<(String, u32), CallInfo>>,
    pub tasks: RefCell<Vec<Pending>>,
    pub questions: RefCell<Vec<Question>>,
    pub schemas: RefCell<Vec<Json>>,
    pub diags: RefCell<Vec<Diagnostic>>,
    pub workflow: RefCell<Option<WorkflowDecl>>,
    pub modules: RefCell<HashMap<String, FrozenModule>>,
    pub loading: RefCell<Vec<String>>,
    /// Where each module is first loaded, for errors about the module as a whole.
    pub load_sites: RefCell<HashMap<String, Loc>>,
}

impl Ctx {
    pub fn get<'a>(eval: &Evaluator<'_, 'a, '_>) -> &'a Ctx {
        eval.extra
            .and_then(|e| e.downcast_ref::<Ctx>())
            .expect("the compiler always sets its context")
    }

    /// Records where every call and each of its arguments sits in a parsed module.
    pub fn index_calls(&self, file: &str, ast: &AstModule) {
        fn walk<'a>(
            v: Visit<'a, AstNoPayload>,
            ast: &AstModule,
            file: &str,
            out: &mut HashMap<(String, u32), CallInfo>,
        ) {
            if let Visit::Expr(e) = &v {
                if let ExprP::Call(_, args) = &e.node {
                    let mut info = CallInfo::default();
                    let mut positional = 0;
                    for a in &args.args {
                        let name = match &a.node {
                            ArgumentP::Named(n, _) => n.node.clone(),
                            ArgumentP::Positional(_) => {
                                positional += 1;
                                format!("#{}", positional - 1)
                            }
                            _ => continue,
                        };
                        let pos = ast.file_span(a.span).resolve_span().begin;
                        info.args.push((name, pos.line + 1, pos.column + 1));
                    }
                    out.insert((file.to_string(), e.span.begin().get()), info);
                }
            }
            v.visit_children(|c| walk(c, ast, file, out));
        }
        let mut calls = self.calls.borrow_mut();
        walk(Visit::Stmt(ast.statement()), ast, file, &mut calls);
        let mut sites = self.load_sites.borrow_mut();
        for l in ast.loads() {
            let pos = l.span.resolve_span().begin;
            sites.entry(l.module_id.to_string()).or_insert(Loc {
                file: file.to_string(),
                line: pos.line + 1,
                col: pos.column + 1,
                call: None,
            });
        }
    }

    /// The location of the native call being evaluated.
    pub fn call_loc(&self, eval: &Evaluator) -> Loc {
        match eval.call_stack_top_location() {
            Some(fs) => {
                let pos = fs.resolve_span().begin;
                let file = fs.filename().to_string();
                let key = (file.clone(), fs.span.begin().get());
                Loc {
                    file,
                    line: pos.line + 1,
                    col: pos.column + 1,
                    call: Some(key),
                }
            }
            None => Loc {
                file: "<native>".into(),
                line: 1,
                col: 1,
                call: None,
            },
        }
    }

    /// Where `arg` of the call at `loc` starts, or the call itself.
    pub fn arg_pos(&self, loc: &Loc, arg: Option<&str>) -> (usize, usize) {
        let found = arg.and_then(|a| {
            let calls = self.calls.borrow();
            let info = calls.get(loc.call.as_ref()?)?;
            info.args
                .iter()
                .find(|(n, _, _)| n == a)
                .map(|(_, l, c)| (*l, *c))
        });
        found.unwrap_or((loc.line, loc.col))
    }

    pub fn diag(
        &self,
        loc: &Loc,
        arg: Option<&str>,
        rule: &str,
        message: String,
        fix: String,
    ) -> Diagnostic {
        let (line, col) = self.arg_pos(loc, arg);
        let source_line = self
            .sources
            .borrow()
            .get(&loc.file)
            .and_then(|s| s.lines().nth(line.saturating_sub(1)).map(str::to_string));
        Diagnostic {
            file: loc.file.clone(),
            line,
            col,
            rule: rule.to_string(),
            message,
            fix,
            source_line,
            did_you_mean: None,
        }
    }

    /// Records a diagnostic and returns the error that aborts evaluation.
    pub fn fail(&self, d: Diagnostic) -> anyhow::Error {
        self.diags.borrow_mut().push(d);
        anyhow::Error::new(Recorded)
    }
}

/// One constructor call's keyword arguments, consumed as they are parsed.
pub struct Args<'v, 'c> {
    pub ctx: &'c Ctx,
    pub ctor: &'static str,
    pub spec: &'static Ctor,
    pub loc: Loc,
    kw: SmallMap<String, Value<'v>>,
    positional: Vec<Value<'v>>,
}

pub type R<T> = anyhow::Result<T>;

impl<'v, 'c> Args<'v, 'c> {
    /// Checks the names against the constructor's table (with a did-you-mean) and the
    /// positional count.
    pub fn new(
        eval: &Evaluator<'v, 'c, '_>,
        spec: &'static Ctor,
        positional: Vec<Value<'v>>,
        kw: SmallMap<String, Value<'v>>,
    ) -> R<Args<'v, 'c>> {
        let ctx = Ctx::get(eval);
        let loc = ctx.call_loc(eval);
        let ctor = spec.name;
        let a = Args {
            ctx,
            ctor,
            spec,
            loc,
            kw,
            positional,
        };
        let positional_names = spec.positional();
        if a.positional.len() > positional_names.len() {
            let msg = if positional_names.is_empty() {
                format!("{ctor}() takes keyword arguments only")
            } else {
                format!(
                    "{ctor}() takes {} positional argument(s)",
                    positional_names.len()
                )
            };
            return Err(a.fail(
                None,
                rules::ARG,
                msg,
                format!("pass arguments by name, as {ctor}(name = ...)"),
            ));
        }
        let names: Vec<&str> = spec
            .keywords()
            .into_iter()
            .chain(positional_names)
            .collect();
        for key in a.kw.keys() {
            if !names.contains(&key.as_str()) {
                let mut d = ctx.diag(
                    &a.loc,
                    Some(key),
                    rules::ARG,
                    format!("{ctor}() has no argument `{key}`"),
                    format!("use one of: {}", names.join(", ")),
                );
                d.did_you_mean = did_you_mean(key, names.iter().copied());
                return Err(ctx.fail(d));
            }
        }
        Ok(a)
    }

    /// In debug builds, that a declared argument is read the way its row says: the tables the
    /// reference is generated from cannot drift from what the compiler reads.
    fn reads(&self, name: &str, read: Read) {
        if let Some(arg) = self.spec.arg(name) {
            debug_assert_eq!(
                arg.ty.read(),
                Some(read),
                "{}(): `{name}` is read as {read:?} but its row says {:?}",
                self.ctor,
                arg.ty
            );
        }
    }

    pub fn fail(
        &self,
        arg: Option<&str>,
        rule: &str,
        message: String,
        fix: String,
    ) -> anyhow::Error {
        self.ctx
            .fail(self.ctx.diag(&self.loc, arg, rule, message, fix))
    }

    fn type_err(&self, arg: &str, want: &str, got: Value<'v>) -> anyhow::Error {
        if got.downcast_ref::<Marked>().is_some() {
            return self.external_err(arg);
        }
        self.fail(
            Some(arg),
            rules::ARG,
            format!(
                "{}(): `{arg}` must be {want}, not {}",
                self.ctor,
                got.get_type()
            ),
            format!("pass {want} as `{arg}`"),
        )
    }

    /// An external value where only pack text may go.
    pub fn external_err(&self, arg: &str) -> anyhow::Error {
        self.fail(
            Some(arg),
            rules::PARAMS,
            format!("{}(): `{arg}` holds a value from outside the pack", self.ctor),
            "a launch value reaches only agent prompts and skill args; a command reads it from `params` in the JSON at $CRUCIBLE_INPUTS_FILE".into(),
        )
    }

    /// Takes an argument (named, or the `i`-th positional under `name`); `None` passed
    /// explicitly reads as absent.
    pub fn take(&mut self, name: &str) -> Option<Value<'v>> {
        self.kw.shift_remove(name).filter(|v| !v.is_none())
    }

    /// Takes the positional argument `i`, or the keyword of the same name.
    pub fn take_pos(&mut self, i: usize, name: &str) -> Option<Value<'v>> {
        self.positional
            .get(i)
            .copied()
            .or_else(|| self.take(name))
            .filter(|v| !v.is_none())
    }

    pub fn require(&self, name: &str, v: Option<Value<'v>>) -> R<Value<'v>> {
        debug_assert!(
            self.spec.arg(name).is_some_and(|a| a.required),
            "{}(): `{name}` is required but its row does not say so",
            self.ctor
        );
        v.ok_or_else(|| {
            self.fail(
                None,
                rules::ARG,
                format!("{}() needs `{name}`", self.ctor),
                format!("pass {name} = ..."),
            )
        })
    }

    /// A plain string (pack text): an external value or converted text is refused.
    pub fn as_str(&self, arg: &str, v: Value<'v>) -> R<String> {
        match v.unpack_str() {
            Some(s) if s.contains(SENTINEL) => Err(self.converted_err(arg)),
            Some(s) => Ok(s.to_string()),
            None => Err(self.type_err(arg, "a string", v)),
        }
    }

    pub fn converted_err(&self, arg: &str) -> anyhow::Error {
        self.fail(
            Some(arg),
            rules::PARAMS,
            format!("{}(): `{arg}` holds text converted from a value from outside the pack", self.ctor),
            "str(), repr(), % and .format() never yield an external value: concatenate it with + into a prompt instead".into(),
        )
    }

    pub fn str(&mut self, name: &str) -> R<Option<String>> {
        self.reads(name, Read::Str);
        self.take_str(name)
    }

    fn take_str(&mut self, name: &str) -> R<Option<String>> {
        self.take(name).map(|v| self.as_str(name, v)).transpose()
    }

    pub fn req_str(&mut self, name: &str) -> R<String> {
        self.reads(name, Read::Str);
        let v = self.take(name);
        let v = self.require(name, v)?;
        self.as_str(name, v)
    }

    pub fn int(&mut self, name: &str) -> R<Option<i64>> {
        self.reads(name, Read::Int);
        match self.take(name) {
            None => Ok(None),
            Some(v) => match v.unpack_i32() {
                Some(n) => Ok(Some(n as i64)),
                None => Err(self.type_err(name, "an int", v)),
            },
        }
    }

    /// An int in `lo..=hi`.
    pub fn uint(&mut self, name: &str, lo: i64, hi: i64, rule: &str) -> R<Option<u32>> {
        match self.int(name)? {
            None => Ok(None),
            Some(n) if n < lo || n > hi => Err(self.fail(
                Some(name),
                rule,
                format!("{}(): `{name}` = {n} is outside {lo} to {hi}", self.ctor),
                format!("use a value from {lo} to {hi}"),
            )),
            Some(n) => Ok(Some(n as u32)),
        }
    }

    pub fn bool(&mut self, name: &str) -> R<Option<bool>> {
        self.reads(name, Read::Bool);
        match self.take(name) {
            None => Ok(None),
            Some(v) => match v.unpack_bool() {
                Some(b) => Ok(Some(b)),
                None => Err(self.type_err(name, "True or False", v)),
            },
        }
    }

    pub fn number(&mut self, name: &str) -> R<Option<f64>> {
        self.reads(name, Read::Number);
        match self.take(name) {
            None => Ok(None),
            Some(v) => {
                if let Some(n) = v.unpack_i32() {
                    Ok(Some(n as f64))
                } else if let Some(f) = v.downcast_ref::<StarlarkFloat>() {
                    Ok(Some(f.0))
                } else {
                    Err(self.type_err(name, "a number", v))
                }
            }
        }
    }

    /// Items of a list or tuple.
    pub fn items(&self, arg: &str, v: Value<'v>) -> R<Vec<Value<'v>>> {
        if let Some(l) = ListRef::from_value(v) {
            Ok(l.content().to_vec())
        } else if let Some(t) = TupleRef::from_value(v) {
            Ok(t.content().to_vec())
        } else {
            Err(self.type_err(arg, "a list", v))
        }
    }

    /// Entries of a dict, in insertion order.
    pub fn entries(&self, arg: &str, v: Value<'v>) -> R<Vec<(Value<'v>, Value<'v>)>> {
        match DictRef::from_value(v) {
            Some(d) => Ok(d.iter().collect()),
            None => Err(self.type_err(arg, "a dict", v)),
        }
    }

    pub fn as_task(&self, arg: &str, v: Value<'v>) -> R<(usize, String)> {
        match v.downcast_ref::<TaskRef>() {
            Some(t) => Ok((t.idx, t.name.clone())),
            None => Err(self.type_err(arg, "a task", v)),
        }
    }

    pub fn task(&mut self, name: &str) -> R<Option<(usize, String)>> {
        self.reads(name, Read::Task);
        self.take(name).map(|v| self.as_task(name, v)).transpose()
    }

    /// A task or a list of tasks.
    pub fn tasks(&mut self, name: &str) -> R<Vec<(usize, String)>> {
        self.reads(name, Read::Tasks);
        match self.take(name) {
            None => Ok(Vec::new()),
            Some(v) if v.downcast_ref::<TaskRef>().is_some() => Ok(vec![self.as_task(name, v)?]),
            Some(v) => self
                .items(name, v)?
                .into_iter()
                .map(|x| self.as_task(name, x))
                .collect(),
        }
    }

    /// `depends_on`: tasks and `optional(task)`s; returns every name and the optional ones.
    pub fn deps(&mut self, name: &str, allow_optional: bool) -> R<(Vec<String>, Vec<String>)> {
        self.reads(name, Read::Deps);
        if let Some(arg) = self.spec.arg(name) {
            debug_assert_eq!(
                arg.ty == Ty::Deps,
                allow_optional,
                "{}(): whether `{name}` takes optional() disagrees with its row",
                self.ctor
            );
        }
        let Some(v) = self.take(name) else {
            return Ok((Vec::new(), Vec::new()));
        };
        let mut all = Vec::new();
        let mut opt = Vec::new();
        for x in self.items(name, v)? {
            if let Some(o) = x.downcast_ref::<OptionalDep>() {
                if !allow_optional {
                    return Err(self.fail(
                        Some(name),
                        rules::ARG,
                        format!("{}() takes no optional() dependency", self.ctor),
                        "list the task itself".into(),
                    ));
                }
                all.push(o.name.clone());
                opt.push(o.name.clone());
            } else {
                all.push(self.as_task(name, x)?.1);
            }
        }
        Ok((all, opt))
    }

    pub fn field(&mut self, name: &str) -> R<Option<(usize, String, String)>> {
        self.reads(name, Read::Field);
        match self.take(name) {
            None => Ok(None),
            Some(v) => match v.downcast_ref::<FieldRefValue>() {
                Some(f) => Ok(Some((f.idx, f.task.clone(), f.field.clone()))),
                None => Err(self.type_err(name, "a `producer.field` reference", v)),
            },
        }
    }

    pub fn fields(&mut self, name: &str) -> R<Vec<(String, String)>> {
        self.reads(name, Read::Fields);
        let Some(v) = self.take(name) else {
            return Ok(Vec::new());
        };
        self.items(name, v)?
            .into_iter()
            .map(|x| match x.downcast_ref::<FieldRefValue>() {
                Some(f) => Ok((f.task.clone(), f.field.clone())),
                None => Err(self.type_err(name, "a list of `producer.field` references", x)),
            })
            .collect()
    }

    pub fn str_list(&mut self, name: &str) -> R<Option<Vec<String>>> {
        self.reads(name, Read::StrList);
        match self.take(name) {
            None => Ok(None),
            Some(v) => Ok(Some(
                self.items(name, v)?
                    .into_iter()
                    .map(|x| self.as_str(name, x))
                    .collect::<R<_>>()?,
            )),
        }
    }

    /// A string or a list of strings.
    pub fn str_or_list(&mut self, name: &str) -> R<Option<Vec<String>>> {
        self.reads(name, Read::StrOrList);
        match self.take(name) {
            None => Ok(None),
            Some(v) if v.unpack_str().is_some() => Ok(Some(vec![self.as_str(name, v)?])),
            Some(v) => Ok(Some(
                self.items(name, v)?
                    .into_iter()
                    .map(|x| self.as_str(name, x))
                    .collect::<R<_>>()?,
            )),
        }
    }

    /// A duration written as `90s`, `10m` or `2h`, in seconds.
    pub fn duration(&mut self, name: &str) -> R<Option<u64>> {
        self.reads(name, Read::Duration);
        match self.take_str(name)? {
            None => Ok(None),
            Some(s) => crucible_plan::duration::parse(&s).map(Some).map_err(|why| {
                self.fail(
                    Some(name),
                    "timeout",
                    why,
                    "write a positive duration such as 90s, 10m or 2h".into(),
                )
            }),
        }
    }

    /// Reads a pack file as UTF-8 text under the file-size limit.
    pub fn pack_text(&self, arg: &str, path: &str) -> R<String> {
        let bytes = self
            .ctx
            .pack
            .read(path, self.ctx.limits.max_file_bytes)
            .map_err(|e| {
                self.fail(
                    Some(arg),
                    rules::FILE,
                    format!("{}(): cannot read `{path}`: {}", self.ctor, e.kind),
                    "name a regular file below the pack directory, reached without links".into(),
                )
            })?;
        String::from_utf8(bytes).map_err(|_| {
            self.fail(
                Some(arg),
                rules::FILE,
                format!("{}(): `{path}` is not UTF-8", self.ctor),
                "store the file as UTF-8 text".into(),
            )
        })
    }
}

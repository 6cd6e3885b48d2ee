//! The params block (RFC-0002:C-PLAYBOOK-PARAMS, ARCHITECTURE.md "Fixed: the params block"):
//! read from the syntax tree without evaluating the source, emitted as a JSON Schema, and bound
//! from `--param` values before compilation.

use crate::diag::{did_you_mean, rules, Diagnostic};
use serde_json::{json, Map, Value as Json};
use starlark::syntax::ast::{AssignTargetP, AstExpr, AstLiteral, AstStmt, ExprP, StmtP};
use starlark::syntax::AstModule;
use starlark_syntax::codemap::Span;
use starlark_syntax::lexer::TokenInt;
use std::collections::BTreeMap;

/// A declared parameter's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    String,
    Integer,
    Number,
    Boolean,
    List,
}

impl ParamType {
    fn parse(s: &str) -> Option<ParamType> {
        Some(match s {
            "string" => ParamType::String,
            "integer" => ParamType::Integer,
            "number" => ParamType::Number,
            "boolean" => ParamType::Boolean,
            "list" => ParamType::List,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Number => "number",
            ParamType::Boolean => "boolean",
            ParamType::List => "list",
        }
    }

    /// Whether `v` has this type (a list holds strings only).
    fn admits(self, v: &Json) -> bool {
        match self {
            ParamType::String => v.is_string(),
            ParamType::Integer => v.is_i64() || v.is_u64(),
            ParamType::Number => v.is_number(),
            ParamType::Boolean => v.is_boolean(),
            ParamType::List => v.as_array().is_some_and(|a| a.iter().all(Json::is_string)),
        }
    }
}

/// One declared parameter.
#[derive(Clone, Debug)]
pub struct ParamDecl {
    pub name: String,
    pub ty: ParamType,
    pub description: Option<String>,
    pub default: Option<Json>,
    pub required: bool,
    pub pattern: Option<String>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub choices: Option<Vec<Json>>,
    pub multiline: bool,
    /// Where the declaration is, for errors about its value.
    pub line: usize,
    pub col: usize,
}

/// The declared block, in declaration order.
#[derive(Clone, Debug, Default)]
pub struct ParamsBlock {
    pub decls: Vec<ParamDecl>,
}

const KEYS: &[&str] = &[
    "type",
    "description",
    "doc",
    "default",
    "required",
    "pattern",
    "minimum",
    "maximum",
    "choices",
    "multiline",
];

/// Reads the params block out of a parsed source. `Ok(None)` when the source declares none.
pub fn read_block(
    ast: &AstModule,
    file: &str,
    source: &str,
) -> Result<Option<ParamsBlock>, Vec<Diagnostic>> {
    let reader = Reader { ast, file, source };
    let stmts: Vec<&AstStmt> = match &ast.statement().node {
        StmtP::Statements(xs) => xs.iter().collect(),
        _ => vec![ast.statement()],
    };
    let mut errors = Vec::new();
    // A `params` assignment anywhere but first would be a block the engine cannot find unevaluated.
    for (i, s) in stmts.iter().enumerate() {
        if i > 0 && assigns_params(s) {
            errors.push(reader.diag(
                s.span,
                "`params` is assigned after the first statement".into(),
                "make the params block the source's first statement",
            ));
        }
    }
    let Some(first) = stmts.first().filter(|s| assigns_params(s)) else {
        return if errors.is_empty() {
            Ok(None)
        } else {
            Err(errors)
        };
    };
    let StmtP::Assign(assign) = &first.node else {
        unreachable!("assigns_params matched an assignment")
    };
    if assign.ty.is_some() {
        errors.push(reader.diag(
            first.span,
            "the params block has a type annotation".into(),
            "write `params = {...}` with no annotation",
        ));
    }
    let block = match reader.literal(&assign.rhs) {
        Ok(v) => v,
        Err(e) => {
            errors.push(*e);
            return Err(errors);
        }
    };
    let Json::Object(mut entries) = block.0 else {
        errors.push(reader.diag(
            assign.rhs.span,
            "the params block is not a dict".into(),
            "write `params = {\"name\": {\"type\": \"string\"}, ...}`",
        ));
        return Err(errors);
    };
    let mut decls = Vec::new();
    for (name, span) in block.1 {
        let decl = entries.remove(&name).expect("every key has a span");
        match reader.decl(name, decl, span) {
            Ok(d) => decls.push(d),
            Err(mut e) => errors.append(&mut e),
        }
    }
    if errors.is_empty() {
        Ok(Some(ParamsBlock { decls }))
    } else {
        Err(errors)
    }
}

fn assigns_params(s: &AstStmt) -> bool {
    match &s.node {
        StmtP::Assign(a) => {
            matches!(&a.lhs.node, AssignTargetP::Identifier(id) if id.node.ident == "params")
        }
        StmtP::AssignModify(lhs, _, _) => {
            matches!(&lhs.node, AssignTargetP::Identifier(id) if id.node.ident == "params")
        }
        _ => false,
    }
}

struct Reader<'a> {
    ast: &'a AstModule,
    file: &'a str,
    source: &'a str,
}

/// A literal value, and for a dict each key with the span of its entry, in source order.
type Lit = (Json, Vec<(String, Span)>);

impl Reader<'_> {
    fn diag(&self, span: Span, message: String, fix: &str) -> Diagnostic {
        let pos = self.ast.file_span(span).resolve_span().begin;
        Diagnostic {
            file: self.file.to_string(),
            line: pos.line + 1,
            col: pos.column + 1,
            rule: rules::PARAMS.to_string(),
            message,
            fix: fix.to_string(),
            source_line: self.source.lines().nth(pos.line).map(str::to_string),
            did_you_mean: None,
        }
    }

    fn pos(&self, span: Span) -> (usize, usize) {
        let pos = self.ast.file_span(span).resolve_span().begin;
        (pos.line + 1, pos.column + 1)
    }

    /// Converts a literal expression; anything computed is refused.
    fn literal(&self, e: &AstExpr) -> Result<Lit, Box<Diagnostic>> {
        let not_literal = |what: &str| {
            Box::new(self.diag(
                e.span,
                format!("the params block contains {what}"),
                "the params block must be a literal: no call, interpolation or variable",
            ))
        };
        let v = match &e.node {
            ExprP::Literal(AstLiteral::String(s)) => Json::String(s.node.clone()),
            ExprP::Literal(AstLiteral::Int(i)) => match &i.node {
                TokenInt::I32(n) => json!(n),
                TokenInt::BigInt(_) => return Err(not_literal("an integer too large")),
            },
            ExprP::Literal(AstLiteral::Float(f)) => json!(f.node),
            ExprP::Minus(inner) => match self.literal(inner)?.0 {
                Json::Number(n) if n.is_i64() => json!(-n.as_i64().expect("checked")),
                Json::Number(n) => json!(-n.as_f64().unwrap_or(0.0)),
                _ => return Err(not_literal("a negated non-number")),
            },
            ExprP::Identifier(id) => match id.node.ident.as_str() {
                "True" => Json::Bool(true),
                "False" => Json::Bool(false),
                "None" => Json::Null,
                other => return Err(not_literal(&format!("the variable `{other}`"))),
            },
            ExprP::List(xs) | ExprP::Tuple(xs) => Json::Array(
                xs.iter()
                    .map(|x| self.literal(x).map(|l| l.0))
                    .collect::<Result<_, _>>()?,
            ),
            ExprP::Dict(entries) => {
                let mut map = Map::new();
                let mut spans = Vec::new();
                for (k, v) in entries {
                    let ExprP::Literal(AstLiteral::String(key)) = &k.node else {
                        return Err(Box::new(self.diag(
                            k.span,
                            "a params key is not a string literal".into(),
                            "write every key as a quoted string",
                        )));
                    };
                    if map.contains_key(&key.node) {
                        return Err(Box::new(self.diag(
                            k.span,
                            format!("`{}` is declared twice", key.node),
                            "declare each key once",
                        )));
                    }
                    map.insert(key.node.clone(), self.literal(v)?.0);
                    spans.push((key.node.clone(), k.span));
                }
                return Ok((Json::Object(map), spans));
            }
            ExprP::Call(..) => return Err(not_literal("a call")),
            ExprP::FString(_) => return Err(not_literal("an interpolation")),
            ExprP::Op(..) => return Err(not_literal("an expression")),
            _ => return Err(not_literal("a computed value")),
        };
        Ok((v, Vec::new()))
    }

    fn decl(&self, name: String, decl: Json, span: Span) -> Result<ParamDecl, Vec<Diagnostic>> {
        let mut errors = Vec::new();
        let mut err = |message: String, fix: &str| errors.push(self.diag(span, message, fix));
        if name.contains('.') {
            err(
                format!("parameter `{name}` contains a dot"),
                "a dotted name is a launch setting (`task.model`): rename the parameter without a dot",
            );
        } else if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            err(
                format!("`{name}` is not a parameter name"),
                "use letters, digits, `_` or `-`",
            );
        }
        let Json::Object(map) = decl else {
            err(
                format!("parameter `{name}` is not declared with a dict"),
                "write `\"name\": {\"type\": \"string\", ...}`",
            );
            return Err(errors);
        };
        for key in map.keys() {
            if !KEYS.contains(&key.as_str()) {
                let hint = did_you_mean(key, KEYS.iter().copied());
                errors.push(Diagnostic {
                    did_you_mean: hint,
                    ..self.diag(
                        span,
                        format!("parameter `{name}` has an unknown key `{key}`"),
                        &format!("use only {}", KEYS.join(", ")),
                    )
                });
            }
        }
        let mut err = |message: String, fix: &str| errors.push(self.diag(span, message, fix));
        let ty = match map
            .get("type")
            .and_then(Json::as_str)
            .and_then(ParamType::parse)
        {
            Some(t) => t,
            None => {
                err(
                    format!("parameter `{name}` has no valid type"),
                    "set \"type\" to string, integer, number, boolean or list",
                );
                return Err(errors);
            }
        };
        let text = |k: &str| map.get(k).and_then(Json::as_str).map(str::to_string);
        let number = |k: &str| map.get(k).and_then(Json::as_f64);
        let flag = |k: &str| map.get(k).and_then(Json::as_bool).unwrap_or(false);
        for k in ["required", "multiline"] {
            if map.get(k).is_some_and(|v| !v.is_boolean()) {
                err(
                    format!("`{name}`: \"{k}\" is not a boolean"),
                    "write True or False",
                );
            }
        }
        for k in ["description", "doc", "pattern"] {
            if map.get(k).is_some_and(|v| !v.is_string()) {
                err(
                    format!("`{name}`: \"{k}\" is not a string"),
                    "write a string",
                );
            }
        }
        let d = ParamDecl {
            name: name.clone(),
            ty,
            description: text("description").or_else(|| text("doc")),
            default: map.get("default").cloned(),
            required: flag("required"),
            pattern: text("pattern"),
            minimum: number("minimum"),
            maximum: number("maximum"),
            choices: map.get("choices").and_then(Json::as_array).cloned(),
            multiline: flag("multiline"),
            line: self.pos(span).0,
            col: self.pos(span).1,
        };
        if d.required && d.default.is_some() {
            err(
                format!("parameter `{name}` is required and has a default"),
                "remove \"default\" or \"required\": a required parameter has no default",
            );
        }
        if d.multiline && ty != ParamType::String {
            err(
                format!("parameter `{name}` is multiline but of type {}", ty.name()),
                "multiline applies to a string only: remove it",
            );
        }
        if d.pattern.is_some() && ty != ParamType::String {
            err(
                format!(
                    "parameter `{name}` has a pattern but is of type {}",
                    ty.name()
                ),
                "pattern applies to a string only",
            );
        }
        if let Some(p) = &d.pattern {
            if regex::Regex::new(p).is_err() {
                err(
                    format!("parameter `{name}`: pattern `{p}` is not a regular expression"),
                    "fix the pattern",
                );
            }
        }
        for k in ["minimum", "maximum"] {
            if map.contains_key(k) && !matches!(ty, ParamType::Integer | ParamType::Number) {
                err(
                    format!("parameter `{name}` has a {k} but is of type {}", ty.name()),
                    "minimum and maximum apply to integer and number",
                );
            } else if map.get(k).is_some_and(|v| !v.is_number()) {
                err(
                    format!("parameter `{name}`: {k} is not a number"),
                    "write a number",
                );
            }
        }
        match map.get("choices") {
            None => {}
            Some(Json::Array(cs)) if !cs.is_empty() && ty != ParamType::List => {
                if let Some(bad) = cs.iter().find(|c| !ty.admits(c)) {
                    err(
                        format!("parameter `{name}`: choice {bad} is not a {}", ty.name()),
                        "list choices of the declared type",
                    );
                }
            }
            Some(_) => err(
                format!("parameter `{name}`: choices must be a non-empty list of scalars"),
                "write \"choices\": [\"a\", \"b\"]",
            ),
        }
        if let Some(def) = &d.default {
            if let Err(why) = check_value(&d, def) {
                err(
                    format!("parameter `{name}`: the default {why}"),
                    "make the default meet the declaration",
                );
            }
        }
        if errors.is_empty() {
            Ok(d)
        } else {
            Err(errors)
        }
    }
}

/// Checks a value against a declaration's type and constraints.
pub fn check_value(d: &ParamDecl, v: &Json) -> Result<(), String> {
    if !d.ty.admits(v) {
        return Err(format!("{v} is not a {}", d.ty.name()));
    }
    if let (Some(p), Some(s)) = (&d.pattern, v.as_str()) {
        if !regex::Regex::new(p).is_ok_and(|re| re.is_match(s)) {
            return Err(format!("{v} does not match the pattern `{p}`"));
        }
    }
    if let Some(n) = v.as_f64() {
        if d.minimum.is_some_and(|m| n < m) || d.maximum.is_some_and(|m| n > m) {
            let range = format!(
                "{} to {}",
                d.minimum.map_or("-inf".into(), |m| m.to_string()),
                d.maximum.map_or("inf".into(), |m| m.to_string())
            );
            return Err(format!("{v} is outside {range}"));
        }
    }
    if let Some(cs) = &d.choices {
        if !cs.contains(v) {
            let shown: Vec<String> = cs.iter().map(Json::to_string).collect();
            return Err(format!("{v} is not one of {}", shown.join(", ")));
        }
    }
    Ok(())
}

/// Parses a `--param` value by its declared type.
pub fn parse_value(d: &ParamDecl, raw: &str) -> Result<Json, String> {
    match d.ty {
        ParamType::String => Ok(Json::String(raw.to_string())),
        ParamType::Integer => raw
            .trim()
            .parse::<i64>()
            .map(|n| json!(n))
            .map_err(|_| format!("`{raw}` is not an integer")),
        ParamType::Number => raw
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(|f| json!(f))
            .ok_or_else(|| format!("`{raw}` is not a number")),
        ParamType::Boolean => match raw.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(Json::Bool(true)),
            "false" => Ok(Json::Bool(false)),
            _ => Err(format!("`{raw}` is not true or false")),
        },
        ParamType::List if raw.trim_start().starts_with('[') => {
            match serde_json::from_str::<Json>(raw) {
                Ok(v) if ParamType::List.admits(&v) => Ok(v),
                _ => Err(format!("`{raw}` is not a JSON array of strings")),
            }
        }
        ParamType::List if raw.is_empty() => Ok(json!([])),
        ParamType::List => Ok(Json::Array(
            raw.split(',')
                .map(|s| Json::String(s.to_string()))
                .collect(),
        )),
    }
}

/// Binds supplied values (undotted `name=value` pairs) to the block: defaults fill the rest, a
/// missing required value or a constraint violation is an error.
pub fn bind(
    block: Option<&ParamsBlock>,
    supplied: &[(String, String)],
    file: &str,
) -> Result<BTreeMap<String, Json>, Vec<Diagnostic>> {
    let empty = ParamsBlock::default();
    let block = block.unwrap_or(&empty);
    let mut errors = Vec::new();
    let mut out = BTreeMap::new();
    let launch = |i: usize, message: String, fix: String, hint: Option<String>| Diagnostic {
        file: "--param".into(),
        line: i + 1,
        col: 1,
        rule: rules::PARAMS.into(),
        message,
        fix,
        source_line: None,
        did_you_mean: hint,
    };
    for (i, (name, raw)) in supplied.iter().enumerate() {
        let Some(d) = block.decls.iter().find(|d| &d.name == name) else {
            let hint = did_you_mean(name, block.decls.iter().map(|d| d.name.as_str()));
            errors.push(launch(
                i,
                format!("`{name}` is not a declared parameter"),
                "supply only parameters the params block declares".into(),
                hint,
            ));
            continue;
        };
        if out.contains_key(name) {
            errors.push(launch(
                i,
                format!("`{name}` is supplied twice"),
                "supply each parameter once".into(),
                None,
            ));
            continue;
        }
        match parse_value(d, raw).and_then(|v| check_value(d, &v).map(|_| v)) {
            Ok(v) => {
                out.insert(name.clone(), v);
            }
            Err(why) => errors.push(launch(
                i,
                format!("parameter `{name}`: {why}"),
                "supply a value the declaration admits".into(),
                None,
            )),
        }
    }
    for d in &block.decls {
        if out.contains_key(&d.name) {
            continue;
        }
        match &d.default {
            Some(v) => {
                out.insert(d.name.clone(), v.clone());
            }
            None if d.required => errors.push(Diagnostic {
                file: file.to_string(),
                line: d.line,
                col: d.col,
                rule: rules::PARAMS.into(),
                message: format!("required parameter `{}` has no value", d.name),
                fix: format!("supply --param {}=<{}>", d.name, d.ty.name()),
                source_line: None,
                did_you_mean: None,
            }),
            None => {}
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// The block as a JSON Schema (draft 2020-12) for one launch's parameter object.
pub fn to_schema(block: Option<&ParamsBlock>) -> Json {
    let mut props = Map::new();
    let mut required = Vec::new();
    for d in block.map(|b| b.decls.as_slice()).unwrap_or_default() {
        let mut p = Map::new();
        match d.ty {
            ParamType::List => {
                p.insert("type".into(), json!("array"));
                p.insert("items".into(), json!({"type": "string"}));
            }
            t => {
                p.insert("type".into(), json!(t.name()));
            }
        }
        if let Some(s) = &d.description {
            p.insert("description".into(), json!(s));
        }
        if let Some(v) = &d.default {
            p.insert("default".into(), v.clone());
        }
        if let Some(s) = &d.pattern {
            p.insert("pattern".into(), json!(s));
        }
        if let Some(n) = d.minimum {
            p.insert("minimum".into(), json!(n));
        }
        if let Some(n) = d.maximum {
            p.insert("maximum".into(), json!(n));
        }
        if let Some(cs) = &d.choices {
            p.insert("enum".into(), Json::Array(cs.clone()));
        }
        if d.multiline {
            // Tells a launch form to use a text area; binding is unchanged.
            p.insert("x-crucible-multiline".into(), json!(true));
        }
        if d.required {
            required.push(json!(d.name));
        }
        props.insert(d.name.clone(), Json::Object(p));
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(ty: ParamType) -> ParamDecl {
        ParamDecl {
            name: "x".into(),
            ty,
            description: None,
            default: None,
            required: false,
            pattern: None,
            minimum: None,
            maximum: None,
            choices: None,
            multiline: false,
            line: 1,
            col: 1,
        }
    }

    // ARCHITECTURE.md "Fixed: the params block" — `--param` values parse by declared type.
    #[test]
    fn values_parse_by_declared_type() {
        let list = decl(ParamType::List);
        assert_eq!(parse_value(&list, "a,b").unwrap(), json!(["a", "b"]));
        assert_eq!(
            parse_value(&list, "[\"a,b\", \"c\"]").unwrap(),
            json!(["a,b", "c"])
        );
        assert_eq!(parse_value(&list, "").unwrap(), json!([]));
        assert!(parse_value(&list, "[1]").is_err());
        assert_eq!(
            parse_value(&decl(ParamType::Integer), "42").unwrap(),
            json!(42)
        );
        assert!(parse_value(&decl(ParamType::Integer), "4.2").is_err());
        assert_eq!(
            parse_value(&decl(ParamType::Number), "4.5").unwrap(),
            json!(4.5)
        );
        assert!(parse_value(&decl(ParamType::Number), "NaN").is_err());
        assert_eq!(
            parse_value(&decl(ParamType::Boolean), "TRUE").unwrap(),
            json!(true)
        );
        assert_eq!(
            parse_value(&decl(ParamType::String), " x ").unwrap(),
            json!(" x ")
        );
    }

    // RFC-0002:C-PLAYBOOK-PARAMS — constraints are checked before compilation.
    #[test]
    fn constraints() {
        let mut d = decl(ParamType::String);
        d.pattern = Some("^[a-z]+$".into());
        assert!(check_value(&d, &json!("abc")).is_ok());
        assert!(check_value(&d, &json!("ABC")).is_err());
        let mut n = decl(ParamType::Number);
        n.name = "n".into();
        n.minimum = Some(0.5);
        n.maximum = Some(1.0);
        assert!(check_value(&n, &json!(0.75)).is_ok());
        assert!(check_value(&n, &json!(2)).is_err());
        assert!(check_value(&n, &json!(0.25)).is_err());
        let mut c = decl(ParamType::Integer);
        c.name = "c".into();
        c.choices = Some(vec![json!(1), json!(2)]);
        assert!(check_value(&c, &json!(2)).is_ok());
        assert!(check_value(&c, &json!(3)).is_err());
        let mut l = decl(ParamType::List);
        l.name = "l".into();
        l.required = true;
        let mut m = decl(ParamType::String);
        m.name = "m".into();
        m.multiline = true;
        m.description = Some("notes".into());
        m.default = Some(json!("none"));
        // RFC-0002:C-PLAYBOOK-PARAMS: the block as a JSON Schema, each declaration's type and
        // constraint as the schema keyword a validator or a launch form reads.
        let schema = to_schema(Some(&ParamsBlock {
            decls: vec![d, n, c, l, m],
        }));
        assert_eq!(schema["properties"]["x"]["pattern"], "^[a-z]+$");
        assert_eq!(
            schema["properties"]["n"],
            json!({"type": "number", "minimum": 0.5, "maximum": 1.0})
        );
        assert_eq!(
            schema["properties"]["c"],
            json!({"type": "integer", "enum": [1, 2]})
        );
        assert_eq!(
            schema["properties"]["l"],
            json!({"type": "array", "items": {"type": "string"}})
        );
        assert_eq!(
            schema["properties"]["m"],
            json!({"type": "string", "description": "notes", "default": "none", "x-crucible-multiline": true})
        );
        assert_eq!(schema["required"], json!(["l"]));
        assert!(jsonschema::draft202012::meta::is_valid(&schema));
    }
}

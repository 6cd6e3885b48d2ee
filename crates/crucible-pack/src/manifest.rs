//! `crucible.toml` (RFC-0001:C-MANIFEST as recovered, RFC-0002:C-PLAYBOOK-LANE's lane rules).
//!
//! Unknown keys are errors naming the key: a misspelt table silently ignored is how a run ends
//! up reaching what its author did not mean it to.

use crucible_plan::WorkflowType;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(default)]
    pub repo: Option<Repo>,
    #[serde(default)]
    pub workspace: WorkspaceConfig,
    #[serde(default)]
    pub agent: AgentConfig,
    #[serde(default)]
    pub env: EnvConfig,
    #[serde(default)]
    pub sandbox: SandboxConfig,
    #[serde(default)]
    pub workflow: Option<WorkflowConfig>,
    #[serde(default)]
    pub judge: Option<Judge>,
    // Tables of the scored lane and the publisher this engine does not act on yet; accepted so
    // a shared manifest still loads, and named by `LoadedManifest::not_applied`.
    #[serde(default)]
    pub outputs: Option<toml::Table>,
    #[serde(default)]
    pub publish: Option<toml::Table>,
    #[serde(default)]
    pub world: Option<toml::Table>,
    #[serde(default)]
    pub deploy: Option<toml::Table>,
    #[serde(default)]
    pub build: Option<toml::Table>,
    #[serde(default)]
    pub measure: Option<toml::Table>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Repo {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceConfig {
    #[serde(default = "default_workspace_dir")]
    pub dir: String,
    #[serde(default)]
    pub setup_cmd: Option<String>,
    #[serde(default)]
    pub inject: Injects,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        WorkspaceConfig {
            dir: default_workspace_dir(),
            setup_cmd: None,
            inject: Injects::default(),
        }
    }
}

fn default_workspace_dir() -> String {
    "workspace".to_string()
}

/// `inject` as one string, one table, or a list of either.
#[derive(Clone, Debug, Default)]
pub struct Injects(pub Vec<Inject>);

/// One inject: `src` below the manifest directory (a file, a directory or a glob), copied to
/// `dst` in the workspace before the base commit.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inject {
    pub src: String,
    #[serde(default)]
    pub dst: Option<String>,
    /// Accepted for shared manifests; this engine does not freeze injects (see `not_applied`).
    #[serde(default)]
    pub frozen: Option<bool>,
}

impl<'de> Deserialize<'de> for Injects {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        fn one<E: Error>(v: toml::Value) -> Result<Inject, E> {
            match v {
                toml::Value::String(src) => Ok(Inject {
                    src,
                    dst: None,
                    frozen: None,
                }),
                toml::Value::Table(t) => Inject::deserialize(t).map_err(E::custom),
                other => Err(E::custom(format!(
                    "an inject is a path string or a table {{src, dst, frozen}}, not {}",
                    other.type_str()
                ))),
            }
        }
        match toml::Value::deserialize(d)? {
            toml::Value::Array(items) => items
                .into_iter()
                .map(one)
                .collect::<Result<_, _>>()
                .map(Injects),
            other => Ok(Injects(vec![one(other)?])),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    #[serde(default)]
    pub backend: Option<String>,
    #[serde(default)]
    pub harness: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub effort: Option<String>,
    #[serde(default)]
    pub goal: Option<String>,
    #[serde(default)]
    pub goal_file: Option<String>,
    #[serde(default)]
    pub agent_cmd: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Where a harness's CLI is, by harness name (relative to the manifest's directory);
    /// unnamed ones are found on PATH.
    #[serde(default)]
    pub cli: BTreeMap<String, String>,
    /// USD per million tokens by model, over the engine's defaults, for harnesses whose
    /// stream reports tokens but no money (docs/agents.md).
    #[serde(default)]
    pub prices: BTreeMap<String, PriceEntry>,
    #[serde(default)]
    pub overrides: Overrides,
    #[serde(default)]
    pub sandbox: BTreeMap<String, Sandbox>,
    #[serde(default)]
    pub method_prompt: Option<String>,
    #[serde(default)]
    pub sandbox_image: Option<String>,
    #[serde(default)]
    pub toolbox_dir: Option<String>,
    #[serde(default)]
    pub toolbox_exclude: Vec<String>,
    // The OpenShell backend's keys (RFC-0001 notes §3): read so that a manifest naming them is
    // refused as not built rather than as misspelt (`LoadedManifest::unbuilt`).
    #[serde(default)]
    pub openshell: Option<toml::Value>,
    #[serde(default)]
    pub broker: Option<toml::Value>,
    #[serde(default)]
    pub relay: Option<toml::Value>,
}

/// `[env]`: what every task receives from the launch environment beyond the engine's fixed base
/// (issue 11: a task's environment is an allowlist).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvConfig {
    /// Launch environment variables every command, evaluate and agent task receives, by name.
    #[serde(default)]
    pub pass: Vec<String>,
    /// As `pass`, and their values are masked (`***`) wherever a task's text is stored or printed.
    #[serde(default)]
    pub secrets: Vec<String>,
}

impl EnvConfig {
    /// Every declared name, `pass` then `secrets`.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.pass.iter().chain(&self.secrets)
    }
}

/// One model's price, USD per million tokens; cache reads cost `cached_input` (default: as
/// `input`).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEntry {
    pub input: f64,
    pub output: f64,
    #[serde(default)]
    pub cached_input: Option<f64>,
}

/// `[sandbox]`: the sandbox every attempt runs in (issue 11; docs/security.md).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// `false` opts the pack out: its tasks run unsandboxed, as the engine's user.
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// Absolute host paths every task may read and write (a shared cache, a results drop).
    /// The pack and the state directory stay hidden even below one of them.
    #[serde(default)]
    pub expose: Vec<String>,
}

impl Default for SandboxConfig {
    fn default() -> SandboxConfig {
        SandboxConfig {
            enabled: true,
            expose: Vec::new(),
        }
    }
}

fn enabled_by_default() -> bool {
    true
}

/// Which launch settings a launch may supply (RFC-0002:C-PLAYBOOK-PARAMS). Everything is
/// refused unless allowed here.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    #[serde(default)]
    pub model: bool,
    #[serde(default)]
    pub harness: bool,
    #[serde(default)]
    pub effort: bool,
    /// When non-empty, the only models a launch may name.
    #[serde(default)]
    pub models: Vec<String>,
    /// Whether `repo.ref` may be supplied.
    #[serde(default, rename = "ref")]
    pub git_ref: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub secrets: Vec<String>,
    #[serde(default)]
    pub endpoints: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowConfig {
    #[serde(rename = "type")]
    pub workflow_type: String,
    /// The graph's source, named rather than carried; compiles per run.
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub result: Option<String>,
    #[serde(default)]
    pub history_record: Option<String>,
    /// The `[[workflow.task]]` tables a source would compile to.
    #[serde(default)]
    pub task: Vec<toml::Table>,
    #[serde(default)]
    pub params: Option<toml::Table>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Judge {
    pub measure_cmd: String,
    pub direction: String,
    #[serde(default)]
    pub baseline: Option<toml::Value>,
}

/// A manifest that could not be loaded or breaks a lane rule.
#[derive(Debug)]
pub struct ManifestError {
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for ManifestError {}

/// A loaded manifest with where it came from.
#[derive(Clone, Debug)]
pub struct LoadedManifest {
    pub manifest: Manifest,
    /// The manifest file.
    pub path: PathBuf,
    /// Its directory: the pack root, anchoring every relative path.
    pub dir: PathBuf,
    /// `""` for `crucible.toml`, `issue` for `crucible.issue.toml`.
    pub variant: String,
}

impl LoadedManifest {
    /// Applies the launch's `repo.ref` setting (already allowed by the compile) to `[repo]`.
    pub fn set_repo_ref(&mut self, git_ref: String) -> Result<(), String> {
        let repo = (self.manifest.repo.as_mut())
            .ok_or("--param repo.ref: the manifest has no [repo] to take a ref")?;
        repo.git_ref = Some(git_ref);
        Ok(())
    }

    /// The workflow type, checked against the lane rules (RFC-0002:C-PLAYBOOK-LANE).
    pub fn workflow_type(&self) -> Result<WorkflowType, ManifestError> {
        let err = |message: String| ManifestError {
            path: self.path.clone(),
            message,
        };
        let Some(wf) = &self.manifest.workflow else {
            return Err(err(
                "no [workflow] table: add [workflow] with type = \"playbook\" and file = \"workflow.star\"".into(),
            ));
        };
        let ty = WorkflowType::parse(&wf.workflow_type).ok_or_else(|| {
            let known = WorkflowType::ALL.iter().map(|t| t.as_str());
            let hint = crucible_plan::validate::did_you_mean(&wf.workflow_type, known)
                .map_or(String::new(), |t| format!("did you mean {t:?}? "));
            err(format!(
                "[workflow].type = {:?} is not a workflow type: {hint}use \"playbook\", \"custom\" or \"autoresearch\"",
                wf.workflow_type
            ))
        })?;
        match (&self.manifest.judge, ty) {
            (None, WorkflowType::Playbook) | (Some(_), WorkflowType::Custom | WorkflowType::Autoresearch) => Ok(ty),
            (None, _) => Err(err(format!(
                "[workflow].type = \"{ty}\" needs a [judge] (RFC-0002:C-PLAYBOOK-LANE): a manifest without [judge] admits only type = \"playbook\""
            ))),
            (Some(_), _) => Err(err(
                "[workflow].type = \"playbook\" with a [judge] (RFC-0002:C-PLAYBOOK-LANE): a playbook has no judge; remove [judge] or choose a scored lane".into(),
            )),
        }
    }

    /// The plan carried inline as `[[workflow.task]]` tables, when the manifest names no source
    /// file. Validation is the caller's: this only reads the tables into the IR.
    pub fn inline_plan(&self) -> Result<Option<crucible_plan::Plan>, ManifestError> {
        let err = |message: String| ManifestError {
            path: self.path.clone(),
            message,
        };
        let Some(wf) = &self.manifest.workflow else {
            return Ok(None);
        };
        if wf.file.is_some() || wf.task.is_empty() {
            return Ok(None);
        }
        let workflow_type = self.workflow_type()?;
        let tasks = wf
            .task
            .iter()
            .enumerate()
            .map(|(i, table)| {
                crucible_plan::Task::deserialize(table.clone()).map_err(|e| {
                    err(format!(
                        "[[workflow.task]] #{}: {}",
                        i + 1,
                        e.message().trim()
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let params = match &wf.params {
            None => Default::default(),
            Some(t) => t
                .iter()
                .map(|(k, v)| {
                    Ok((
                        k.clone(),
                        serde_json::to_value(v).map_err(|e| err(e.to_string()))?,
                    ))
                })
                .collect::<Result<_, ManifestError>>()?,
        };
        Ok(Some(crucible_plan::Plan {
            version: crucible_plan::PLAN_VERSION,
            workflow_type,
            result: wf.result.clone(),
            history_record: wf.history_record.clone(),
            params,
            tasks,
        }))
    }

    /// The keys this manifest sets that name a feature this engine has not built: a run that
    /// names one is refused before dispatch, never run as if the key were absent.
    pub fn unbuilt(&self) -> Vec<String> {
        let a = &self.manifest.agent;
        let mut out = Vec::new();
        let mut key = |set: bool, what: &str| {
            if set {
                out.push(format!("{what} is not built in this engine: remove it"));
            }
        };
        key(
            a.backend.as_deref() == Some("openshell"),
            "[agent].backend = \"openshell\"",
        );
        key(a.openshell.is_some(), "[agent].openshell");
        key(a.broker.is_some(), "[agent].broker");
        key(a.relay.is_some(), "[agent].relay");
        key(a.sandbox_image.is_some(), "[agent].sandbox_image");
        for (name, s) in &a.sandbox {
            if s.image.is_some() {
                out.push(format!("[agent.sandbox.{name}].image is not built in this engine: images are not run locally; remove it"));
            }
            if !s.endpoints.is_empty() {
                out.push(format!("[agent.sandbox.{name}].endpoints is not built in this engine: an egress allowlist cannot be enforced on a shared network; remove it (a named sandbox has no network)"));
            }
        }
        out
    }

    /// The tables and keys this manifest sets that this engine reads but does not act on: a
    /// run goes ahead without them, and `check` and `plan run` both say so.
    pub fn not_applied(&self) -> Vec<String> {
        let m = &self.manifest;
        let mut out = Vec::new();
        for (table, set) in [
            ("[outputs]", m.outputs.is_some()),
            ("[publish]", m.publish.is_some()),
            ("[world]", m.world.is_some()),
            ("[deploy]", m.deploy.is_some()),
            ("[build]", m.build.is_some()),
            ("[measure]", m.measure.is_some()),
            ("[agent].method_prompt", m.agent.method_prompt.is_some()),
            ("[agent].toolbox_dir", m.agent.toolbox_dir.is_some()),
            (
                "[agent].toolbox_exclude",
                !m.agent.toolbox_exclude.is_empty(),
            ),
        ] {
            if set {
                out.push(format!("{table} is not applied by this engine"));
            }
        }
        if m.repo.is_some() && m.workspace.setup_cmd.is_some() {
            out.push(
                "[repo] is not cloned: [workspace].setup_cmd builds the workspace in its place"
                    .into(),
            );
        }
        for inj in m.workspace.inject.0.iter().filter(|i| i.frozen.is_some()) {
            out.push(format!(
                "[workspace].inject {:?}: `frozen` is not applied by this engine (a task can change an injected file like any other)",
                inj.src
            ));
        }
        out
    }

    /// Resolves a manifest-relative path.
    pub fn resolve(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

/// The variant a manifest file names: `crucible.<variant>.toml` → `<variant>`.
pub fn variant_of(path: &Path) -> String {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.strip_prefix("crucible.")
        .and_then(|rest| rest.strip_suffix(".toml"))
        .unwrap_or("")
        .to_string()
}

/// Reads and checks a manifest: syntax, unknown keys, and the shape rules that need no pack.
pub fn load(path: &Path) -> Result<LoadedManifest, ManifestError> {
    let err = |message: String| ManifestError {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let manifest: Manifest =
        toml::from_str(&text).map_err(|e| err(describe_toml_error(&text, &e)))?;
    if let Some(repo) = &manifest.repo {
        if repo.url.is_some() == repo.path.is_some() {
            return Err(err("[repo] needs exactly one of `url` and `path`".into()));
        }
    }
    for name in manifest.env.names() {
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(err(format!(
                "[env] names {name:?}, which is not an environment variable name"
            )));
        }
        if name.starts_with("CRUCIBLE_") {
            return Err(err(format!(
                "[env] names {name}: CRUCIBLE_ variables are the engine's task contract and its own settings, never passed through"
            )));
        }
    }
    if let Some(p) = (manifest.sandbox.expose.iter()).find(|p| !Path::new(p).is_absolute()) {
        return Err(err(format!(
            "[sandbox] expose names {p:?}: exposed host paths are absolute"
        )));
    }
    if manifest.agent.goal.is_some() && manifest.agent.goal_file.is_some() {
        return Err(err(
            "[agent] sets both `goal` and `goal_file`: keep one".into()
        ));
    }
    let dir = path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let loaded = LoadedManifest {
        manifest,
        path: path.to_path_buf(),
        dir,
        variant: variant_of(path),
    };
    if loaded.manifest.repo.is_none() {
        if let Some(wf) = &loaded.manifest.workflow {
            if WorkflowType::parse(&wf.workflow_type).is_none() {
                // An unknown type is named as such, with its likely spelling, before this rule.
                loaded.workflow_type()?;
            }
            if wf.workflow_type != "playbook" {
                return Err(err(
                    "[repo] may be omitted only when [workflow].type = \"playbook\"".into(),
                ));
            }
        }
    }
    Ok(loaded)
}

/// A TOML error with its line and column, and the key for an unknown field.
fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().to_string();
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("{line}:{col}: {msg}")
        }
        None => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn playbook_without_judge_loads() {
        let t = tmp();
        let d = t.path();
        let p = write(d, "crucible.toml", "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n[workspace]\ninject = [\"a.txt\", {src = \"b\", dst = \"c\"}]\n");
        let m = load(&p).unwrap();
        assert_eq!(m.workflow_type().unwrap(), WorkflowType::Playbook);
        assert_eq!(m.manifest.workspace.inject.0.len(), 2);
        assert_eq!(m.variant, "");
    }

    #[test]
    fn inline_tables_read_into_a_plan() {
        let t = tmp();
        let d = t.path();
        let p = write(d, "crucible.toml", "[workflow]\ntype = \"playbook\"\n[[workflow.task]]\nname = \"a\"\nkind = \"command\"\nrun = \"true\"\nemits = [\"x\"]\n[[workflow.task]]\nname = \"b\"\nkind = \"command\"\nrun = \"true\"\ndepends_on = [\"a\"]\njoin = \"settled\"\n");
        let plan = load(&p).unwrap().inline_plan().unwrap().unwrap();
        assert_eq!(plan.tasks.len(), 2);
        assert_eq!(plan.tasks[1].join, crucible_plan::Join::Settled);
        assert!(plan.tasks[0].required);
        assert_eq!(plan.tasks[0].emits["x"], crucible_plan::FieldType::Any);
    }

    #[test]
    fn lane_rules() {
        let t = tmp();
        let d = t.path();
        // RFC-0002:C-PLAYBOOK-LANE: without [judge], every type but "playbook" is refused.
        for ty in ["custom", "autoresearch"] {
            let p = write(
                d,
                "crucible.toml",
                &format!("[repo]\npath = \".\"\n[workflow]\ntype = \"{ty}\"\n"),
            );
            assert!(
                load(&p)
                    .unwrap()
                    .workflow_type()
                    .unwrap_err()
                    .message
                    .contains("needs a [judge]"),
                "{ty}"
            );
        }
        let p = write(d, "crucible.x.toml", "[workflow]\ntype = \"playbook\"\n[judge]\nmeasure_cmd = \"true\"\ndirection = \"higher\"\n");
        let m = load(&p).unwrap();
        assert_eq!(m.variant, "x");
        assert!(m
            .workflow_type()
            .unwrap_err()
            .message
            .contains("with a [judge]"));
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let t = tmp();
        let d = t.path();
        let p = write(
            d,
            "crucible.toml",
            "[workflow]\ntype = \"playbook\"\n[agent]\nmodle = \"x\"\n",
        );
        let e = load(&p).unwrap_err();
        assert!(e.message.contains("modle"), "{e}");
        assert!(e.message.starts_with("4:"), "{e}");
    }
}

//! Kubernetes dispatch targets (issue 17; RFC-0002:C-PACK-PUBLISH delivery, C-PACK-BASE budget):
//! the targets an operator configures (`crucible serve --targets FILE`) and the objects a
//! launch on one becomes, rendered by `POST /v1/render` (`crucible remote render`) without
//! creating anything: a Job running `crucible plan run` on the delivered pack, a claim for the
//! run's state (so a pod the Job starts again resumes the run), and the pack as a ConfigMap
//! holding the gzipped tar (checked against the delivery budget) or, for a registry-trusted
//! target that can mount OCI artifacts and a published pack, an image volume of the recorded
//! manifest digest. Objects are k8s-openapi's typed ones for Kubernetes 1.33.

use crate::error::{ApiError, ApiResult};
use crate::identity::Caller;
use crate::launches::LaunchRequest;
use crate::packs::editable_team;
use crate::trees::{tree_dir, within_budget, write_delivery};
use crate::App;
use axum::extract::State;
use axum::Json;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, ImageVolumeSource, KeyToPath, LocalObjectReference, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, Secret, SecretKeySelector, SecurityContext, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// One Kubernetes dispatch target, as the operator's targets file declares it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// The name launches give (`local` is the controller's own executor and is reserved).
    pub name: String,
    /// The kubeconfig context the controller reaches the cluster by.
    pub context: String,
    pub namespace: String,
    /// The image whose `crucible` runs the Job (it needs `sh` and `tar` for ConfigMap
    /// delivery).
    pub image: String,
    /// Registry-trusted: may pull packs from the pack registry. Set here (the operator's file,
    /// the platform administrators'), it is authoritative; left out, a platform admin may mark
    /// the target through the API (`trust`), and unmarked it is not trusted.
    #[serde(default)]
    pub registry_trusted: Option<bool>,
    /// The cluster mounts OCI artifacts as image volumes (Kubernetes 1.33+ with ImageVolume).
    #[serde(default)]
    pub image_volumes: bool,
    /// The Secret (in `namespace`) holding the pack registry's pull credentials: used by a
    /// registry-trusted target only.
    #[serde(default)]
    pub pull_secret: Option<String>,
    /// The service account the run's pod runs as (default: the namespace's `default`).
    #[serde(default)]
    pub service_account: Option<String>,
    /// The size of the run's state claim (default `1Gi`) and its storage class.
    #[serde(default)]
    pub state_size: Option<String>,
    #[serde(default)]
    pub storage_class: Option<String>,
    /// The kubeconfig file `context` is read from (default: `$KUBECONFIG`, else
    /// `~/.kube/config`), read at each dispatch so rotated credentials are picked up.
    #[serde(default)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The controller's URL as the run's pod reaches it (`CRUCIBLE_CONTROLLER_URL`): needed to
    /// dispatch (the engine reports by connections it initiates), not to render.
    #[serde(default)]
    pub controller_url: Option<String>,
}

impl Target {
    /// The client for this target's cluster, from its kubeconfig context.
    pub fn client(&self) -> anyhow::Result<crate::kubeapi::Client> {
        let path = self
            .kubeconfig
            .clone()
            .unwrap_or_else(crate::kubeapi::default_kubeconfig);
        crate::kubeapi::Client::from_kubeconfig(&path, &self.context)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetsFile {
    #[serde(default)]
    target: Vec<Target>,
}

/// Reads the targets file: `[[target]]` tables, each name a DNS-1123 label other than `local`,
/// and no name twice.
pub fn load_targets(path: &std::path::Path) -> anyhow::Result<Vec<Target>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    let file: TargetsFile =
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut seen = std::collections::BTreeSet::new();
    for t in &file.target {
        anyhow::ensure!(
            dns_label(&t.name) && t.name != "local",
            "{}: the target name `{}` must be a DNS-1123 label other than `local`",
            path.display(),
            t.name.escape_debug()
        );
        anyhow::ensure!(
            dns_label(&t.namespace),
            "{}: target `{}`: the namespace must be a DNS-1123 label",
            path.display(),
            t.name
        );
        anyhow::ensure!(
            seen.insert(t.name.clone()),
            "{}: target `{}` twice",
            path.display(),
            t.name
        );
    }
    Ok(file.target)
}

/// The targets as `GET /v1/settings` lists them: `local`, then each configured one, with its
/// trust and who decides it (`operator`: the targets file; `admin`: a platform admin's mark;
/// `default`: neither, not trusted).
pub async fn targets_json(app: &App) -> ApiResult<Value> {
    let mut out = vec![json!({ "name": "local", "kind": "local" })];
    for t in &app.config.targets {
        let (trusted, by) = trust(app, t).await?;
        out.push(json!({
            "name": t.name, "kind": "kubernetes", "context": t.context,
            "namespace": t.namespace, "registry_trusted": trusted, "trust_set_by": by,
            "image_volumes": t.image_volumes,
        }));
    }
    Ok(Value::Array(out))
}

/// Whether `target` is registry-trusted (RFC-0002:C-PACK-PUBLISH), and who decided: the
/// operator's file when it says, else a platform admin's last mark, else not.
pub(crate) async fn trust(app: &App, target: &Target) -> ApiResult<(bool, &'static str)> {
    if let Some(t) = target.registry_trusted {
        return Ok((t, "operator"));
    }
    let marked: Option<i64> =
        sqlx::query_scalar("SELECT trusted FROM target_trust WHERE name = $1")
            .bind(&target.name)
            .fetch_optional(&app.db)
            .await?;
    Ok(match marked {
        Some(t) => (t != 0, "admin"),
        None => (false, "default"),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustMark {
    pub registry_trusted: bool,
}

/// `POST /v1/targets/{name}/trust` (platform admins; `{"registry_trusted": BOOL}`): marks or
/// unmarks a target registry-trusted, audited as `target.trust`. A target whose trust the
/// operator's file sets is refused: the file stays authoritative for what it sets.
pub async fn mark_trust(
    State(app): State<App>,
    caller: Caller,
    axum::extract::Path(name): axum::extract::Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let mark: TrustMark = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("the mark is not well-formed: {e}")))?;
    if !caller.is_platform_admin() {
        return Err(ApiError::Forbidden(
            "marking a target registry-trusted is for the platform team `platform`'s admins".into(),
        ));
    }
    let target = app
        .config
        .targets
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("target `{}`", name.escape_debug())))?;
    if let Some(t) = target.registry_trusted {
        return Err(ApiError::Refused(format!(
            "the operator's targets file sets registry_trusted = {t} for `{name}`; only the file changes it"
        )));
    }
    let mut tx = app.db.begin().await?;
    sqlx::query(
        "INSERT INTO target_trust (name, trusted, subject_id, updated_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (name) DO UPDATE SET trusted = excluded.trusted, \
         subject_id = excluded.subject_id, updated_at = excluded.updated_at",
    )
    .bind(&name)
    .bind(i64::from(mark.registry_trusted))
    .bind(&caller.id)
    .bind(crate::db::now_ms())
    .execute(&mut *tx)
    .await?;
    let detail = if mark.registry_trusted {
        "registry-trusted"
    } else {
        "not registry-trusted"
    };
    crate::audit::record(
        &mut tx,
        &caller.id,
        "target.trust",
        &format!("target:{name}"),
        detail,
    )
    .await?;
    tx.commit().await?;
    Ok(Json(json!({
        "name": name, "registry_trusted": mark.registry_trusted, "trust_set_by": "admin",
    })))
}

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Where a launch's pack comes from in the pod.
pub(crate) enum Delivery {
    /// The gzipped tar, as a ConfigMap's binary data.
    ConfigMap(Vec<u8>),
    /// An image volume of `registry/repo@manifest`.
    Image(String),
}

impl Delivery {
    pub(crate) fn how(&self) -> &'static str {
        match self {
            Delivery::ConfigMap(_) => "configmap",
            Delivery::Image(_) => "image-volume",
        }
    }
}

/// The image volume a launch of `digest` on `target` mounts, if it gets one
/// (RFC-0002:C-PACK-PUBLISH): only for a registry-trusted target that can mount OCI artifacts,
/// of a published pack, by its recorded manifest digest.
pub(crate) async fn image_reference(
    app: &App,
    target: &Target,
    digest: &str,
) -> ApiResult<Option<String>> {
    let Some(registry) = &app.config.registry else {
        return Ok(None);
    };
    if !(target.image_volumes && trust(app, target).await?.0) {
        return Ok(None);
    }
    let published: Option<String> = sqlx::query_scalar(
        "SELECT manifest_digest FROM publications WHERE digest = $1 AND state = 'published'",
    )
    .bind(digest)
    .fetch_optional(&app.db)
    .await?
    .flatten();
    let repo = registry.url.split_once("://").map_or("", |(_, r)| r);
    Ok(published.map(|manifest| format!("{}@{manifest}", repo.trim_end_matches('/'))))
}

/// How a launch of `digest` on `target` gets its pack: the image volume, else the delivery
/// archive as a ConfigMap, refused over the delivery budget in force (RFC-0002:C-PACK-BASE)
/// naming the budget and the size.
pub(crate) async fn delivery(app: &App, target: &Target, digest: &str) -> ApiResult<Delivery> {
    if let Some(reference) = image_reference(app, target, digest).await? {
        return Ok(Delivery::Image(reference));
    }
    let tree = tree_dir(&app.trees_dir(), digest)
        .filter(|t| t.is_dir())
        .ok_or_else(|| anyhow::anyhow!("the stored tree of {digest} is missing"))?;
    let archive = tokio::task::spawn_blocking(move || write_delivery(&tree, Vec::new()))
        .await
        .map_err(anyhow::Error::from)??;
    within_budget(archive.len() as u64, app.config.delivery_budget_bytes)?;
    Ok(Delivery::ConfigMap(archive))
}

/// The Kubernetes target a launch names, if any (`None` and `local` are the controller's own
/// executor); an unknown name is refused.
pub(crate) fn named_target<'a>(app: &'a App, name: Option<&str>) -> ApiResult<Option<&'a Target>> {
    match name {
        None | Some("local") => Ok(None),
        Some(name) => app
            .config
            .targets
            .iter()
            .find(|t| t.name == name)
            .map(Some)
            .ok_or_else(|| {
                ApiError::Refused(format!("there is no target `{}`", name.escape_debug()))
            }),
    }
}

/// `POST /v1/render` (editors): the objects a launch on a Kubernetes target would create, as
/// YAML, created nowhere. Refused over the delivery budget when the pack would go as a
/// ConfigMap, naming the budget and the size.
pub async fn render(
    State(app): State<App>,
    caller: Caller,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let launch = LaunchRequest::parse(&body, "render")?;
    let launch = &launch;
    let (_, team_id) = editable_team(&caller, launch.team.clone(), "rendering a launch")?;
    let params = launch.compile_params()?;
    let steering = launch.steering_files()?;
    let secs = launch
        .max_secs()?
        .ok_or_else(|| ApiError::Refused("a launch needs --max-time".into()))?;
    let cost = launch
        .max_cost
        .ok_or_else(|| ApiError::Refused("a launch needs --max-cost".into()))?;
    let target = match launch.target.as_deref() {
        None => return Err(ApiError::BadRequest("the render names no `target`".into())),
        Some("local") => {
            return Err(ApiError::Refused(
                "the target `local` runs on the controller itself: there is nothing to render"
                    .into(),
            ))
        }
        Some(name) => app
            .config
            .targets
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| ApiError::NotFound(format!("target `{}`", name.escape_debug())))?
            .clone(),
    };
    let _trees = app.trees_in_use().await;
    let (digest, _) = crate::launches::candidates(&app, &team_id, &launch.pack, None)
        .await?
        .into_iter()
        .next()
        .expect("candidates are never empty");
    let delivery = delivery(&app, &target, &digest).await?;
    let how = delivery.how();
    let launch_key = render_key(&target, &digest, &params, &steering, cost, secs);
    let objects = objects(
        &target,
        &digest,
        &params,
        cost,
        secs,
        delivery,
        &steering,
        &launch_key,
        None,
    );
    let mut yaml = String::new();
    for o in objects {
        yaml.push_str("---\n");
        yaml.push_str(&o.yaml().map_err(|e| anyhow::anyhow!("rendering: {e}"))?);
    }
    Ok(Json(json!({
        "target": target.name,
        "digest": digest,
        "delivery": how,
        "yaml": yaml,
    })))
}

/// A rendering's stand-in for the run id in its names: a hash of what the launch sets.
fn render_key(
    target: &Target,
    digest: &str,
    params: &[String],
    steering: &[(String, String)],
    cost: f64,
    secs: u64,
) -> String {
    let mut h = Sha256::new();
    for part in [
        target.name.as_str(),
        digest,
        &cost.to_string(),
        &secs.to_string(),
    ]
    .into_iter()
    .chain(params.iter().map(String::as_str))
    .chain(steering.iter().flat_map(|(n, t)| [n.as_str(), t.as_str()]))
    {
        h.update(part.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// Labels every rendered object carries.
fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/managed-by".into(), "crucible".into()),
        ("app.kubernetes.io/name".into(), "crucible-run".into()),
    ])
}

/// The annotation naming the controller's run a dispatched object belongs to: an object of
/// the same name without it (or with another run's) is not ours.
pub(crate) const RUN_ANNOTATION: &str = "dev.crucible/run";

fn meta(name: &str, target: &Target, digest: &str, run: Option<&RunIdentity>) -> ObjectMeta {
    let mut annotations = BTreeMap::from([
        ("dev.crucible/pack-digest".to_string(), digest.to_string()),
        ("dev.crucible/target".into(), target.name.clone()),
    ]);
    if let Some(run) = run {
        annotations.insert(RUN_ANNOTATION.into(), run.id.to_string());
    }
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(target.namespace.clone()),
        labels: Some(labels()),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    }
}

/// What a dispatched run's objects carry that a rendering does not: the run's id, the
/// controller's URL as the pod reaches it and the run token (in the run's Secret), the
/// environment the engine reports by (the remote engine link).
pub(crate) struct RunIdentity<'a> {
    pub id: &'a str,
    pub controller_url: &'a str,
    pub token: &'a str,
}

/// One object a launch creates.
pub(crate) enum Object {
    Secret(Secret),
    ConfigMap(ConfigMap),
    Claim(Box<PersistentVolumeClaim>),
    Job(Box<Job>),
}

impl Object {
    pub(crate) fn name(&self) -> &str {
        let m = match self {
            Object::Secret(o) => &o.metadata,
            Object::ConfigMap(o) => &o.metadata,
            Object::Claim(o) => &o.metadata,
            Object::Job(o) => &o.metadata,
        };
        m.name.as_deref().unwrap_or_default()
    }

    /// The API path of the collection it is created in, in `namespace`.
    pub(crate) fn collection(&self, namespace: &str) -> String {
        collection(self.kind(), namespace)
    }

    pub(crate) fn kind(&self) -> Kind {
        match self {
            Object::Secret(_) => Kind::Secret,
            Object::ConfigMap(_) => Kind::ConfigMap,
            Object::Claim(_) => Kind::Claim,
            Object::Job(_) => Kind::Job,
        }
    }

    pub(crate) fn json(&self) -> Result<Value, serde_json::Error> {
        match self {
            Object::Secret(o) => serde_json::to_value(o),
            Object::ConfigMap(o) => serde_json::to_value(o),
            Object::Claim(o) => serde_json::to_value(&**o),
            Object::Job(o) => serde_json::to_value(&**o),
        }
    }

    fn yaml(&self) -> Result<String, serde_yaml::Error> {
        match self {
            Object::Secret(o) => serde_yaml::to_string(o),
            Object::ConfigMap(o) => serde_yaml::to_string(o),
            Object::Claim(o) => serde_yaml::to_string(&**o),
            Object::Job(o) => serde_yaml::to_string(&**o),
        }
    }
}

/// The kinds of object a launch creates, in the order they are deleted once its run ended.
/// `Steering` is the second ConfigMap, holding the launch's steering (when it has any).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Job,
    Secret,
    ConfigMap,
    Steering,
    Claim,
}

pub(crate) const KINDS: [Kind; 5] = [
    Kind::Job,
    Kind::Secret,
    Kind::ConfigMap,
    Kind::Steering,
    Kind::Claim,
];

/// The collection `kind` is created in, in `namespace`.
pub(crate) fn collection(kind: Kind, namespace: &str) -> String {
    match kind {
        Kind::Job => format!("/apis/batch/v1/namespaces/{namespace}/jobs"),
        Kind::Secret => format!("/api/v1/namespaces/{namespace}/secrets"),
        Kind::ConfigMap | Kind::Steering => format!("/api/v1/namespaces/{namespace}/configmaps"),
        Kind::Claim => format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims"),
    }
}

/// The name of a launch's objects of `kind`, for a launch whose key is `key` (the run id when
/// dispatched): `crucible-<12 hex of the digest>-<8 hex of the key's hash>`, and a suffix.
pub(crate) fn object_name(kind: Kind, digest: &str, key: &str) -> String {
    let hex = digest.strip_prefix("tree1:").unwrap_or(digest);
    let launch = &hex::encode(Sha256::digest(key.as_bytes()))[..8];
    let name = format!("crucible-{}-{launch}", &hex[..12.min(hex.len())]);
    match kind {
        Kind::Job | Kind::ConfigMap => name,
        Kind::Secret => format!("{name}-token"),
        Kind::Steering => format!("{name}-steering"),
        Kind::Claim => format!("{name}-state"),
    }
}

// The steering ConfigMap holds text under `data`, so its size is the steering's own bound plus
// its names: far under the 1 MiB an object may hold (RFC-0002:C-PACK-BASE).
const _: () = assert!(
    crucible_engine::steering::MAX_BYTES + crucible_engine::steering::MAX_FILES * 64 < 512 * 1024
);

/// Where a dispatched run's pod finds its steering: beside `/pack`, never in it.
const STEERING_DIR: &str = "/steering";

/// The objects of one launch, in the order they are created: the run's Secret (dispatched
/// only), the ConfigMap (when the pack goes as one), the steering ConfigMap (when the launch
/// carries steering), the state claim and the Job.
#[allow(clippy::too_many_arguments)]
pub(crate) fn objects(
    target: &Target,
    digest: &str,
    params: &[String],
    cost: f64,
    secs: u64,
    delivery: Delivery,
    steering: &[(String, String)],
    key: &str,
    run: Option<&RunIdentity>,
) -> Vec<Object> {
    let name = object_name(Kind::Job, digest, key);
    let state = object_name(Kind::Claim, digest, key);
    let secret = object_name(Kind::Secret, digest, key);
    let meta = |name: &str| meta(name, target, digest, run);
    let mut out = Vec::new();
    let mut env = None;
    if let Some(run) = run {
        out.push(Object::Secret(Secret {
            metadata: meta(&secret),
            data: Some(BTreeMap::from([(
                "token".to_string(),
                ByteString(run.token.as_bytes().to_vec()),
            )])),
            immutable: Some(true),
            type_: Some("Opaque".into()),
            ..Secret::default()
        }));
        let value = |name: &str, value: &str| EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        };
        env = Some(vec![
            value(
                "CRUCIBLE_CONTROLLER_URL",
                run.controller_url.trim_end_matches('/'),
            ),
            value("CRUCIBLE_CONTROLLER_RUN", run.id),
            EnvVar {
                name: "CRUCIBLE_RUN_TOKEN".into(),
                value: None,
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret.clone(),
                        key: "token".into(),
                        optional: Some(false),
                    }),
                    ..EnvVarSource::default()
                }),
            },
        ]);
    }
    let mut run_args: Vec<String> = vec![
        "--manifest".into(),
        "/pack/crucible.toml".into(),
        "--state-dir".into(),
        "/state".into(),
        "--max-cost".into(),
        cost.to_string(),
        "--max-time".into(),
        format!("{secs}s"),
    ];
    for p in params {
        run_args.push("--param".into());
        run_args.push(p.clone());
    }
    let mut mounts = Vec::new();
    let mut volumes = Vec::new();
    // Per-run steering (RFC-0002:C-PACK-BASE), beside the pack and never in it: its own
    // immutable ConfigMap, each file mounted read-only at `/steering/NAME` by `subPath` (a
    // ConfigMap volume's files are symlinks into `..data`, which the engine's steering reader
    // refuses: it takes regular files only), handed to the engine as the local executor hands
    // it, its steering directory (`plan run --steering-dir`).
    let steering_cm = (!steering.is_empty()).then(|| {
        let cm_name = object_name(Kind::Steering, digest, key);
        run_args.push("--steering-dir".into());
        run_args.push(STEERING_DIR.into());
        volumes.push(Volume {
            name: "steering".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: cm_name.clone(),
                items: Some(
                    steering
                        .iter()
                        .map(|(n, _)| KeyToPath {
                            key: n.clone(),
                            path: n.clone(),
                            mode: Some(0o444),
                        })
                        .collect(),
                ),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
        for (n, _) in steering {
            mounts.push(VolumeMount {
                name: "steering".into(),
                mount_path: format!("{STEERING_DIR}/{n}"),
                sub_path: Some(n.clone()),
                read_only: Some(true),
                ..VolumeMount::default()
            });
        }
        ConfigMap {
            metadata: meta(&cm_name),
            data: Some(steering.iter().cloned().collect()),
            immutable: Some(true),
            ..ConfigMap::default()
        }
    });
    // The first pod starts the run; a pod the Job starts again (a node lost, a pod evicted)
    // finds the run in the state claim and resumes it (RFC-0002:C-PLAYBOOK-RESUME). Parameter
    // values reach `crucible` as arguments ("$@"), never through the shell's parsing.
    let script = "if [ -e /state/current ]; then exec crucible plan run --resume \"$@\"; \
                  else exec crucible plan run \"$@\"; fi";
    let mut command = vec![
        "sh".to_string(),
        "-c".into(),
        script.into(),
        "crucible".into(),
    ];
    command.extend(run_args);
    mounts.extend([
        VolumeMount {
            name: "state".into(),
            mount_path: "/state".into(),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: "pack".into(),
            mount_path: "/pack".into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    ]);
    volumes.push(Volume {
        name: "state".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: state.clone(),
            read_only: None,
        }),
        ..Volume::default()
    });
    let mut init = Vec::new();
    let mut pull_secrets = None;
    match delivery {
        Delivery::ConfigMap(archive) => {
            let cm = ConfigMap {
                metadata: meta(&name),
                binary_data: Some(BTreeMap::from([(
                    "pack.tar.gz".to_string(),
                    ByteString(archive),
                )])),
                immutable: Some(true),
                ..ConfigMap::default()
            };
            out.push(Object::ConfigMap(cm));
            volumes.push(Volume {
                name: "delivery".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: name.clone(),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            });
            volumes.push(Volume {
                name: "pack".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            });
            init.push(Container {
                name: "unpack".into(),
                image: Some(target.image.clone()),
                command: Some(vec![
                    "tar".into(),
                    "-xzf".into(),
                    "/delivery/pack.tar.gz".into(),
                    "-C".into(),
                    "/pack".into(),
                ]),
                volume_mounts: Some(vec![
                    VolumeMount {
                        name: "delivery".into(),
                        mount_path: "/delivery".into(),
                        read_only: Some(true),
                        ..VolumeMount::default()
                    },
                    VolumeMount {
                        name: "pack".into(),
                        mount_path: "/pack".into(),
                        ..VolumeMount::default()
                    },
                ]),
                security_context: Some(restricted()),
                ..Container::default()
            });
        }
        Delivery::Image(reference) => {
            volumes.push(Volume {
                name: "pack".into(),
                image: Some(ImageVolumeSource {
                    reference: Some(reference),
                    pull_policy: Some("IfNotPresent".into()),
                }),
                ..Volume::default()
            });
            // Pull access for the registry-trusted target only (this branch is only taken for
            // one): the operator's pull secret, never a person's.
            pull_secrets = target
                .pull_secret
                .clone()
                .map(|s| vec![LocalObjectReference { name: s }]);
        }
    }
    out.extend(steering_cm.map(Object::ConfigMap));
    let claim = PersistentVolumeClaim {
        metadata: meta(&state),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(target.state_size.clone().unwrap_or_else(|| "1Gi".into())),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: target.storage_class.clone(),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    };
    out.push(Object::Claim(Box::new(claim)));
    mounts.sort_by(|a, b| (&a.name, &a.mount_path).cmp(&(&b.name, &b.mount_path)));
    let job = Job {
        metadata: meta(&name),
        spec: Some(JobSpec {
            backoff_limit: Some(3),
            // The run's own wall-clock ceiling, and five minutes to start and settle.
            active_deadline_seconds: Some(secs as i64 + 300),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels()),
                    annotations: run
                        .map(|r| BTreeMap::from([(RUN_ANNOTATION.to_string(), r.id.to_string())])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    service_account_name: target.service_account.clone(),
                    automount_service_account_token: Some(false),
                    image_pull_secrets: pull_secrets,
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65532),
                        fs_group: Some(65532),
                        ..PodSecurityContext::default()
                    }),
                    init_containers: (!init.is_empty()).then_some(init),
                    containers: vec![Container {
                        name: "run".into(),
                        image: Some(target.image.clone()),
                        command: Some(command),
                        env,
                        volume_mounts: Some(mounts),
                        security_context: Some(restricted()),
                        ..Container::default()
                    }],
                    volumes: Some(volumes),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    };
    out.push(Object::Job(Box::new(job)));
    out
}

/// A container that cannot gain privileges and holds no capability.
fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

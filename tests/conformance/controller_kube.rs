//! Kubernetes dispatch targets (issue 17; RFC-0002:C-PACK-PUBLISH delivery, C-PACK-BASE budget
//! at dispatch): `crucible remote render` against a real `crucible serve` with a targets file,
//! and a real registry for the published packs image volumes mount. No API server can be had
//! offline, so the rendered objects are checked here and by PyPI's `kubernetes-validate
//! --strict` against the Kubernetes 1.33 schemas (`CRUCIBLE_KUBERNETES_VALIDATE` names it, else
//! `kubernetes-validate` on PATH; without it that check is skipped with a message, unless
//! `CRUCIBLE_REQUIRE_KUBERNETES_VALIDATE` is set, as CI sets it).

use crate::controller::{file, tar_of, Server, Store};
use crate::controller_publish::{publication, Registry};
use crate::controller_runs::{ended, launch, push, wait_run};
use crate::kube_double::KubeDouble;
use crate::support::BIN;
use serde_json::{json, Value};
use std::process::Command;

/// The Kubernetes version the rendered objects are for (k8s-openapi's `v1_33` feature).
const KUBERNETES: &str = "1.33.0";

const TARGETS: &str = r#"
[[target]]
name = "shared"
context = "kind-crucible"
namespace = "crucible-runs"
image = "ghcr.io/example/crucible:0.1"
image_volumes = true

[[target]]
name = "trusted"
context = "kind-crucible"
namespace = "crucible-trusted"
image = "ghcr.io/example/crucible:0.1"
registry_trusted = true
image_volumes = true
pull_secret = "pack-pull"
storage_class = "standard"
"#;

/// The YAML documents `remote render` printed, as JSON values; fails on a refusal.
fn render(server: &Server, pack: &str, target: &str) -> (Vec<Value>, String) {
    let out = server.remote(&[
        "render",
        pack,
        "--target",
        target,
        "--max-cost",
        "1",
        "--max-time",
        "10m",
        "--param",
        "topic=a b; $(x)",
    ]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    validate(&stdout);
    (docs_of(&stdout), stdout)
}

/// The YAML documents of a rendering.
fn docs_of(yaml: &str) -> Vec<Value> {
    yaml.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_yaml::from_str::<Value>(d).unwrap())
        .collect()
}

/// `kubernetes-validate --strict` for the version we target, when it is installed.
fn validate(yaml: &str) {
    let tool = std::env::var("CRUCIBLE_KUBERNETES_VALIDATE")
        .unwrap_or_else(|_| "kubernetes-validate".into());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("objects.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = match Command::new(&tool)
        .args(["--strict", "-k", KUBERNETES])
        .arg(&path)
        .output()
    {
        Ok(out) => out,
        Err(_) => {
            assert!(
                std::env::var_os("CRUCIBLE_REQUIRE_KUBERNETES_VALIDATE").is_none(),
                "CRUCIBLE_REQUIRE_KUBERNETES_VALIDATE is set but `{tool}` cannot be run"
            );
            eprintln!(
                "\n*** SKIPPED: schema validation of the rendered objects: install PyPI's \
                 kubernetes-validate (pip install kubernetes-validate; .ci/run does) or set \
                 CRUCIBLE_KUBERNETES_VALIDATE. CI always runs it. ***\n"
            );
            return;
        }
    };
    assert!(
        out.status.success(),
        "kubernetes-validate --strict -k {KUBERNETES} refused:\n{}{}\n{yaml}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> Option<&'a Value> {
    docs.iter().find(|d| d["kind"] == kind)
}

/// The image volume of a pod's spec.
fn image_volume(pod: &Value) -> &Value {
    let volumes = pod["volumes"].as_array().unwrap();
    volumes.iter().find_map(|v| v.get("image")).unwrap()
}

fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| d["kind"].as_str().unwrap()).collect()
}

// Issue 17, RFC-0002:C-PACK-PUBLISH and C-PACK-BASE — a launch rendered for a target that is not
// registry-trusted gets the pack as a ConfigMap holding exactly the delivery archive (unpacked
// by an init container), a state claim and a Job running `crucible plan run` (resuming from the
// claim when a pod starts again), with no registry pull access; for a registry-trusted target
// that mounts OCI artifacts, a published pack goes as an image volume of its recorded manifest
// digest, with the target's pull secret and no ConfigMap. Every rendering passes
// `kubernetes-validate --strict` for 1.33. Over the delivery budget in force at dispatch the
// ConfigMap launch is refused naming the budget and the size; the image-volume one is not
// checked against it. Without a registry the trusted target gets a ConfigMap too, and
// `draft:NAME` renders as a launch names it.
#[test]
fn kubernetes_render_configmap_or_image_volume_by_target_trust() {
    for store in Store::all() {
        let Some(registry) = Registry::start() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let targets = dir.path().join("targets.toml");
        std::fs::write(&targets, TARGETS).unwrap();
        let targets = targets.to_str().unwrap();
        let repo = registry.repo();
        let mut server = Server::start(&store, &["--registry", &repo, "--targets", targets]);
        let entries = [
            file("crucible.toml", "[pack]\nname = \"k\"\n"),
            file("workflow.star", "# graph\n"),
        ];
        let (s, v) = server.call(
            "POST",
            "/v1/packs?name=k&team=platform",
            &server.admin,
            Some(&tar_of(&entries)),
        );
        assert_eq!(s, 200, "{v}");
        let (pack, digest) = (v["id"].as_str().unwrap(), v["digest"].as_str().unwrap());
        let published = publication(&server, pack, 1, "published");
        let manifest = published["manifest_digest"].as_str().unwrap();
        let (_, settings) = server.get("/v1/settings", &server.admin);
        let names: Vec<&str> = settings["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["local", "shared", "trusted"]);

        let (shared, _) = render(&server, digest, "shared");
        assert_eq!(
            kinds(&shared),
            ["ConfigMap", "PersistentVolumeClaim", "Job"]
        );
        let cm = kind(&shared, "ConfigMap").unwrap();
        let (s, archive) = server.archive(pack, "", &server.admin);
        assert_eq!(s, 200);
        use base64::Engine;
        let held = base64::engine::general_purpose::STANDARD
            .decode(cm["binaryData"]["pack.tar.gz"].as_str().unwrap())
            .unwrap();
        assert_eq!(held, archive, "the ConfigMap holds the delivery archive");
        let job = kind(&shared, "Job").unwrap();
        assert_eq!(job["metadata"]["namespace"], "crucible-runs");
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["imagePullSecrets"], Value::Null, "{pod}");
        let volumes = pod["volumes"].as_array().unwrap();
        assert!(volumes.iter().all(|v| v.get("image").is_none()), "{pod}");
        assert!(volumes
            .iter()
            .any(|v| v["configMap"]["name"] == cm["metadata"]["name"]));
        assert!(volumes
            .iter()
            .any(|v| v["persistentVolumeClaim"]["claimName"]
                == kind(&shared, "PersistentVolumeClaim").unwrap()["metadata"]["name"]));
        assert_eq!(pod["initContainers"][0]["name"], "unpack");
        let command: Vec<&str> = pod["containers"][0]["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert!(command[2].contains("plan run --resume") && command[2].contains("/state/current"));
        let at = command.iter().position(|c| *c == "--param").unwrap();
        assert_eq!(
            command[at + 1],
            "topic=a b; $(x)",
            "a value is one argument, never shell"
        );
        assert!(command.windows(2).any(|w| w == ["--max-time", "600s"]));

        let (trusted, _) = render(&server, digest, "trusted");
        assert_eq!(kinds(&trusted), ["PersistentVolumeClaim", "Job"]);
        let pod = &kind(&trusted, "Job").unwrap()["spec"]["template"]["spec"];
        let host_repo = repo.trim_start_matches("http://");
        let image = image_volume(pod);
        assert_eq!(
            image["reference"],
            format!("{host_repo}@{manifest}").as_str()
        );
        assert_eq!(pod["imagePullSecrets"][0]["name"], "pack-pull");
        assert_eq!(pod.get("initContainers"), None);

        // The budget in force at dispatch: the ConfigMap launch is refused, naming both.
        let budget = (archive.len() - 1).to_string();
        server.restart_with(
            &store,
            &[
                "--registry",
                &repo,
                "--targets",
                targets,
                "--delivery-budget",
                &budget,
            ],
        );
        let out = server.remote(&[
            "render",
            digest,
            "--target",
            "shared",
            "--max-cost",
            "1",
            "--max-time",
            "10m",
        ]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        let want = format!(
            "archive is {} bytes, over the delivery budget of {budget} bytes",
            archive.len()
        );
        assert!(err.contains(&want), "{err}");
        publication(&server, pack, 1, "published");
        let (trusted, _) = render(&server, digest, "trusted");
        assert_eq!(kinds(&trusted), ["PersistentVolumeClaim", "Job"]);

        // No registry: nothing is published, so a trusted target gets a ConfigMap too.
        server.restart_with(&store, &["--targets", targets]);
        let (s, v) = server.save_draft("d", None, &tar_of(&entries), &server.admin);
        assert_eq!(s, 200, "{v}");
        let (trusted, _) = render(&server, "draft:d", "trusted");
        assert_eq!(
            kinds(&trusted),
            ["ConfigMap", "PersistentVolumeClaim", "Job"]
        );
        let out = server.remote(&[
            "render",
            digest,
            "--target",
            "nowhere",
            "--max-cost",
            "1",
            "--max-time",
            "10m",
        ]);
        assert_eq!(out.status.code(), Some(1));
    }
}

/// A command playbook of one task, as a launch on a target compiles it.
const PLAYBOOK: &str = "[workflow]\ntype = \"playbook\"\n\
    [[workflow.task]]\nname = \"a\"\nkind = \"command\"\nrun = \"echo '{}'\"\n";

const JOBS: &str = "/apis/batch/v1/namespaces/crucible-runs/jobs/";

/// The targets of the dispatch test: one reaching the double with its token, one with a wrong
/// token, one that says nothing of how its pods reach the controller.
fn dispatch_targets(kube: &KubeDouble, dir: &std::path::Path) -> String {
    let good = kube.kubeconfig(dir, "s3cret");
    let bad = kube.kubeconfig(dir, "wrong");
    let path = dir.join("targets.toml");
    let mut text = String::new();
    for (name, config, url) in [
        (
            "shared",
            &good,
            "controller_url = \"http://crucible.example:8870/\"",
        ),
        (
            "badtoken",
            &bad,
            "controller_url = \"http://crucible.example:8870\"",
        ),
        ("nourl", &good, ""),
    ] {
        text.push_str(&format!(
            "[[target]]\nname = \"{name}\"\ncontext = \"mock\"\nnamespace = \"crucible-runs\"\n\
             image = \"ghcr.io/example/crucible:0.1\"\nkubeconfig = \"{}\"\n{url}\n",
            config.display()
        ));
    }
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// Launches `digest` on `target`; the run's id.
fn launch_on(server: &Server, digest: &str, target: &str) -> String {
    let (s, v) = launch(
        server,
        &server.admin,
        json!({ "pack": digest, "max_cost": 1, "max_time": "10m", "target": target }),
    );
    assert_eq!(s, 200, "{}: {v}", server.store);
    assert_eq!(v["target"], target);
    v["id"].as_str().unwrap().to_string()
}

/// The path of the one Job of run `id`, once it exists.
fn job_of(kube: &KubeDouble, id: &str) -> String {
    let ours = |o: &Value| o["metadata"]["annotations"]["dev.crucible/run"] == id;
    kube.wait("the run's Job", |objects| {
        objects.iter().any(|(p, o)| p.starts_with(JOBS) && ours(o))
    });
    let objects = kube.objects();
    let (path, _) = objects
        .iter()
        .find(|(p, o)| p.starts_with(JOBS) && ours(o))
        .unwrap();
    path.clone()
}

/// The objects of run `id` that exist, by kind.
fn objects_of(kube: &KubeDouble, id: &str) -> Vec<(String, Value)> {
    kube.objects()
        .into_values()
        .filter(|o| o["metadata"]["annotations"]["dev.crucible/run"] == id)
        .map(|o| (o["kind"].as_str().unwrap().to_string(), o))
        .collect()
}

/// `kubernetes-validate --strict` of the objects the double received.
fn validate_sent(objects: &[(String, Value)]) {
    let mut yaml = String::new();
    for (_, o) in objects {
        let mut o = o.clone();
        // What the double added, as the API server would: not part of what was sent.
        o["metadata"].as_object_mut().unwrap().remove("uid");
        // JSON is YAML (and serde_yaml cannot write an arbitrary-precision number).
        yaml.push_str(&format!("---\n{o}\n"));
    }
    validate(&yaml);
}

fn posts(kube: &KubeDouble) -> Vec<(String, String)> {
    kube.requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| {
            (
                r.path,
                r.body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

// Issue 17, RFC-0002:C-PACK-PUBLISH delivery and C-PACK-BASE budget at dispatch — a launch that
// names a Kubernetes target is dispatched: the controller creates, through the Kubernetes API
// (a double on loopback speaking its wire protocol, bearer token checked), the run's Secret
// (its token), the pack's ConfigMap, the state claim and the Job, in that order, each
// annotated with the run; the pod gets CRUCIBLE_CONTROLLER_URL, CRUCIBLE_CONTROLLER_RUN and
// CRUCIBLE_RUN_TOKEN (from the Secret); what it created passes `kubernetes-validate --strict`.
// A restarted controller creates nothing again; a dispatch a crash interrupted is finished on
// restart, taking objects already there (409 AlreadyExists) as its own only because they are.
// A Job that failed, or was deleted, without the run's report ends the run failed; `stop`
// deletes the Job (propagationPolicy Background); a terminal run's objects are all deleted.
// Over the delivery budget the launch is refused naming it and the size, before anything is
// created; a target the controller cannot authenticate to fails the run, naming the 401.
#[test]
fn kubernetes_dispatch_creates_watches_stops_and_cleans_up() {
    for store in Store::all() {
        let kube = KubeDouble::start("s3cret");
        let dir = tempfile::tempdir().unwrap();
        let targets = dispatch_targets(&kube, dir.path());
        let args = ["--targets", targets.as_str()];
        let mut server = Server::start(&store, &args);
        let digest = push(&server, "k", PLAYBOOK);

        // A target that says nothing of how its pods reach the controller is refused.
        let (s, v) = launch(
            &server,
            &server.admin,
            json!({ "pack": digest, "max_cost": 1, "max_time": "10m", "target": "nourl" }),
        );
        assert_eq!(s, 422, "{v}");
        assert!(
            v["error"].as_str().unwrap().contains("controller_url"),
            "{v}"
        );
        assert!(posts(&kube).is_empty());

        // Dispatched: the four objects, in order, each the run's.
        let id = launch_on(&server, &digest, "shared");
        let job_path = job_of(&kube, &id);
        let made = posts(&kube);
        let kinds: Vec<&str> = made
            .iter()
            .map(|(p, _)| p.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["secrets", "configmaps", "persistentvolumeclaims", "jobs"],
            "{}",
            server.store
        );
        let objects = objects_of(&kube, &id);
        assert_eq!(objects.len(), 4, "{objects:?}");
        let by_kind = |k: &str| &objects.iter().find(|(kind, _)| kind == k).unwrap().1;
        let job = by_kind("Job");
        let secret = by_kind("Secret");
        let pod = &job["spec"]["template"]["spec"];
        let env = pod["containers"][0]["env"].as_array().unwrap();
        let var = |n: &str| env.iter().find(|e| e["name"] == n).unwrap().clone();
        assert_eq!(
            var("CRUCIBLE_CONTROLLER_URL")["value"],
            "http://crucible.example:8870"
        );
        assert_eq!(var("CRUCIBLE_CONTROLLER_RUN")["value"], id.as_str());
        let token_ref = &var("CRUCIBLE_RUN_TOKEN")["valueFrom"]["secretKeyRef"];
        assert_eq!(token_ref["name"], secret["metadata"]["name"]);
        assert_eq!(token_ref["key"], "token");
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["token"].as_str().unwrap())
            .unwrap();
        // The Secret holds a run token (the remote engine link's) that the controller takes for
        // this run while it runs, and refuses once it ended.
        let token = String::from_utf8(token).unwrap();
        let report = format!("/v1/runs/{id}/report");
        let (s, v) = server.get(&report, &token);
        assert_eq!(s, 200, "{v}");
        assert!(pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["configMap"]["name"] == by_kind("ConfigMap")["metadata"]["name"]));
        validate_sent(&objects);
        let (_, run) = server.get(&format!("/v1/runs/{id}"), &server.admin);
        assert_eq!(run["state"], "running", "{run}");

        // A restart creates nothing again: it only watches the Job.
        let before = posts(&kube).len();
        server.restart_with(&store, &args);
        let seen = kube.requests().len();
        kube.wait("the Job looked at again", |_| {
            kube.requests()[seen..]
                .iter()
                .any(|r| r.method == "GET" && r.path == job_path)
        });
        assert_eq!(
            posts(&kube).len(),
            before,
            "{}: nothing created again",
            server.store
        );

        // The Job failed without the run reporting its end: the run failed, its objects go.
        kube.set_job_condition(&job_path, "Failed", "BackoffLimitExceeded");
        let run = wait_run(&server, &id, ended);
        assert_eq!(run["state"], "failed", "{run}");
        assert!(
            run["reason"]
                .as_str()
                .unwrap()
                .contains("BackoffLimitExceeded"),
            "{run}"
        );
        kube.wait("the failed run's objects deleted", |_| {
            objects_of(&kube, &id).is_empty()
        });
        let deletes: Vec<String> = kube
            .requests()
            .into_iter()
            .filter(|r| r.method == "DELETE")
            .map(|r| r.path)
            .collect();
        assert!(
            deletes.contains(&format!("{job_path}?propagationPolicy=Background")),
            "{deletes:?}"
        );
        assert!(
            deletes.last().unwrap().contains("/persistentvolumeclaims/"),
            "the state claim last: {deletes:?}"
        );

        // `stop` deletes the Job, and the stopped run's objects go.
        let id = launch_on(&server, &digest, "shared");
        let job_path = job_of(&kube, &id);
        let (s, v) = server.call("POST", &format!("/v1/runs/{id}/stop"), &server.admin, None);
        assert_eq!(s, 200, "{v}");
        assert!(
            !kube.objects().contains_key(&job_path),
            "the Job is deleted by the stop"
        );
        let run = wait_run(&server, &id, ended);
        assert_eq!(run["outcome"], "stopped", "{run}");
        kube.wait("the stopped run's objects deleted", |_| {
            objects_of(&kube, &id).is_empty()
        });

        // A Job deleted by someone else: the run failed.
        let id = launch_on(&server, &digest, "shared");
        let job_path = job_of(&kube, &id);
        kube.remove(&job_path);
        let run = wait_run(&server, &id, ended);
        assert_eq!(run["state"], "failed", "{run}");
        assert!(
            run["reason"].as_str().unwrap().contains("was deleted"),
            "{run}"
        );

        // A dispatch cut short by a crash: the API server fails the Job's creation, the
        // controller dies, and the next one finishes it, taking what is there as its own.
        kube.fail_jobs(true);
        let id = launch_on(&server, &digest, "shared");
        kube.wait("the run's objects before its Job", |_| {
            objects_of(&kube, &id).len() == 3
        });
        let first: Vec<(String, Value)> = objects_of(&kube, &id);
        server.kill();
        kube.fail_jobs(false);
        server.restart_with(&store, &args);
        job_of(&kube, &id);
        let now = objects_of(&kube, &id);
        assert_eq!(now.len(), 4, "{now:?}");
        for (kind, o) in &first {
            let again = &now.iter().find(|(k, _)| k == kind).unwrap().1;
            assert_eq!(
                again["metadata"]["uid"], o["metadata"]["uid"],
                "{kind} kept"
            );
        }
        let (_, run) = server.get(&format!("/v1/runs/{id}"), &server.admin);
        assert_eq!(run["state"], "running", "{run}");
        let (s, v) = server.call("POST", &format!("/v1/runs/{id}/stop"), &server.admin, None);
        assert_eq!(s, 200, "{v}");

        // A cluster that refuses the controller's credentials: the run fails, naming it.
        let id = launch_on(&server, &digest, "badtoken");
        let run = wait_run(&server, &id, ended);
        assert_eq!(run["state"], "failed", "{run}");
        assert!(run["reason"].as_str().unwrap().contains("401"), "{run}");

        // Over the delivery budget: refused naming both, before anything is created.
        let before = posts(&kube).len();
        let mut with_budget = args.to_vec();
        with_budget.extend(["--delivery-budget", "10"]);
        server.restart_with(&store, &with_budget);
        let (s, v) = launch(
            &server,
            &server.admin,
            json!({ "pack": digest, "max_cost": 1, "max_time": "10m", "target": "shared" }),
        );
        assert_eq!(s, 422, "{v}");
        let why = v["error"].as_str().unwrap();
        assert!(
            why.contains("over the delivery budget of 10 bytes"),
            "{why}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert_eq!(posts(&kube).len(), before, "nothing created");
    }
}

// Issue 17, RFC-0002:C-PACK-PUBLISH — a target is registry-trusted when the operator's file says
// so or a platform admin marks it: the mark (and its removal) is audited, persisted across a
// restart, refused to anyone else (an admin of another team included), and refused for a
// target whose trust the file sets. The same launch renders and dispatches differently on
// either side of the mark: unmarked, the pack goes as a ConfigMap and the pod gets no pull
// secret; marked, the published pack is an image volume of its manifest digest with the
// target's pull secret, and no ConfigMap is created.
#[test]
fn kubernetes_trust_marked_by_an_admin_changes_render_and_dispatch() {
    for store in Store::all() {
        let Some(registry) = Registry::start() else {
            return;
        };
        let kube = KubeDouble::start("s3cret");
        let dir = tempfile::tempdir().unwrap();
        let config = kube.kubeconfig(dir.path(), "s3cret");
        let targets = dir.path().join("targets.toml");
        let common = format!(
            "context = \"mock\"\nnamespace = \"crucible-runs\"\nimage = \"ghcr.io/example/crucible:0.1\"\n\
             image_volumes = true\npull_secret = \"pack-pull\"\nkubeconfig = \"{}\"\n\
             controller_url = \"http://crucible.example:8870\"\n",
            config.display()
        );
        std::fs::write(
            &targets,
            format!(
                "[[target]]\nname = \"marked\"\n{common}\n\
                 [[target]]\nname = \"fixed\"\nregistry_trusted = false\n{common}"
            ),
        )
        .unwrap();
        let repo = registry.repo();
        let args = ["--registry", &repo, "--targets", targets.to_str().unwrap()];
        let mut server = Server::start(&store, &args);
        let tar = tar_of(&[file("crucible.toml", PLAYBOOK)]);
        let (s, v) = server.call(
            "POST",
            "/v1/packs?name=k&team=platform",
            &server.admin,
            Some(&tar),
        );
        assert_eq!(s, 200, "{v}");
        let (pack, digest) = (v["id"].as_str().unwrap(), v["digest"].as_str().unwrap());
        let published = publication(&server, pack, 1, "published");
        let manifest = published["manifest_digest"].as_str().unwrap();
        let reference = format!("{}@{manifest}", repo.trim_start_matches("http://"));
        let trust = |server: &Server| {
            let (_, settings) = server.get("/v1/settings", &server.admin);
            let marked = settings["targets"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == "marked")
                .unwrap()
                .clone();
            (
                marked["registry_trusted"].clone(),
                marked["trust_set_by"].clone(),
            )
        };
        let mark = |server: &Server, token: &str, name: &str, on: bool| {
            server.post_json(
                &format!("/v1/targets/{name}/trust"),
                token,
                json!({ "registry_trusted": on }),
            )
        };

        // Unmarked: not trusted, the pack as a ConfigMap, no pull secret.
        assert_eq!(trust(&server), (json!(false), json!("default")));
        let (docs, _) = render(&server, digest, "marked");
        assert_eq!(kinds(&docs), ["ConfigMap", "PersistentVolumeClaim", "Job"]);
        let pod = &kind(&docs, "Job").unwrap()["spec"]["template"]["spec"];
        assert_eq!(pod["imagePullSecrets"], Value::Null);

        // The operator's file is authoritative for what it sets.
        let (s, v) = mark(&server, &server.admin, "fixed", true);
        assert_eq!(s, 422, "{v}");
        assert!(v["error"].as_str().unwrap().contains("targets file"), "{v}");

        // Marked by a platform admin (`remote target trust`), audited, kept across a restart.
        let out = server.remote(&["target", "trust", "marked"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        server.restart_with(&store, &args);
        assert_eq!(trust(&server), (json!(true), json!("admin")));
        let out = server.remote(&["target", "list"]);
        let listed = String::from_utf8_lossy(&out.stdout);
        assert!(
            listed.contains("marked\tkubernetes\tregistry-trusted (admin)")
                && listed.contains("fixed\tkubernetes\tnot registry-trusted (operator)"),
            "{listed}"
        );
        let (_, audit) = server.get("/v1/audit", &server.admin);
        let entries = audit["entries"].as_array().unwrap();
        let marks: Vec<&Value> = entries
            .iter()
            .filter(|e| e["action"] == "target.trust")
            .collect();
        assert_eq!(marks.len(), 1, "{audit}");
        assert_eq!(marks[0]["subject"], "admin");
        assert_eq!(marks[0]["target"], "target:marked");
        assert_eq!(marks[0]["detail"], "registry-trusted");

        let (docs, _) = render(&server, digest, "marked");
        assert_eq!(kinds(&docs), ["PersistentVolumeClaim", "Job"]);
        let pod = &kind(&docs, "Job").unwrap()["spec"]["template"]["spec"];
        assert_eq!(pod["imagePullSecrets"][0]["name"], "pack-pull");

        // Dispatched on the marked target: an image volume, no ConfigMap created.
        let id = launch_on(&server, digest, "marked");
        job_of(&kube, &id);
        let objects = objects_of(&kube, &id);
        let mut made: Vec<&str> = objects.iter().map(|(k, _)| k.as_str()).collect();
        made.sort();
        assert_eq!(
            made,
            ["Job", "PersistentVolumeClaim", "Secret"],
            "{}",
            server.store
        );
        let job = &objects.iter().find(|(k, _)| k == "Job").unwrap().1;
        let pod = &job["spec"]["template"]["spec"];
        let image = image_volume(pod);
        assert_eq!(image["reference"], reference.as_str());
        assert_eq!(pod["imagePullSecrets"][0]["name"], "pack-pull");
        validate_sent(&objects);
        let (s, v) = server.call("POST", &format!("/v1/runs/{id}/stop"), &server.admin, None);
        assert_eq!(s, 200, "{v}");

        // Unmarked again: a ConfigMap again, for render and dispatch alike.
        let (s, v) = mark(&server, &server.admin, "marked", false);
        assert_eq!(s, 200, "{v}");
        assert_eq!(trust(&server), (json!(false), json!("admin")));
        let (docs, _) = render(&server, digest, "marked");
        assert_eq!(kinds(&docs), ["ConfigMap", "PersistentVolumeClaim", "Job"]);
        let id = launch_on(&server, digest, "marked");
        job_of(&kube, &id);
        assert!(
            objects_of(&kube, &id).iter().any(|(k, _)| k == "ConfigMap"),
            "{}",
            server.store
        );

        // Nobody but a platform admin marks: an admin of another team is refused.
        let other = server.team_with_user("other", "olga", "admin");
        let (s, v) = mark(&server, &other, "marked", true);
        assert_eq!(s, 403, "{v}");
        assert_eq!(trust(&server), (json!(false), json!("admin")));
    }
}

/// The pod `as_pod` ran has exited 0: its Job is marked complete, and the run the engine
/// reported is awaited and must have ended finished and valid.
fn pod_finished(
    kube: &KubeDouble,
    server: &Server,
    id: &str,
    job_path: &str,
    out: std::process::Output,
) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    kube.set_job_condition(job_path, "Complete", "Completed");
    let run = wait_run(server, id, ended);
    assert_eq!(run["state"], "finished", "{run}");
    assert_eq!(run["verdict"], "valid", "{run}");
    run
}

/// The Job of run `id` as its pod would run it, here: the pack unpacked from the ConfigMap the
/// controller created into `dir/pack`, an empty `dir/state`, the Job's container command with
/// `/pack` and `/state` being those directories and `crucible` this build, the environment the
/// Job names (the run id) with the token read from the run's Secret, and the controller reached
/// at its loopback address.
fn as_pod(kube: &KubeDouble, server: &Server, id: &str, dir: &std::path::Path) -> Command {
    use base64::Engine;
    let objects = objects_of(kube, id);
    let by_kind = |k: &str| &objects.iter().find(|(kind, _)| kind == k).unwrap().1;
    let b64 = |v: &Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    };
    let token = String::from_utf8(b64(&by_kind("Secret")["data"]["token"])).unwrap();
    let config_map = |key: &str| {
        let found = objects
            .iter()
            .find(|(kind, o)| kind == "ConfigMap" && o.get(key).is_some());
        found.map(|(_, o)| o)
    };
    let archive = b64(&config_map("binaryData").unwrap()["binaryData"]["pack.tar.gz"]);
    let (pack, state) = (dir.join("pack"), dir.join("state"));
    let steering = dir.join("steering");
    tar::Archive::new(flate2::read::GzDecoder::new(&archive[..]))
        .unpack(&pack)
        .unwrap();
    std::fs::create_dir(&state).unwrap();
    let container = &by_kind("Job")["spec"]["template"]["spec"]["containers"][0];
    // The steering ConfigMap's files where the Job mounts them (`subPath`, read-only): each
    // mount of the `steering` volume is one of its keys, at `/steering/KEY`.
    for m in container["volumeMounts"].as_array().unwrap() {
        if m["name"] != "steering" {
            continue;
        }
        assert_eq!(m["readOnly"], true, "{m}");
        let key = m["subPath"].as_str().unwrap();
        assert_eq!(m["mountPath"], format!("/steering/{key}"), "{m}");
        let text = config_map("data").unwrap()["data"][key].as_str().unwrap();
        std::fs::create_dir_all(&steering).unwrap();
        std::fs::write(steering.join(key), text).unwrap();
        std::fs::set_permissions(
            steering.join(key),
            std::os::unix::fs::PermissionsExt::from_mode(0o444),
        )
        .unwrap();
    }
    let env = container["env"].as_array().unwrap();
    let value = |n: &str| env.iter().find(|e| e["name"] == n).unwrap()["value"].clone();
    assert_eq!(value("CRUCIBLE_CONTROLLER_RUN"), id);
    // The Job's command as the pod runs it, `/pack`, `/state` and `/steering` being these
    // directories and
    // `crucible` this build; the controller reached at its loopback address.
    let command: Vec<String> = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let c = c.as_str().unwrap();
            c.replace("/pack", pack.to_str().unwrap())
                .replace("/state", state.to_str().unwrap())
                .replace("/steering", steering.to_str().unwrap())
        })
        .collect();
    let bin_dir = std::path::Path::new(BIN).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .env("PATH", path)
        .env_remove("CRUCIBLE_DECISIONS_URL")
        .env("CRUCIBLE_CONTROLLER_URL", &server.url)
        .env("CRUCIBLE_CONTROLLER_RUN", id)
        .env("CRUCIBLE_RUN_TOKEN", &token);
    cmd
}

/// The first store's controller dispatching to a cluster double (target `shared`), its targets
/// file in `dir`.
fn dispatching(dir: &std::path::Path) -> (KubeDouble, Server) {
    let kube = KubeDouble::start("s3cret");
    let targets = dispatch_targets(&kube, dir);
    let server = Server::start(&Store::all().remove(0), &["--targets", targets.as_str()]);
    (kube, server)
}

// Issue 17 with the remote engine link — the dispatched Job's own command, run here as its pod
// would run it (the pack unpacked from the ConfigMap the controller created, the state
// directory empty, the environment the Job names: the controller's URL and run id, and the
// token read from the run's Secret), reports its run to the controller, which records it
// finished as the engine ended it (not failed) when the Job completes, then deletes the run's
// objects.
#[test]
fn kubernetes_dispatched_job_reports_its_run_and_ends_finished() {
    let dir = tempfile::tempdir().unwrap();
    let (kube, server) = dispatching(dir.path());
    let digest = push(&server, "k", PLAYBOOK);
    let id = launch_on(&server, &digest, "shared");
    let job_path = job_of(&kube, &id);
    let out = as_pod(&kube, &server, &id, dir.path()).output().unwrap();
    pod_finished(&kube, &server, &id, &job_path, out);
    kube.wait("the finished run's objects deleted", |_| {
        objects_of(&kube, &id).is_empty()
    });
}

/// A human route between two commands: `deploy` runs when the person says yes.
const GATED: &str = r#"scan = command(name = "scan", run = "echo '{}'")
gate = route(name = "gate", depends_on = [scan], human = True, timeout = "120s", questions = {"go": noul(ask = "Deploy?")})
deploy = command(name = "deploy", run = "echo {}", depends_on = [gate], when = gate.go, answers = "yes")
hold = command(name = "hold", run = "echo {}", depends_on = [gate], when = gate.go, otherwise = True)
workflow([scan, gate, deploy, hold])
"#;

// Issue 17 end to end, "the engine reporting to the controller by connections it initiates"
// (RFC-0002:C-HUMAN-DECISION through a Kubernetes dispatch): a launch on a Kubernetes target,
// the created Job's own command run as its pod would run it, its human route opened on the
// controller by the engine's own requests and answered by an approver through the API, the
// run's session log reported: the controller shows the run finished valid with the answer,
// and the Job completed, deletes the run's objects.
#[test]
fn kubernetes_dispatched_job_asks_the_controllers_approvers() {
    let dir = tempfile::tempdir().unwrap();
    let (kube, server) = dispatching(dir.path());
    let ann = server.member("platform", "ann", "approver");
    let src = tempfile::tempdir().unwrap();
    std::fs::write(
        src.path().join("crucible.toml"),
        "[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n",
    )
    .unwrap();
    std::fs::write(src.path().join("workflow.star"), GATED).unwrap();
    let digest = crate::controller_runs::push_dir(&server, "gated", src.path());
    let id = launch_on(&server, &digest, "shared");
    let job_path = job_of(&kube, &id);
    let child = as_pod(&kube, &server, &id, dir.path())
        .env("CRUCIBLE_DECISIONS_POLL_MS", "100")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    let request = crate::controller_link::listed(&server, &ann, &id);
    assert_eq!(request["route"], "gate");
    let (s, v) = server.post_json(
        &format!("/v1/runs/{id}/decisions/gate/answer"),
        &ann,
        json!({"digest": request["digest"], "answers": {"go": ["yes"]}, "note": "ship it"}),
    );
    assert_eq!(s, 200, "{v}");
    let out = child.wait_with_output().unwrap();
    let run = pod_finished(&kube, &server, &id, &job_path, out);
    let status = |task: &str| {
        run["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["task"] == task)
            .map(|r| r["status"].clone())
    };
    assert_eq!(status("gate"), Some(json!("pass")), "{run}");
    assert_eq!(status("deploy"), Some(json!("pass")), "{run}");
    assert_eq!(status("hold"), Some(json!("not_taken")), "{run}");
    let (_, answered) = server.get(&format!("/v1/runs/{id}/decisions/gate"), &ann);
    assert_eq!(answered["state"], "answered", "{answered}");
    assert_eq!(answered["answer"]["principal"], "user:ann", "{answered}");
    kube.wait("the finished run's objects deleted", |_| {
        objects_of(&kube, &id).is_empty()
    });
}

// RFC-0002:C-PACK-BASE on a Kubernetes target (issue 17 with per-run steering) — a launch's
// steering goes beside the pack, never in it: its own immutable ConfigMap (text under `data`),
// every file mounted read-only at `/steering/NAME` by `subPath`, the Job's `plan run` handed
// `--steering-dir /steering` as the local executor hands the engine its steering directory;
// the objects pass `kubernetes-validate --strict`, `remote render` shows the same. The Job's
// own command, run as its pod would run it, has a (sandboxed, hostile) task read the steering
// file and be refused changing it, an agent's prompt carry it inside the external-input
// markers; the delivered pack's digest is unchanged and holds no steering. Once the run ended
// the steering ConfigMap is deleted with the run's other objects.
#[test]
fn kubernetes_pack_base_steering_delivered_beside_the_pack() {
    use crate::controller::pack_digest;
    use crate::controller_runs::{push_dir, row};
    use crate::controller_steering::{AGENT, FOCUS, MANIFEST, PROBE};
    // Outside /tmp: a task's sandbox empties /tmp.
    let dir = crate::support::probe_dir();
    let (kube, server) = dispatching(dir.path());
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("crucible.toml"), MANIFEST).unwrap();
    std::fs::write(src.path().join("probe.py"), PROBE).unwrap();
    std::fs::write(src.path().join("agent.py"), AGENT).unwrap();
    let digest = push_dir(&server, "p", src.path());
    let steering = json!({ "focus.md": FOCUS });

    // Rendered: the steering ConfigMap beside the pack's, mounted beside /pack.
    let (s, v) = server.post_json(
        "/v1/render",
        &server.admin,
        json!({ "pack": digest, "max_cost": 1, "max_time": "10m", "target": "shared",
                "steering": steering }),
    );
    assert_eq!(s, 200, "{v}");
    let yaml = v["yaml"].as_str().unwrap();
    validate(yaml);
    // And through `crucible remote render --steer`, from a file of that name.
    let given = tempfile::tempdir().unwrap();
    let focus = given.path().join("focus.md");
    std::fs::write(&focus, FOCUS).unwrap();
    let out = server.remote(&[
        "render",
        &digest,
        "--target",
        "shared",
        "--max-cost",
        "1",
        "--max-time",
        "10m",
        "--steer",
        focus.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let cli = String::from_utf8(out.stdout).unwrap();
    validate(&cli);
    for docs in [docs_of(yaml), docs_of(&cli)] {
        assert_eq!(
            kinds(&docs),
            ["ConfigMap", "ConfigMap", "PersistentVolumeClaim", "Job"]
        );
        let cm = docs
            .iter()
            .find(|d| {
                d["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .ends_with("-steering")
            })
            .unwrap();
        assert_eq!(cm["data"], steering, "{cm}");
        assert_eq!(cm["immutable"], true, "{cm}");
        assert!(cm.get("binaryData").is_none(), "{cm}");
    }

    // Dispatched.
    let (s, v) = launch(
        &server,
        &server.admin,
        json!({ "pack": digest, "max_cost": 1, "max_time": "10m", "target": "shared",
                "steering": steering }),
    );
    assert_eq!(s, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let job_path = job_of(&kube, &id);
    let objects = objects_of(&kube, &id);
    validate_sent(&objects);
    let steering_cms: Vec<&Value> = objects
        .iter()
        .filter(|(k, o)| k == "ConfigMap" && o.get("data").is_some())
        .map(|(_, o)| o)
        .collect();
    assert_eq!(steering_cms.len(), 1, "{objects:?}");
    assert_eq!(steering_cms[0]["data"], steering);
    assert_eq!(steering_cms[0]["immutable"], true);
    let job = &objects.iter().find(|(k, _)| k == "Job").unwrap().1;
    let pod = &job["spec"]["template"]["spec"];
    let command = pod["containers"][0]["command"].to_string();
    assert!(
        command.contains(r#""--steering-dir","/steering""#),
        "{command}"
    );
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "steering")
        .unwrap();
    assert_eq!(
        volume["configMap"]["name"],
        steering_cms[0]["metadata"]["name"]
    );

    // The Job's own command, as its pod runs it.
    let out = as_pod(&kube, &server, &id, dir.path()).output().unwrap();
    let run = pod_finished(&kube, &server, &id, &job_path, out);
    let probe = &row(&run, "probe")["output"];
    assert_eq!(probe["text"], FOCUS, "{probe}");
    assert_eq!(
        probe["dir"],
        json!(dir.path().join("steering").to_string_lossy()),
        "{probe}"
    );
    for attempt in ["created", "appended", "removed", "chmod", "renamed"] {
        assert_eq!(probe[attempt], "refused", "{attempt}: {probe}");
    }
    let prompt = row(&run, "steered")["output"]["prompt"].as_str().unwrap();
    let at = prompt
        .find(FOCUS.trim())
        .expect("the steering is in the prompt");
    assert!(
        prompt[..at].contains("[steering focus.md]"),
        "marked: {prompt}"
    );
    // Beside the tree, never in it.
    assert_eq!(pack_digest(&dir.path().join("pack")), digest);
    assert!(!dir.path().join("pack/focus.md").exists());
    assert!(!dir.path().join("pack/steering").exists());
    kube.wait(
        "the run's objects, its steering ConfigMap too, deleted",
        |_| objects_of(&kube, &id).is_empty(),
    );
}

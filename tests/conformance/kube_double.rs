//! A Kubernetes API server on loopback, standing in for a cluster (none can be had offline:
//! docs/kubernetes.md): the REST wire protocol the controller's dispatch speaks, on the
//! recording HTTP double. Namespaced collections at their real paths
//! (`/api/v1/namespaces/{ns}/configmaps|secrets|persistentvolumeclaims`,
//! `/apis/batch/v1/namespaces/{ns}/jobs`), create (201, or 409 with a `Status` of reason
//! `AlreadyExists`), get and delete by name (404 with reason `NotFound`), a bearer token
//! checked on every request (401 `Unauthorized`); it keeps what exists, lets a test play the
//! cluster's part (a Job's status, an object deleted by someone else, a failing API server),
//! and records every request.

use crate::http_double::{HttpDouble, Seen};
use crate::support::poll;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Cluster {
    /// Each object, by its path.
    objects: BTreeMap<String, Value>,
    /// Objects made so far (uids).
    made: u64,
    /// Answer a Job's creation 503 while set.
    fail_jobs: bool,
}

pub struct KubeDouble {
    http: HttpDouble,
    cluster: Arc<Mutex<Cluster>>,
}

/// A Kubernetes `Status` failure.
fn status(code: u16, reason: &str, message: &str) -> (u16, String) {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    (code, body.to_string())
}

/// The kind and apiVersion a collection holds.
fn kind_of(group: &str, resource: &str) -> Option<(&'static str, &'static str)> {
    match (group, resource) {
        ("v1", "configmaps") => Some(("ConfigMap", "v1")),
        ("v1", "secrets") => Some(("Secret", "v1")),
        ("v1", "persistentvolumeclaims") => Some(("PersistentVolumeClaim", "v1")),
        ("batch/v1", "jobs") => Some(("Job", "batch/v1")),
        _ => None,
    }
}

fn answer(cluster: &Mutex<Cluster>, token: &str, req: &Seen) -> (u16, String) {
    if req.authorization.as_deref() != Some(&format!("Bearer {token}")) {
        return status(401, "Unauthorized", "Unauthorized");
    }
    let path = req.path.split('?').next().unwrap_or_default();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("v1", rest),
        ["apis", "batch", "v1", rest @ ..] => ("batch/v1", rest),
        _ => {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
    };
    let (namespace, resource, name) = match rest {
        ["namespaces", ns, res] => (*ns, *res, None),
        ["namespaces", ns, res, name] => (*ns, *res, Some(*name)),
        _ => {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
    };
    let Some((kind, api_version)) = kind_of(group, resource) else {
        return status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    };
    let mut cluster = cluster.lock().unwrap();
    match (req.method.as_str(), name) {
        ("POST", None) => {
            let mut object = req.body.clone();
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if object["kind"] != kind || object["apiVersion"] != api_version || name.is_empty() {
                return status(400, "BadRequest", &format!("not a {api_version} {kind}"));
            }
            if object["metadata"]["namespace"]
                .as_str()
                .is_some_and(|n| n != namespace)
            {
                return status(
                    400,
                    "BadRequest",
                    "the namespace of the object does not match",
                );
            }
            if kind == "Job" && cluster.fail_jobs {
                return status(503, "ServiceUnavailable", "etcdserver: request timed out");
            }
            let at = format!("{path}/{name}");
            if cluster.objects.contains_key(&at) {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("{resource} \"{name}\" already exists"),
                );
            }
            cluster.made += 1;
            object["metadata"]["uid"] = json!(format!("uid-{}", cluster.made));
            object["metadata"]["namespace"] = json!(namespace);
            cluster.objects.insert(at, object.clone());
            (201, object.to_string())
        }
        ("GET", Some(name)) => match cluster.objects.get(path) {
            Some(o) => (200, o.to_string()),
            None => status(404, "NotFound", &format!("{resource} \"{name}\" not found")),
        },
        ("DELETE", Some(name)) => match cluster.objects.remove(path) {
            Some(_) => (
                200,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}).to_string(),
            ),
            None => status(404, "NotFound", &format!("{resource} \"{name}\" not found")),
        },
        _ => status(405, "MethodNotAllowed", "not served by the double"),
    }
}

impl KubeDouble {
    /// A cluster that accepts `token` as its bearer token.
    pub fn start(token: &str) -> KubeDouble {
        let cluster = Arc::new(Mutex::new(Cluster::default()));
        let (c, token) = (Arc::clone(&cluster), token.to_string());
        let http = HttpDouble::scripted(move |req| answer(&c, &token, req));
        KubeDouble { http, cluster }
    }

    /// Writes a kubeconfig in `dir` whose context `mock` reaches this cluster with `token`.
    pub fn kubeconfig(&self, dir: &Path, token: &str) -> PathBuf {
        let path = dir.join(format!("kubeconfig-{token}"));
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: mock\n\
             clusters:\n- name: mock\n  cluster:\n    server: {}\n\
             users:\n- name: ci\n  user:\n    token: {token}\n\
             contexts:\n- name: mock\n  context:\n    cluster: mock\n    user: ci\n    namespace: crucible-runs\n",
            self.http.url("")
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The objects that exist now, by path.
    pub fn objects(&self) -> BTreeMap<String, Value> {
        self.cluster.lock().unwrap().objects.clone()
    }

    /// Every request, in order: (method, path with its query, status answered is not kept).
    pub fn requests(&self) -> Vec<Seen> {
        self.http.requests()
    }

    /// Plays the Job controller: sets a condition (`Failed`, `Complete`) on the Job at `path`.
    pub fn set_job_condition(&self, path: &str, kind: &str, reason: &str) {
        let mut cluster = self.cluster.lock().unwrap();
        let job = cluster.objects.get_mut(path).expect("the Job exists");
        job["status"] = json!({ "conditions": [{
            "type": kind, "status": "True", "reason": reason, "message": "as the test says",
        }]});
    }

    /// Someone else deletes the object at `path`.
    pub fn remove(&self, path: &str) {
        self.cluster.lock().unwrap().objects.remove(path);
    }

    /// Makes the API server answer a Job's creation 503 (true) or serve it again (false).
    pub fn fail_jobs(&self, fail: bool) {
        self.cluster.lock().unwrap().fail_jobs = fail;
    }

    /// Waits (at most a minute) until `done` holds of the objects that exist.
    pub fn wait(&self, what: &str, done: impl Fn(&BTreeMap<String, Value>) -> bool) {
        poll(60, || {
            let objects = self.objects();
            if done(&objects) {
                Ok(())
            } else {
                Err(format!(
                    "the cluster never got to {what}: {:?}",
                    objects.keys()
                ))
            }
        })
    }
}

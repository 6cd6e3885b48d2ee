//! A small Kubernetes REST client (issue 17, dispatch) on the workspace's blocking `ureq`: the
//! cluster a target's kubeconfig context names (its server URL, CA, and a bearer token or a
//! client certificate), and the four calls dispatch needs: create, get, delete, all by path.
//! No SDK: the objects are k8s-openapi's typed ones, sent as JSON (docs/decisions.md).

use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a call failed: transient (the network, 429, 5xx: tried again later) or permanent
/// (anything else the API server refused, with its Status message).
#[derive(Debug)]
pub enum Failure {
    Transient(String),
    Permanent(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Transient(m) | Failure::Permanent(m) => f.write_str(m),
        }
    }
}

pub type Result<T> = std::result::Result<T, Failure>;

/// A kubeconfig file, the parts of it a context needs (the client-go format).
#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    #[serde(default)]
    certificate_authority_data: Option<String>,
    #[serde(default)]
    certificate_authority: Option<PathBuf>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct User {
    #[serde(default)]
    token: Option<String>,
    #[serde(default, rename = "tokenFile")]
    token_file: Option<PathBuf>,
    #[serde(default)]
    client_certificate_data: Option<String>,
    #[serde(default)]
    client_key_data: Option<String>,
    #[serde(default)]
    client_certificate: Option<PathBuf>,
    #[serde(default)]
    client_key: Option<PathBuf>,
    #[serde(default)]
    exec: Option<Value>,
    #[serde(default, rename = "auth-provider")]
    auth_provider: Option<Value>,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: Option<String>,
}

/// The kubeconfig the controller reads when a target names none: `$KUBECONFIG` (its first
/// file), else `~/.kube/config`.
pub fn default_kubeconfig() -> PathBuf {
    if let Some(k) = std::env::var_os("KUBECONFIG").filter(|k| !k.is_empty()) {
        if let Some(first) = std::env::split_paths(&k).next() {
            return first;
        }
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".kube/config")
}

/// One cluster, as one kubeconfig context reaches it.
pub struct Client {
    /// `https://host:port`, no trailing slash.
    server: String,
    /// `Bearer …`, when the user authenticates by token.
    authorization: Option<String>,
    agent: ureq::Agent,
}

fn b64(what: &str, data: &str) -> anyhow::Result<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| anyhow::anyhow!("{what}: not base64: {e}"))
}

/// Inline data, else the file (relative to the kubeconfig's directory), else nothing.
fn data_or_file(
    what: &str,
    data: &Option<String>,
    file: &Option<PathBuf>,
    dir: &Path,
) -> anyhow::Result<Option<Vec<u8>>> {
    match (data, file) {
        (Some(d), _) => b64(what, d).map(Some),
        (None, Some(f)) => std::fs::read(dir.join(f))
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{what}: reading {}: {e}", dir.join(f).display())),
        (None, None) => Ok(None),
    }
}

impl Client {
    /// The client for `context` of the kubeconfig at `path`. Exec plugins and auth providers
    /// are refused (a controller authenticates by a service account's token or a client
    /// certificate, docs/kubernetes.md).
    pub fn from_kubeconfig(path: &Path, context: &str) -> anyhow::Result<Client> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading the kubeconfig {}: {e}", path.display()))?;
        let config: Kubeconfig = serde_yaml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("the kubeconfig {}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let ctx = config
            .contexts
            .iter()
            .find(|c| c.name == context)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "the kubeconfig {} has no context `{context}`",
                    path.display()
                )
            })?;
        let ctx = &ctx.context;
        let cluster = &config
            .clusters
            .iter()
            .find(|c| c.name == ctx.cluster)
            .ok_or_else(|| anyhow::anyhow!("context `{context}`: no cluster `{}`", ctx.cluster))?
            .cluster;
        let user = match &ctx.user {
            Some(u) => {
                &config
                    .users
                    .iter()
                    .find(|x| &x.name == u)
                    .ok_or_else(|| anyhow::anyhow!("context `{context}`: no user `{u}`"))?
                    .user
            }
            None => &User::default(),
        };
        anyhow::ensure!(
            user.exec.is_none() && user.auth_provider.is_none(),
            "context `{context}`: credential plugins (exec, auth-provider) are not supported: \
             give the controller a service account token or a client certificate"
        );
        let token = match (&user.token, &user.token_file) {
            (Some(t), _) => Some(t.trim().to_string()),
            (None, Some(f)) => Some(
                std::fs::read_to_string(dir.join(f))
                    .map_err(|e| anyhow::anyhow!("reading the token file {}: {e}", f.display()))?
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(ca) = data_or_file(
            "certificate-authority",
            &cluster.certificate_authority_data,
            &cluster.certificate_authority,
            dir,
        )? {
            let certs = pem_certs(&ca)?;
            anyhow::ensure!(
                !certs.is_empty(),
                "certificate-authority holds no certificate"
            );
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
        }
        let cert = data_or_file(
            "client-certificate",
            &user.client_certificate_data,
            &user.client_certificate,
            dir,
        )?;
        let key = data_or_file("client-key", &user.client_key_data, &user.client_key, dir)?;
        if let (Some(cert), Some(key)) = (cert, key) {
            let chain = pem_certs(&cert)?;
            let key = ureq::tls::PrivateKey::from_pem(&key)
                .map_err(|e| anyhow::anyhow!("client-key: {e}"))?;
            tls = tls.client_cert(Some(ureq::tls::ClientCert::new_with_certs(&chain, key)));
        }
        if cluster.insecure_skip_tls_verify {
            tls = tls.disable_verification(true);
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .tls_config(tls.build())
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Ok(Client {
            server: cluster.server.trim_end_matches('/').to_string(),
            authorization: token.map(|t| format!("Bearer {t}")),
            agent,
        })
    }

    fn with_auth<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.authorization {
            Some(a) => req.header("Authorization", a),
            None => req,
        }
    }

    /// One call: the answer's status and JSON body (a Kubernetes Status on most failures).
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value)> {
        let url = format!("{}{path}", self.server);
        let what = format!("{method} {path}");
        let response = match (method, body) {
            ("POST", Some(b)) => self
                .with_auth(self.agent.post(&url))
                .header("Content-Type", "application/json")
                .header("Accept", "application/json")
                .send(b.to_string().as_bytes()),
            ("DELETE", _) => self
                .with_auth(self.agent.delete(&url))
                .header("Accept", "application/json")
                .call(),
            _ => self
                .with_auth(self.agent.get(&url))
                .header("Accept", "application/json")
                .call(),
        };
        let mut r = response.map_err(|e| Failure::Transient(format!("{what}: {e}")))?;
        let status = r.status().as_u16();
        let bytes = r
            .body_mut()
            .with_config()
            .limit(8 << 20)
            .read_to_vec()
            .map_err(|e| Failure::Transient(format!("{what}: {e}")))?;
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    /// Creates the object at `collection` (its path); `Ok(true)` when created, `Ok(false)`
    /// when an object of that name was already there and `ours` says it is this one's (a
    /// dispatch tried again). One of that name that is not ours is a permanent failure.
    pub fn create(
        &self,
        collection: &str,
        object: &Value,
        ours: impl Fn(&Value) -> bool,
    ) -> Result<bool> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let (status, answer) = self.call("POST", collection, Some(object))?;
        match status {
            200..=299 => Ok(true),
            409 if answer["reason"] == "AlreadyExists" => {
                match self.get(&format!("{collection}/{name}"))? {
                    Some(there) if ours(&there) => Ok(false),
                    Some(_) => Err(Failure::Permanent(format!(
                        "{collection}/{name} already exists and is not this run's"
                    ))),
                    // Deleted between the two calls: create it again, next time round.
                    None => Err(Failure::Transient(format!("{collection}/{name} went away"))),
                }
            }
            _ => Err(failure(&format!("POST {collection}"), status, &answer)),
        }
    }

    /// The object at `path`, or `None` when there is none (404).
    pub fn get(&self, path: &str) -> Result<Option<Value>> {
        match self.call("GET", path, None)? {
            (200..=299, v) => Ok(Some(v)),
            (404, _) => Ok(None),
            (status, v) => Err(failure(&format!("GET {path}"), status, &v)),
        }
    }

    /// Deletes the object at `path` (a missing one is deleted already); a Job with its pods
    /// deleted in the background.
    pub fn delete(&self, path: &str) -> Result<()> {
        let url = format!("{path}?propagationPolicy=Background");
        match self.call("DELETE", &url, None)? {
            (200..=299 | 404, _) => Ok(()),
            (status, v) => Err(failure(&format!("DELETE {path}"), status, &v)),
        }
    }
}

/// The certificates of a PEM bundle.
fn pem_certs(pem: &[u8]) -> anyhow::Result<Vec<ureq::tls::Certificate<'static>>> {
    let mut out = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        if let ureq::tls::PemItem::Certificate(c) = item.map_err(|e| anyhow::anyhow!("{e}"))? {
            out.push(c);
        }
    }
    Ok(out)
}

/// A refusal as the API server's Status says it: 429 and 5xx transient, the rest permanent.
fn failure(what: &str, status: u16, answer: &Value) -> Failure {
    let message = answer["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| answer.to_string().chars().take(300).collect());
    let reason = answer["reason"].as_str().unwrap_or_default();
    let text = format!("{what}: the API server answered {status} {reason}: {message}");
    if status == 429 || status >= 500 {
        Failure::Transient(text)
    } else {
        Failure::Permanent(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, user: &str) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443/\n\
             users:\n- name: u\n  user:\n{user}\n\
             contexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n"
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_context_gives_the_server_and_a_token_from_a_relative_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "abc\n").unwrap();
        let path = config(dir.path(), "    tokenFile: token");
        let c = Client::from_kubeconfig(&path, "ctx").unwrap();
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert_eq!(c.authorization.as_deref(), Some("Bearer abc"));
        let err = Client::from_kubeconfig(&path, "other").err().unwrap();
        assert!(err.to_string().contains("no context `other`"), "{err}");
    }

    #[test]
    fn credential_plugins_and_a_bad_ca_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = config(dir.path(), "    exec:\n      command: aws");
        let err = Client::from_kubeconfig(&path, "ctx").err().unwrap();
        assert!(err.to_string().contains("credential plugins"), "{err}");
        let path = config(dir.path(), "    token: t");
        let text = std::fs::read_to_string(&path).unwrap().replace(
            "server: https://10.0.0.1:6443/",
            "server: https://10.0.0.1:6443/\n    certificate-authority-data: bm90IGEgY2VydA==",
        );
        std::fs::write(&path, text).unwrap();
        let err = Client::from_kubeconfig(&path, "ctx").err().unwrap();
        assert!(err.to_string().contains("no certificate"), "{err}");
    }
}

//! RFC-0002:C-PACK-PUBLISH (issue 17): OCI publication by a real `crucible serve`, against a
//! real CNCF distribution registry (Debian's `docker-registry`, installed by .ci/run) started
//! on a free loopback port with a temporary store, and, for the failure classes, through a
//! fault-injecting HTTP proxy written here. Each test runs once per store (SQLite, and
//! PostgreSQL when `CRUCIBLE_TEST_POSTGRES` names a server).
//!
//! Without the registry binary the tests skip with a message, unless
//! `CRUCIBLE_REQUIRE_REGISTRY` is set (CI sets it), when they fail.

use crate::controller::{file, noise, pack_digest, tar_of, Server, Store};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const EMPTY_CONFIG_DIGEST: &str =
    "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";

/// A `docker-registry serve` on a free loopback port, its store in a temporary directory.
pub(crate) struct Registry {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    origin: String,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// The running registry, or `None` (with a message) when the binary is absent and the run
    /// does not require it.
    pub(crate) fn start() -> Option<Registry> {
        let bin = "docker-registry";
        if Command::new(bin).arg("--version").output().is_err() {
            assert!(
                std::env::var_os("CRUCIBLE_REQUIRE_REGISTRY").is_none(),
                "CRUCIBLE_REQUIRE_REGISTRY is set but `docker-registry` is not installed"
            );
            eprintln!(
                "\n*** SKIPPED: the OCI publication tests need `docker-registry` (apt-get \
                 install docker-registry; .ci/run installs it). CI always runs them. ***\n"
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: info, accesslog: {{disabled: true}}}}\n\
                 storage: {{filesystem: {{rootdirectory: {}}}, delete: {{enabled: true}}}}\n\
                 http: {{addr: \"127.0.0.1:0\", secret: test-only}}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let mut child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // It logs `listening on 127.0.0.1:PORT` once bound: no port race.
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("the registry exits before listening")
                .unwrap();
            if let Some(rest) = line.split("listening on 127.0.0.1:").nth(1) {
                break rest
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        let origin = format!("http://127.0.0.1:{port}");
        let registry = Registry {
            child,
            origin,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while registry.get("/v2/", "").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "the registry never answered /v2/"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(registry)
    }

    /// The repository the controller publishes to.
    pub(crate) fn repo(&self) -> String {
        format!("{}/crucible/packs", self.origin)
    }

    fn get(&self, path: &str, accept: &str) -> (u16, Vec<u8>, Option<String>) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut req = agent.get(format!("{}{path}", self.origin));
        if !accept.is_empty() {
            req = req.header("Accept", accept);
        }
        let mut r = req.call().unwrap();
        let digest = r
            .headers()
            .get("Docker-Content-Digest")
            .map(|v| v.to_str().unwrap().to_string());
        let status = r.status().as_u16();
        let body = r
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .unwrap();
        (status, body, digest)
    }

    /// The manifest the tag of `digest` names, and its digest.
    fn manifest_of(&self, digest: &str) -> (Value, String) {
        let tag = digest.replace("tree1:", "tree1-");
        let accept = format!("{MANIFEST}, {DOCKER_MANIFEST}");
        let (s, body, d) = self.get(&format!("/v2/crucible/packs/manifests/{tag}"), &accept);
        assert_eq!(s, 200, "{}", String::from_utf8_lossy(&body));
        (serde_json::from_slice(&body).unwrap(), d.unwrap())
    }

    /// The files the manifest's layers give when extracted in order, a later file replacing
    /// an earlier one, with each entry's mode.
    fn extracted(&self, manifest: &Value) -> Vec<(String, u32, Vec<u8>)> {
        let mut files = std::collections::BTreeMap::new();
        for layer in manifest["layers"].as_array().unwrap() {
            let digest = layer["digest"].as_str().unwrap();
            let (s, gz, _) = self.get(&format!("/v2/crucible/packs/blobs/{digest}"), "");
            assert_eq!(s, 200);
            let mut a = tar::Archive::new(flate2::read::GzDecoder::new(&gz[..]));
            for e in a.entries().unwrap() {
                let mut e = e.unwrap();
                let path = e.path().unwrap().to_string_lossy().into_owned();
                let mode = e.header().mode().unwrap();
                let mut data = Vec::new();
                e.read_to_end(&mut data).unwrap();
                files.insert(path, (mode, data));
            }
        }
        files.into_iter().map(|(p, (m, d))| (p, m, d)).collect()
    }

    /// Puts a manifest that is not a crucible pack's under `tag`, as another publisher might:
    /// no layers, its annotation claiming the pack digest `claims`.
    fn put_foreign(&self, tag: &str, media_type: &str, claims: &str) -> String {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let base = format!("{}/v2/crucible/packs", self.origin);
        let r = agent
            .post(format!("{base}/blobs/uploads/"))
            .send_empty()
            .unwrap();
        let location = r
            .headers()
            .get("Location")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let sep = if location.contains('?') { '&' } else { '?' };
        let r = agent
            .put(format!("{location}{sep}digest={EMPTY_CONFIG_DIGEST}"))
            .send(&b"{}"[..])
            .unwrap();
        assert_eq!(r.status().as_u16(), 201);
        let config = match media_type {
            MANIFEST => "application/vnd.oci.empty.v1+json",
            _ => "application/vnd.docker.container.image.v1+json",
        };
        let manifest = json!({
            "schemaVersion": 2, "mediaType": media_type,
            "config": {"mediaType": config,
                       "digest": EMPTY_CONFIG_DIGEST, "size": 2},
            "layers": [],
            "annotations": {"dev.crucible.pack.digest": claims}
        });
        let r = agent
            .put(format!("{base}/manifests/{tag}"))
            .header("Content-Type", media_type)
            .send(manifest.to_string().as_bytes())
            .unwrap();
        assert_eq!(r.status().as_u16(), 201);
        r.headers()
            .get("Docker-Content-Digest")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string()
    }

    /// The tags of the repository (none when it does not exist yet).
    fn tags(&self) -> Vec<String> {
        let (s, body, _) = self.get("/v2/crucible/packs/tags/list", "");
        if s == 404 {
            return Vec::new();
        }
        let v: Value = serde_json::from_slice(&body).unwrap();
        let mut tags: Vec<String> = v["tags"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| t.as_str().unwrap().to_string())
            .collect();
        tags.sort();
        tags
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the proxy does with the next requests.
#[derive(Clone, Copy)]
enum Mode {
    Pass,
    /// Answer `status` to the next `count` requests (then pass).
    Fail {
        status: u16,
        count: usize,
    },
    /// Be a registry that authenticates by Bearer tokens (the distribution token protocol):
    /// every request without the token is answered 401 with a `WWW-Authenticate: Bearer`
    /// challenge naming `/token` here as the realm, which gives the token for the Basic
    /// credentials `BEARER_USER` only.
    Bearer,
}

const BEARER_USER: &str = "crucible:s3cret";
const BEARER_TOKEN: &str = "issued-token-1";

/// An HTTP proxy in front of the registry that fails requests on demand and counts them.
struct Proxy {
    origin: String,
    mode: Arc<Mutex<Mode>>,
    requests: Arc<AtomicUsize>,
    /// Tokens given in Bearer mode.
    tokens: Arc<AtomicUsize>,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream.trim_start_matches("http://").to_string();
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let requests = Arc::new(AtomicUsize::new(0));
        let tokens = Arc::new(AtomicUsize::new(0));
        let (m, n, t) = (mode.clone(), requests.clone(), tokens.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (m, n, t, up) = (m.clone(), n.clone(), t.clone(), upstream.clone());
                std::thread::spawn(move || {
                    let _ = relay(conn, &up, &m, &n, &t);
                });
            }
        });
        Proxy {
            origin,
            mode,
            requests,
            tokens,
        }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// One request per connection: read it whole, then answer the failure or relay it upstream
/// with `Connection: close` and copy the answer back.
fn relay(
    mut conn: TcpStream,
    upstream: &str,
    mode: &Mutex<Mode>,
    n: &AtomicUsize,
    tokens: &AtomicUsize,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut head: Vec<String> = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if !lower.starts_with("connection:") {
            head.push(line);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    n.fetch_add(1, Ordering::SeqCst);
    if matches!(*mode.lock().unwrap(), Mode::Bearer) {
        match bearer(&head, tokens) {
            Some((status, extra, text)) => {
                write!(
                    conn,
                    "HTTP/1.1 {status} Auth\r\nContent-Type: application/json\r\n{extra}\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                )?;
                return Ok(());
            }
            // Authorized: relayed without the token (the registry behind wants none).
            None => head.retain(|l| !l.to_ascii_lowercase().starts_with("authorization:")),
        }
    }
    let fail = {
        let mut m = mode.lock().unwrap();
        match *m {
            Mode::Fail { status, count } if count > 0 => {
                *m = Mode::Fail {
                    status,
                    count: count - 1,
                };
                Some(status)
            }
            _ => None,
        }
    };
    if let Some(status) = fail {
        let text =
            format!("{{\"errors\":[{{\"code\":\"INJECTED\",\"message\":\"fault {status}\"}}]}}");
        write!(
            conn,
            "HTTP/1.1 {status} Injected\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        )?;
        return Ok(());
    }
    let mut up = TcpStream::connect(upstream)?;
    for line in &head {
        up.write_all(line.as_bytes())?;
    }
    up.write_all(b"Connection: close\r\n\r\n")?;
    up.write_all(&body)?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    conn.write_all(&answer)?;
    Ok(())
}

/// Bearer mode's answer to a request, when it is not relayed: the token endpoint's, or the
/// challenge to a request without the token.
fn bearer(head: &[String], tokens: &AtomicUsize) -> Option<(u16, String, String)> {
    use base64::Engine;
    let header = |name: &str| {
        head.iter().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let path = head.first()?.split_whitespace().nth(1)?.to_string();
    let authorization = header("authorization");
    if path.starts_with("/token?") {
        let basic = base64::engine::general_purpose::STANDARD.encode(BEARER_USER);
        let scoped = path.contains("service=crucible-test")
            && path.contains("scope=repository%3Acrucible%2Fpacks%3Apull%2Cpush");
        if authorization.as_deref() != Some(&format!("Basic {basic}")) || !scoped {
            let text = r#"{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}"#;
            return Some((401, String::new(), text.into()));
        }
        tokens.fetch_add(1, Ordering::SeqCst);
        return Some((
            200,
            String::new(),
            json!({ "token": BEARER_TOKEN }).to_string(),
        ));
    }
    if authorization.as_deref() == Some(&format!("Bearer {BEARER_TOKEN}")) {
        return None;
    }
    let realm = format!("http://{}/token", header("host")?);
    let challenge = format!(
        "WWW-Authenticate: Bearer realm=\"{realm}\",service=\"crucible-test\",\
         scope=\"repository:crucible/packs:pull,push\"\r\n"
    );
    let text = r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#;
    Some((401, challenge, text.into()))
}

/// Polls the pack's revision `rev` (1-based; 0 the last) until its publication state is
/// `want`; returns that state.
pub(crate) fn publication(server: &Server, pack: &str, rev: usize, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, v) = server.get(&format!("/v1/packs/{pack}"), &server.admin);
        assert_eq!(s, 200, "{v}");
        let revs = v["revisions"].as_array().unwrap();
        let r = if rev == 0 {
            revs.last()
        } else {
            revs.get(rev - 1)
        };
        let p = r.unwrap()["publication"].clone();
        if p["state"] == want {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "{}: publication never became {want}: {p}",
            server.store
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A pack registered in the platform team from `files`: (id, digest).
fn register(server: &Server, name: &str, files: &[(&str, &str)]) -> (String, String) {
    let entries: Vec<_> = files.iter().map(|(p, d)| file(p, d)).collect();
    let (s, v) = server.call(
        "POST",
        &format!("/v1/packs?name={name}&team=platform"),
        &server.admin,
        Some(&tar_of(&entries)),
    );
    assert_eq!(s, 200, "{v}");
    (
        v["id"].as_str().unwrap().into(),
        v["digest"].as_str().unwrap().into(),
    )
}

/// The files as extraction gives them: each mode 0755.
fn as_extracted(files: &[(&str, &str)]) -> Vec<(String, u32, Vec<u8>)> {
    let mut v: Vec<_> = files
        .iter()
        .map(|(p, d)| (p.to_string(), 0o755, d.as_bytes().to_vec()))
        .collect();
    v.sort();
    v
}

const FILES: &[(&str, &str)] = &[
    ("crucible.toml", "[pack]\nname = \"p\"\n"),
    ("prompts/a.md", "hello\n"),
    ("workflow.star", "# graph\n"),
];

// RFC-0002:C-PACK-PUBLISH — with no registry configured nothing is published and the state is
// unpublished; configured later, revisions registered before are published: the OCI empty
// config, one tar+gzip layer whose extraction is exactly the pack's files (mode 0755), the two
// annotations, under the tag tree1-<hex>, the manifest digest recorded and shown by `remote
// pack show`. A second controller publishing the same pack finds the tag and records the same
// manifest (idempotent). A tag already naming another manifest is never moved: a permanent
// failure, the registration kept. Changing the registry resets every state (the failed one is
// published on the new registry), and removing it resets them to unpublished.
#[test]
fn pack_publish_published_once_under_an_immutable_tag_and_reset_on_registry_change() {
    for store in Store::all() {
        let Some(registry) = Registry::start() else {
            return;
        };
        let mut server = Server::start(&store, &[]);
        let (pack, digest) = register(&server, "p", FILES);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            publication(&server, &pack, 1, "unpublished")["state"],
            "unpublished"
        );
        assert!(
            registry.tags().is_empty(),
            "nothing attempts publication without a registry"
        );
        let repo = registry.repo();
        server.restart_with(&store, &["--registry", &repo]);
        let published = publication(&server, &pack, 1, "published");
        let (manifest, manifest_digest) = registry.manifest_of(&digest);
        assert_eq!(published["manifest_digest"], manifest_digest.as_str());
        assert_eq!(published["layers"], 1);
        assert_eq!(published["base_layer_shared"], Value::Null);
        assert_eq!(manifest["mediaType"], MANIFEST);
        assert_eq!(
            manifest["config"]["mediaType"],
            "application/vnd.oci.empty.v1+json"
        );
        assert_eq!(manifest["config"]["digest"], EMPTY_CONFIG_DIGEST);
        assert_eq!(
            manifest["annotations"]["dev.crucible.pack.digest"],
            digest.as_str()
        );
        assert_eq!(
            manifest["annotations"]["dev.crucible.pack.kind"],
            "playbook"
        );
        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(
            layers[0]["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        assert_eq!(registry.extracted(&manifest), as_extracted(FILES));
        let out = server.remote(&["pack", "show", &digest]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains(&format!("published {manifest_digest}")),
            "{text}"
        );
        assert!(text.contains("pack platform/p"), "{text}");

        // Idempotent: another controller's publication of the same pack finds the tag.
        let other = Server::start(&Store::Sqlite, &["--registry", &repo]);
        let (other_pack, _) = register(&other, "same", FILES);
        let again = publication(&other, &other_pack, 1, "published");
        assert_eq!(again["manifest_digest"], manifest_digest.as_str());
        assert_eq!(registry.manifest_of(&digest).1, manifest_digest);

        // A tag that names another manifest (an OCI one, or a Docker one a HEAD asking only for
        // OCI manifests would not see, or one whose annotation claims this very pack but whose
        // layers are not its layers) is refused, permanently; registration stands.
        let mut conflicted = Vec::new();
        let cases = [
            (MANIFEST, false),
            (DOCKER_MANIFEST, false),
            (MANIFEST, true),
        ];
        for (n, (media_type, claims_it)) in cases.into_iter().enumerate() {
            let marker = format!("{}{n}", server.store);
            let q: &[(&str, &str)] = &[("crucible.toml", "[pack]\n"), ("q", &marker)];
            let dir = tempfile::tempdir().unwrap();
            for (p, d) in q {
                std::fs::write(dir.path().join(p), d).unwrap();
            }
            let q_digest = pack_digest(dir.path());
            let claims = if claims_it {
                q_digest.as_str()
            } else {
                "tree1:someone-else"
            };
            let tag = q_digest.replace("tree1:", "tree1-");
            let foreign = registry.put_foreign(&tag, media_type, claims);
            let (q_pack, got) = register(&server, &format!("q{n}"), q);
            assert_eq!(got, q_digest);
            let failed = publication(&server, &q_pack, 1, "failed");
            let error = failed["last_error"].as_str().unwrap();
            assert!(
                error.contains("never moved") && error.contains(&foreign),
                "{media_type}: {failed}"
            );
            assert_eq!(
                error.contains("whose layers are not this pack's"),
                claims_it,
                "{failed}"
            );
            assert_eq!(
                registry.manifest_of(&q_digest).1,
                foreign,
                "the tag was moved"
            );
            let (_, shown) = server.get(&format!("/v1/packs/{q_pack}"), &server.admin);
            assert_eq!(shown["digest"], q_digest.as_str());
            conflicted.push((q_pack, q_digest));
        }

        // Another registry: every state reset, then published there (the failed ones too).
        let second = Registry::start().unwrap();
        server.restart_with(&store, &["--registry", &second.repo()]);
        for (q_pack, q_digest) in &conflicted {
            let moved = publication(&server, q_pack, 1, "published");
            assert_eq!(
                second.manifest_of(q_digest).1,
                moved["manifest_digest"].as_str().unwrap()
            );
        }
        let p_again = publication(&server, &pack, 1, "published");
        assert_eq!(
            p_again["manifest_digest"],
            manifest_digest.as_str(),
            "same bytes, same digest"
        );
        // No registry: every state unpublished.
        server.restart_with(&store, &[]);
        assert_eq!(
            publication(&server, &pack, 1, "unpublished")["state"],
            "unpublished"
        );
        for (q_pack, _) in &conflicted {
            assert_eq!(
                publication(&server, q_pack, 1, "unpublished")["state"],
                "unpublished"
            );
        }
    }
}

// RFC-0002:C-PACK-PUBLISH — a pack graduated from a draft saved on a base is published as two
// layers, the base's files and then the overlay's, whose ordered extraction is the flattened
// tree; two packs on one base carry an identical first layer. Once the base's tree is no
// longer held (its pack deleted), a pack on it is published as one layer and its state records
// that the base layer is not shared.
#[test]
fn pack_publish_two_layers_on_a_held_base_and_one_after() {
    let Some(registry) = Registry::start() else {
        return;
    };
    for store in Store::all() {
        let server = Server::start(&store, &["--registry", &registry.repo()]);
        let noisy = noise();
        let base_files: &[(&str, &str)] =
            &[("crucible.toml", "[pack]\n"), ("a", "1"), ("b", &noisy)];
        let (base_pack, base) = register(&server, &format!("base-{}", server.store), base_files);
        publication(&server, &base_pack, 1, "published");
        let save = |draft: &str, files: &[(&str, &str)]| {
            let entries: Vec<_> = files.iter().map(|(p, d)| file(p, d)).collect();
            let (s, v) = server.save_draft(draft, Some(&base), &tar_of(&entries), &server.admin);
            assert_eq!(s, 200, "{v}");
            v
        };
        let graduate = |draft: &Value, version: i64| {
            let path = format!("/v1/drafts/{}/publish", draft["id"].as_str().unwrap());
            let (s, v) = server.post_json(&path, &server.admin, json!({ "version": version }));
            assert_eq!(s, 200, "{v}");
            v["id"].as_str().unwrap().to_string()
        };
        let one = save("one", &[("a", "2"), ("c", server.store)]);
        let two = save("two", &[("d", "4")]);
        let one_pack = graduate(&one, 1);
        let p1 = publication(&server, &one_pack, 0, "published");
        assert_eq!(
            (p1["layers"].clone(), p1["base_layer_shared"].clone()),
            (json!(2), json!(true))
        );
        let two_pack = graduate(&two, 1);
        publication(&server, &two_pack, 0, "published");
        let (m1, d1) = registry.manifest_of(one["digest"].as_str().unwrap());
        let (m2, _) = registry.manifest_of(two["digest"].as_str().unwrap());
        assert_eq!(p1["manifest_digest"], d1.as_str());
        assert_eq!(
            m1["layers"][0], m2["layers"][0],
            "one base, one first layer"
        );
        assert_ne!(m1["layers"][1], m2["layers"][1]);
        let flattened: &[(&str, &str)] = &[
            ("crucible.toml", "[pack]\n"),
            ("a", "2"),
            ("b", &noisy),
            ("c", server.store),
        ];
        assert_eq!(registry.extracted(&m1), as_extracted(flattened));

        // The base's pack deleted: its tree is collected, and a pack on it goes as one layer.
        let later = save("one", &[("a", "3"), ("c", server.store)]);
        let (s, _) = server.call(
            "DELETE",
            &format!("/v1/packs/{base_pack}"),
            &server.admin,
            None,
        );
        assert_eq!(s, 200);
        assert!(
            !server.tree(&base).exists(),
            "the base's tree is no longer held"
        );
        let later_pack = graduate(&later, 2);
        let p3 = publication(&server, &later_pack, 0, "published");
        assert_eq!(
            (p3["layers"].clone(), p3["base_layer_shared"].clone()),
            (json!(1), json!(false))
        );
        let (m3, _) = registry.manifest_of(later["digest"].as_str().unwrap());
        assert_eq!(m3["layers"].as_array().unwrap().len(), 1);
        let flattened: &[(&str, &str)] = &[
            ("crucible.toml", "[pack]\n"),
            ("a", "3"),
            ("b", &noisy),
            ("c", server.store),
        ];
        assert_eq!(registry.extracted(&m3), as_extracted(flattened));
        let out = server.remote(&["pack", "show", later["digest"].as_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("the base layer not shared") && text.contains("on base"),
            "{text}"
        );
    }
}

// RFC-0002:C-PACK-PUBLISH — failures through a fault-injecting proxy: 503s, 429s (and a registry
// that cannot be reached) are transient, the state pending with the last error while retried
// with backoff, then published; a 403 is permanent: failed with the error, not retried however
// long one waits, a retry refused to a viewer and another team, and on an editor's request
// tried again and published. The registration is never undone or blocked by either.
#[test]
fn pack_publish_transient_retried_permanent_failed_until_asked() {
    let Some(registry) = Registry::start() else {
        return;
    };
    for store in Store::all() {
        let proxy = Proxy::start(&registry.origin);
        proxy.set(Mode::Fail {
            status: 503,
            count: 3,
        });
        let repo = format!("{}/crucible/packs", proxy.origin);
        let mut server = Server::start(&store, &["--registry", &repo]);
        let (pack, _) = register(
            &server,
            "t",
            &[("crucible.toml", "[pack]\n"), ("t", server.store)],
        );
        let pending = publication(&server, &pack, 1, "pending");
        assert!(
            pending["last_error"]
                .as_str()
                .unwrap_or_default()
                .contains("503"),
            "{pending}"
        );
        publication(&server, &pack, 1, "published");
        proxy.set(Mode::Fail {
            status: 429,
            count: 2,
        });
        let (slow, _) = register(
            &server,
            "s",
            &[("crucible.toml", "[pack]\n"), ("s", server.store)],
        );
        let pending = publication(&server, &slow, 1, "pending");
        assert!(
            pending["last_error"]
                .as_str()
                .unwrap_or_default()
                .contains("429"),
            "{pending}"
        );
        publication(&server, &slow, 1, "published");

        proxy.set(Mode::Fail {
            status: 403,
            count: usize::MAX,
        });
        let (perm, _) = register(
            &server,
            "u",
            &[("crucible.toml", "[pack]\n"), ("u", server.store)],
        );
        let failed = publication(&server, &perm, 1, "failed");
        assert!(
            failed["last_error"].as_str().unwrap().contains("403"),
            "{failed}"
        );
        let seen = proxy.count();
        std::thread::sleep(Duration::from_millis(2500));
        assert_eq!(
            proxy.count(),
            seen,
            "a permanent failure is not retried unasked"
        );
        let retry = format!("/v1/packs/{perm}/publication");
        let outsider = server.team_with_user(&format!("blue{}", server.store), "bo", "viewer");
        assert_eq!(server.call("POST", &retry, &outsider, None).0, 404);
        let (s, v) = server.post_json(
            "/v1/teams/platform/members",
            &server.admin,
            json!({"name": "vi", "role": "viewer"}),
        );
        assert_eq!(s, 200, "{v}");
        let viewer = v["token"].as_str().unwrap().to_string();
        assert_eq!(server.call("POST", &retry, &viewer, None).0, 403);
        let (_, shown) = server.get(&format!("/v1/packs/{perm}"), &viewer);
        assert_eq!(
            shown["revisions"][0]["publication"]["state"], "failed",
            "readers see it"
        );
        proxy.set(Mode::Pass);
        let (s, v) = server.call("POST", &retry, &server.admin, None);
        assert_eq!(s, 200, "{v}");
        publication(&server, &perm, 1, "published");

        // A registry nobody answers on: transient, pending with the connection error.
        let dead = format!("127.0.0.1:{}", crate::support::CLOSED_PORT);
        server.restart_with(
            &store,
            &["--registry", &format!("http://{dead}/crucible/packs")],
        );
        let (late, _) = register(
            &server,
            "v",
            &[("crucible.toml", "[pack]\n"), ("v", server.store)],
        );
        let p = publication(&server, &late, 1, "pending");
        assert!(
            p["last_error"].as_str().is_some_and(|e| !e.is_empty()),
            "{p}"
        );
        let (_, shown) = server.get(&format!("/v1/packs/{late}"), &server.admin);
        assert_eq!(shown["name"], "v", "the registration stands");
    }
}

// RFC-0002:C-PACK-PUBLISH — layer bytes are a function of the files alone: the same pack on
// two controllers with different stores (SQLite and PostgreSQL; two SQLite controllers when no
// server is configured), each publishing to its own registry, gets the same manifest digest;
// on the second it is an imported revision (the first's delivery archive), which is published
// as a registered one is.
#[test]
fn pack_publish_same_pack_same_manifest_digest_on_any_store() {
    let Some(first) = Registry::start() else {
        return;
    };
    let second = Registry::start().unwrap();
    let mut stores = Store::all().into_iter();
    let (a, b) = (
        stores.next().unwrap(),
        stores.next().unwrap_or(Store::Sqlite),
    );
    let source = Server::start(&a, &["--registry", &first.repo()]);
    let noisy = noise();
    let files: &[(&str, &str)] = &[("crucible.toml", "[pack]\n"), ("z/y", &noisy), ("a", "")];
    let (pack, digest) = register(&source, "same", files);
    let p = publication(&source, &pack, 1, "published");
    assert_eq!(
        first.manifest_of(&digest).1,
        p["manifest_digest"].as_str().unwrap()
    );
    let (s, archive) = source.archive(&pack, "", &source.admin);
    assert_eq!(s, 200);
    let target = Server::start(&b, &["--registry", &second.repo()]);
    let (s, v) = target.call(
        "POST",
        "/v1/packs/import?name=same&team=platform",
        &target.admin,
        Some(&archive),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["origin"], "imported");
    let imported = v["id"].as_str().unwrap();
    let q = publication(&target, imported, 1, "published");
    assert_eq!(
        second.manifest_of(&digest).1,
        q["manifest_digest"].as_str().unwrap()
    );
    assert_eq!(
        p["manifest_digest"], q["manifest_digest"],
        "{} and {}",
        source.store, target.store
    );
}

// RFC-0002:C-PACK-PUBLISH (registry credentials) — a registry that authenticates by Bearer
// tokens (the distribution token protocol, played by the proxy in front of the real registry):
// the controller answers the `WWW-Authenticate: Bearer` challenge by asking the realm it names
// for a token (its service and scope, the credentials file's user and password as Basic) and
// publishes with it; credentials the token endpoint refuses fail the publication permanently,
// naming the 401, the registration kept.
#[test]
fn pack_publish_through_a_registry_that_wants_bearer_tokens() {
    let Some(registry) = Registry::start() else {
        return;
    };
    for store in Store::all() {
        let proxy = Proxy::start(&registry.origin);
        proxy.set(Mode::Bearer);
        let dir = tempfile::tempdir().unwrap();
        let (good, bad) = (dir.path().join("good"), dir.path().join("bad"));
        std::fs::write(&good, format!("{BEARER_USER}\n")).unwrap();
        std::fs::write(&bad, "crucible:wrong\n").unwrap();
        let repo = format!("{}/crucible/packs", proxy.origin);
        let good = [
            "--registry",
            &repo,
            "--registry-credentials",
            good.to_str().unwrap(),
        ];
        let mut server = Server::start(&store, &good);
        let files = [("crucible.toml", "[pack]\n"), ("b", server.store)];
        let (pack, digest) = register(&server, "b", &files);
        let published = publication(&server, &pack, 1, "published");
        assert!(
            proxy.tokens.load(Ordering::SeqCst) >= 1,
            "a token was asked for"
        );
        assert_eq!(
            registry.manifest_of(&digest).1,
            published["manifest_digest"].as_str().unwrap()
        );

        let bad = [
            "--registry",
            &repo,
            "--registry-credentials",
            bad.to_str().unwrap(),
        ];
        server.restart_with(&store, &bad);
        let files = [("crucible.toml", "[pack]\n"), ("c", server.store)];
        let (other, _) = register(&server, "c", &files);
        let failed = publication(&server, &other, 1, "failed");
        let error = failed["last_error"].as_str().unwrap();
        assert!(error.contains("token") && error.contains("401"), "{failed}");
    }
}

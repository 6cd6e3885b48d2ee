//! The controller (issue 12; RFC-0002:C-PACK-BASE for packs): a real `crucible serve` on
//! loopback, driven over HTTP and through `crucible remote`. Every test runs once per store:
//! SQLite always, PostgreSQL when `CRUCIBLE_TEST_POSTGRES` names a server (CI always sets it;
//! each test gets its own database, so tests run in parallel).

use crate::support::BIN;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Which store a controller under test uses.
pub(crate) enum Store {
    Sqlite,
    /// A database made for this test on the server `CRUCIBLE_TEST_POSTGRES` names.
    Postgres {
        admin_url: String,
        name: String,
    },
}

impl Store {
    pub(crate) fn all() -> Vec<Store> {
        let mut stores = vec![Store::Sqlite];
        match std::env::var("CRUCIBLE_TEST_POSTGRES") {
            Ok(url) if !url.is_empty() => {
                let name = format!("crucible_test_{}", uuid_like());
                psql(&url, &format!("CREATE DATABASE {name}"));
                stores.push(Store::Postgres {
                    admin_url: url,
                    name,
                });
            }
            _ => {
                assert!(
                    std::env::var_os("CRUCIBLE_REQUIRE_POSTGRES").is_none(),
                    "CRUCIBLE_REQUIRE_POSTGRES is set but CRUCIBLE_TEST_POSTGRES is not"
                );
                eprintln!(
                    "\n*** SKIPPED: the PostgreSQL pass of the controller tests: set \
                     CRUCIBLE_TEST_POSTGRES=postgres://USER:PASS@127.0.0.1:5432/postgres \
                     (docs/controller.md). CI always runs it. ***\n"
                );
            }
        }
        stores
    }

    fn database_arg(&self) -> Option<String> {
        match self {
            Store::Sqlite => None,
            Store::Postgres { admin_url, name } => {
                let (base, _) = admin_url.rsplit_once('/').expect("a URL with a database");
                Some(format!("{base}/{name}"))
            }
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Store::Sqlite => "sqlite",
            Store::Postgres { .. } => "postgresql",
        }
    }
}

impl Drop for Store {
    /// Cleanup, not a check: a test's database is uniquely named, so one left behind harms no
    /// other test. Dropping it can race the server's own workers under load (seen once as a
    /// permission error from `WITH (FORCE)`), so it is tried a few times and then only reported.
    fn drop(&mut self) {
        if let Store::Postgres { admin_url, name } = self {
            let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
            for attempt in 1..=3 {
                let out = Command::new("psql")
                    .args([admin_url.as_str(), "-q", "-c", &sql])
                    .output();
                match out {
                    Ok(o) if o.status.success() => return,
                    Ok(o) if attempt == 3 => eprintln!(
                        "leaving test database {name}: {}",
                        String::from_utf8_lossy(&o.stderr)
                    ),
                    Err(e) if attempt == 3 => eprintln!("leaving test database {name}: {e}"),
                    _ => std::thread::sleep(std::time::Duration::from_millis(200)),
                }
            }
        }
    }
}

fn psql(url: &str, sql: &str) {
    let out = Command::new("psql")
        .args([url, "-q", "-c", sql])
        .output()
        .expect("psql (the PostgreSQL client) runs");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn uuid_like() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}_{t}", std::process::id())
}

/// JSON bodies say so; anything else is a pack upload.
fn content_type(body: &[u8]) -> &'static str {
    if body.starts_with(b"{") {
        "application/json"
    } else {
        "application/x-tar"
    }
}

/// A running `crucible serve` on an ephemeral loopback port.
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
    pub(crate) state: tempfile::TempDir,
    pub(crate) admin: String,
    pub(crate) store: &'static str,
}

impl Server {
    pub(crate) fn start(store: &Store, extra: &[&str]) -> Server {
        Server::start_in(tempfile::tempdir().unwrap(), store, extra)
    }

    /// The same, with its state in `state` (a task's sandbox empties `/tmp`, so a state
    /// directory a task could reach must be elsewhere).
    pub(crate) fn start_in(state: tempfile::TempDir, store: &Store, extra: &[&str]) -> Server {
        let (child, url) = spawn_serve(state.path(), store, extra);
        let admin = std::fs::read_to_string(state.path().join("admin.token"))
            .unwrap()
            .trim()
            .to_string();
        Server {
            child,
            url,
            state,
            admin,
            store: store.label(),
        }
    }

    /// Kills the server (SIGKILL) and waits for it; `restart` starts it again.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn restart(&mut self, store: &Store) {
        self.restart_with(store, &[]);
    }

    /// Kills the server (SIGKILL) and starts it again on the same state, with `extra` flags.
    pub(crate) fn restart_with(&mut self, store: &Store, extra: &[&str]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, url) = spawn_serve(self.state.path(), store, extra);
        self.child = child;
        self.url = url;
    }

    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<&[u8]>,
    ) -> (u16, Value) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("{}{path}", self.url);
        let auth = format!("Bearer {token}");
        let response = match (method, body) {
            ("GET", _) => agent.get(&url).header("Authorization", &auth).call(),
            ("DELETE", _) => agent.delete(&url).header("Authorization", &auth).call(),
            (_, Some(b)) => agent
                .post(&url)
                .header("Authorization", &auth)
                .header("Content-Type", content_type(b))
                .send(b),
            (_, None) => agent.post(&url).header("Authorization", &auth).send_empty(),
        };
        let mut response = response.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let bytes = response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .unwrap();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, value)
    }

    pub(crate) fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.call("GET", path, token, None)
    }

    pub(crate) fn post_json(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, token, Some(body.to_string().as_bytes()))
    }

    pub(crate) fn push_tar(&self, name: &str, team: &str, tar: &[u8], token: &str) -> (u16, Value) {
        self.call(
            "POST",
            &format!("/v1/packs?name={name}&team={team}"),
            token,
            Some(tar),
        )
    }

    /// A new team and a user in it with `role`; returns the user's token.
    pub(crate) fn team_with_user(&self, team: &str, user: &str, role: &str) -> String {
        let (s, v) = self.post_json(
            "/v1/teams",
            &self.admin,
            serde_json::json!({ "name": team }),
        );
        assert_eq!(s, 200, "{v}");
        self.member(team, user, role)
    }

    /// A user added to `team` with `role`; returns the user's token.
    pub(crate) fn member(&self, team: &str, user: &str, role: &str) -> String {
        let (s, v) = self.post_json(
            &format!("/v1/teams/{team}/members"),
            &self.admin,
            serde_json::json!({ "name": user, "role": role }),
        );
        assert_eq!(s, 200, "{v}");
        v["token"].as_str().unwrap().to_string()
    }

    pub(crate) fn archive(&self, id: &str, query: &str, token: &str) -> (u16, Vec<u8>) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut r = agent
            .get(format!("{}/v1/packs/{id}/archive{query}", self.url))
            .header("Authorization", format!("Bearer {token}"))
            .call()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.body_mut().read_to_vec().unwrap())
    }

    /// Nothing half-stored: no spool or staging file left, and the stored trees are `want`.
    fn assert_store_clean(&self, trees: usize) {
        let tmp: Vec<_> = std::fs::read_dir(self.state.path().join("tmp"))
            .unwrap()
            .collect();
        assert!(tmp.is_empty(), "{}: spool left behind: {tmp:?}", self.store);
        let stored = std::fs::read_dir(self.state.path().join("trees"))
            .unwrap()
            .count();
        assert_eq!(stored, trees, "{}: stored trees", self.store);
    }

    pub(crate) fn remote(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .arg("remote")
            .args(["--server", &self.url, "--state-dir"])
            .arg(self.state.path())
            .args(args)
            .env_remove("CRUCIBLE_TOKEN")
            .output()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_serve(state: &Path, store: &Store, extra: &[&str]) -> (Child, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--state-dir"])
        .arg(state)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(db) = store.database_arg() {
        cmd.args(["--database", &db]);
    }
    let mut child = cmd.spawn().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first
        .trim()
        .strip_prefix("crucible controller listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {first:?}"))
        .to_string();
    (child, url)
}

/// A tar with entries exactly as given: raw path bytes, entry type, contents, mode, so tests
/// can send what no well-behaved archiver would write.
fn raw_tar(entries: &[(&[u8], tar::EntryType, &[u8], u32)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, kind, data, mode) in entries {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..path.len()].copy_from_slice(path);
        h.set_entry_type(*kind);
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_mtime(1_700_000_000);
        if *kind == tar::EntryType::Symlink || *kind == tar::EntryType::Link {
            h.set_link_name("target").unwrap();
        }
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap()
}

pub(crate) fn file(path: &str, data: &str) -> (Vec<u8>, tar::EntryType, Vec<u8>, u32) {
    (
        path.as_bytes().to_vec(),
        tar::EntryType::Regular,
        data.as_bytes().to_vec(),
        0o644,
    )
}

pub(crate) fn tar_of(entries: &[(Vec<u8>, tar::EntryType, Vec<u8>, u32)]) -> Vec<u8> {
    let borrowed: Vec<(&[u8], tar::EntryType, &[u8], u32)> = entries
        .iter()
        .map(|(p, k, d, m)| (&p[..], *k, &d[..], *m))
        .collect();
    raw_tar(&borrowed)
}

/// 8000 pseudo-random printable bytes: well over 2 KiB however gzip tries.
pub(crate) fn noise() -> String {
    let mut x = 1u64;
    (0..8000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            char::from(b'!' + ((x >> 33) % 90) as u8)
        })
        .collect()
}

fn pack_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("prompts")).unwrap();
    std::fs::write(d.path().join("crucible.toml"), "[pack]\nname = \"p\"\n").unwrap();
    std::fs::write(d.path().join("prompts/a.md"), "hello\n").unwrap();
    std::fs::set_permissions(
        d.path().join("prompts/a.md"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    d
}

pub(crate) fn pack_digest(dir: &Path) -> String {
    let out = Command::new(BIN)
        .args(["pack", "digest"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The files of a gzipped delivery archive: path and mode.
fn delivered(gz: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(gz));
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let mode = e.header().mode().unwrap();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            (path, mode, data)
        })
        .collect()
}

// Issue 12: the first start creates the admin and writes its token (0600); tokens are stored
// hashed; a bad token is refused; a restart keeps the admin and does not rewrite the file.
#[test]
fn serve_first_start_writes_admin_token_and_stores_it_hashed() {
    for store in Store::all() {
        let mut server = Server::start(&store, &[]);
        let file = server.state.path().join("admin.token");
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let (s, me) = server.get("/v1/whoami", &server.admin);
        assert_eq!(s, 200, "{me}");
        assert_eq!(me["name"], "admin");
        assert_eq!(me["teams"][0]["team"], "platform");
        assert_eq!(me["teams"][0]["role"], "admin");
        let (s, v) = server.get("/v1/whoami", "cru_not_a_token");
        assert_eq!(s, 401, "{v}");
        if let Store::Sqlite = store {
            let db = std::fs::read(server.state.path().join("controller.db")).unwrap();
            let token = server.admin.as_bytes();
            assert!(
                !db.windows(token.len()).any(|w| w == token),
                "token stored in clear"
            );
        }
        let before = server.admin.clone();
        server.restart(&store);
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), before);
        assert_eq!(server.get("/v1/whoami", &before).0, 200);
        let (s, audit) = server.get("/v1/audit", &before);
        assert_eq!(s, 200);
        assert_eq!(audit["entries"].as_array().unwrap().len(), 1, "{audit}");
    }
}

// RFC-0002:C-PACK-BASE — the digest is tree1: over the files, the same as `crucible pack
// digest`, and does not depend on file mode, timestamps, order or framing in the archive.
#[test]
fn pack_base_digest_is_tree1_and_independent_of_archiving() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let dir = pack_dir();
        let out = server.remote(&["pack", "push", dir.path().to_str().unwrap(), "--name", "p"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want = pack_digest(dir.path());
        assert!(want.starts_with("tree1:"));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), want);
        // The same files, archived otherwise: reversed, `./`-framed, other modes and times.
        let mut entries = vec![
            file("./prompts/a.md", "hello\n"),
            file("./crucible.toml", "[pack]\nname = \"p\"\n"),
        ];
        entries[0].3 = 0o400;
        let (s, v) = server.push_tar("q", "platform", &tar_of(&entries), &server.admin);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["digest"], want.as_str());
        server.assert_store_clean(1);
    }
}

// RFC-0002:C-PACK-BASE — a registration reports the paths it ignored (state, .git, workspace
// segments), and they are not part of the pack.
#[test]
fn pack_base_registration_reports_ignored_paths() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let link = (
            b"sub/workspace/l".to_vec(),
            tar::EntryType::Symlink,
            Vec::new(),
            0o777,
        );
        let tar = tar_of(&[
            file("a.md", "a"),
            file("state/runs/x", "x"),
            file(".git/HEAD", "ref"),
            link,
            file("workspace", "a file named workspace"),
        ]);
        let (s, v) = server.push_tar("p", "platform", &tar, &server.admin);
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            v["ignored"],
            serde_json::json!([".git/", "state/", "sub/workspace/", "workspace"])
        );
        let (s, shown) = server.get(
            &format!("/v1/packs/{}", v["id"].as_str().unwrap()),
            &server.admin,
        );
        assert_eq!(s, 200);
        assert_eq!(shown["revisions"][0]["ignored"], v["ignored"]);
        let (_, gz) = server.archive(v["id"].as_str().unwrap(), "", &server.admin);
        let paths: Vec<String> = delivered(&gz).into_iter().map(|f| f.0).collect();
        assert_eq!(paths, vec!["a.md"]);
        // The CLI reports what it ignored too.
        let dir = pack_dir();
        std::fs::create_dir_all(dir.path().join("state")).unwrap();
        std::fs::write(dir.path().join("state/x"), "").unwrap();
        let out = server.remote(&["pack", "push", dir.path().to_str().unwrap(), "--name", "d"]);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("ignored: state/"));
    }
}

// RFC-0002:C-PACK-BASE — a pack path is relative, uses `/`, is UTF-8, and has no empty, `.`
// or `..` segment and no newline: anything else is refused and nothing is stored.
#[test]
fn pack_base_path_rules_refused() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let cases: [(&[u8], &str); 6] = [
            (b"../escape.md", "`..`"),
            (b"a/../../escape.md", "`..`"),
            (b"/etc/passwd", "absolute"),
            (b"a//b.md", "segment"),
            (b"a\nb.md", "newline"),
            (b"caf\xe9.md", "UTF-8"),
        ];
        for (path, why) in cases {
            let tar = raw_tar(&[
                (b"ok.md", tar::EntryType::Regular, b"ok", 0o644),
                (path, tar::EntryType::Regular, b"x", 0o644),
            ]);
            let (s, v) = server.push_tar("p", "platform", &tar, &server.admin);
            assert_eq!(s, 422, "{}: {v}", String::from_utf8_lossy(path));
            assert!(v["error"].as_str().unwrap().contains(why), "{why}: {v}");
        }
        server.assert_store_clean(0);
        assert_eq!(
            server.get("/v1/packs", &server.admin).1["packs"],
            serde_json::json!([])
        );
    }
}

// RFC-0002:C-PACK-BASE — a symbolic link or another non-regular file outside an excluded
// segment is refused (a link under `state/` is only ignored); nothing is stored.
#[test]
fn pack_base_links_and_non_regular_files_refused() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        for kind in [
            tar::EntryType::Symlink,
            tar::EntryType::Link,
            tar::EntryType::Fifo,
            tar::EntryType::Char,
        ] {
            let tar = raw_tar(&[
                (b"ok.md", tar::EntryType::Regular, b"ok", 0o644),
                (b"dir/x", kind, b"", 0o644),
            ]);
            let (s, v) = server.push_tar("p", "platform", &tar, &server.admin);
            assert_eq!(s, 422, "{kind:?}: {v}");
            let e = v["error"].as_str().unwrap();
            assert!(
                e.starts_with("dir/x:") && e.contains("regular files only"),
                "{e}"
            );
        }
        server.assert_store_clean(0);
        // The CLI refuses a linked file before sending anything, naming it.
        let dir = pack_dir();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("evil")).unwrap();
        let out = server.remote(&["pack", "push", dir.path().to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("evil"));
    }
}

// RFC-0002:C-PACK-BASE — one file's path followed by `/` may not be a prefix of another's
// (`a` and `a/b`), in either order; a path twice is refused too.
#[test]
fn pack_base_path_prefix_of_another_refused() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        for entries in [
            vec![file("a", "1"), file("a/b", "2")],
            vec![file("a/b", "2"), file("a", "1")],
            vec![file("x/a", "1"), file("x/a/b/c", "2")],
        ] {
            let (s, v) = server.push_tar("p", "platform", &tar_of(&entries), &server.admin);
            assert_eq!(s, 422, "{v}");
            assert!(v["error"].as_str().unwrap().contains("prefix"), "{v}");
        }
        let (s, v) = server.push_tar(
            "p",
            "platform",
            &tar_of(&[file("a", "1"), file("a", "2")]),
            &server.admin,
        );
        assert_eq!(s, 422, "{v}");
        assert!(v["error"].as_str().unwrap().contains("twice"), "{v}");
        server.assert_store_clean(0);
    }
}

// RFC-0002:C-PACK-BASE — every pack file is delivered with mode 0755, whatever mode it had.
#[test]
fn pack_base_files_delivered_with_mode_0755() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let mut entries = vec![file("run.sh", "#!/bin/sh\n"), file("prompts/a.md", "a")];
        entries[0].3 = 0o700;
        entries[1].3 = 0o400;
        let (s, v) = server.push_tar("p", "platform", &tar_of(&entries), &server.admin);
        assert_eq!(s, 200, "{v}");
        let (s, gz) = server.archive(v["id"].as_str().unwrap(), "", &server.admin);
        assert_eq!(s, 200);
        let files = delivered(&gz);
        assert_eq!(files.len(), 2);
        for (path, mode, _) in &files {
            assert_eq!(*mode, 0o755, "{path}");
        }
        assert_eq!(v["delivered_bytes"].as_u64().unwrap(), gz.len() as u64);
    }
}

// RFC-0002:C-PACK-BASE — the delivery budget is declared and retrievable, and a registration
// whose delivered archive exceeds it is refused naming the budget and the size.
#[test]
fn pack_base_delivery_budget_declared_and_enforced_at_registration() {
    for store in Store::all() {
        let server = Server::start(&store, &["--delivery-budget", "2048"]);
        let (s, v) = server.get("/v1/settings", &server.admin);
        assert_eq!(s, 200);
        assert_eq!(v["delivery_budget_bytes"], 2048);
        let (s, v) = server.push_tar(
            "small",
            "platform",
            &tar_of(&[file("a", "tiny")]),
            &server.admin,
        );
        assert_eq!(s, 200, "{v}");
        // Incompressible content well over 2 KiB gzipped.
        let noise = noise();
        let (s, v) = server.push_tar(
            "big",
            "platform",
            &tar_of(&[file("noise", &noise)]),
            &server.admin,
        );
        assert_eq!(s, 422, "{v}");
        let e = v["error"].as_str().unwrap();
        assert!(
            e.contains("delivery budget of 2048 bytes") && e.contains("bytes, over"),
            "{e}"
        );
        server.assert_store_clean(1);
    }
}

// RFC-0002:C-PACK-BASE — a pack records its current and every prior revision, and the stored
// tree of each stays retrievable under its digest.
#[test]
fn pack_base_prior_revisions_keep_their_trees() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let (_, v1) = server.push_tar("p", "platform", &tar_of(&[file("a", "one")]), &server.admin);
        let (_, v2) = server.push_tar("p", "platform", &tar_of(&[file("a", "two")]), &server.admin);
        assert_eq!(v1["id"], v2["id"]);
        assert_eq!(v2["revision"], 2);
        let (_, same) =
            server.push_tar("p", "platform", &tar_of(&[file("a", "two")]), &server.admin);
        assert_eq!(same["changed"], false);
        let id = v1["id"].as_str().unwrap();
        let (_, shown) = server.get(&format!("/v1/packs/{id}"), &server.admin);
        assert_eq!(shown["digest"], v2["digest"]);
        assert_eq!(shown["revisions"].as_array().unwrap().len(), 2);
        let d1 = v1["digest"].as_str().unwrap();
        let (s, gz) = server.archive(id, &format!("?digest={d1}"), &server.admin);
        assert_eq!(s, 200);
        assert_eq!(delivered(&gz)[0].2, b"one");
        let (s, _) = server.archive(id, "?digest=tree1:0000", &server.admin);
        assert_eq!(s, 404);
    }
}

// Issue 12 — read scoping: a second team sees none of the first team's packs, and every
// refusal for them is indistinguishable from a pack that does not exist; a token cannot act
// in another team; a viewer cannot register; every change is audited with its subject.
#[test]
fn read_scoping_another_team_sees_nothing_and_cannot_tell() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let red = server.team_with_user("red", "rita", "editor");
        let blue = server.team_with_user("blue", "bo", "editor");
        let (s, v) = server.post_json(
            "/v1/teams",
            &server.admin,
            serde_json::json!({ "name": "bo" }),
        );
        assert_eq!(
            (s, v["error"].as_str()),
            (422, Some("the name `bo` is taken"))
        );
        let watcher = {
            let (s, v) = server.post_json(
                "/v1/teams/red/members",
                &server.admin,
                serde_json::json!({ "name": "vic", "role": "viewer" }),
            );
            assert_eq!(s, 200, "{v}");
            v["token"].as_str().unwrap().to_string()
        };
        let (s, v) = server.push_tar("secret", "red", &tar_of(&[file("a", "x")]), &red);
        assert_eq!(s, 200, "{v}");
        let id = v["id"].as_str().unwrap();
        // Blue lists nothing; its answer for red's pack equals the one for a missing id, once
        // the id in the wording is the one asked for.
        assert_eq!(
            server.get("/v1/packs", &blue).1["packs"],
            serde_json::json!([])
        );
        let (s1, e1) = server.get(&format!("/v1/packs/{id}"), &blue);
        let missing = "01900000-0000-7000-8000-000000000000";
        let (s2, e2) = server.get(&format!("/v1/packs/{missing}"), &blue);
        assert_eq!((s1, s2), (404, 404));
        assert_eq!(
            e1["error"].as_str().unwrap().replace(id, "ID"),
            e2["error"].as_str().unwrap().replace(missing, "ID")
        );
        assert_eq!(server.archive(id, "", &blue).0, 404);
        // Blue cannot push into red, and cannot tell red from a team that does not exist.
        let (s1, e1) = server.push_tar("p", "red", &tar_of(&[file("a", "y")]), &blue);
        let (s2, e2) = server.push_tar("p", "nosuch", &tar_of(&[file("a", "y")]), &blue);
        assert_eq!((s1, s2), (404, 404));
        assert_eq!(
            e1["error"].as_str().unwrap().replace("red", "T"),
            e2["error"].as_str().unwrap().replace("nosuch", "T")
        );
        // A viewer reads but may not register.
        assert_eq!(
            server.get("/v1/packs", &watcher).1["packs"][0]["name"],
            "secret"
        );
        let (s, e) = server.push_tar("p", "red", &tar_of(&[file("a", "z")]), &watcher);
        assert_eq!(s, 403, "{e}");
        // Over the CLI: a refusal exits 1 with the controller's reason.
        let dir = pack_dir();
        let out = Command::new(BIN)
            .args(["remote", "--server", &server.url, "pack", "push"])
            .arg(dir.path())
            .args(["--team", "red"])
            .env("CRUCIBLE_TOKEN", &blue)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("team `red` not found"));
        let (_, audit) = server.get("/v1/audit", &server.admin);
        let actions: Vec<(String, String)> = audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["subject"].as_str().unwrap().to_string(),
                    e["action"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert!(
            actions.contains(&("rita".into(), "pack.register".into())),
            "{actions:?}"
        );
        assert!(
            actions.contains(&("admin".into(), "team.create".into())),
            "{actions:?}"
        );
        assert_eq!(server.get("/v1/audit", &blue).0, 403);
    }
}

// Issue 12 — bad uploads: a malformed tar is refused; a 1 GB upload is refused as soon as it
// is declared, and one streamed without a length is cut off at the limit, not buffered.
#[test]
fn malformed_and_oversized_uploads_refused_without_storing() {
    for store in Store::all() {
        let server = Server::start(&store, &["--max-upload", "1048576"]);
        let mut garbage = tar_of(&[file("a", "x")]);
        garbage[148..156].copy_from_slice(b"0000000\0"); // a wrong header checksum
        let (s, v) = server.push_tar("p", "platform", &garbage, &server.admin);
        assert_eq!(s, 400, "{v}");
        assert!(
            v["error"].as_str().unwrap().starts_with("malformed tar"),
            "{v}"
        );
        let (s, v) = server.push_tar(
            "p",
            "platform",
            b"not a tar: shorter than one block",
            &server.admin,
        );
        assert_eq!(s, 400, "{v}");
        let (s, v) = server.push_tar("p", "platform", b"", &server.admin);
        assert_eq!(s, 422, "{v}");
        assert!(
            v["error"].as_str().unwrap().contains("no pack files"),
            "{v}"
        );
        let addr = server.url.strip_prefix("http://").unwrap();
        // Declared 1 GB: refused before the body is read.
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        write!(
            c,
            "POST /v1/packs?name=p&team=platform HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
             Content-Length: 1073741824\r\n\r\n",
            server.admin
        )
        .unwrap();
        let mut head = [0u8; 12];
        c.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 413");
        // Chunked, no length: the controller stops reading at the limit and refuses; the
        // sender is cut off long before its gigabyte (the answer may be lost to the reset).
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        write!(
            c,
            "POST /v1/packs?name=p&team=platform HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
             Transfer-Encoding: chunked\r\n\r\n",
            server.admin
        )
        .unwrap();
        // Bounded either way: a controller that neither reads nor closes fails the test.
        c.set_write_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut reader = c.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let chunk = vec![0u8; 64 * 1024];
            let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
            let mut sent = 0u64;
            while sent < 1 << 30 && c.write_all(&framed).is_ok() {
                sent += chunk.len() as u64;
            }
            sent
        });
        let mut head = Vec::new();
        let _ = (&mut reader).take(12).read_to_end(&mut head);
        assert!(
            head.is_empty() || head == b"HTTP/1.1 413",
            "{}",
            String::from_utf8_lossy(&head)
        );
        let _ = reader.shutdown(std::net::Shutdown::Both);
        let sent = writer.join().unwrap();
        assert!(
            sent < 64 << 20,
            "the controller read {sent} bytes past its 1 MiB limit"
        );
        server.assert_store_clean(0);
    }
}

// Issue 12 — concurrent pushes of one pack: each is stored whole or refused whole, and the
// revisions recorded are consecutive with the last one current.
#[test]
fn concurrent_pushes_of_one_pack_stay_consistent() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let results: Vec<(u16, Value)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let server = &server;
                    s.spawn(move || {
                        server.push_tar(
                            "p",
                            "platform",
                            &tar_of(&[file("a", &i.to_string())]),
                            &server.admin,
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let ok = results.iter().filter(|(s, _)| *s == 200).count();
        for (s, v) in &results {
            assert!(
                *s == 200 || (*s == 422 && v["error"].as_str().unwrap().contains("push again")),
                "{v}"
            );
        }
        assert!(ok >= 1);
        let id = results.iter().find(|(s, _)| *s == 200).unwrap().1["id"]
            .as_str()
            .unwrap()
            .to_string();
        let (_, shown) = server.get(&format!("/v1/packs/{id}"), &server.admin);
        let revs = shown["revisions"].as_array().unwrap();
        assert_eq!(revs.len(), ok, "{shown}");
        for (i, r) in revs.iter().enumerate() {
            assert_eq!(r["revision"], i as u64 + 1);
        }
        assert_eq!(shown["digest"], revs.last().unwrap()["digest"]);
    }
}

impl Server {
    pub(crate) fn save_draft(
        &self,
        name: &str,
        base: Option<&str>,
        tar: &[u8],
        token: &str,
    ) -> (u16, Value) {
        let base = base.map(|b| format!("&base={b}")).unwrap_or_default();
        self.call(
            "POST",
            &format!("/v1/drafts?name={name}{base}"),
            token,
            Some(tar),
        )
    }
}

/// A pack registered in the platform team; returns (id, digest).
fn registered(server: &Server, name: &str, files: &[(&str, &str)]) -> (String, String) {
    let entries: Vec<_> = files.iter().map(|(p, d)| file(p, d)).collect();
    let (s, v) = server.push_tar(name, "platform", &tar_of(&entries), &server.admin);
    assert_eq!(s, 200, "{v}");
    (
        v["id"].as_str().unwrap().into(),
        v["digest"].as_str().unwrap().into(),
    )
}

// RFC-0002:C-PACK-BASE — a base not available to the caller is refused with one refusal that
// names the digest as given, the same for a missing base, another team's base and a malformed
// one, and before any check that depends on the base (here: a link in the overlay).
#[test]
fn pack_base_unavailable_base_refused_alike() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let (_, mine) = registered(&server, "base", &[("a", "1")]);
        let blue = server.team_with_user("blue", "bo", "editor");
        let missing = format!("tree1:{}", "0".repeat(64));
        let link = raw_tar(&[(b"l", tar::EntryType::Symlink, b"", 0o777)]);
        for base in [mine.as_str(), missing.as_str(), "nonsense"] {
            let (s, v) = server.save_draft("d", Some(base), &link, &blue);
            assert_eq!(s, 422, "{v}");
            assert_eq!(v["error"], format!("the base `{base}` is not available"));
        }
        // Readable, the same base is used (and the link is what is refused).
        let path = format!("/v1/drafts?name=d&team=platform&base={mine}");
        let (s, v) = server.call("POST", &path, &server.admin, Some(&link));
        assert_eq!(s, 422);
        assert!(
            v["error"].as_str().unwrap().contains("regular files only"),
            "{v}"
        );
        server.assert_store_clean(1);
    }
}

// RFC-0002:C-PACK-BASE — saving on a base flattens: an overlay file replaces the base file at
// its path whole, every other base file is kept, nothing is merged or removed; an empty
// overlay's version has the base's digest; the digest is that of the flattened files.
#[test]
fn pack_base_flatten_overlay_replaces_whole_files() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let (_, base) = registered(
            &server,
            "base",
            &[
                ("a.md", "one\ntwo\n"),
                ("keep.md", "kept"),
                ("dir/c.md", "c"),
            ],
        );
        let overlay = tar_of(&[file("a.md", "two\n"), file("new.md", "added")]);
        let (s, v) = server.save_draft("d", Some(&base), &overlay, &server.admin);
        assert_eq!(s, 200, "{v}");
        let want = tempfile::tempdir().unwrap();
        for (p, d) in [
            ("a.md", "two\n"),
            ("keep.md", "kept"),
            ("dir/c.md", "c"),
            ("new.md", "added"),
        ] {
            std::fs::create_dir_all(want.path().join(p).parent().unwrap()).unwrap();
            std::fs::write(want.path().join(p), d).unwrap();
        }
        assert_eq!(v["digest"], pack_digest(want.path()).as_str());
        let (s, v) = server.save_draft("d", Some(&base), &tar_of(&[]), &server.admin);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["digest"], base.as_str());
        assert_eq!(v["version"], 2);
        // An overlay equal to part of the base changes nothing either.
        let (_, v) = server.save_draft(
            "d",
            Some(&base),
            &tar_of(&[file("keep.md", "kept")]),
            &server.admin,
        );
        assert_eq!(v["digest"], base.as_str());
    }
}

// RFC-0002:C-PACK-BASE — a path that is a prefix of another is refused across base and
// overlay, in both directions.
#[test]
fn pack_base_prefix_across_base_and_overlay_refused() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let (_, base) = registered(&server, "base", &[("a/b", "1"), ("c", "2")]);
        for overlay in [vec![file("a", "x")], vec![file("c/d", "y")]] {
            let (s, v) = server.save_draft("d", Some(&base), &tar_of(&overlay), &server.admin);
            assert_eq!(s, 422, "{v}");
            assert!(v["error"].as_str().unwrap().contains("prefix"), "{v}");
        }
        server.assert_store_clean(1);
    }
}

// RFC-0002:C-PACK-BASE — a version on a base records and returns its provenance (base
// digest, the overlay's own digest, every overlay path and which replaced a base path), and
// reports the readable packs holding the base as a prior revision with their current one,
// never a pack the caller may not read.
#[test]
fn pack_base_draft_provenance_recorded_and_returned() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        // Red registers the base and moves on from it.
        let rita = server.team_with_user("red", "rita", "editor");
        let push = |team: &str, name: &str, b: &str, token: &str| {
            let (s, v) =
                server.push_tar(name, team, &tar_of(&[file("a", "1"), file("b", b)]), token);
            assert_eq!(s, 200, "{v}");
            (
                v["id"].as_str().unwrap().to_string(),
                v["digest"].as_str().unwrap().to_string(),
            )
        };
        let (pack, base) = push("red", "base", "2", &rita);
        let (_, current) = push("red", "base", "3", &rita);
        // Blue registers the same tree and moves on too: rita may not read it.
        let blue = server.team_with_user("blue", "bo", "editor");
        push("blue", "mirror", "2", &blue);
        push("blue", "mirror", "4", &blue);
        let overlay = [file("b", "new"), file("c", "added")];
        let (s, v) = server.save_draft("d", Some(&base), &tar_of(&overlay), &rita);
        assert_eq!(s, 200, "{v}");
        let own = tempfile::tempdir().unwrap();
        std::fs::write(own.path().join("b"), "new").unwrap();
        std::fs::write(own.path().join("c"), "added").unwrap();
        let want = serde_json::json!({
            "base_digest": base,
            "overlay_digest": pack_digest(own.path()),
            "overlay_paths": [{"path": "b", "replaced": true}, {"path": "c", "replaced": false}],
        });
        assert_eq!(v["provenance"], want);
        let moved = serde_json::json!([{"id": pack, "team": "red", "name": "base", "current_digest": current}]);
        assert_eq!(v["base_moved_on"], moved);
        let draft = format!("/v1/drafts/{}", v["id"].as_str().unwrap());
        let (s, shown) = server.get(&draft, &rita);
        assert_eq!(s, 200);
        assert_eq!(shown["versions"][0]["provenance"], want);
        assert_eq!(shown["versions"][0]["base_moved_on"], moved);
        // Blue cannot read the draft, and cannot tell.
        let (s, e) = server.get(&draft, &blue);
        assert_eq!(s, 404, "{e}");
        // The CLI saves on a base and prints the version's digest.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b"), "new").unwrap();
        std::fs::write(dir.path().join("c"), "added").unwrap();
        let out = server.remote(&[
            "draft",
            "save",
            "d",
            dir.path().to_str().unwrap(),
            "--base",
            &base,
            "--team",
            "red",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            v["digest"].as_str().unwrap()
        );
    }
}

// RFC-0002:C-PACK-BASE — the delivery budget is enforced at save, on the flattened tree,
// naming the budget and the size.
#[test]
fn pack_base_delivery_budget_enforced_at_save() {
    for store in Store::all() {
        let server = Server::start(&store, &["--delivery-budget", "2048"]);
        let noise = noise();
        let saved = server.save_draft("d", None, &tar_of(&[file("noise", &noise)]), &server.admin);
        assert_over_budget(saved, 2048);
        server.assert_store_clean(0);
    }
}

// Issue 12 — concurrent saves of one draft: every save gets its own version, none lost.
#[test]
fn concurrent_saves_of_one_draft_get_distinct_versions() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let results: Vec<(u16, Value)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let server = &server;
                    s.spawn(move || {
                        server.save_draft(
                            "d",
                            None,
                            &tar_of(&[file("a", &i.to_string())]),
                            &server.admin,
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut versions: Vec<u64> = results
            .iter()
            .map(|(s, v)| {
                assert_eq!(*s, 200, "{v}");
                v["version"].as_u64().unwrap()
            })
            .collect();
        versions.sort();
        assert_eq!(versions, (1..=8).collect::<Vec<u64>>());
        let (_, shown) = server.get(
            &format!("/v1/drafts/{}", results[0].1["id"].as_str().unwrap()),
            &server.admin,
        );
        assert_eq!(shown["versions"].as_array().unwrap().len(), 8);
    }
}

impl Server {
    /// The stored tree of a digest, by the store's layout.
    pub(crate) fn tree(&self, digest: &str) -> std::path::PathBuf {
        let hex = digest.strip_prefix("tree1:").unwrap();
        self.state.path().join("trees").join(hex)
    }
}

// RFC-0002:C-PACK-BASE — a stored tree is kept, unchanged, while any draft version or pack
// (current or prior revision) records its digest, and collected once nothing does: deleting a
// draft or a pack removes exactly the trees no other holder records. A tree nothing records
// (a recording that never committed) is removed when the controller starts; anything in the
// store that is not a tree is left alone. (A launch's hold: controller_runs.rs.)
#[test]
fn pack_base_trees_kept_while_recorded_and_collected_after() {
    for store in Store::all() {
        let mut server = Server::start(&store, &[]);
        let (pack, shared) = registered(&server, "p", &[("a", "1")]);
        let (_, prior_only) = registered(&server, "q", &[("a", "3")]);
        let (s, v) = server.save_draft("d", None, &tar_of(&[file("a", "1")]), &server.admin);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["digest"], shared.as_str());
        let draft = v["id"].as_str().unwrap().to_string();
        let (_, v) = server.save_draft("d", None, &tar_of(&[file("a", "2")]), &server.admin);
        let draft_only = v["digest"].as_str().unwrap().to_string();
        // `shared` becomes a prior revision of `p`: still recorded by the pack.
        let (s, _) = server.push_tar("p", "platform", &tar_of(&[file("a", "3")]), &server.admin);
        assert_eq!(s, 200);
        for d in [&shared, &draft_only] {
            assert!(server.tree(d).is_dir(), "{}: {d}", server.store);
        }
        // A viewer may not delete; another team cannot tell the draft exists.
        let viewer = server.team_with_user("blue", "bo", "viewer");
        let (s, _) = server.call("DELETE", &format!("/v1/drafts/{draft}"), &viewer, None);
        assert_eq!(s, 404);
        let (s, v) = server.call(
            "DELETE",
            &format!("/v1/drafts/{draft}"),
            &server.admin,
            None,
        );
        assert_eq!(s, 200, "{v}");
        assert!(!server.tree(&draft_only).exists(), "{}", server.store);
        assert!(
            server.tree(&shared).is_dir(),
            "{}: held by a prior revision",
            server.store
        );
        let (s, _) = server.get(&format!("/v1/drafts/{draft}"), &server.admin);
        assert_eq!(s, 404);
        // Deleting `p` releases `shared`; its current tree (a=3) is still `q`'s.
        let (s, v) = server.call("DELETE", &format!("/v1/packs/{pack}"), &server.admin, None);
        assert_eq!(s, 200, "{v}");
        assert!(!server.tree(&shared).exists(), "{}", server.store);
        assert!(server.tree(&prior_only).is_dir(), "{}", server.store);
        let (_, packs) = server.get("/v1/packs", &server.admin);
        assert_eq!(packs["packs"].as_array().unwrap().len(), 1, "{packs}");
        // An unrecorded tree left in the store goes at the next start; other entries stay.
        let stray = server.tree(&format!("tree1:{}", "ab".repeat(32)));
        std::fs::create_dir_all(&stray).unwrap();
        std::fs::write(stray.join("a"), "x").unwrap();
        let other = server.state.path().join("trees/not-a-tree");
        std::fs::create_dir_all(&other).unwrap();
        server.restart(&store);
        assert!(!stray.exists(), "{}", server.store);
        assert!(other.is_dir());
        assert!(server.tree(&prior_only).is_dir());
        let (_, audit) = server.get("/v1/audit", &server.admin);
        let actions: Vec<&str> = audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["action"].as_str().unwrap())
            .collect();
        assert!(actions.contains(&"draft.delete") && actions.contains(&"pack.delete"));
    }
}

impl Server {
    /// `POST /v1/packs/import` of `body` as the platform team's pack `name`, as the admin.
    fn import(&self, name: &str, query: &str, body: &[u8]) -> (u16, Value) {
        let path = format!("/v1/packs/import?name={name}&team=platform{query}");
        self.call("POST", &path, &self.admin, Some(body))
    }
}

/// A refusal by the delivery budget, naming it (RFC-0002:C-PACK-BASE).
fn assert_over_budget((status, v): (u16, Value), budget: u64) {
    assert_eq!(status, 422, "{v}");
    let want = format!("over the delivery budget of {budget} bytes");
    assert!(v["error"].as_str().unwrap().contains(&want), "{v}");
}

/// A gzipped tar of `entries`, as an import takes it.
fn gzipped(tar: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(tar).unwrap();
    gz.finish().unwrap()
}

// RFC-0002:C-PACK-BASE — a pack registered from a draft version (draft publish) is that
// version's stored tree under its digest and carries and returns the version's provenance;
// a registered pack carries none; publishing is refused over the delivery budget in force,
// naming both, recording nothing; only an editor of the draft's team may publish, and another
// team cannot tell the draft exists.
#[test]
fn pack_base_pack_registered_from_a_draft_carries_its_provenance() {
    for store in Store::all() {
        let mut server = Server::start(&store, &[]);
        let (base_pack, base) = registered(&server, "base", &[("a", "1"), ("b", &noise())]);
        let (_, shown) = server.get(&format!("/v1/packs/{base_pack}"), &server.admin);
        assert_eq!(shown["revisions"][0]["origin"], "registered");
        assert_eq!(shown["revisions"][0]["provenance"], Value::Null);
        let overlay = tar_of(&[file("a", "2"), file("c", "3")]);
        let (s, saved) = server.save_draft("d", Some(&base), &overlay, &server.admin);
        assert_eq!(s, 200, "{saved}");
        let draft = saved["id"].as_str().unwrap().to_string();
        let publish = format!("/v1/drafts/{draft}/publish");
        let viewer = server.team_with_user("blue", "bo", "viewer");
        let (s, _) = server.call("POST", &publish, &viewer, None);
        assert_eq!(s, 404, "another team cannot tell the draft exists");
        let (s, v) = server.call("POST", &publish, &server.admin, None);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["digest"], saved["digest"]);
        assert_eq!(v["name"], "d");
        assert_eq!(v["origin"], "draft");
        assert_eq!(v["source"], "draft:d version 1");
        assert_eq!(v["provenance"], saved["provenance"]);
        let (_, shown) = server.get(
            &format!("/v1/packs/{}", v["id"].as_str().unwrap()),
            &server.admin,
        );
        let rev = &shown["revisions"][0];
        assert_eq!(rev["provenance"], saved["provenance"], "{shown}");
        assert_eq!(rev["origin"], "draft");
        assert!(server.tree(saved["digest"].as_str().unwrap()).is_dir());
        // A named version into a named pack; a version that does not exist is not found.
        let (s, v) = server.post_json(
            &publish,
            &server.admin,
            serde_json::json!({"version": 1, "name": "shipped"}),
        );
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["name"], "shipped");
        let (s, _) = server.post_json(&publish, &server.admin, serde_json::json!({"version": 9}));
        assert_eq!(s, 404);
        // The budget in force at publish: lowered since the save, the publish is refused.
        server.restart_with(&store, &["--delivery-budget", "2048"]);
        let late = serde_json::json!({"name": "late"});
        assert_over_budget(server.post_json(&publish, &server.admin, late), 2048);
        let (_, packs) = server.get("/v1/packs", &server.admin);
        assert!(
            !packs["packs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "late"),
            "{packs}"
        );
    }
}

// RFC-0002:C-PACK-BASE — import: another controller's delivery archive becomes a pack with the
// same digest, recorded as imported and naming no base; every registration rule applies (a
// link refused, ignored paths reported, the budget in force, a path prefix refused), a digest
// the archive does not hold is refused, and a malformed gzip or one that unpacks past the
// upload limit is refused; nothing refused is stored.
#[test]
fn pack_base_import_takes_another_controllers_archive() {
    let source = Server::start(&Store::Sqlite, &[]);
    let (id, digest) = registered(&source, "p", &[("crucible.toml", "[pack]\n"), ("x/y", "z")]);
    let (s, archive) = source.archive(&id, "", &source.admin);
    assert_eq!(s, 200);
    for store in Store::all() {
        let server = Server::start(&store, &["--max-upload", "1048576"]);
        let import = |query: &str, body: &[u8]| server.import("p", query, body);
        let wrong = format!("tree1:{}", "0".repeat(64));
        let (s, v) = import(&format!("&digest={wrong}"), &archive);
        assert_eq!(s, 422, "{v}");
        assert!(v["error"].as_str().unwrap().contains(&digest), "{v}");
        let link = gzipped(&raw_tar(&[(b"l", tar::EntryType::Symlink, b"", 0o777)]));
        let (s, v) = import("", &link);
        assert_eq!(s, 422, "{v}");
        assert!(
            v["error"].as_str().unwrap().contains("regular files only"),
            "{v}"
        );
        let clash = gzipped(&tar_of(&[file("a", "1"), file("a/b", "2")]));
        assert_eq!(import("", &clash).0, 422);
        let (s, v) = import("", b"\x1f\x8b not really gzip");
        assert_eq!(s, 400, "{v}");
        // 4 MiB of zeros gzips to a few KiB and would unpack past the 1 MiB limit.
        let bomb = gzipped(&tar_of(&[file("big", &"\0".repeat(4 << 20))]));
        assert!(bomb.len() < 64 << 10);
        let (s, v) = import("", &bomb);
        assert_eq!(s, 413, "{v}");
        server.assert_store_clean(0);
        let (s, v) = import(&format!("&digest={digest}"), &archive);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["digest"], digest.as_str());
        assert_eq!(v["origin"], "imported");
        let (_, shown) = server.get(
            &format!("/v1/packs/{}", v["id"].as_str().unwrap()),
            &server.admin,
        );
        assert_eq!(shown["revisions"][0]["origin"], "imported");
        assert_eq!(shown["revisions"][0]["provenance"], Value::Null);
        // Excluded segments are ignored and reported, as at registration.
        let with_git = gzipped(&tar_of(&[file("a", "1"), file(".git/HEAD", "x")]));
        let (s, v) = server.import("q", "", &with_git);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["ignored"], serde_json::json!([".git/"]));
        // An imported pack is a base like any registered one.
        let (s, v) = server.save_draft("d", Some(&digest), &tar_of(&[]), &server.admin);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["digest"], digest.as_str());
    }
    let budget = Server::start(&Store::Sqlite, &["--delivery-budget", "2048"]);
    let noisy = gzipped(&tar_of(&[file("n", &noise())]));
    assert_over_budget(budget.import("p", "", &noisy), 2048);
    budget.assert_store_clean(0);
}

// RFC-0002:C-PACK-BASE — a deleted pack is no longer a base anyone can save on (availability
// counts packs that have not been deleted), while a version already saved on it is unaffected:
// its flattened tree stays stored, readable and deliverable, as a copy of the base's files.
// Provenance digests keep no tree.
#[test]
fn pack_base_deleting_a_base_leaves_versions_saved_on_it() {
    for store in Store::all() {
        let server = Server::start(&store, &[]);
        let (pack, base) = registered(&server, "base", &[("a", "1"), ("b", "2")]);
        let overlay = tar_of(&[file("b", "3")]);
        let (s, saved) = server.save_draft("d", Some(&base), &overlay, &server.admin);
        assert_eq!(s, 200, "{saved}");
        let version = saved["digest"].as_str().unwrap().to_string();
        let overlay_digest = saved["provenance"]["overlay_digest"].as_str().unwrap();
        assert!(
            !server.tree(overlay_digest).exists(),
            "a provenance digest keeps no tree"
        );
        let (s, v) = server.call("DELETE", &format!("/v1/packs/{pack}"), &server.admin, None);
        assert_eq!(s, 200, "{v}");
        assert!(!server.tree(&base).exists(), "{}", server.store);
        assert!(server.tree(&version).is_dir(), "{}", server.store);
        let (s, v) = server.save_draft("d", Some(&base), &overlay, &server.admin);
        assert_eq!(s, 422, "{v}");
        assert_eq!(v["error"], format!("the base `{base}` is not available"));
        // The saved version still reads with its provenance and publishes as a pack whose
        // archive holds the base's files as they were copied.
        let draft = saved["id"].as_str().unwrap();
        let (s, shown) = server.get(&format!("/v1/drafts/{draft}"), &server.admin);
        assert_eq!(s, 200);
        assert_eq!(shown["versions"][0]["provenance"], saved["provenance"]);
        let (s, published) = server.call(
            "POST",
            &format!("/v1/drafts/{draft}/publish"),
            &server.admin,
            None,
        );
        assert_eq!(s, 200, "{published}");
        let (s, gz) = server.archive(published["id"].as_str().unwrap(), "", &server.admin);
        assert_eq!(s, 200);
        let files: Vec<(String, Vec<u8>)> =
            delivered(&gz).into_iter().map(|(p, _, d)| (p, d)).collect();
        assert_eq!(
            files,
            [
                ("a".to_string(), b"1".to_vec()),
                ("b".to_string(), b"3".to_vec())
            ]
        );
    }
}

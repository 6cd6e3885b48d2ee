//! The web UI (issue 14; RFC-0002:C-HUMAN-DECISION, C-DECISION-EVIDENCE) through a real
//! `crucible serve`: its pages read with the API's scoping, and, in headless Chromium over the
//! DevTools protocol (`cdp`), a run reaching a human route, the evidence page showing each media
//! type, an answer accepted and the run going on, a second answer refused, an expired request
//! routing `uncertain`, a notification for an approver and none for a viewer, and a hostile HTML
//! evidence file whose every reach outside its frame fails; the run page colours a task in
//! flight apart from pending and settled ones, and offers each task's files for download. Every
//! test runs on SQLite and on PostgreSQL (`CRUCIBLE_TEST_POSTGRES`), as the other controller
//! tests do.
//!
//! `CRUCIBLE_UPDATE_SCREENSHOTS=1` rewrites docs/ui-run.png and docs/ui-evidence.png.

use crate::cdp::{browser, Page};
use crate::controller::{Server, Store};
use crate::controller_runs::{ended, launch, row, wait_run};
use serde_json::json;
use std::time::{Duration, Instant};

const WORKFLOW: &str = r#"scan = command(name = "scan", run = "python3 make.py",
    emits = ["jobs", "size", "ratio", "ok", "title"],
    emits_files = ["a.png", "b.jpg", "c.gif", "d.svg", "e.md", "f.csv", "g.json", "hostile.html", "h.bin", "broken.png"])
gate = route(name = "gate", depends_on = [scan], human = True, timeout = "TIMEOUT", review = "review.md",
    questions = {"go": noul(ask = "Deploy?"), "area": choice(options = ["docs", "code"], multiple = True)})
deploy = command(name = "deploy", run = "sleep 3; echo '{}'", depends_on = [gate], when = gate.go, answers = "yes")
hold = command(name = "hold", run = "echo '{}'", depends_on = [gate], when = gate.go, answers = ["no", "uncertain"])
workflow([scan, gate, deploy, hold])
"#;

const MAKE: &str = r#"import json, os, shutil
src = "files"
for name in os.listdir(src):
    shutil.copy(os.path.join(src, name), name)
print(json.dumps({"jobs": ["j1", "j2"], "size": 3, "ratio": 0.5, "ok": True,
                  "title": "<img src=x onerror=alert(1)> *not emphasis*"}))
"#;

const REVIEW: &str = "# Deploy {{ inputs.scan.output.size }} jobs?\n\nTitle: {{ inputs.scan.output.title }}\n\n**Ratio** {{ inputs.scan.output.ratio }}\n";

/// A 1×1 GIF.
const GIF: &str = "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7";

const SVG: &str = r#"<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40"><rect width="120" height="40" fill="teal"/><text x="8" y="26" fill="white">svg</text><script>parent.postMessage({svg: "ran"}, "*")</script></svg>"#;

const MARKDOWN: &str =
    "# Findings\n\n- one *emphasised*\n\n<script>parent.postMessage({md: 'ran'}, '*')</script>\n";

/// A file whose scripts try to reach out of its frame; it reports what each attempt did.
const HOSTILE: &str = r#"<!doctype html><html><body><p id="p">hostile</p><script>
const results = {};
async function attempt(name, f) {
  try { results[name] = 'allowed: ' + String(await f()).slice(0, 80); }
  catch (e) { results[name] = 'blocked: ' + e.name; }
}
(async () => {
  await attempt('fetch', () => fetch('http://127.0.0.1:9/steal').then(r => r.status));
  await attempt('cookie', () => document.cookie);
  await attempt('localStorage', () => localStorage.getItem('k'));
  await attempt('top', () => { top.location.href = 'about:blank#stolen'; return top.location.href; });
  await attempt('api', () => fetch('SERVER/v1/whoami', {credentials: 'include'}).then(r => r.status));
  await attempt('ui', () => fetch('/ui/decisions.json', {credentials: 'include'}).then(r => r.status));
  parent.postMessage({hostile: results}, '*');
})();
</script></body></html>"#;

/// What the top page records: the hostile frame's report, and each notification raised.
const SPY: &str = r#"
window.__messages = [];
window.addEventListener('message', (e) => window.__messages.push(e.data));
window.__notified = [];
if (window.Notification) {
  const Real = window.Notification;
  window.Notification = class extends Real {
    constructor(title, options) {
      super(title, options);
      window.__notified.push({ title, url: options && options.data && options.data.url });
    }
  };
  Object.defineProperty(window.Notification, 'permission', { get: () => Real.permission });
}
"#;

fn entry(path: &str, data: &[u8]) -> (Vec<u8>, tar::EntryType, Vec<u8>, u32) {
    (
        path.as_bytes().to_vec(),
        tar::EntryType::Regular,
        data.to_vec(),
        0o644,
    )
}

/// Registers the workflow in team red: its evidence files are `png` and `jpeg` (real images),
/// and the rest above. Returns the pack's digest.
fn push(server: &Server, token: &str, timeout: &str, png: &[u8], jpeg: &[u8]) -> String {
    use base64::Engine;
    let gif = base64::engine::general_purpose::STANDARD
        .decode(GIF)
        .unwrap();
    let tar = crate::controller::tar_of(&[
        entry(
            "crucible.toml",
            b"[workspace]\ninject = [\"make.py\", \"files\"]\n[workflow]\ntype = \"playbook\"\nfile = \"workflow.star\"\n",
        ),
        entry("workflow.star", WORKFLOW.replace("TIMEOUT", timeout).as_bytes()),
        entry("make.py", MAKE.as_bytes()),
        entry("review.md", REVIEW.as_bytes()),
        entry("files/a.png", png),
        entry("files/b.jpg", jpeg),
        entry("files/c.gif", &gif),
        entry("files/d.svg", SVG.as_bytes()),
        entry("files/e.md", MARKDOWN.as_bytes()),
        entry("files/f.csv", b"name,count\n\"a, b\",2\n<i>c</i>,3\n"),
        entry("files/g.json", br#"{"n": 3, "s": "three", "t": true, "z": null, "l": [1, "x"]}"#),
        entry("files/hostile.html", HOSTILE.replace("SERVER", &server.url).as_bytes()),
        entry("files/h.bin", &[0, 159, 146, 150, 1, 2]),
        entry("files/broken.png", b"\x89PNG\r\n\x1a\nnot really"),
    ]);
    let (s, v) = server.call("POST", "/v1/packs?name=gated&team=red", token, Some(&tar));
    assert_eq!(s, 200, "{v}");
    v["digest"].as_str().unwrap().to_string()
}

/// Launches a run of `digest` and waits until its route's request is open: the run's id.
fn launch_to_gate(server: &Server, token: &str, digest: &str) -> String {
    let (s, v) = launch(
        server,
        token,
        json!({ "pack": digest, "max_cost": 1, "max_time": "2m" }),
    );
    assert_eq!(s, 200, "{v}");
    let run = v["id"].as_str().unwrap().to_string();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, v) = server.get(&format!("/v1/runs/{run}/decisions/gate"), &server.admin);
        if s == 200 && v["state"] == "open" {
            return run;
        }
        let (_, r) = server.get(&format!("/v1/runs/{run}"), &server.admin);
        assert!(
            Instant::now() < until && r["state"] == "running",
            "the route never opened: {v}; the run: {r}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Signs `token` in on a fresh page of its own context.
fn signed_in(server: &Server, token: &str, notifications: bool) -> Option<Page> {
    let mut page = browser()?.page(&server.url, notifications);
    page.before_each_document(SPY);
    page.goto(&format!("{}/ui/signin", server.url));
    page.eval(&format!(
        "document.querySelector('input[name=token]').value = {}; \
         document.querySelector('form.signin').submit(); true",
        json!(token)
    ));
    page.wait_for(
        "location.pathname === '/ui/runs' && document.readyState === 'complete'",
        "the runs page after signing in",
    );
    Some(page)
}

fn screenshot(page: &mut Page, name: &str) {
    let png = page.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    if std::env::var_os("CRUCIBLE_UPDATE_SCREENSHOTS").is_some() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs")
            .join(name);
        std::fs::write(path, png).unwrap();
    }
}

/// A run's pack in team red with its people: (server, rita the editor, ann the approver,
/// digest), the route timing out after `timeout`; real PNG and JPEG files drawn by `page`.
fn gated_server(
    store: &Store,
    timeout: &str,
    page: Option<&mut Page>,
) -> (Server, String, String, String) {
    let server = Server::start(store, &[]);
    let rita = server.team_with_user("red", "rita", "editor");
    let ann = server.member("red", "ann", "approver");
    let (png, jpeg) = match page {
        Some(p) => (p.picture("png", "teal"), p.picture("jpeg", "darkorange")),
        None => (b"\x89PNG".to_vec(), b"\xff\xd8\xff".to_vec()),
    };
    let digest = push(&server, &rita, timeout, &png, &jpeg);
    (server, rita, ann, digest)
}

// RFC-0002:C-HUMAN-DECISION, C-DECISION-EVIDENCE — in a real browser: the run reaches its human
// route and its page shows the graph and the request; the evidence page shows every part, each
// media type inline (a broken image and an unknown type offered for download), the review and
// a Markdown file with their raw HTML as text; the hostile HTML file cannot fetch, read cookies
// or storage, navigate the top page or call the API; an approver's answer is accepted and the
// run goes on (a page left open on the run follows it over the event stream); a second answer
// is refused.
#[test]
fn ui_evidence_page_answer_and_hostile_file_in_a_browser() {
    let Some(b) = browser() else { return };
    for store in Store::all() {
        let mut blank = b.page("http://127.0.0.1", false);
        let (server, rita, ann, digest) = gated_server(&store, "90s", Some(&mut blank));
        evidence_answer_and_hostile_file(&server, &rita, &ann, &digest);
    }
}

/// The status a run page's graph draws task `task` in (`data-status`; null: pending), and
/// whether its node is filled with the running colour.
const NODE: &str =
    "((t) => { const n = document.querySelector(`.graph svg [data-task=\"${t}\"]`); \
     return n && [n.getAttribute('data-status'), n.outerHTML.includes('74c0fc')]; })";

fn evidence_answer_and_hostile_file(server: &Server, rita: &str, ann: &str, digest: &str) {
    let run = launch_to_gate(server, rita, digest);

    // Rita watches the run's page; it updates itself as the run goes on.
    let mut watching = signed_in(server, rita, false).unwrap();
    watching.goto(&format!("{}/ui/runs/{run}", server.url));
    watching.wait_for(
        "document.querySelector('.graph svg') && document.querySelector('details.task[data-task=scan]')",
        "the graph and the scan row",
    );
    // Settled green, the route waiting on its request drawn running, the rest pending.
    assert_eq!(
        watching.eval(&format!("{NODE}('scan')")),
        json!(["pass", false]),
        "{}",
        server.store
    );
    assert_eq!(
        watching.eval(&format!("{NODE}('gate')")),
        json!(["running", true])
    );
    assert_eq!(
        watching.eval(&format!("{NODE}('deploy')")),
        json!([null, false])
    );
    // A task's files, offered for download from the run page: the bytes it wrote, as an
    // attachment never sniffed or rendered.
    let download = watching.eval(
        "(async () => { const a = [...document.querySelectorAll('details.task[data-task=scan] a.download')] \
           .find((a) => a.textContent === 'h.bin'); \
         const r = await fetch(a.getAttribute('href'), {credentials: 'same-origin'}); \
         return {status: r.status, download: a.hasAttribute('download'), \
           type: r.headers.get('content-type'), disposition: r.headers.get('content-disposition'), \
           sniff: r.headers.get('x-content-type-options'), csp: r.headers.get('content-security-policy'), \
           bytes: [...new Uint8Array(await r.arrayBuffer())]}; })()",
    );
    assert_eq!(
        download,
        json!({
            "status": 200, "download": true, "type": "application/octet-stream",
            "disposition": "attachment; filename=\"h.bin\"", "sniff": "nosniff",
            "csp": "default-src 'none'; sandbox", "bytes": [0, 159, 146, 150, 1, 2],
        }),
        "{}",
        server.store
    );
    let graph = watching.eval("document.querySelector('.graph svg').textContent");
    for task in ["scan", "gate", "deploy", "hold"] {
        assert!(graph.as_str().unwrap().contains(task), "{task}: {graph}");
    }
    let link = watching.eval("document.querySelector('ul.decisions a').getAttribute('href')");
    assert_eq!(link, format!("/ui/runs/{run}/decisions/gate"));
    assert_eq!(
        watching.eval("document.querySelector('details.task[data-task=deploy]') === null"),
        true
    );

    let mut page = signed_in(server, ann, false).unwrap();
    let evidence = format!("{}{}", server.url, link.as_str().unwrap());
    page.goto(&evidence);
    page.wait_for(
        "[...document.querySelectorAll('img.evidence')].every(i => i.complete) \
         && document.querySelector('.file[data-path=\"broken.png\"]').classList.contains('failed')",
        "the images to decode, and the broken one to fail",
    );
    let report = page.wait_for(
        "window.__messages.find(m => m.hostile)",
        "the hostile file's report",
    );
    for attempt in ["fetch", "cookie", "localStorage", "top", "api", "ui"] {
        let said = report["hostile"][attempt].as_str().unwrap_or_default();
        assert!(said.starts_with("blocked"), "{attempt}: {report}");
    }
    assert_eq!(
        page.eval("location.href"),
        json!(evidence),
        "the top page stayed"
    );
    let (s, v) = server.get(&format!("/v1/runs/{run}/decisions/gate"), &server.admin);
    assert_eq!((s, &v["state"]), (200, &json!("open")), "{v}");

    let seen = page.eval(
        r#"(() => {
        const f = (p) => document.querySelector(`.file[data-path="${p}"]`);
        const width = (p) => f(p).querySelector('img.evidence').naturalWidth;
        return {
          png: width('a.png'), jpeg: width('b.jpg'), gif: width('c.gif'),
          broken: f('broken.png').classList.contains('failed'),
          bin: f('h.bin').classList.contains('failed') && f('h.bin').querySelector('a.download[download]') !== null,
          binShown: getComputedStyle(f('h.bin').querySelector('.fallback')).display,
          svg: f('d.svg').querySelector('iframe').getAttribute('sandbox'),
          html: f('hostile.html').querySelector('iframe').getAttribute('sandbox'),
          md: f('e.md').querySelector('.markdown h1').textContent,
          mdEm: f('e.md').querySelector('.markdown em').textContent,
          mdScript: f('e.md').querySelector('script') === null && f('e.md').textContent.includes('<script>'),
          csv: [...f('f.csv').querySelectorAll('td')].map((c) => c.textContent),
          json: [...f('g.json').querySelectorAll('[data-type]')].map((e) => e.dataset.type),
          review: document.querySelector('.review h1').textContent,
          reviewText: document.querySelector('.review').textContent,
          reviewMarkup: document.querySelectorAll('.review img, .review em').length,
          size: document.querySelector('[data-input=scan] .j-number').dataset.type,
          ok: document.querySelector('[data-input=scan] .j-boolean').textContent,
          multiple: document.querySelector('fieldset[data-question=area] .multiple') !== null,
          single: document.querySelector('fieldset[data-question=go] .multiple') === null,
          go: [...document.querySelectorAll('fieldset[data-question=go] input')].map((i) => i.type + ':' + i.value),
          area: [...document.querySelectorAll('fieldset[data-question=area] input')].map((i) => i.type + ':' + i.value),
          gated: [...document.querySelectorAll('table.gated td:first-child')].map((c) => c.textContent),
          scripts: window.__messages.filter((m) => m.svg || m.md).length,
        };
      })()"#,
    );
    assert!(seen["png"].as_u64() > Some(0), "{seen}");
    assert!(seen["jpeg"].as_u64() > Some(0), "{seen}");
    assert!(seen["gif"].as_u64() > Some(0), "{seen}");
    assert_eq!(seen["broken"], true, "{seen}");
    assert_eq!(seen["bin"], true, "{seen}");
    assert_eq!(seen["binShown"], "block", "{seen}");
    assert_eq!(seen["svg"], "", "{seen}");
    assert_eq!(seen["html"], "allow-scripts", "{seen}");
    assert_eq!(seen["md"], "Findings", "{seen}");
    assert_eq!(seen["mdEm"], "emphasised", "{seen}");
    assert_eq!(seen["mdScript"], true, "{seen}");
    assert_eq!(seen["csv"], json!(["a, b", "2", "<i>c</i>", "3"]), "{seen}");
    for ty in ["object", "number", "string", "boolean", "null", "array"] {
        assert!(
            seen["json"].as_array().unwrap().contains(&json!(ty)),
            "{ty}: {seen}"
        );
    }
    assert_eq!(seen["review"], "Deploy 3 jobs?", "{seen}");
    assert!(
        seen["reviewText"]
            .as_str()
            .unwrap()
            .contains("<img src=x onerror=alert(1)> *not emphasis*"),
        "{seen}"
    );
    assert_eq!(seen["reviewMarkup"], 0, "{seen}");
    assert_eq!(seen["size"], "number", "{seen}");
    assert_eq!(seen["ok"], "true", "{seen}");
    assert_eq!(seen["multiple"], true, "{seen}");
    assert_eq!(seen["single"], true, "{seen}");
    assert_eq!(seen["go"], json!(["radio:yes", "radio:no"]), "{seen}");
    assert_eq!(
        seen["area"],
        json!(["checkbox:docs", "checkbox:code"]),
        "{seen}"
    );
    assert_eq!(seen["gated"], json!(["deploy", "hold"]), "{seen}");
    assert_eq!(seen["scripts"], 0, "{seen}");
    screenshot(&mut page, "ui-evidence.png");

    // The answer, through the page's own form.
    let posted = page.eval(
        "(() => { const f = document.getElementById('answer'); \
         f.querySelector('input[name=\"q:go\"][value=yes]').click(); \
         f.querySelector('input[name=\"q:area\"][value=code]').click(); \
         f.querySelector('textarea[name=note]').value = 'ship it'; \
         const body = new URLSearchParams(new FormData(f)).toString(); \
         f.submit(); return body; })()",
    );
    page.wait_for(
        "document.getElementById('accepted') !== null",
        "the answer to be accepted",
    );
    // The page left open follows the run over its event stream: deploy (three seconds long)
    // drawn in the running colour while it runs.
    watching.wait_for(
        &format!("(({NODE})('deploy') || [])[0] === 'running'"),
        "deploy drawn running on the open run page",
    );
    assert_eq!(
        watching.eval(&format!("{NODE}('deploy')")),
        json!(["running", true])
    );
    // A second, different answer is refused with the reason.
    let refused = page.eval(&format!(
        "fetch({}, {{method: 'POST', headers: {{'content-type': 'application/x-www-form-urlencoded'}}, \
          body: {}}}).then(async (r) => [r.status, await r.text()])",
        json!(format!("{}/answer", link.as_str().unwrap())),
        json!(posted.as_str().unwrap().replace("q%3Ago=yes", "q%3Ago=no"))
    ));
    assert_eq!(refused[0], 422, "{refused}");
    assert!(
        refused[1].as_str().unwrap().contains("already answered"),
        "{refused}"
    );

    let done = wait_run(server, &run, ended);
    assert_eq!(row(&done, "deploy")["status"], "pass", "{done}");
    assert_eq!(row(&done, "hold")["status"], "not_taken", "{done}");
    assert_eq!(row(&done, "gate")["output"]["go"]["label"], "yes", "{done}");
    // The page left open followed the run to its end over the event stream.
    watching.wait_for(
        "document.querySelector('details.task[data-task=deploy] .status.pass') !== null \
         && !document.getElementById('run-state').textContent.startsWith('running')",
        "the open run page to show the run's end",
    );
    screenshot(&mut watching, "ui-run.png");
}

// RFC-0002:C-HUMAN-DECISION — the open-decisions page raises a notification, linking to the
// evidence page, for a request its approver may answer, and none for a viewer of the same team;
// unanswered, the request expires, the route records `uncertain` and the run goes on.
#[test]
fn ui_notifies_approvers_not_viewers_and_an_expired_request_routes_uncertain() {
    let Some(b) = browser() else { return };
    for store in Store::all() {
        notifies_approvers_not_viewers(b, &store);
    }
}

fn notifies_approvers_not_viewers(b: &crate::cdp::Browser, store: &Store) {
    let mut blank = b.page("http://127.0.0.1", false);
    let (server, rita, ann, digest) = gated_server(store, "15s", Some(&mut blank));
    let vic = server.member("red", "vic", "viewer");
    let mut approver = signed_in(&server, &ann, true).unwrap();
    let mut viewer = signed_in(&server, &vic, true).unwrap();
    for p in [&mut approver, &mut viewer] {
        p.goto(&format!("{}/ui/decisions", server.url));
        assert_eq!(
            p.eval("navigator.permissions.query({name: 'notifications'}).then(s => s.state + ' ' + Notification.permission)"),
            "granted granted"
        );
    }
    let (s, v) = launch(
        &server,
        &rita,
        json!({ "pack": digest, "max_cost": 1, "max_time": "2m" }),
    );
    assert_eq!(s, 200, "{v}");
    let run = v["id"].as_str().unwrap().to_string();
    let note = approver.wait_for(
        "window.__notified.length > 0 && window.__notified",
        "the approver's notification",
    );
    let url = format!("/ui/runs/{run}/decisions/gate");
    assert_eq!(note.as_array().unwrap().len(), 1, "{note}");
    assert_eq!(note[0]["url"], url, "{note}");
    approver.wait_for(
        &format!("document.querySelector('#decisions a[href=\"{url}\"]') !== null"),
        "the request in the approver's list",
    );
    // The viewer's page polled the same while the request was open, and raised nothing.
    std::thread::sleep(Duration::from_millis(2500));
    let (s, v) = server.get(&format!("/v1/runs/{run}/decisions/gate"), &server.admin);
    assert_eq!((s, &v["state"]), (200, &json!("open")), "{v}");
    assert_eq!(viewer.eval("window.__notified.length"), 0);
    assert_eq!(
        viewer.eval("document.querySelectorAll('#decisions [data-key]').length"),
        0
    );

    let done = wait_run(&server, &run, ended);
    assert_eq!(
        row(&done, "gate")["output"]["go"]["label"],
        "uncertain",
        "{done}"
    );
    assert_eq!(row(&done, "hold")["status"], "pass", "{done}");
    assert_eq!(row(&done, "deploy")["status"], "not_taken", "{done}");
    approver.goto(&format!("{}{url}", server.url));
    assert_eq!(
        approver.eval("document.getElementById('decision-state').textContent"),
        "expired"
    );
    assert_eq!(
        approver.eval("document.getElementById('answer') === null"),
        true
    );
}

/// A UI request with the session cookie of `token` (or none): status, headers, body.
fn ui(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    form: Option<(&str, &str)>,
) -> (u16, ureq::http::HeaderMap, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let url = format!("{}{path}", server.url);
    let cookie = token
        .map(|t| format!("crucible_session={t}"))
        .unwrap_or_default();
    let response = match (method, form) {
        ("GET", _) => agent.get(&url).header("Cookie", &cookie).call(),
        (_, Some((origin, body))) => agent
            .post(&url)
            .header("Cookie", &cookie)
            .header("Origin", origin)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .send(body),
        _ => agent.post(&url).header("Cookie", &cookie).send_empty(),
    };
    let mut response = response.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    (status, headers, body)
}

// RFC-0002:C-HUMAN-DECISION, C-DECISION-EVIDENCE — the UI over plain HTTP: pages need a
// sign-in; the session cookie is HttpOnly and SameSite=Strict; each page reads with the API's
// scoping (another team's run, request, files and standing launch are "not found"); a standing
// launch shows its firings with their runs; a viewer reads the evidence
// without answer controls; an evidence file is served sandboxed with no network; a form posted
// from another origin is refused.
#[test]
fn ui_pages_need_a_session_and_read_as_the_api_does() {
    for store in Store::all() {
        pages_need_a_session_and_read_as_the_api_does(&store);
    }
}

fn pages_need_a_session_and_read_as_the_api_does(store: &Store) {
    let (server, rita, ann, digest) = gated_server(store, "90s", None);
    let vic = server.member("red", "vic", "viewer");
    let bo = server.team_with_user("blue", "bo", "admin");
    let run = launch_to_gate(&server, &rita, &digest);
    let gate = format!("/ui/runs/{run}/decisions/gate");

    let (s, h, _) = ui(&server, "GET", "/ui/runs", None, None);
    assert_eq!((s, h["location"].to_str().unwrap()), (303, "/ui/signin"));
    let (s, _, body) = ui(
        &server,
        "POST",
        "/ui/signin",
        None,
        Some((&server.url, "token=cru_wrong")),
    );
    assert_eq!(s, 401, "{body}");
    let (s, h, _) = ui(
        &server,
        "POST",
        "/ui/signin",
        None,
        Some((&server.url, &format!("token={ann}"))),
    );
    assert_eq!(s, 303);
    let cookie = h["set-cookie"].to_str().unwrap();
    assert!(
        cookie.starts_with(&format!("crucible_session={ann};")),
        "{cookie}"
    );
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );

    let (s, h, body) = ui(&server, "GET", "/ui/runs", Some(&ann), None);
    assert_eq!(s, 200, "{body}");
    assert!(body.contains(&run), "{body}");
    assert!(h["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("frame-ancestors 'none'"));
    let (s, _, body) = ui(&server, "GET", "/ui/runs", Some(&bo), None);
    assert_eq!(s, 200);
    assert!(!body.contains(&run), "{body}");
    // A task's files: to the run's team, only a path its published set lists; to another team,
    // not found as the run is.
    let file = |path: &str| format!("/ui/runs/{run}/files?task=scan&path={path}");
    let (s, h, body) = ui(&server, "GET", &file("f.csv"), Some(&vic), None);
    assert_eq!(s, 200, "{}: {body}", server.store);
    assert_eq!(body, "name,count\n\"a, b\",2\n<i>c</i>,3\n");
    assert_eq!(h["content-type"], "application/octet-stream");
    assert_eq!(h["content-disposition"], "attachment; filename=\"f.csv\"");
    assert_eq!(h["x-content-type-options"], "nosniff");
    for other in [
        "make.py",
        "..%2F..%2F..%2Fadmin.token",
        "files%2Fh.bin",
        "nosuch",
    ] {
        let (s, _, body) = ui(&server, "GET", &file(other), Some(&vic), None);
        assert_eq!(s, 404, "{other}: {body}");
    }
    let (s, _, body) = ui(
        &server,
        "GET",
        &format!("/ui/runs/{run}/files?task=gate&path=f.csv"),
        Some(&vic),
        None,
    );
    assert_eq!(s, 404, "a row with no files: {body}");
    for path in [
        format!("/ui/runs/{run}"),
        format!("/ui/runs/{run}/graph"),
        file("f.csv"),
        gate.clone(),
        format!("{gate}/files/0"),
    ] {
        let (s, _, body) = ui(&server, "GET", &path, Some(&bo), None);
        assert_eq!(s, 404, "{path}: {body}");
        assert!(body.contains("not found"), "{path}: {body}");
    }
    let (s, _, body) = ui(&server, "GET", "/ui/decisions/list", Some(&bo), None);
    assert_eq!(s, 200);
    assert!(!body.contains(&run), "{body}");

    let (s, _, body) = ui(&server, "GET", &gate, Some(&vic), None);
    assert_eq!(s, 200, "{body}");
    assert!(
        !body.contains("id=\"answer\"") && body.contains("class=\"readonly\""),
        "{body}"
    );
    let (s, _, body) = ui(&server, "GET", &gate, Some(&ann), None);
    assert_eq!(s, 200, "{body}");
    assert!(body.contains("id=\"answer\""), "{body}");

    // In path order (a, b, broken, c, d, e, f, g, h, hostile): h.bin is 8, hostile.html 9.
    let (s, h, body) = ui(&server, "GET", &format!("{gate}/files/9"), Some(&ann), None);
    assert_eq!(s, 200);
    assert!(body.contains("hostile"), "{body}");
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("sandbox allow-scripts"),
        "{csp}"
    );
    assert!(
        !csp.contains("allow-same-origin") && !csp.contains("connect-src"),
        "{csp}"
    );
    let (s, h, _) = ui(
        &server,
        "GET",
        &format!("{gate}/files/8?download=1"),
        Some(&ann),
        None,
    );
    assert_eq!(s, 200);
    assert_eq!(h["content-type"], "application/octet-stream");
    assert!(h["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("attachment"));

    // Standing launches (issue 13): listed to the team, each with its firings and their runs.
    let (s, v) = server.post_json(
        "/v1/standing",
        &rita,
        json!({ "name": "nightly", "pack": digest, "max_cost": 1, "max_time": "2m" }),
    );
    assert_eq!(s, 200, "{v}");
    let standing = v["id"].as_str().unwrap().to_string();
    let (s, firing) = server.post_json(&format!("/v1/standing/{standing}/fire"), &rita, json!({}));
    assert_eq!(s, 200, "{firing}");
    let fired = firing["run"].as_str().expect("the firing launched a run");
    let (s, _, body) = ui(&server, "GET", "/ui/standing", Some(&vic), None);
    assert_eq!(s, 200, "{body}");
    assert!(
        body.contains("nightly") && body.contains("fired by hand"),
        "{body}"
    );
    let (s, _, body) = ui(
        &server,
        "GET",
        &format!("/ui/standing/{standing}"),
        Some(&vic),
        None,
    );
    assert_eq!(s, 200, "{body}");
    assert!(
        body.contains(&format!("href=\"/ui/runs/{fired}\"")),
        "{body}"
    );
    let (s, _, body) = ui(&server, "GET", "/ui/standing", Some(&bo), None);
    assert_eq!(s, 200);
    assert!(!body.contains("nightly"), "{body}");
    let (s, _, body) = ui(
        &server,
        "GET",
        &format!("/ui/standing/{standing}"),
        Some(&bo),
        None,
    );
    assert_eq!(s, 404, "{body}");

    let (s, _, body) = ui(
        &server,
        "POST",
        &format!("{gate}/answer"),
        Some(&ann),
        Some(("http://evil.example", "digest=x&q%3Ago=yes")),
    );
    assert_eq!(s, 403, "{body}");
    let (s, v) = server.get(&format!("/v1/runs/{run}/decisions/gate"), &server.admin);
    assert_eq!((s, &v["state"]), (200, &json!("open")), "{v}");
}

//! The API's one table of endpoints (issue 12): each is routed from here and described from
//! here, so the OpenAPI document served at `GET /v1/openapi.json` lists exactly the routes the
//! controller answers, by construction.

use crate::{
    asks, audit, decisions, drafts, identity, kube, launches, link, packs, publish, runs, standing,
    App,
};
use axum::routing::{delete, get, post, MethodRouter};
use axum::{Json, Router};
use serde_json::{json, Map, Value};

/// An HTTP method the API uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Delete,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Post => "post",
            Method::Delete => "delete",
        }
    }
}

/// What a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    None,
    /// A JSON object.
    Json,
    /// An uncompressed tar of a pack's files.
    Tar,
    /// A gzipped tar: a delivery archive.
    Gzip,
}

/// What a success answers, by media type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Json,
    /// The gzipped delivery archive.
    Gzip,
    /// JSON lines (the session log).
    JsonLines,
    /// Server-sent events.
    EventStream,
}

impl Answer {
    fn media_type(self) -> &'static str {
        match self {
            Answer::Json => "application/json",
            Answer::Gzip => "application/gzip",
            Answer::JsonLines => "application/x-ndjson",
            Answer::EventStream => "text/event-stream",
        }
    }
}

/// One operation of the API.
pub struct Endpoint {
    pub method: Method,
    /// The path, with `{name}` path parameters.
    pub path: &'static str,
    pub summary: &'static str,
    /// Query parameters: name and what it is.
    pub query: &'static [(&'static str, &'static str)],
    pub body: Body,
    pub answer: Answer,
    /// Whether it needs `Authorization: Bearer TOKEN`.
    pub token: bool,
    route: fn() -> MethodRouter<App>,
}

const fn op(
    method: Method,
    path: &'static str,
    summary: &'static str,
    route: fn() -> MethodRouter<App>,
) -> Endpoint {
    Endpoint {
        method,
        path,
        summary,
        query: &[],
        body: Body::None,
        answer: Answer::Json,
        token: true,
        route,
    }
}

impl Endpoint {
    const fn query(mut self, query: &'static [(&'static str, &'static str)]) -> Endpoint {
        self.query = query;
        self
    }
    const fn body(mut self, body: Body) -> Endpoint {
        self.body = body;
        self
    }
    const fn answer(mut self, answer: Answer) -> Endpoint {
        self.answer = answer;
        self
    }
    const fn public(mut self) -> Endpoint {
        self.token = false;
        self
    }
}

const TEAM: (&str, &str) = (
    "team",
    "the team; may be left out by a caller who can edit in exactly one team",
);

/// Every endpoint, in the order the document lists them.
pub fn endpoints() -> Vec<Endpoint> {
    use Method::{Delete, Get, Post};
    vec![
        op(Get, "/v1/health", "Whether the controller answers", || {
            get(|| async { Json(json!({ "ok": true })) })
        })
        .public(),
        op(Get, "/v1/openapi.json", "This document", || {
            get(|| async { Json(document()) })
        })
        .public(),
        op(Get, "/v1/settings", "The limits in force, the delivery budget among them", || {
            get(crate::settings)
        }),
        op(
            Post,
            "/v1/targets/{name}/trust",
            "Mark or unmark a Kubernetes target registry-trusted (platform admins; audited); `{\"registry_trusted\": BOOL}`; refused for a target whose trust the operator's targets file sets",
            || post(kube::mark_trust),
        )
        .body(Body::Json),
        op(Get, "/v1/whoami", "The caller: its teams and roles", || {
            get(identity::whoami)
        }),
        op(Post, "/v1/teams", "A new team (platform admins); `{\"name\"}`", || {
            post(identity::create_team)
        })
        .body(Body::Json),
        op(
            Post,
            "/v1/teams/{team}/members",
            "A new user in the team with a role (its admins); `{\"name\", \"role\"}`; answers the user's token once",
            || post(identity::add_user),
        )
        .body(Body::Json),
        op(Get, "/v1/audit", "Every change with its subject (platform admins)", || {
            get(audit::list)
        }),
        op(Post, "/v1/packs", "Register a pack (a new revision when the tree differs)", || {
            post(packs::push)
        })
        .query(&[("name", "the pack's name in its team"), TEAM])
        .body(Body::Tar),
        op(
            Post,
            "/v1/packs/import",
            "Import a pack from a delivery archive (gzipped tar) another controller served",
            || post(packs::import),
        )
        .query(&[
            ("name", "the pack's name in its team"),
            TEAM,
            ("digest", "the digest the archive must hold; refused when it differs"),
        ])
        .body(Body::Gzip),
        op(Get, "/v1/packs", "The packs of the caller's teams", || {
            get(packs::list)
        }),
        op(Get, "/v1/packs/{id}", "One pack and every revision", || {
            get(packs::show)
        }),
        op(
            Delete,
            "/v1/packs/{id}",
            "Delete a pack and its revisions (editors); trees nothing else records are collected",
            || delete(packs::delete),
        ),
        op(
            Post,
            "/v1/packs/{id}/shares",
            "Share the pack, every revision, with another team read-only (admins of its team): its members read and may launch it; `{\"team\"}`",
            || post(packs::share),
        )
        .body(Body::Json),
        op(
            Delete,
            "/v1/packs/{id}/shares/{team}",
            "Stop sharing the pack with a team (admins of its team): it is not found to that team again",
            || delete(packs::unshare),
        ),
        op(
            Get,
            "/v1/packs/{id}/archive",
            "The gzipped tar a run of a revision is delivered",
            || get(packs::archive),
        )
        .query(&[("digest", "one of the pack's revisions; the current one when left out")])
        .answer(Answer::Gzip),
        op(
            Post,
            "/v1/packs/{id}/publication",
            "Publish a revision to the pack registry again now (editors): a failed publication is retried",
            || post(publish::retry),
        )
        .query(&[("digest", "one of the pack's revisions; the current one when left out")]),
        op(
            Get,
            "/v1/digests/{digest}",
            "A digest's publication state and the readable packs recording it, with their revisions",
            || get(publish::by_digest),
        ),
        op(
            Post,
            "/v1/render",
            "The Kubernetes objects a launch on a target would create, as YAML, creating nothing: `{\"target\", \"pack\", \"team\", \"params\", \"settings\", \"max_cost\", \"max_time\"}`",
            || post(kube::render),
        )
        .body(Body::Json),
        op(Post, "/v1/drafts", "Save the next version of a draft, on a base or whole", || {
            post(drafts::save)
        })
        .query(&[
            ("name", "the draft's name in its team"),
            TEAM,
            ("base", "the base's digest: the upload is then the overlay"),
        ])
        .body(Body::Tar),
        op(Get, "/v1/drafts", "The drafts of the caller's teams", || {
            get(drafts::list)
        }),
        op(Get, "/v1/drafts/{id}", "One draft and every version with its provenance", || {
            get(drafts::show)
        }),
        op(
            Post,
            "/v1/drafts/{id}/publish",
            "Register a draft version (the latest by default) as a pack revision, with its provenance: `{\"version\", \"name\"}`",
            || post(drafts::publish),
        )
        .body(Body::Json),
        op(
            Delete,
            "/v1/drafts/{id}",
            "Delete a draft and its versions (editors); trees nothing else records are collected",
            || delete(drafts::delete),
        ),
        op(
            Post,
            "/v1/launches",
            "Launch a run of a digest or `draft:NAME`: `{\"pack\", \"team\", \"params\", \"settings\", \"caps\", \"max_cost\", \"max_time\", \"steering\"}` (steering: file name to text, delivered beside the pack), checked as `plan run` checks it",
            || post(launches::launch),
        )
        .body(Body::Json),
        op(Get, "/v1/runs", "The runs of the caller's teams, newest first", || {
            get(runs::list)
        }),
        op(Get, "/v1/runs/{id}", "One run: its launch, rows, outcome, verdict and spend", || {
            get(runs::show)
        }),
        op(Get, "/v1/runs/{id}/log", "The run's session log", || {
            get(runs::session_log)
        })
        .answer(Answer::JsonLines),
        op(Get, "/v1/runs/{id}/logs", "Every settled row's kept stdout and stderr", || {
            get(runs::task_logs)
        }),
        op(
            Get,
            "/v1/runs/{id}/logs/{task}",
            "One task's kept stdout and stderr (its instances and rounds included)",
            || get(runs::task_logs_of),
        ),
        op(
            Get,
            "/v1/runs/{id}/events",
            "The run's events: each session log line, task_started, and a last end",
            || get(runs::events),
        )
        .answer(Answer::EventStream),
        op(Post, "/v1/runs/{id}/stop", "Stop a running run (editors); a remote run is recorded stopped and its token dies", || {
            post(runs::stop)
        }),
        op(
            Post,
            "/v1/remote-runs",
            "Record a run an engine outside the controller executes (editors): a launch's fields; answers its id, its run token (once) and its engine's environment",
            || post(link::create),
        )
        .body(Body::Json),
        op(
            Get,
            "/v1/runs/{id}/report",
            "How many session log lines of the run the controller holds (the run's token)",
            || get(link::acknowledged),
        ),
        op(
            Post,
            "/v1/runs/{id}/report",
            "Report session log lines of a remote run (the run's token): `{\"engine_run\", \"from\", \"lines\"}`; answers how many the controller holds",
            || post(link::report),
        )
        .body(Body::Json),
        op(
            Get,
            "/v1/decisions",
            "The open decision requests the caller may answer (approvers of the run's team)",
            || get(decisions::list),
        ),
        op(
            Post,
            "/v1/decisions",
            "Open a decision request (a remote run's engine, by its run token): the request as the engine's polling protocol sends it; answers its record, 201 new or 200 the pair's existing one unchanged",
            || post(decisions::open),
        )
        .body(Body::Json),
        op(
            Get,
            "/v1/decisions/{run}/{route}",
            "Poll a decision request's record (the run's token)",
            || get(decisions::poll),
        ),
        op(
            Delete,
            "/v1/decisions/{run}/{route}",
            "Withdraw an open decision request (the run's token): its run stopped",
            || delete(decisions::withdraw),
        ),
        op(
            Get,
            "/v1/runs/{id}/decisions/{route}",
            "One decision request: its questions, evidence and digest, state and answer",
            || get(decisions::show),
        ),
        op(
            Post,
            "/v1/runs/{id}/decisions/{route}/answer",
            "Answer a decision request (approvers): `{\"digest\", \"answers\": {question: [option, …]}, \"note\"}`; the first accepted answer is final",
            || post(decisions::answer),
        )
        .body(Body::Json),
        op(
            Post,
            "/v1/standing",
            "A standing launch (editors): a launch's fields with `\"name\"`, `\"schedule\"` (five-field cron; none: fired by hand), `\"timezone\"` (IANA, default UTC) and `\"daily_max_cost\"`, checked as its launch would be",
            || post(standing::create),
        )
        .body(Body::Json),
        op(Get, "/v1/standing", "The standing launches of the caller's teams", || {
            get(standing::list)
        }),
        op(
            Get,
            "/v1/standing/{id}",
            "One standing launch and its firings, newest first: launched, skipped or refused",
            || get(standing::show),
        ),
        op(
            Delete,
            "/v1/standing/{id}",
            "Delete a standing launch (editors): it fires no more; its runs are kept",
            || delete(standing::delete),
        ),
        op(
            Get,
            "/v1/standing/{id}/history",
            "The series history its next run would be handed now, and the size bound",
            || get(standing::history),
        ),
        op(Post, "/v1/standing/{id}/pause", "Pause its schedule (editors)", || {
            post(standing::pause)
        }),
        op(Post, "/v1/standing/{id}/resume", "Resume its schedule (editors)", || {
            post(standing::resume)
        }),
        op(
            Post,
            "/v1/standing/{id}/fire",
            "Fire it now (editors), under the scheduler's policies; answers the firing",
            || post(standing::fire),
        ),
        op(
            Post,
            "/v1/clock",
            "Tests only (a controller started with --test-clock; platform admins): set the scheduler's clock `{\"now\": RFC 3339}` and run one scheduler pass",
            || post(standing::set_clock),
        )
        .body(Body::Json),
        op(
            Get,
            "/v1/asks",
            "The asks the runs of the caller's teams emitted: each as proposed and as decided",
            || get(asks::list),
        )
        .query(&[
            ("run", "only the asks of this run"),
            ("state", "only asks in this state: proposed, rejected, duplicate, held, admitted, refused, dismissed"),
        ]),
        op(
            Post,
            "/v1/asks/{id}/admit",
            "Admit a held ask (approvers): launched under the operator's ceilings",
            || post(asks::admit_held),
        ),
        op(Post, "/v1/asks/{id}/dismiss", "Dismiss a held ask (approvers)", || {
            post(asks::dismiss)
        }),
    ]
}

/// The routes of every endpoint.
pub fn router(app: App) -> Router {
    endpoints()
        .iter()
        .fold(Router::new(), |r, e| r.route(e.path, (e.route)()))
        .with_state(app)
}

/// The path parameters of a path: each `{name}` segment.
fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
        .collect()
}

/// The OpenAPI 3.1 document of the API.
pub fn document() -> Value {
    let error = json!({
        "description": "refused: `error` says why (400 malformed, 401 no valid token, 403 a role \
                        that does not allow it, 404 not found or not readable, 413 too large, \
                        422 refused by a rule)",
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
    });
    let mut paths = Map::new();
    for e in endpoints() {
        let mut parameters: Vec<Value> = path_params(e.path)
            .into_iter()
            .map(|p| json!({ "name": p, "in": "path", "required": true, "schema": { "type": "string" } }))
            .collect();
        parameters.extend(e.query.iter().map(|(name, what)| {
            json!({ "name": name, "in": "query", "description": what, "schema": { "type": "string" } })
        }));
        let mut operation = json!({
            "summary": e.summary,
            "parameters": parameters,
            "responses": {
                "200": {
                    "description": "done",
                    "content": { e.answer.media_type(): {} }
                },
                "default": error,
            },
        });
        match e.body {
            Body::None => {}
            Body::Json => {
                operation["requestBody"] = json!({
                    "required": true,
                    "content": { "application/json": { "schema": { "type": "object" } } }
                })
            }
            Body::Tar => {
                operation["requestBody"] = json!({
                    "required": true,
                    "content": { "application/x-tar": {} }
                })
            }
            Body::Gzip => {
                operation["requestBody"] = json!({
                    "required": true,
                    "content": { "application/gzip": {} }
                })
            }
        }
        operation["security"] = match e.token {
            true => json!([{ "token": [] }]),
            false => json!([]),
        };
        let item = paths
            .entry(e.path)
            .or_insert_with(|| Value::Object(Map::new()));
        item[e.method.name()] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "crucible controller",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A team's packs, drafts and runs (docs/controller.md)."
        },
        "paths": paths,
        "components": {
            "securitySchemes": { "token": { "type": "http", "scheme": "bearer" } },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": { "error": { "type": "string" } }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each operation is listed once, and every path parameter is declared.
    #[test]
    fn the_document_lists_each_operation_once_with_its_parameters() {
        let doc = document();
        let mut seen = std::collections::BTreeSet::new();
        for e in endpoints() {
            assert!(seen.insert((e.path, e.method.name())), "{} twice", e.path);
            let op = &doc["paths"][e.path][e.method.name()];
            for p in path_params(e.path) {
                let declared = op["parameters"].as_array().unwrap();
                assert!(declared.iter().any(|d| d["name"] == p && d["in"] == "path"));
            }
        }
        let operations: usize = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|item| item.as_object().unwrap().len())
            .sum();
        assert_eq!(operations, seen.len());
    }
}

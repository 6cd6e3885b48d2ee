//! The conformance suite: drives the real `crucible` binary, one module per RFC-0002 clause
//! (see docs/conformance.md for the map from each MUST to its tests).

mod http_double;
mod model_double;
mod support;

mod admission;
mod agent;
mod agents;
mod agents_claude;
mod agents_codex;
mod agents_pi;
mod asks;
mod budget;
mod caps;
mod compile_bombs;
mod conformance_map;
mod example_branching;
mod examples;
mod fanout;
mod history;
mod inspect;
mod io;
mod lane;
mod live;
mod logs;
mod mapped_files;
mod model_routes;
mod one_engine;
mod picture;
mod readback;
mod repair;
mod reports;
mod rerun;
mod resume;
mod resume_branches;
mod revise;
mod revise_files;
mod routes;
mod runs;
mod sandbox;
mod settled_join;
mod stop;
mod task_env;
mod task_files;
mod terminal;
mod workspace;

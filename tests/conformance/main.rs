//! The conformance suite: drives the real `crucible` binary, one module per RFC-0002 clause
//! (see docs/conformance.md for the map from each MUST to its tests).

mod support;

mod agent;
mod budget;
mod caps;
mod examples;
mod io;
mod lane;
mod rerun;
mod resume;
mod runs;
mod settled_join;
mod stop;

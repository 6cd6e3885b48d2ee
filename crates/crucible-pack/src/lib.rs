//! Pack files and their digest, the `crucible.toml` manifest and its variants.

pub mod files;
pub mod manifest;
pub mod runbook;

pub use manifest::{load, LoadedManifest, Manifest, ManifestError};

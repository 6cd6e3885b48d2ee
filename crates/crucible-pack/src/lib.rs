//! Pack files and their digest, the `crucible.toml` manifest and its variants.

pub mod files;
pub mod manifest;

pub use manifest::{load, LoadedManifest, Manifest, ManifestError};

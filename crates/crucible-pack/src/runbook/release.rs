//! Sealing (issue 15): a runbook release is identified by its content, never by its `version`
//! label. The digest is the pack's `tree1:` digest of the whole bundle (contract, procedure,
//! skill dependencies and support files), so file order, modes and timestamps never change it
//! and a dependency cannot change without changing the release. A release may be written to a
//! store as `STORE/<name>/<hex>/`, read-only, verified after the copy.

use super::validate::{check, Checked, Refused};
use crate::files::{pack_files, tree1_of, PackDir, PackFileError};
use crucible_plan::diag::Diagnostic;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What went wrong making a release or a conversion.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The contract was refused: its diagnostics.
    #[error("{0}")]
    Refused(Refused),
    #[error("{0}")]
    File(#[from] PackFileError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// A refusal that is not a contract rule (a destination that exists, a clash).
    #[error("{0}")]
    Refusal(String),
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// A sealed release: its identity and what it holds.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    pub name: String,
    pub version: String,
    /// `tree1:` over every bundle file: the release's identity.
    pub digest: String,
    pub procedure: String,
    pub skill_dependencies: Vec<SealedDependency>,
    /// Every bundle file, in byte order.
    pub files: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SealedDependency {
    pub path: String,
    /// `tree1:` over the dependency directory's files alone.
    pub digest: String,
}

/// Seals the bundle at `dir`: validates it and computes its release. Warnings come back with it.
pub fn seal(dir: &Path) -> Result<(Release, Vec<Diagnostic>), BundleError> {
    seal_checked(dir).map(|(release, checked)| (release, checked.warnings))
}

/// [`seal`], with the contract it sealed (what a run of it enforces).
pub fn seal_checked(dir: &Path) -> Result<(Release, Checked), BundleError> {
    let checked = check(dir).map_err(BundleError::Refused)?;
    let listing = pack_files(dir)?;
    let digest = tree1_of(dir, &listing)?;
    let r = checked.runbook.clone();
    let mut skill_dependencies = Vec::new();
    for dep in &r.skill_dependencies {
        let sub = pack_files(&dir.join(dep))?;
        skill_dependencies.push(SealedDependency {
            path: dep.clone(),
            digest: tree1_of(&dir.join(dep), &sub)?,
        });
    }
    let release = Release {
        name: r.name,
        version: r.version,
        digest,
        procedure: r.procedure,
        skill_dependencies,
        files: listing.files,
    };
    Ok((release, checked))
}

/// Writes `release` (sealed from `dir`) to `store/<name>/<hex>/`, its files read-only, and
/// returns that directory. A release already there is verified, not rewritten; a copy whose
/// digest differs (the bundle changed while it was copied) is removed and refused.
pub fn store(dir: &Path, release: &Release, store: &Path) -> Result<PathBuf, BundleError> {
    let hex = release.digest.trim_start_matches("tree1:");
    let parent = store.join(&release.name);
    let target = parent.join(hex);
    if target.exists() {
        let have = tree1_of(&target, &pack_files(&target)?)?;
        if have != release.digest {
            return Err(BundleError::Refusal(format!(
                "{}: holds {have}, not the release it is named for",
                target.display()
            )));
        }
        return Ok(target);
    }
    std::fs::create_dir_all(&parent).map_err(io(&parent))?;
    let staging = parent.join(format!(".{hex}.{}", std::process::id()));
    let result = copy_files(
        dir,
        release.files.iter().map(|f| (f.as_str(), f.as_str())),
        &staging,
    )
    .and_then(|()| {
        let copied = tree1_of(&staging, &pack_files(&staging)?)?;
        if copied != release.digest {
            return Err(BundleError::Refusal(format!(
                "{}: the bundle changed while it was sealed ({} became {copied})",
                dir.display(),
                release.digest
            )));
        }
        for f in &release.files {
            let p = staging.join(f);
            let mode = std::fs::metadata(&p).map_err(io(&p))?.permissions().mode();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode & 0o555))
                .map_err(io(&p))?;
        }
        std::fs::rename(&staging, &target).map_err(io(&target))
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result.map(|()| target)
}

/// Copies bundle files (`from` in `src`, read without following links) to `to` below `dest`,
/// which is created. An executable file stays executable; nothing else of its mode is kept.
pub(crate) fn copy_files<'a>(
    src: &Path,
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
    dest: &Path,
) -> Result<(), BundleError> {
    let dir = PackDir::open(src)?;
    std::fs::create_dir_all(dest).map_err(io(dest))?;
    for (from, to) in files {
        let bytes = dir.read(from, u64::MAX)?;
        let out = dest.join(to);
        if let Some(p) = out.parent() {
            std::fs::create_dir_all(p).map_err(io(p))?;
        }
        std::fs::write(&out, bytes).map_err(io(&out))?;
        let exec = std::fs::symlink_metadata(src.join(from))
            .map(|m| m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
        let mode = if exec { 0o755 } else { 0o644 };
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(mode)).map_err(io(&out))?;
    }
    Ok(())
}

/// Refuses a destination that exists and is not an empty directory: conversions never
/// overwrite.
pub(crate) fn fresh(dest: &Path) -> Result<(), BundleError> {
    match std::fs::read_dir(dest).map(|mut entries| entries.next().is_none()) {
        Ok(true) => Ok(()),
        Ok(false) => Err(BundleError::Refusal(format!(
            "{}: the destination is not empty; name a new directory",
            dest.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(dest)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTRACT: &str = r#"{"schemaVersion": 1, "name": "triage", "version": "1.0.0",
        "description": "d", "invocation": "auto", "requiredCapabilities": [],
        "allowedEffectClasses": ["filesystem.read"], "skillDependencies": ["skills/research"]}"#;

    /// Writes the same bundle, its files in `order` and with `mode`.
    fn bundle(order: &[usize], mode: u32) -> tempfile::TempDir {
        let files = [
            ("runbook.json", CONTRACT),
            ("RUNBOOK.md", "# Triage\n"),
            ("skills/research/SKILL.md", "# Research\n"),
            ("skills/research/notes/a.txt", "a\n"),
        ];
        let d = tempfile::tempdir().unwrap();
        for &i in order {
            let (rel, text) = files[i];
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        d
    }

    // The same content gives the same digest whatever order the files were made in and
    // whatever their modes; the dependency is sealed in.
    #[test]
    fn the_digest_is_the_content() {
        let a = bundle(&[0, 1, 2, 3], 0o644);
        let b = bundle(&[3, 2, 1, 0], 0o755);
        let (ra, _) = seal(a.path()).unwrap();
        let (rb, _) = seal(b.path()).unwrap();
        assert_eq!(ra, rb);
        assert_eq!(ra.digest, crate::files::tree1_digest(a.path()).unwrap());
        assert_eq!(ra.skill_dependencies.len(), 1);
        assert_eq!(
            ra.skill_dependencies[0].digest,
            crate::files::tree1_digest(&a.path().join("skills/research")).unwrap()
        );
        // A dependency's file changes the release, its version label unchanged.
        std::fs::write(a.path().join("skills/research/notes/a.txt"), "b\n").unwrap();
        let (changed, _) = seal(a.path()).unwrap();
        assert_ne!(changed.digest, rb.digest);
        assert_eq!(changed.version, rb.version);
    }

    #[test]
    fn a_refused_contract_is_not_sealed() {
        let a = bundle(&[0, 1], 0o644);
        assert!(matches!(seal(a.path()), Err(BundleError::Refused(_))));
    }

    // A stored release is read-only, named by its digest, and storing it again verifies it.
    #[test]
    fn storing_a_release() {
        let a = bundle(&[0, 1, 2, 3], 0o755);
        let s = tempfile::tempdir().unwrap();
        let (r, _) = seal(a.path()).unwrap();
        let at = store(a.path(), &r, s.path()).unwrap();
        assert_eq!(
            at,
            s.path()
                .join("triage")
                .join(r.digest.trim_start_matches("tree1:"))
        );
        assert_eq!(crate::files::tree1_digest(&at).unwrap(), r.digest);
        let mode = std::fs::metadata(at.join("RUNBOOK.md"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o555);
        assert_eq!(store(a.path(), &r, s.path()).unwrap(), at);
        // Nothing else is left in the store (no staging directory).
        let names: Vec<_> = std::fs::read_dir(s.path().join("triage"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }
}

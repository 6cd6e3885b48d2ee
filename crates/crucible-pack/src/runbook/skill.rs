//! Conversions between an Agent Skill directory and a runbook bundle (issue 15).
//!
//! `from_skill` keeps `SKILL.md` as the procedure and copies every support file; since a skill
//! says nothing of effects, capabilities, predicates or gates, the contract it writes is the
//! least one: explicit invocation, no capabilities, `filesystem.read` only, to be widened by a
//! person who reviews it. `to_skill` makes the procedure the root `SKILL.md` and copies the
//! support files; `runbook.json` (and so everything it governs) is left out.

use super::release::{copy_files, fresh, io, BundleError};
use super::validate::{check, is_name, Checked};
use super::CONTRACT_FILE;
use crate::files::{pack_files, PackDir, PackFileErrorKind, MAX_FILE_BYTES};
use std::path::Path;

/// The name and description in a `SKILL.md` front matter (`---` … `---`), when present.
pub fn front_matter(text: &str) -> (Option<String>, Option<String>) {
    let (mut name, mut description) = (None, None);
    let Some(rest) = text.strip_prefix("---\n") else {
        return (name, description);
    };
    for line in rest.lines().take_while(|l| l.trim_end() != "---") {
        if let Some((k, v)) = line.split_once(':') {
            let v = v.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
            match k.trim() {
                "name" if !v.is_empty() => name = Some(v),
                "description" if !v.is_empty() => description = Some(v),
                _ => {}
            }
        }
    }
    (name, description)
}

/// A runbook name made from free text: lowercased, every run of other characters one hyphen.
fn to_name(text: &str) -> Option<String> {
    let lowered: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let name = lowered
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    let name: String = name.chars().take(64).collect();
    let name = name.trim_end_matches('-').to_string();
    is_name(&name).then_some(name)
}

/// Converts the skill at `skill` into a runbook bundle at `dest` (new or empty), returning the
/// written contract as checked.
pub fn from_skill(skill: &Path, dest: &Path) -> Result<Checked, BundleError> {
    fresh(dest)?;
    let dir = PackDir::open(skill)?;
    match dir.read(CONTRACT_FILE, MAX_FILE_BYTES) {
        Err(e) if matches!(e.kind, PackFileErrorKind::NotFound) => {}
        _ => {
            return Err(BundleError::Refusal(format!(
                "{}: already holds {CONTRACT_FILE}: it is a runbook bundle, not a skill",
                skill.display()
            )))
        }
    }
    let bytes = dir.read("SKILL.md", MAX_FILE_BYTES).map_err(|e| {
        BundleError::Refusal(format!(
            "{}: not a skill: SKILL.md: {}",
            skill.display(),
            e.kind
        ))
    })?;
    let text = String::from_utf8(bytes)
        .map_err(|_| BundleError::Refusal("SKILL.md is not UTF-8 text".into()))?;
    let (fm_name, fm_description) = front_matter(&text);
    let dir_name = skill
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let name = fm_name
        .as_deref()
        .and_then(to_name)
        .or_else(|| dir_name.as_deref().and_then(to_name))
        .unwrap_or_else(|| "skill".into());
    let description =
        fm_description.unwrap_or_else(|| format!("The procedure of the skill {name}."));
    let contract = serde_json::json!({
        "schemaVersion": 1,
        "name": name,
        "version": "0.1.0",
        "description": description,
        "invocation": "explicit",
        "requiredCapabilities": [],
        "allowedEffectClasses": ["filesystem.read"],
        "procedure": "SKILL.md",
    });
    let listing = pack_files(skill)?;
    copy_files(
        skill,
        listing.files.iter().map(|f| (f.as_str(), f.as_str())),
        dest,
    )?;
    let out = dest.join(CONTRACT_FILE);
    let mut json = serde_json::to_string_pretty(&contract).expect("a JSON value serializes");
    json.push('\n');
    std::fs::write(&out, json).map_err(io(&out))?;
    check(dest).map_err(BundleError::Refused)
}

/// Exports the runbook bundle at `bundle` as a skill at `dest` (new or empty). A procedure
/// without front matter gets one naming the runbook, as a skill needs.
pub fn to_skill(bundle: &Path, dest: &Path) -> Result<(), BundleError> {
    let checked = check(bundle).map_err(BundleError::Refused)?;
    let r = &checked.runbook;
    fresh(dest)?;
    let listing = pack_files(bundle)?;
    if r.procedure != "SKILL.md" && listing.files.iter().any(|f| f == "SKILL.md") {
        return Err(BundleError::Refusal(format!(
            "{}: the procedure is {}, and the bundle's own SKILL.md would be overwritten by it; \
             rename one of them",
            bundle.display(),
            r.procedure
        )));
    }
    let support = listing
        .files
        .iter()
        .filter(|f| *f != CONTRACT_FILE && **f != r.procedure)
        .map(|f| (f.as_str(), f.as_str()));
    copy_files(bundle, support, dest)?;
    let dir = PackDir::open(bundle)?;
    let procedure = String::from_utf8(dir.read(&r.procedure, MAX_FILE_BYTES)?)
        .map_err(|_| BundleError::Refusal("the procedure is not UTF-8 text".into()))?;
    let text = if procedure.starts_with("---\n") {
        procedure
    } else {
        format!(
            "---\nname: {}\ndescription: {}\n---\n{procedure}",
            r.name,
            serde_json::Value::from(r.description.as_str())
        )
    };
    let out = dest.join("SKILL.md");
    std::fs::write(&out, text).map_err(io(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_and_names() {
        let t = "---\nname: Web Research\ndescription: \"Look things up.\"\n---\n# Body\n";
        assert_eq!(
            front_matter(t),
            (Some("Web Research".into()), Some("Look things up.".into()))
        );
        assert_eq!(front_matter("# no front matter\n"), (None, None));
        assert_eq!(to_name("Web Research").as_deref(), Some("web-research"));
        assert_eq!(to_name("--A__b--").as_deref(), Some("a-b"));
        assert_eq!(to_name("___"), None);
    }
}

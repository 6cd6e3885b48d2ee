//! Per-run steering (RFC-0002:C-PACK-BASE, docs/decisions.md "Per-run steering"): text a launch
//! carries for this run only, not pack content. It is delivered beside the pack's tree, never
//! into it, as a directory of small UTF-8 files the launcher wrote; every task reads it
//! read-only (`CRUCIBLE_STEERING_DIR`, bound read-only by the sandbox), and an agent task's
//! prompt carries each file only inside an external-input region. This module holds its bounds
//! and reads it, refusing what breaks them before anything is dispatched.

use std::path::Path;

/// The most steering files one run may carry.
pub const MAX_FILES: usize = 8;
/// The most bytes all of a run's steering files may hold together.
pub const MAX_BYTES: usize = 64 * 1024;

/// Checks steering files (name, text) against the rules: at most [`MAX_FILES`] files and
/// [`MAX_BYTES`] bytes, each name 1 to 64 of `A-Za-z0-9._-` not starting with `.`, and no text
/// or name carrying the external-input marker text (refused, never rewritten, so an attempt to
/// open or close a region is reported to whoever launched the run).
pub fn check(files: &[(String, String)]) -> Result<(), String> {
    if files.len() > MAX_FILES {
        return Err(format!(
            "{} steering files: a run takes at most {MAX_FILES}",
            files.len()
        ));
    }
    let total: usize = files.iter().map(|(_, t)| t.len()).sum();
    if total > MAX_BYTES {
        return Err(format!(
            "the steering holds {total} bytes, over the bound of {MAX_BYTES}"
        ));
    }
    for (name, text) in files {
        let ok = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !ok {
            return Err(format!(
                "the steering file name `{}` is refused: use 1 to 64 of A-Z a-z 0-9 . _ - not starting with .",
                name.escape_debug()
            ));
        }
        if crucible_plan::markers::carries_marker(text) {
            return Err(format!(
                "the steering file `{name}` carries the external-input marker text"
            ));
        }
    }
    Ok(())
}

/// The steering files in `dir`, by name in byte order, checked as [`check`] does; anything in
/// it that is not a regular UTF-8 file is refused.
pub fn read(dir: &Path) -> Result<Vec<(String, String)>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("the steering directory {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("the steering directory: {e}"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry
            .file_type()
            .map_err(|e| format!("the steering file `{name}`: {e}"))?;
        if !kind.is_file() {
            return Err(format!("the steering entry `{name}` is not a regular file"));
        }
        let meta = entry
            .metadata()
            .map_err(|e| format!("the steering file `{name}`: {e}"))?;
        if meta.len() > MAX_BYTES as u64 {
            return Err(format!(
                "the steering file `{name}` is over the bound of {MAX_BYTES} bytes"
            ));
        }
        let bytes =
            std::fs::read(entry.path()).map_err(|e| format!("the steering file `{name}`: {e}"))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("the steering file `{name}` is not UTF-8 text"))?;
        files.push((name, text));
    }
    files.sort();
    check(&files)?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steering_is_bounded_named_and_free_of_markers() {
        let f = |n: &str, t: &str| vec![(n.to_string(), t.to_string())];
        assert!(check(&f("focus.md", "only the docs")).is_ok());
        for bad in ["", ".hidden", "a/b", "../x", "a b", &"x".repeat(65)] {
            assert!(check(&f(bad, "t")).is_err(), "{bad:?}");
        }
        let marked = format!("x {} y", crucible_plan::markers::CLOSE);
        assert!(check(&f("s", &marked)).unwrap_err().contains("marker"));
        let many: Vec<_> = (0..=MAX_FILES)
            .map(|i| (format!("f{i}"), String::new()))
            .collect();
        assert!(check(&many).is_err());
        assert!(check(&f("big", &"x".repeat(MAX_BYTES + 1))).is_err());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.md"), "two").unwrap();
        std::fs::write(dir.path().join("a.md"), "one").unwrap();
        assert_eq!(
            read(dir.path()).unwrap(),
            [("a.md".into(), "one".into()), ("b.md".into(), "two".into())]
        );
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("c")).unwrap();
        assert!(read(dir.path()).unwrap_err().contains("not a regular file"));
    }
}

//! Directory names for captured and staged sets (RFC-0002:C-TASK-FILES).
//!
//! A mapped instance's key is runtime data. Where it forms a directory name it is escaped so the
//! directory is exactly one path component and distinct keys name distinct directories; the key
//! stays raw everywhere else (names, rows, inputs, resume matching).

/// Escape an instance key for use inside one path component: `%`→`%25`, `/`→`%2F`, `\`→`%5C`,
/// NUL→`%00`, and a leading `.`→`%2E`.
///
/// Injective because `%` itself is escaped first-class: every `%` in the output starts one of the
/// five escapes, so the output decodes back to exactly one key.
pub fn escape_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for (i, c) in key.chars().enumerate() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            '\\' => out.push_str("%5C"),
            '\0' => out.push_str("%00"),
            '.' if i == 0 => out.push_str("%2E"),
            other => out.push(other),
        }
    }
    out
}

/// The directory a producer's set is captured and staged under: the raw task name for an
/// unmapped task, `node[<escaped key>]` for one instance of a mapped task.
pub fn dir_name(task_name: &str, key: Option<&str>) -> String {
    match key {
        None => task_name.to_string(),
        Some(key) => format!("{task_name}[{}]", escape_key(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The inverse of [`escape_key`], only to prove injectivity by round trip.
    fn unescape(s: &str) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('%') {
            out.push_str(&rest[..i]);
            let code = &rest[i + 1..i + 3];
            out.push(match code {
                "25" => '%',
                "2F" => '/',
                "5C" => '\\',
                "00" => '\0',
                "2E" => '.',
                other => panic!("unexpected escape %{other}"),
            });
            rest = &rest[i + 3..];
        }
        out.push_str(rest);
        out
    }

    // RFC-0002:C-TASK-FILES: the escape table, each rule on its own and combined.
    #[test]
    fn escapes_each_reserved_character() {
        let table = [
            ("plain", "plain"),
            ("a/b", "a%2Fb"),
            ("a\\b", "a%5Cb"),
            ("50%", "50%25"),
            ("nul\0here", "nul%00here"),
            (".hidden", "%2Ehidden"),
            ("..", "%2E."),
            ("a.b.", "a.b."),
            ("/", "%2F"),
            ("./x", "%2E%2Fx"),
            ("%2F", "%252F"),
            ("", ""),
            ("ключ", "ключ"),
        ];
        for (key, want) in table {
            assert_eq!(escape_key(key), want, "key {key:?}");
        }
    }

    // RFC-0002:C-TASK-FILES: the directory is one path component, never `.` or `..`.
    #[test]
    fn escaped_key_is_one_component() {
        for key in [
            "a/b",
            "../..",
            "..",
            ".",
            "/etc/passwd",
            "x\\y",
            "\0",
            ".git",
        ] {
            let d = escape_key(key);
            assert!(!d.contains('/') && !d.contains('\0'), "{key:?} -> {d:?}");
            assert!(!d.starts_with('.'), "{key:?} -> {d:?}");
        }
    }

    // RFC-0002:C-TASK-FILES: distinct keys name distinct directories, including keys that
    // would collide under a naive escape (e.g. `a/b` vs `a%2Fb`).
    #[test]
    fn distinct_keys_never_collide() {
        let alphabet = ['a', '.', '/', '\\', '%', '\0', '2', 'F', '5', 'C', 'E'];
        let mut keys = vec![String::new()];
        // Every string over the alphabet up to length 4: 16 105 keys.
        let mut frontier = vec![String::new()];
        for _ in 0..4 {
            let mut next = Vec::new();
            for k in &frontier {
                for c in alphabet {
                    let mut s = k.clone();
                    s.push(c);
                    next.push(s);
                }
            }
            keys.extend(next.iter().cloned());
            frontier = next;
        }
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for k in keys {
            let e = escape_key(&k);
            assert_eq!(unescape(&e), k, "round trip of {k:?}");
            if let Some(prev) = seen.insert(e.clone(), k.clone()) {
                panic!("{prev:?} and {k:?} both escape to {e:?}");
            }
        }
    }

    #[test]
    fn dir_name_is_raw_for_unmapped_and_bracketed_for_instances() {
        assert_eq!(dir_name("build", None), "build");
        assert_eq!(dir_name("shard", Some("eu/west")), "shard[eu%2Fwest]");
        assert_eq!(dir_name("shard", Some(".env")), "shard[%2Eenv]");
        assert_ne!(
            dir_name("shard", Some("a/b")),
            dir_name("shard", Some("a%2Fb"))
        );
    }
}

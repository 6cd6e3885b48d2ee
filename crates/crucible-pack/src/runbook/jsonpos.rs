//! Where each value of a JSON document starts, by JSON path, so a contract error can point at
//! `file:line:col` like a compile error. It also finds duplicate object keys, which a JSON
//! parser silently resolves to the last one: a contract must say one thing per field.
//!
//! It runs only on text `serde_json` already accepted, so it trusts the grammar and never
//! fails; its recursion is bounded by `serde_json`'s own nesting limit.

use std::collections::HashMap;

/// A 1-based line and column (in characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

/// Positions of a document's values and object keys, by path (`$`, `$.a[0].b`).
#[derive(Debug, Default)]
pub struct Positions {
    values: HashMap<String, Pos>,
    keys: HashMap<String, Pos>,
    /// Members whose key already appeared in the same object, with where the repeat starts,
    /// in document order. Like `serde_json`, the positions above keep the last occurrence.
    pub duplicates: Vec<(String, Pos)>,
}

impl Positions {
    /// Scans `text`, which must be a JSON document `serde_json` accepted.
    pub fn scan(text: &str) -> Positions {
        let mut s = Scanner {
            chars: text.chars().collect(),
            at: 0,
            pos: Pos { line: 1, col: 1 },
            out: Positions::default(),
        };
        s.ws();
        s.value("$".to_string());
        s.out
    }

    /// Where the value at `path` starts (the document start when unknown).
    pub fn value(&self, path: &str) -> Pos {
        self.values
            .get(path)
            .copied()
            .unwrap_or(Pos { line: 1, col: 1 })
    }

    /// Where the key of the member at `path` starts (else where its value starts).
    pub fn key(&self, path: &str) -> Pos {
        self.keys
            .get(path)
            .copied()
            .unwrap_or_else(|| self.value(path))
    }
}

/// The path of member `key` of the object at `parent`.
pub fn member(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        format!("{parent}.{key}")
    } else {
        format!("{parent}[{}]", serde_json::Value::from(key))
    }
}

/// The path of element `i` of the array at `parent`.
pub fn element(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

struct Scanner {
    chars: Vec<char>,
    at: usize,
    pos: Pos,
    out: Positions,
}

impl Scanner {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += 1;
        if c == '\n' {
            self.pos.line += 1;
            self.pos.col = 1;
        } else {
            self.pos.col += 1;
        }
        Some(c)
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\n' | '\r')) {
            self.bump();
        }
    }

    fn value(&mut self, path: String) {
        self.out.values.insert(path.clone(), self.pos);
        match self.peek() {
            Some('{') => self.object(&path),
            Some('[') => self.array(&path),
            Some('"') => {
                self.string();
            }
            _ => {
                while matches!(self.peek(), Some(c) if !matches!(c, ',' | ']' | '}' | ' ' | '\t' | '\n' | '\r'))
                {
                    self.bump();
                }
            }
        }
    }

    fn object(&mut self, path: &str) {
        self.bump();
        self.ws();
        let mut seen = std::collections::HashSet::new();
        while self.peek() == Some('"') {
            let key_pos = self.pos;
            let key = self.string();
            let child = member(path, &key);
            if !seen.insert(key) {
                self.out.duplicates.push((child.clone(), key_pos));
            }
            self.out.keys.insert(child.clone(), key_pos);
            self.ws();
            self.bump(); // ':'
            self.ws();
            self.value(child);
            self.ws();
            if self.peek() == Some(',') {
                self.bump();
                self.ws();
            }
        }
        self.bump(); // '}'
    }

    fn array(&mut self, path: &str) {
        self.bump();
        self.ws();
        let mut i = 0;
        while !matches!(self.peek(), Some(']') | None) {
            self.value(element(path, i));
            i += 1;
            self.ws();
            if self.peek() == Some(',') {
                self.bump();
                self.ws();
            }
        }
        self.bump(); // ']'
    }

    /// Consumes a string literal and returns its decoded text.
    fn string(&mut self) -> String {
        let start = self.at;
        self.bump();
        while let Some(c) = self.bump() {
            match c {
                '\\' => {
                    self.bump();
                }
                '"' => break,
                _ => {}
            }
        }
        let raw: String = self.chars[start..self.at].iter().collect();
        serde_json::from_str(&raw).unwrap_or(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_nested_values_and_keys() {
        let text = "{\n  \"a\": [1, {\"b\": \"x\\\"y\"}],\n  \"c d\": true,\n  \"a\": 2\n}";
        serde_json::from_str::<serde_json::Value>(text).unwrap();
        let p = Positions::scan(text);
        assert_eq!(p.value("$"), Pos { line: 1, col: 1 });
        assert_eq!(p.key("$.a"), Pos { line: 4, col: 3 });
        assert_eq!(p.value("$.a"), Pos { line: 4, col: 8 });
        assert_eq!(p.value("$.a[1]"), Pos { line: 2, col: 12 });
        assert_eq!(p.value("$.a[1].b"), Pos { line: 2, col: 18 });
        assert_eq!(p.value("$[\"c d\"]"), Pos { line: 3, col: 10 });
        assert_eq!(
            p.duplicates,
            vec![("$.a".to_string(), Pos { line: 4, col: 3 })]
        );
    }
}

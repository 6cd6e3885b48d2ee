//! A task commit's tree, written from its parent's tree with only the directories on the changed
//! paths rewritten (issue 18). libgit2's `git_index_write_tree` reuses unchanged subtrees but then
//! reads the whole written tree back to rebuild the index's tree cache, on every commit: work that
//! grows with the workspace. Here the cost is the changed paths' directories alone, each read at
//! most once (then kept, by path, checked by id) and written whole, as git's trees require
//! (stored, not deflated: see `store`).
//!
//! The tree written is the one `git write-tree` makes from the index after staging, provided the
//! index held the parent's tree before it (the memory's invariant): each changed path takes the
//! index's entry for it, or leaves the tree when the index has none. A name is a file or a
//! directory, never both, as in the index: a file set at a name replaces a directory there, and a
//! directory with entries replaces a file; a directory left empty disappears.

use super::store::write_stored;
use super::{gerr, GitError};
use git2::{ObjectType, Oid, Repository};
use std::collections::BTreeMap;

const TREE_MODE: u32 = 0o040000;

/// One tree entry, as git writes it.
#[derive(Clone)]
struct Entry {
    name: Vec<u8>,
    mode: u32,
    id: Oid,
}

impl Entry {
    fn is_tree(&self) -> bool {
        self.mode == TREE_MODE
    }
}

/// Git's order of tree entries: by name, a directory's name as if it ended in `/`.
fn git_order(name: &[u8], tree: bool, other: &Entry) -> std::cmp::Ordering {
    let a = name.iter().chain(tree.then_some(&b'/'));
    let b = other.name.iter().chain(other.is_tree().then_some(&b'/'));
    a.cmp(b)
}

/// What the index holds at a changed path once staged: an entry (id, mode), or nothing.
pub(super) type Staged = Option<(Oid, u32)>;

/// The changes below one directory.
#[derive(Default)]
struct Node {
    files: BTreeMap<Vec<u8>, Staged>,
    dirs: BTreeMap<Vec<u8>, Node>,
}

/// The entries of the trees last written or read, by directory path (`""` for the root), each
/// with the id it was taken from: the current HEAD's trees along the paths tasks change.
#[derive(Default)]
pub(super) struct Trees {
    known: BTreeMap<Vec<u8>, (Oid, Vec<Entry>)>,
}

impl Trees {
    /// Writes `base` with `changes` (paths relative to the work tree, `/`-separated) applied,
    /// and returns the new tree's id (`base` itself when nothing differs).
    pub(super) fn write<'a>(
        &mut self,
        repo: &Repository,
        base: Oid,
        changes: impl IntoIterator<Item = (&'a [u8], Staged)>,
    ) -> Result<Oid, GitError> {
        let mut root = Node::default();
        for (path, staged) in changes {
            let mut node = &mut root;
            let mut parts = path.split(|b| *b == b'/').filter(|p| !p.is_empty());
            let Some(mut name) = parts.next() else {
                continue;
            };
            for next in parts {
                node = node.dirs.entry(name.to_vec()).or_default();
                name = next;
            }
            node.files.insert(name.to_vec(), staged);
        }
        let mut path = Vec::new();
        match self.write_dir(repo, &mut path, Some(base), &root)? {
            Some(id) => Ok(id),
            // Everything was removed: the empty tree, as `git write-tree` writes it.
            None => write_stored(repo, ObjectType::Tree, &[]),
        }
    }

    /// Writes the directory at `path` (its tree `base`, if any) with `node` applied: `None` when
    /// it ends up empty.
    fn write_dir(
        &mut self,
        repo: &Repository,
        path: &mut Vec<u8>,
        base: Option<Oid>,
        node: &Node,
    ) -> Result<Option<Oid>, GitError> {
        let mut entries = match base {
            Some(id) => self.entries(repo, path, id)?,
            None => Vec::new(),
        };
        let mut changed = false;
        for (name, staged) in &node.files {
            changed |= match staged {
                Some((id, mode)) => set(&mut entries, name, *id, *mode),
                // The index has no entry at a name where a directory may still be: only a file
                // there goes.
                None => find(&entries, name)
                    .filter(|i| !entries[*i].is_tree())
                    .map(|i| entries.remove(i))
                    .is_some(),
            };
        }
        for (name, sub) in &node.dirs {
            let at = find(&entries, name);
            let old = at
                .map(|i| &entries[i])
                .filter(|e| e.is_tree())
                .map(|e| e.id);
            let len = path.len();
            if len > 0 {
                path.push(b'/');
            }
            path.extend_from_slice(name);
            let new = self.write_dir(repo, path, old, sub)?;
            path.truncate(len);
            changed |= match new {
                Some(id) => set(&mut entries, name, id, TREE_MODE),
                // Left empty: the directory goes, a file of that name stays.
                None => at
                    .filter(|_| old.is_some())
                    .map(|i| entries.remove(i))
                    .is_some(),
            };
        }
        if entries.is_empty() {
            self.forget(path);
            return Ok(None);
        }
        let id = match (changed, base) {
            (false, Some(id)) => id,
            _ => write_stored(repo, ObjectType::Tree, &serialize(&entries))?,
        };
        self.known.insert(path.clone(), (id, entries));
        Ok(Some(id))
    }

    /// The entries of tree `id` at `path`: kept from the last write or read when still that
    /// tree, else read. Taken out, to be put back once rewritten.
    fn entries(&mut self, repo: &Repository, path: &[u8], id: Oid) -> Result<Vec<Entry>, GitError> {
        if let Some((known, entries)) = self.known.remove(path) {
            if known == id {
                return Ok(entries);
            }
        }
        let tree = repo.find_tree(id).map_err(gerr("cannot read tree"))?;
        let mut entries: Vec<Entry> = tree
            .iter()
            .map(|e| Entry {
                name: e.name_bytes().to_vec(),
                // Normalised, as the index holds modes (and `git write-tree` writes them).
                mode: e.filemode() as u32,
                id: e.id(),
            })
            .collect();
        entries.sort_by(|a, b| git_order(&a.name, a.is_tree(), b));
        Ok(entries)
    }

    /// Drops what is kept for `path` and every directory below it.
    fn forget(&mut self, path: &[u8]) {
        self.known.remove(path);
        let mut below = path.to_vec();
        if !below.is_empty() {
            below.push(b'/');
        }
        let gone: Vec<Vec<u8>> = self
            .known
            .range(below.clone()..)
            .take_while(|(k, _)| k.starts_with(&below))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.known.remove(&k);
        }
    }
}

/// Where an entry named `name` is (a file or a directory).
fn find(entries: &[Entry], name: &[u8]) -> Option<usize> {
    [false, true].into_iter().find_map(|tree| {
        entries
            .binary_search_by(|e| git_order(name, tree, e).reverse())
            .ok()
    })
}

/// Puts an entry at `name`, replacing whatever was there (a file or a directory). True when
/// that changed anything.
fn set(entries: &mut Vec<Entry>, name: &[u8], id: Oid, mode: u32) -> bool {
    if let Some(i) = find(entries, name) {
        if entries[i].id == id && entries[i].mode == mode {
            return false;
        }
        entries.remove(i);
    }
    let tree = mode == TREE_MODE;
    let at = entries
        .binary_search_by(|e| git_order(name, tree, e).reverse())
        .unwrap_or_else(|i| i);
    entries.insert(
        at,
        Entry {
            name: name.to_vec(),
            mode,
            id,
        },
    );
    true
}

/// A tree object's content: `<octal mode> <name>\0<raw id>` per entry, in git's order.
fn serialize(entries: &[Entry]) -> Vec<u8> {
    use std::io::Write;
    let mut buf = Vec::with_capacity(entries.iter().map(|e| e.name.len() + 28).sum());
    for e in entries {
        write!(buf, "{:o} ", e.mode).expect("writes to a vector");
        buf.extend_from_slice(&e.name);
        buf.push(0);
        buf.extend_from_slice(e.id.as_bytes());
    }
    buf
}

//! The run's workspace and git memory, in process through libgit2.
//!
//! The git directory of the workspace lives in the run's state (`runs/<id>/memory/`) and the
//! workspace holds a `.git` link to it, so the run's commits (the base, then one `task <name>`
//! commit per passing task, each also under `refs/crucible/tasks/<name>`) survive a deleted
//! workspace. Commits carry the engine's own identity, never the machine's git config.

use crucible_pack::LoadedManifest;
use git2::{build::CheckoutBuilder, IndexAddOption, Oid, Repository, Signature, StatusOptions};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

mod store;
mod trees;
mod watch;

/// The base commit's message.
pub const BASE_MESSAGE: &str = "crucible: baseline workspace";

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct GitError {
    pub message: String,
}

fn gerr(context: &str) -> impl Fn(git2::Error) -> GitError + '_ {
    move |e| GitError {
        message: format!("{context}: {}", e.message()),
    }
}

fn ioerr(context: String) -> impl Fn(std::io::Error) -> GitError {
    move |e| GitError {
        message: format!("{context}: {e}"),
    }
}

fn plain(message: String) -> GitError {
    GitError { message }
}

/// The engine's commit identity: `CRUCIBLE_GIT_NAME` / `CRUCIBLE_GIT_EMAIL`, else `crucible`.
fn signature() -> Result<Signature<'static>, GitError> {
    let name = std::env::var("CRUCIBLE_GIT_NAME").unwrap_or_else(|_| "crucible".into());
    let email = std::env::var("CRUCIBLE_GIT_EMAIL").unwrap_or_else(|_| "crucible@localhost".into());
    Signature::now(&name, &email).map_err(gerr("commit identity"))
}

/// Where the workspace goes: `[workspace].dir` below the manifest directory, never the manifest
/// directory itself (the engine deletes and recreates it).
pub fn workspace_path(manifest: &LoadedManifest) -> Result<PathBuf, GitError> {
    let dir = &manifest.manifest.workspace.dir;
    let rel = Path::new(dir);
    let ok = !dir.is_empty()
        && rel.components().all(|c| matches!(c, Component::Normal(_)))
        && rel.components().next().is_some();
    if !ok {
        return Err(plain(format!(
            "[workspace].dir = {dir:?} must be a relative path below the manifest directory, without `..`"
        )));
    }
    Ok(manifest.dir.join(rel))
}

/// What workspace setup reads from the pack, checked without building anything: the workspace
/// directory, `[repo].path`, and every inject's source and destination. Admission calls it, so
/// `check` refuses what setup would.
pub fn preflight(manifest: &LoadedManifest) -> Result<(), GitError> {
    workspace_path(manifest)?;
    repo_source(manifest)?;
    inject_pairs(manifest).map(drop)
}

/// Where `[repo]` is cloned from: its url, or its path resolved below the manifest directory.
/// None without `[repo]`, and with a `setup_cmd`, which replaces the clone (RFC-0001 notes §3:
/// cloning `[repo]` is the default setup).
fn repo_source(manifest: &LoadedManifest) -> Result<Option<String>, GitError> {
    let Some(r) = &manifest.manifest.repo else {
        return Ok(None);
    };
    if manifest.manifest.workspace.setup_cmd.is_some() {
        return Ok(None);
    }
    match (&r.url, &r.path) {
        (Some(url), _) => Ok(Some(url.clone())),
        (None, Some(path)) => {
            let p = manifest.resolve(path);
            let real = p
                .canonicalize()
                .map_err(ioerr(format!("[repo].path {}", p.display())))?;
            Ok(Some(real.to_string_lossy().into_owned()))
        }
        (None, None) => Err(plain("[repo] names no url or path".into())),
    }
}

/// Builds the workspace: clone `[repo]` at `ref` (or start empty), run `setup_cmd`, copy the
/// injects, and make the base commit. Returns the base commit.
pub fn setup(manifest: &LoadedManifest, ws: &Path, memory: &Path) -> Result<Oid, GitError> {
    let injects = inject_pairs(manifest)?;
    if ws.exists() {
        std::fs::remove_dir_all(ws).map_err(ioerr(format!("cannot clear {}", ws.display())))?;
    }
    std::fs::create_dir_all(ws).map_err(ioerr(format!("cannot create {}", ws.display())))?;
    let repo = match (repo_source(manifest)?, &manifest.manifest.repo) {
        (Some(source), Some(r)) => {
            let repo = git2::build::RepoBuilder::new()
                .bare(true)
                .clone(&source, memory)
                .map_err(gerr("cannot clone [repo]"))?;
            attach(&repo, ws)?;
            let target = match &r.git_ref {
                Some(rf) => resolve_ref(&repo, rf)?,
                None => repo
                    .head()
                    .and_then(|h| h.peel_to_commit())
                    .map(|c| c.id())
                    .map_err(gerr("the cloned repository has no HEAD commit"))?,
            };
            repo.set_head_detached(target)
                .map_err(gerr("cannot check out [repo].ref"))?;
            repo.checkout_head(Some(CheckoutBuilder::new().force()))
                .map_err(gerr("cannot check out [repo].ref"))?;
            repo
        }
        _ => {
            let repo = Repository::init_bare(memory).map_err(gerr("cannot create git memory"))?;
            attach(&repo, ws)?;
            repo
        }
    };
    if let Some(cmd) = &manifest.manifest.workspace.setup_cmd {
        run_setup(cmd, &manifest.dir, ws)?;
        // The command builds the workspace itself, perhaps as a repository of its own: the
        // engine keeps its tree and links it to the run's git memory again.
        std::fs::create_dir_all(ws).map_err(ioerr(format!("cannot create {}", ws.display())))?;
        let own = ws.join(".git");
        if own.is_dir() {
            std::fs::remove_dir_all(&own)
                .map_err(ioerr(format!("cannot clear {}", own.display())))?;
        }
        attach(&repo, ws)?;
    }
    for (from, to) in injects {
        let dest = ws.join(&to);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(ioerr(format!("{}", parent.display())))?;
        }
        std::fs::copy(&from, &dest).map_err(ioerr(format!("inject {}", from.display())))?;
    }
    let base = commit_all(&repo, BASE_MESSAGE, true)?.expect("forced commit");
    repo.reference("refs/crucible/base", base, true, "base")
        .map_err(gerr("cannot record the base commit"))?;
    Ok(base)
}

/// Links the workspace to the git directory by a `.git` file only. No `core.worktree` is
/// recorded, so the memory stays readable (`git --git-dir memory log`) once the workspace is
/// gone, and git finds the work tree from the link as it does for any linked checkout.
fn attach(repo: &Repository, ws: &Path) -> Result<(), GitError> {
    repo.set_workdir(ws, false)
        .map_err(gerr("cannot attach the workspace"))?;
    let gitdir = repo
        .path()
        .canonicalize()
        .map_err(ioerr("git memory".into()))?;
    std::fs::write(ws.join(".git"), format!("gitdir: {}\n", gitdir.display()))
        .map_err(ioerr("cannot link the workspace".into()))?;
    // The git directory was made bare; with a work tree it must say so for the git CLI too.
    repo.config()
        .and_then(|mut c| c.set_bool("core.bare", false))
        .map_err(gerr("cannot configure git memory"))
}

fn resolve_ref(repo: &Repository, rf: &str) -> Result<Oid, GitError> {
    for candidate in [
        rf.to_string(),
        format!("refs/heads/{rf}"),
        format!("refs/tags/{rf}"),
        // A clone keeps the source's other branches as remote-tracking refs.
        format!("refs/remotes/origin/{rf}"),
    ] {
        if let Ok(obj) = repo.revparse_single(&candidate) {
            if let Ok(c) = obj.peel_to_commit() {
                return Ok(c.id());
            }
        }
    }
    Err(plain(format!(
        "[repo].ref {rf:?} names no commit in the repository"
    )))
}

fn run_setup(cmd: &str, dir: &Path, ws: &Path) -> Result<(), GitError> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .env("CRUCIBLE_WORKSPACE", ws)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(ioerr("cannot run [workspace].setup_cmd".into()))?;
    if !out.status.success() {
        // Either stream may hold the reason (git writes much of its own to stdout).
        let tail = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            let lines: Vec<&str> = text.lines().rev().take(5).collect();
            match lines.is_empty() {
                true => "(nothing)".to_string(),
                false => lines.into_iter().rev().collect::<Vec<_>>().join(" ⏎ "),
            }
        };
        return Err(plain(format!(
            "[workspace].setup_cmd failed ({}): stdout: {}; stderr: {}",
            out.status,
            tail(&out.stdout),
            tail(&out.stderr)
        )));
    }
    Ok(())
}

/// Each inject's files below the manifest directory and where they go in the workspace
/// (RFC-0001 notes §3): a file, a directory (every regular file below it) or a glob, in sorted
/// order, confined below the manifest directory; an empty source, or one matching nothing, is an
/// error.
fn inject_pairs(manifest: &LoadedManifest) -> Result<Vec<(PathBuf, PathBuf)>, GitError> {
    let root = manifest.dir.canonicalize().map_err(ioerr(format!(
        "manifest directory {}",
        manifest.dir.display()
    )))?;
    let mut all = Vec::new();
    for inj in &manifest.manifest.workspace.inject.0 {
        let src = &inj.src;
        if src.trim().is_empty() {
            return Err(plain(
                "an inject has an empty src: name a file, directory or glob below the manifest directory".into(),
            ));
        }
        let is_glob = src.contains(['*', '?', '[']);
        let mut pairs: Vec<(PathBuf, PathBuf)> = Vec::new();
        let pattern = root.join(src);
        let matches: Vec<PathBuf> = if is_glob {
            glob::glob(&pattern.to_string_lossy())
                .map_err(|e| plain(format!("inject {src:?} is not a valid glob: {e}")))?
                .flatten()
                .collect()
        } else if pattern.exists() {
            vec![pattern.clone()]
        } else {
            Vec::new()
        };
        for m in matches {
            let real = m
                .canonicalize()
                .map_err(ioerr(format!("inject {}", m.display())))?;
            if !real.starts_with(&root) {
                return Err(plain(format!(
                    "inject {src:?} reaches {} outside the manifest directory",
                    real.display()
                )));
            }
            if real.is_dir() {
                for f in files_below(&real)? {
                    let rel_in = f.strip_prefix(&real).expect("below").to_path_buf();
                    let dst = match &inj.dst {
                        Some(d) => PathBuf::from(d).join(&rel_in),
                        None => real.strip_prefix(&root).expect("below").join(&rel_in),
                    };
                    pairs.push((f, dst));
                }
            } else if real.is_file() {
                let dst = match (&inj.dst, is_glob) {
                    (Some(d), true) => PathBuf::from(d).join(real.file_name().expect("a file")),
                    (Some(d), false) => PathBuf::from(d),
                    (None, _) => real.strip_prefix(&root).expect("below").to_path_buf(),
                };
                pairs.push((real, dst));
            }
        }
        if pairs.is_empty() {
            return Err(plain(format!(
                "inject {src:?} matches no file below the manifest directory"
            )));
        }
        pairs.sort();
        if let Some((_, to)) = pairs
            .iter()
            .find(|(_, to)| !to.components().all(|c| matches!(c, Component::Normal(_))))
        {
            return Err(plain(format!(
                "inject destination {} must stay inside the workspace",
                to.display()
            )));
        }
        all.extend(pairs);
    }
    Ok(all)
}

fn files_below(dir: &Path) -> Result<Vec<PathBuf>, GitError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(ioerr(format!("{}", d.display())))? {
            let e = e.map_err(ioerr(format!("{}", d.display())))?;
            let ty = e.file_type().map_err(ioerr(format!("{}", d.display())))?;
            if ty.is_dir() {
                stack.push(e.path());
            } else if ty.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Stages every change in the work tree into the repository's index (kept in memory between
/// calls) and writes its tree. `add_all` is libgit2's `git add -A`: one index-to-workdir diff,
/// untracked files included, each changed path added and each vanished one removed; stat data
/// in the index spares unchanged files their hashing, and the index's tree cache spares
/// unchanged subtrees their rewriting.
fn stage(repo: &Repository) -> Result<Oid, GitError> {
    let mut index = repo.index().map_err(gerr("cannot read the index"))?;
    index
        .add_all(["*"], IndexAddOption::DEFAULT, None)
        .map_err(gerr("cannot stage changes"))?;
    index.write_tree().map_err(gerr("cannot write tree"))
}

/// `git add -A` for `paths` only (files, or directories taken whole), into `index`; returns
/// every path whose index entry it may have changed. Its cost follows what changed rather than
/// the size of the workspace.
///
/// A path that is a file or a symlink, or that is gone, below real directories only, and that
/// was not a directory in the index, is staged directly: added (hashed again, so a rewrite that kept size and mtime is seen
/// too), unless it is untracked and ignored, or removed from the index. Every other path (a
/// directory, or one that was a directory) goes through one index-to-workdir diff limited to
/// those paths, whose deltas are applied exactly as libgit2's `add_all` applies its own diff.
fn stage_paths(
    repo: &Repository,
    index: &mut git2::Index,
    paths: &[PathBuf],
) -> Result<Vec<PathBuf>, GitError> {
    let ws = repo.workdir().expect("attached workspace");
    let mut touched = Vec::new();
    let mut walk = Vec::new();
    // Whether each directory above a path is a real one: a path through a symlink (or below
    // something gone) is not in git's work tree, though opening it may reach a file, so only
    // the diff, whose walk never follows a link, stages what is there.
    let mut real_dirs: std::collections::HashMap<PathBuf, bool> = Default::default();
    let mut under_real_dirs = |p: &Path| {
        p.ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .all(|a| {
                *real_dirs.entry(a.to_path_buf()).or_insert_with(|| {
                    std::fs::symlink_metadata(ws.join(a)).is_ok_and(|m| m.is_dir())
                })
            })
    };
    for p in paths {
        let mut below = p.as_os_str().as_bytes().to_vec();
        below.push(b'/');
        if index.find_prefix(below.as_slice()).is_ok() || !under_real_dirs(p) {
            walk.push(p);
            continue;
        }
        let present = match std::fs::symlink_metadata(ws.join(p)) {
            Ok(m) if m.is_dir() => {
                walk.push(p);
                continue;
            }
            // What git's work tree walk passes over (sockets, fifos, devices) is not there.
            Ok(m) => m.is_file() || m.is_symlink(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            // A parent replaced by a file, or unreadable: the diff decides.
            Err(_) => {
                walk.push(p);
                continue;
            }
        };
        let tracked = index.get_path(p, 0).is_some();
        match (present, tracked) {
            (true, false)
                if repo
                    .is_path_ignored(p)
                    .map_err(gerr("cannot read ignore rules"))? => {}
            (true, _) => index.add_path(p).map_err(gerr("cannot stage changes"))?,
            (false, true) => index.remove_path(p).map_err(gerr("cannot stage changes"))?,
            (false, false) => continue,
        }
        touched.push(p.clone());
    }
    if walk.is_empty() {
        return Ok(touched);
    }
    let mut opts = git2::DiffOptions::new();
    opts.include_typechange(true)
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .disable_pathspec_match(true);
    for p in walk {
        opts.pathspec(p);
    }
    let diff = repo
        .diff_index_to_workdir(Some(index), Some(&mut opts))
        .map_err(gerr("cannot stage changes"))?;
    let deltas: Vec<(bool, PathBuf)> = diff
        .deltas()
        .filter_map(|d| {
            let exists = d.new_file().exists();
            let file = if exists { d.new_file() } else { d.old_file() };
            Some((exists, file.path()?.to_path_buf()))
        })
        .collect();
    drop(diff);
    for (exists, path) in deltas {
        match exists {
            true => index.add_path(&path),
            false => index.remove_path(&path),
        }
        .map_err(gerr("cannot stage changes"))?;
        touched.push(path);
    }
    Ok(touched)
}

/// Stages every change in the work tree and commits it onto HEAD, moving HEAD and writing the
/// index, unless nothing changed (and `force` is off). Returns the new commit.
fn commit_all(repo: &Repository, message: &str, force: bool) -> Result<Option<Oid>, GitError> {
    let tree_id = stage(repo)?;
    save_index(repo)?;
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    if !force && parent.as_ref().is_some_and(|p| p.tree_id() == tree_id) {
        return Ok(None);
    }
    let tree = repo.find_tree(tree_id).map_err(gerr("cannot read tree"))?;
    let sig = signature()?;
    let parents: Vec<&git2::Commit> = parent.iter().collect();
    let oid = repo
        .commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)
        .map_err(gerr("cannot commit"))?;
    Ok(Some(oid))
}

fn save_index(repo: &Repository) -> Result<(), GitError> {
    repo.index()
        .and_then(|mut i| i.write())
        .map_err(gerr("cannot write the index"))
}

/// RFC-0002:C-PLAYBOOK-RESUME: commits the declared files a resume put back into the rebuilt
/// workspace as part of its starting state, so that a failing task's discard keeps them and no
/// task's commit claims them. Returns the commit, or `None` when nothing was restored.
pub fn commit_restored(ws: &Path) -> Result<Option<Oid>, GitError> {
    let repo = Repository::open(ws).map_err(gerr("cannot open git memory"))?;
    commit_all(
        &repo,
        "crucible: declared files of folded tasks, restored on resume",
        false,
    )
}

/// The run's git memory, opened once: every task's git work goes through this one handle (one
/// at a time), so no task pays for reopening the repository, rereading the index or rewriting
/// files that only describe the current state.
///
/// A task commit creates its objects and its task ref, nothing else: HEAD and the index are
/// kept here and saved every [`SAVE_EVERY`] commits and by [`Memory::finish`] at the end of the
/// run. Each save replaces a file (a lock file renamed over it), and file replacement is what
/// the kernel charges most for when it comes thousands of times a minute. Neither file is
/// needed to resume a run killed between saves (resumption rebuilds the workspace and HEAD
/// from the start commit, and a rerun reads the task refs), and an index older than the work
/// tree only means more files are hashed again, never that a change is missed.
pub struct Memory(std::sync::Mutex<Held>);

struct Held {
    repo: Repository,
    /// The commit the next task commit goes onto: HEAD as last saved, or newer.
    head: Oid,
    /// Task commits since HEAD and the index were last saved.
    unsaved: u32,
    /// Task commits since the loose objects were last packed.
    unpacked: u32,
    /// What changed in the workspace since the last commit; `None` when the kernel cannot
    /// say, and then every commit walks the whole work tree.
    watch: Option<watch::Watch>,
    /// The trees along the paths tasks change, kept from one commit to the next.
    trees: trees::Trees,
}

/// How many task commits may pass between saves of HEAD and the index. Between saves every
/// file written since the last one is "racily clean" for git (not older than the index file),
/// so it is hashed again by each commit: the bound keeps that work small and constant.
const SAVE_EVERY: u32 = 32;

/// How many task commits may leave their objects loose before they are packed. A loose
/// object is a whole compressed file (a 4 KiB block at least, and a flat directory's tree is
/// rewritten whole by every commit); packed, each is a delta against a similar one. Packing
/// costs in proportion to what it packs, so a fixed interval keeps it linear in the run.
const PACK_EVERY: u32 = 256;

/// `0` turns the workspace watch off: every task commit then walks the whole work tree.
const WATCH_ENV: &str = "CRUCIBLE_GIT_WATCH";

impl Memory {
    /// Opens the memory through the workspace's `.git` link, which names the work tree.
    pub fn open(ws: &Path) -> Result<Memory, GitError> {
        // Every tree and commit the memory writes names objects it wrote itself a moment
        // before: checking that each exists (one file lookup per entry, so a whole tree's
        // worth per commit) is work that grows with the workspace and proves nothing.
        git2::opts::strict_object_creation(false);
        // Nor is hashing every object read back to check its id: packing reads every loose
        // object the memory wrote since the last pack (a flat directory's tree whole, each time).
        git2::opts::strict_hash_verification(false);
        let repo = Repository::open(ws).map_err(gerr("cannot open git memory"))?;
        window_of_one(&repo)?;
        let head = repo
            .head()
            .and_then(|h| h.peel_to_commit())
            .map_err(gerr("the git memory has no HEAD commit"))?
            .id();
        // A workspace that changes by other ways than its own directory entries (a network
        // file system another machine writes) can be staged by whole-tree passes instead.
        let watched = std::env::var_os(WATCH_ENV).is_none_or(|v| v != "0");
        let watch = repo
            .workdir()
            .filter(|_| watched)
            .and_then(watch::Watch::start);
        Ok(Memory(std::sync::Mutex::new(Held {
            repo,
            head,
            unsaved: 0,
            unpacked: 0,
            watch,
            trees: trees::Trees::default(),
        })))
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        // A panic mid-operation leaves nothing half-done in memory that the next one relies on.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits a passing task's changes as `task <name>` and records them as its commit set.
    pub fn commit_task(&self, task: &str) -> Result<Option<Oid>, GitError> {
        self.held().commit_task(task)
    }

    /// The commit the next task commit goes onto.
    pub fn head(&self) -> Oid {
        self.held().head
    }

    pub fn discard(&self) -> Result<(), GitError> {
        self.held().discard()
    }

    /// Writes HEAD's tree into `dir` (created); returns HEAD.
    pub fn checkout_to(&self, dir: &Path) -> Result<Oid, GitError> {
        let held = self.held();
        checkout_to(&held.repo, held.head, dir)?;
        Ok(held.head)
    }

    /// How many files HEAD's tree holds and their total size (from the index, which holds
    /// HEAD's tree between commits).
    pub fn head_weight(&self) -> Result<(usize, u64), GitError> {
        let held = self.held();
        let index = held.repo.index().map_err(gerr("cannot read the index"))?;
        Ok((
            index.len(),
            index.iter().map(|e| u64::from(e.file_size)).sum(),
        ))
    }

    /// Moves `dir`, which holds exactly `from`'s tree (a checkout nothing else writes), to
    /// HEAD's tree by writing only the paths that differ; returns HEAD.
    pub fn advance_checkout(&self, dir: &Path, from: Oid) -> Result<Oid, GitError> {
        let held = self.held();
        advance_checkout(&held.repo, from, held.head, dir)?;
        Ok(held.head)
    }

    /// Packs the loose objects and writes HEAD and the index as the last commit left them, so
    /// the memory is small and the git CLI sees the run's history and a clean work tree. The
    /// run calls it when it ends.
    pub fn finish(&self) -> Result<(), GitError> {
        let mut held = self.held();
        held.pack()?;
        held.save()
    }
}

impl Held {
    /// Stages what changed since the last commit (the paths the watch names, or everything) and
    /// writes the tree to commit. None when nothing can have changed.
    fn stage_changes(&mut self) -> Result<Option<Oid>, GitError> {
        let changed = match &mut self.watch {
            Some(w) => w.take(),
            None => watch::Changed::Everything,
        };
        let everything = matches!(changed, watch::Changed::Everything);
        let staged = match &changed {
            watch::Changed::Paths(p) if p.is_empty() => Ok(None),
            watch::Changed::Paths(p) => self.stage_paths(p).map(Some),
            watch::Changed::Everything => stage(&self.repo).map(Some),
        };
        if let Some(w) = &mut self.watch {
            if staged.is_err() {
                w.spoil();
            } else if !w.settle(everything) {
                self.watch = None;
            }
        }
        staged
    }

    /// Stages `paths` and writes HEAD's tree with their new index entries: the index, which
    /// held HEAD's tree, then holds the written one, so the invariant holds for the next commit.
    fn stage_paths(&mut self, paths: &[PathBuf]) -> Result<Oid, GitError> {
        let repo = &self.repo;
        let mut index = repo.index().map_err(gerr("cannot read the index"))?;
        let touched = stage_paths(repo, &mut index, paths)?;
        let base = repo
            .find_commit(self.head)
            .map_err(gerr("cannot read HEAD"))?
            .tree_id();
        let changes: Vec<(&[u8], trees::Staged)> = touched
            .iter()
            .map(|p| {
                let entry = index.get_path(p, 0).map(|e| (e.id, e.mode));
                (p.as_os_str().as_bytes(), entry)
            })
            .collect();
        self.trees.write(repo, base, changes)
    }

    fn commit_task(&mut self, task: &str) -> Result<Option<Oid>, GitError> {
        let Some(tree_id) = self.stage_changes()? else {
            return Ok(None);
        };
        let repo = &self.repo;
        let parent = repo
            .find_commit(self.head)
            .map_err(gerr("cannot read HEAD"))?;
        if parent.tree_id() == tree_id {
            return Ok(None);
        }
        drop(parent);
        let oid = write_commit(
            repo,
            tree_id,
            self.head,
            &signature()?,
            &format!("task {task}"),
        )?;
        repo.reference(&task_ref(task), oid, true, "task commit")
            .map_err(gerr("cannot record the task's commit"))?;
        self.head = oid;
        self.unsaved += 1;
        if self.unsaved >= SAVE_EVERY {
            self.save()?;
        }
        self.unpacked += 1;
        if self.unpacked >= PACK_EVERY {
            self.pack()?;
        }
        Ok(Some(oid))
    }

    /// Packs the loose objects and folds the task refs into `packed-refs`.
    fn pack(&mut self) -> Result<(), GitError> {
        pack_loose(&self.repo)?;
        store::pack_task_refs(&self.repo)?;
        self.unpacked = 0;
        Ok(())
    }

    fn save(&mut self) -> Result<(), GitError> {
        save_index(&self.repo)?;
        move_head(&self.repo, self.head)?;
        self.unsaved = 0;
        Ok(())
    }

    /// Throws away every uncommitted change in the work tree: tracked files back to the last
    /// commit, untracked files and directories removed (ignored ones are left, as
    /// `git clean -fd` leaves them). The reset saves HEAD and the index as a side effect.
    fn discard(&mut self) -> Result<(), GitError> {
        let repo = &self.repo;
        let head = repo
            .find_object(self.head, Some(git2::ObjectType::Commit))
            .map_err(gerr("cannot read HEAD"))?;
        repo.reset(&head, git2::ResetType::Hard, None)
            .map_err(gerr("cannot reset the workspace"))?;
        self.unsaved = 0;
        let ws = repo.workdir().expect("attached workspace").to_path_buf();
        let mut opts = StatusOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(false);
        let statuses = repo
            .statuses(Some(&mut opts))
            .map_err(gerr("cannot list untracked files"))?;
        for s in statuses.iter() {
            if !s.status().contains(git2::Status::WT_NEW) {
                continue;
            }
            let Some(path) = s.path() else { continue };
            let p = ws.join(path);
            let removed = if p.is_dir() && !p.is_symlink() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            removed.map_err(ioerr(format!("cannot remove {}", p.display())))?;
        }
        Ok(())
    }
}

/// Writes a commit of `tree` onto `parent`, as `git_commit_create` writes it, straight to the
/// object database (stored, as trees are: see `store`): libgit2's own call takes the tree as an object, which means reading back
/// (inflating, hashing and parsing) the root tree just written, on every commit.
fn write_commit(
    repo: &Repository,
    tree: Oid,
    parent: Oid,
    sig: &Signature<'_>,
    message: &str,
) -> Result<Oid, GitError> {
    use std::io::Write;
    let mut buf = Vec::with_capacity(256 + message.len());
    let when = sig.when();
    let offset = when.offset_minutes();
    let sign = if offset < 0 || when.sign() == '-' {
        '-'
    } else {
        '+'
    };
    let (hours, mins) = (offset.abs() / 60, offset.abs() % 60);
    write!(buf, "tree {tree}\nparent {parent}\n").expect("writes to a vector");
    for role in ["author", "committer"] {
        write!(buf, "{role} ").expect("writes to a vector");
        buf.extend_from_slice(sig.name_bytes());
        buf.extend_from_slice(b" <");
        buf.extend_from_slice(sig.email_bytes());
        writeln!(buf, "> {} {sign}{hours:02}{mins:02}", when.seconds())
            .expect("writes to a vector");
    }
    buf.push(b'\n');
    buf.extend_from_slice(message.as_bytes());
    store::write_stored(repo, git2::ObjectType::Commit, &buf)
}

/// Sets the memory's `pack.windowMemory` to one byte, which leaves the pack builder one delta
/// candidate per object (the next larger object of its kind; it always keeps one) instead of
/// ten. The objects packed are mostly successive versions of the same trees, each best
/// delta-compressed against the one before it, so the pack is about as small, and the delta
/// search, which tried every object against ten others of its size, no longer grows tenfold
/// with the size of a rewritten directory. It applies to `git gc` on the memory as well.
fn window_of_one(repo: &Repository) -> Result<(), GitError> {
    const KEY: &str = "pack.windowMemory";
    let mut config = repo.config().map_err(gerr("cannot configure git memory"))?;
    if config.get_i64(KEY).ok() == Some(1) {
        return Ok(());
    }
    config
        .set_i64(KEY, 1)
        .map_err(gerr("cannot configure git memory"))
}

/// Moves every loose object into one new pack, delta-compressed by libgit2's pack builder,
/// then removes the loose copies. Crash-safe at every point: the pack and its index are
/// complete (written under temporary names and renamed) before any loose object is removed,
/// and an object both loose and packed is just found twice. The fan-out directories stay, so
/// the next loose objects need no `mkdir`.
fn pack_loose(repo: &Repository) -> Result<(), GitError> {
    let objects = repo.path().join("objects");
    let mut loose = Vec::new();
    for dir in std::fs::read_dir(&objects).map_err(ioerr("git objects".into()))? {
        let dir = dir.map_err(ioerr("git objects".into()))?;
        let fan = dir.file_name().to_string_lossy().into_owned();
        if fan.len() != 2 || !fan.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        for file in std::fs::read_dir(dir.path()).map_err(ioerr("git objects".into()))? {
            let file = file.map_err(ioerr("git objects".into()))?;
            let rest = file.file_name().to_string_lossy().into_owned();
            // Anything else here (a temporary file a crash left) is not an object.
            let oid = Oid::from_str(&format!("{fan}{rest}")).ok();
            if let Some(oid) = oid.filter(|_| rest.len() == 38) {
                loose.push((oid, file.path()));
            }
        }
    }
    if loose.is_empty() {
        return Ok(());
    }
    let mut builder = repo.packbuilder().map_err(gerr("cannot pack objects"))?;
    for (oid, _) in &loose {
        builder
            .insert_object(*oid, None)
            .map_err(gerr("cannot pack objects"))?;
    }
    builder
        .write(&objects.join("pack"), 0)
        .map_err(gerr("cannot write a pack"))?;
    for (_, path) in &loose {
        std::fs::remove_file(path).map_err(ioerr(format!("cannot remove {}", path.display())))?;
    }
    Ok(())
}

/// Points HEAD (the branch it names, or HEAD itself when detached) at `commit`, unless it is
/// there already.
fn move_head(repo: &Repository, commit: Oid) -> Result<(), GitError> {
    let head = repo
        .find_reference("HEAD")
        .map_err(gerr("cannot read HEAD"))?;
    if head.resolve().ok().and_then(|r| r.target()) == Some(commit) {
        return Ok(());
    }
    match head.symbolic_target() {
        Some(branch) => repo
            .reference(branch, commit, true, "crucible: task commits")
            .map(drop),
        None => repo.set_head_detached(commit),
    }
    .map_err(gerr("cannot move HEAD"))
}

/// The ref holding a task's commit set; names that are not valid ref components are hex-encoded.
pub fn task_ref(task: &str) -> String {
    let plain = format!("refs/crucible/tasks/{task}");
    if git2::Reference::is_valid_name(&plain) {
        plain
    } else {
        format!("refs/crucible/tasks/x-{}", hex::encode(task))
    }
}

/// Writes `head`'s tree into `dir`: a disposable worktree for an isolated task.
fn checkout_to(repo: &Repository, head: Oid, dir: &Path) -> Result<(), GitError> {
    std::fs::create_dir_all(dir).map_err(ioerr(format!("{}", dir.display())))?;
    let tree = repo
        .find_commit(head)
        .and_then(|c| c.into_object().peel(git2::ObjectType::Tree))
        .map_err(gerr("no HEAD tree"))?;
    repo.checkout_tree(
        &tree,
        Some(
            CheckoutBuilder::new()
                .force()
                .target_dir(dir)
                .update_index(false),
        ),
    )
    .map_err(gerr("cannot write the isolated worktree"))
}

/// Moves `dir` from `from`'s tree to `to`'s: what `to` lacks is removed first (with the
/// directories that leaves empty, which no checkout holds), then libgit2 writes the paths that
/// were added or changed, with the same filters and modes as a whole checkout.
fn advance_checkout(repo: &Repository, from: Oid, to: Oid, dir: &Path) -> Result<(), GitError> {
    let tree = |commit: Oid| {
        repo.find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(gerr("no commit tree"))
    };
    let (old, new) = (tree(from)?, tree(to)?);
    let diff = repo
        .diff_tree_to_tree(Some(&old), Some(&new), None)
        .map_err(gerr("cannot compare the trees"))?;
    let mut written = CheckoutBuilder::new();
    written
        .force()
        .target_dir(dir)
        .update_index(false)
        .disable_pathspec_match(true);
    let mut any = false;
    for delta in diff.deltas() {
        let status = delta.status();
        // A changed mode or type is written afresh, not over the old entry.
        let replaced = match status {
            git2::Delta::Deleted | git2::Delta::Typechange => true,
            git2::Delta::Modified => delta.old_file().mode() != delta.new_file().mode(),
            _ => false,
        };
        if let Some(path) = delta.old_file().path().filter(|_| replaced) {
            remove_checked_out(dir, path)?;
        }
        if let Some(path) = delta
            .new_file()
            .path()
            .filter(|_| status != git2::Delta::Deleted)
        {
            written.path(path);
            any = true;
        }
    }
    if any {
        repo.checkout_tree(new.as_object(), Some(&mut written))
            .map_err(gerr("cannot update the kept checkout"))?;
    }
    Ok(())
}

/// Removes the checked-out `path` below `dir` and every parent directory that leaves empty.
fn remove_checked_out(dir: &Path, path: &Path) -> Result<(), GitError> {
    let full = dir.join(path);
    let removed = match std::fs::symlink_metadata(&full) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&full),
        Ok(_) => std::fs::remove_file(&full),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    removed.map_err(ioerr(format!("cannot remove {}", full.display())))?;
    let mut parent = path.parent();
    while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
        // Not empty (or already gone): the directories above it stay as they are.
        if std::fs::remove_dir(dir.join(p)).is_err() {
            break;
        }
        parent = p.parent();
    }
    Ok(())
}

/// The ref a rerun leaves on the commit its replay ended on: the start a resumption of that
/// rerun rebuilds from (for a fresh run the base is the start).
const START_REF: &str = "refs/crucible/start";
/// Where a rerun fetches its parent's refs while replaying them.
const PARENT_REFS: &str = "refs/crucible/parent/";

/// RFC-0002:C-PLAYBOOK-RESUME: rebuilds an interrupted run's workspace as the pristine
/// checkout, from the git memory the run kept (its start commit), never as any task left it.
/// The memory keeps every commit the run made before the interruption (a later rerun replays
/// them); the workspace and HEAD go back to the start. Returns the start commit.
pub fn reopen(ws: &Path, memory: &Path) -> Result<Oid, GitError> {
    if ws.exists() {
        std::fs::remove_dir_all(ws).map_err(ioerr(format!("cannot clear {}", ws.display())))?;
    }
    std::fs::create_dir_all(ws).map_err(ioerr(format!("cannot create {}", ws.display())))?;
    // A git write the interruption cut short leaves its lock behind; the interrupted engine
    // was the memory's only writer, so every lock in it is stale.
    let locks = files_below(memory)?;
    for lock in locks
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "lock"))
    {
        std::fs::remove_file(lock).map_err(ioerr(format!("cannot remove {}", lock.display())))?;
    }
    let repo = Repository::open_bare(memory).map_err(gerr("cannot open the run's git memory"))?;
    attach(&repo, ws)?;
    let start = [START_REF, "refs/crucible/base"]
        .iter()
        .find_map(|r| repo.refname_to_id(r).ok())
        .ok_or_else(|| plain("the run's git memory has no base commit".into()))?;
    check_out(&repo, start)?;
    Ok(start)
}

/// Points HEAD at `commit` and makes the index and the work tree match it.
fn check_out(repo: &Repository, commit: Oid) -> Result<(), GitError> {
    repo.set_head_detached(commit)
        .map_err(gerr("cannot move HEAD"))?;
    let obj = repo
        .find_object(commit, None)
        .map_err(gerr("cannot read the start commit"))?;
    repo.reset(
        &obj,
        git2::ResetType::Hard,
        Some(CheckoutBuilder::new().force()),
    )
    .map_err(gerr("cannot check out the start commit"))
}

/// Why a rerun's replay could not be done; every kind refuses the rerun.
#[derive(Debug)]
pub enum ReplayError {
    /// The parent's start commit is not in its git memory.
    StartUnavailable(String),
    /// A reused task's commit set did not apply onto what came before it.
    Conflict(String),
    Git(GitError),
}

impl From<GitError> for ReplayError {
    fn from(e: GitError) -> ReplayError {
        ReplayError::Git(e)
    }
}

/// RFC-0002:C-PLAYBOOK-RERUN: fetches the parent's git memory into the rerun's, moves the
/// workspace to the parent's start commit (`start`, or the rerun's own base when `None`: a
/// workspace with no repository starts from its own injected files), and replays onto it, in
/// the given order (the parent's settle order), the commit set each reused task contributed.
/// The replayed commits become the rerun's own task commits; the commit replay ended on is
/// recorded as the run's start. Returns the base the replay started from.
pub fn replay(
    ws: &Path,
    parent_memory: &Path,
    start: Option<&str>,
    reused: &[String],
) -> Result<Oid, ReplayError> {
    let repo = Repository::open(ws).map_err(gerr("cannot open git memory"))?;
    let url = parent_memory.canonicalize().map_err(ioerr(format!(
        "parent git memory {}",
        parent_memory.display()
    )))?;
    repo.remote_anonymous(&url.to_string_lossy())
        .and_then(|mut r| r.fetch(&[format!("+refs/crucible/*:{PARENT_REFS}*")], None, None))
        .map_err(gerr("cannot read the parent's git memory"))?;
    let base = match start {
        Some(s) => {
            let oid = Oid::from_str(s)
                .ok()
                .filter(|o| repo.find_commit(*o).is_ok())
                .ok_or_else(|| ReplayError::StartUnavailable(s.to_string()))?;
            check_out(&repo, oid)?;
            repo.reference("refs/crucible/base", oid, true, "the parent's start")
                .map_err(gerr("cannot record the base commit"))?;
            oid
        }
        None => repo
            .refname_to_id("refs/crucible/base")
            .map_err(gerr("no base commit"))?,
    };
    let mut head = base;
    let sig = signature()?;
    for task in reused {
        let theirs = task_ref(task).replacen("refs/crucible/", PARENT_REFS, 1);
        let Ok(oid) = repo.refname_to_id(&theirs) else {
            // The task passed without changing the workspace: it has no commit set.
            continue;
        };
        let commit = repo
            .find_commit(oid)
            .map_err(gerr("cannot read a task commit"))?;
        let onto = repo.find_commit(head).map_err(gerr("cannot read HEAD"))?;
        let mut index = repo
            .cherrypick_commit(&commit, &onto, 0, None)
            .map_err(|e| ReplayError::Conflict(format!("task {task}: {}", e.message())))?;
        if index.has_conflicts() {
            let paths: Vec<String> = index
                .conflicts()
                .map(|c| {
                    c.flatten()
                        .filter_map(|c| c.our.or(c.their).or(c.ancestor))
                        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
                        .collect()
                })
                .unwrap_or_default();
            return Err(ReplayError::Conflict(format!(
                "task {task}'s commit conflicts at {}",
                paths.join(", ")
            )));
        }
        let tree_id = index
            .write_tree_to(&repo)
            .map_err(gerr("cannot write tree"))?;
        let tree = repo.find_tree(tree_id).map_err(gerr("cannot read tree"))?;
        head = repo
            .commit(None, &sig, &sig, &format!("task {task}"), &tree, &[&onto])
            .map_err(gerr("cannot commit a replayed task"))?;
        repo.reference(&task_ref(task), head, true, "replayed task commit")
            .map_err(gerr("cannot record a replayed task's commit"))?;
    }
    check_out(&repo, head)?;
    repo.reference(START_REF, head, true, "the rerun's start")
        .map_err(gerr("cannot record the start"))?;
    // The parent's refs were only the source of the replay; its memory keeps them.
    let fetched: Vec<String> = repo
        .references_glob(&format!("{PARENT_REFS}*"))
        .map_err(gerr("cannot list fetched refs"))?
        .flatten()
        .filter_map(|r| r.name().map(str::to_string))
        .collect();
    for name in fetched {
        if let Ok(mut r) = repo.find_reference(&name) {
            let _ = r.delete();
        }
    }
    Ok(base)
}

#[cfg(test)]
mod commit_contents;

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(dir: &Path, body: &str) -> LoadedManifest {
        let p = dir.join("crucible.toml");
        std::fs::write(&p, body).unwrap();
        crucible_pack::load(&p).unwrap()
    }

    // RFC-0002:C-PLAYBOOK-LANE: commits when and only when a task passes.
    #[test]
    fn empty_workspace_base_commit_then_task_commit_and_discard() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(d.join("seed.txt"), "seed").unwrap();
        let m = manifest(
            d,
            "[workflow]\ntype = \"playbook\"\n[workspace]\ninject = \"seed.txt\"\n",
        );
        let ws = workspace_path(&m).unwrap();
        let mem = d.join("memory");
        setup(&m, &ws, &mem).unwrap();
        let memory = Memory::open(&ws).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("seed.txt")).unwrap(),
            "seed"
        );
        std::fs::write(ws.join("a.txt"), "a").unwrap();
        assert!(memory.commit_task("a").unwrap().is_some());
        assert!(memory.commit_task("noop").unwrap().is_none());
        std::fs::write(ws.join("seed.txt"), "changed").unwrap();
        std::fs::create_dir_all(ws.join("junk/deep")).unwrap();
        std::fs::write(ws.join("junk/deep/x"), "x").unwrap();
        memory.discard().unwrap();
        memory.finish().unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("seed.txt")).unwrap(),
            "seed"
        );
        assert!(!ws.join("junk").exists());
        let repo = Repository::open(&mem).unwrap();
        let head = repo.head().unwrap().peel_to_commit().unwrap();
        assert_eq!(head.message(), Some("task a"));
        assert_eq!(head.author().name(), Some("crucible"));
        let iso = d.join("iso");
        memory.checkout_to(&iso).unwrap();
        assert!(iso.join("a.txt").exists() && !iso.join(".git").exists());
    }
}

//! RFC-0002:C-PLAYBOOK-LANE: what a passing task's commit holds. Whatever the engine does to
//! make a commit cheap, its tree must be exactly the tree `git add -A && git write-tree` by the
//! git CLI makes from the same workspace state, starting from the index of the commit before it.
//! Each step below runs straight after the one before (no sleeps), so same-second rewrites that
//! a stat cache could miss are exercised too. Isolated checkouts must hold HEAD's tree exactly
//! and nothing done in one may reach the shared workspace or the memory.

use super::*;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::process::Command;

struct Fixture {
    tmp: tempfile::TempDir,
    ws: PathBuf,
    mem: PathBuf,
    memory: Memory,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("crucible.toml");
    std::fs::write(&p, "[workflow]\ntype = \"playbook\"\n").unwrap();
    let m = crucible_pack::load(&p).unwrap();
    let ws = workspace_path(&m).unwrap();
    let mem = tmp.path().join("memory");
    setup(&m, &ws, &mem).unwrap();
    let memory = Memory::open(&ws).unwrap();
    Fixture {
        tmp,
        ws,
        mem,
        memory,
    }
}

/// The git CLI on the run's git directory, with no user or system config, and its own index.
fn git(f: &Fixture, work_tree: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(&f.mem)
        .arg("--work-tree")
        .arg(work_tree)
        .args(args)
        .env("GIT_INDEX_FILE", f.tmp.path().join("cli-index"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", f.tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The tree the git CLI stages from `work_tree`, starting from `parent`'s tree in a fresh index.
fn cli_tree(f: &Fixture, work_tree: &Path, parent: Oid) -> Oid {
    let _ = std::fs::remove_file(f.tmp.path().join("cli-index"));
    git(f, work_tree, &["read-tree", &parent.to_string()]);
    git(f, work_tree, &["add", "-A"]);
    Oid::from_str(&git(f, work_tree, &["write-tree"])).unwrap()
}

fn head(f: &Fixture) -> Oid {
    f.memory.head()
}

fn tree_of(f: &Fixture, commit: Oid) -> Oid {
    let repo = Repository::open_bare(&f.mem).unwrap();
    let id = repo.find_commit(commit).unwrap().tree_id();
    id
}

/// Changes the workspace as a task would, commits, and compares with the CLI's tree.
fn step(f: &Fixture, name: &str, change: impl FnOnce(&Path)) {
    let parent = head(f);
    change(&f.ws);
    let committed = f.memory.commit_task(name).unwrap();
    let expected = cli_tree(f, &f.ws, parent);
    let got = tree_of(f, committed.unwrap_or(parent));
    assert_eq!(
        got, expected,
        "step {name}: the commit's tree is not `git add -A`'s"
    );
    assert_eq!(
        committed.is_some(),
        expected != tree_of(f, parent),
        "step {name}: committed exactly when something changed"
    );
    if let Some(c) = committed {
        let repo = Repository::open_bare(&f.mem).unwrap();
        assert_eq!(repo.refname_to_id(&task_ref(name)).unwrap(), c);
        assert_eq!(repo.find_commit(c).unwrap().parent_id(0).unwrap(), parent);
    }
    assert_index_is_head(f, name);
}

/// The memory's invariant, which lets a commit write its tree from its parent's: after every
/// commit (and every discard) the index holds exactly HEAD's tree, entry for entry.
fn assert_index_is_head(f: &Fixture, name: &str) {
    let held = f.memory.held();
    let mut from_index: Vec<(Vec<u8>, Oid, u32)> = held
        .repo
        .index()
        .unwrap()
        .iter()
        .map(|e| (e.path, e.id, e.mode))
        .collect();
    let tree = held.repo.find_commit(held.head).unwrap().tree().unwrap();
    let mut from_tree = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |dir, e| {
        if e.kind() != Some(git2::ObjectType::Tree) {
            let path = [dir.as_bytes(), e.name_bytes()].concat();
            from_tree.push((path, e.id(), e.filemode() as u32));
        }
        git2::TreeWalkResult::Ok
    })
    .unwrap();
    from_index.sort();
    from_tree.sort();
    assert!(
        from_index == from_tree,
        "step {name}: the index is not HEAD's tree"
    );
}

fn write(p: &Path, body: &str) {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(p, body).unwrap();
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A base most steps change: files at several depths, an executable, symlinks, ignore rules
/// with ignored files present, and an empty directory.
fn seed(ws: &Path) {
    write(&ws.join("a.txt"), "aaaa");
    write(&ws.join("b.txt"), "b");
    write(&ws.join("dir/c.txt"), "c");
    write(&ws.join("dir/sub/d.txt"), "d");
    write(&ws.join("tool.sh"), "#!/bin/sh\n");
    symlink("a.txt", ws.join("link")).unwrap();
    symlink("dir", ws.join("dirlink")).unwrap();
    write(&ws.join(".gitignore"), "*.log\nbuild/\n");
    write(&ws.join("keep.log"), "ignored");
    write(&ws.join("build/out.o"), "ignored");
    std::fs::create_dir_all(ws.join("empty")).unwrap();
}

#[test]
fn shared_workspace_commits_what_git_add_all_stages() {
    let f = fixture();
    step(&f, "seed", seed);
    step(&f, "same-size rewrite", |ws| {
        write(&ws.join("a.txt"), "bbbb")
    });
    step(&f, "append in place", |ws| {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(ws.join("dir/c.txt"))
            .unwrap();
        file.write_all(b" more").unwrap();
    });
    step(&f, "same size, mtime put back", |ws| {
        let p = ws.join("a.txt");
        let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
        write(&p, "cccc");
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
    });
    step(&f, "delete", |ws| {
        std::fs::remove_file(ws.join("b.txt")).unwrap()
    });
    step(&f, "rename", |ws| {
        std::fs::rename(ws.join("dir/sub/d.txt"), ws.join("dir/e.txt")).unwrap()
    });
    step(&f, "chmod +x", |ws| chmod(&ws.join("tool.sh"), 0o755));
    step(&f, "chmod -x", |ws| chmod(&ws.join("tool.sh"), 0o644));
    step(&f, "file to directory", |ws| {
        std::fs::remove_file(ws.join("a.txt")).unwrap();
        write(&ws.join("a.txt/inner.txt"), "inner");
    });
    step(&f, "directory to file", |ws| {
        std::fs::remove_dir_all(ws.join("dir")).unwrap();
        write(&ws.join("dir"), "now a file");
    });
    step(&f, "ignored files only", |ws| {
        write(&ws.join("keep.log"), "still ignored");
        write(&ws.join("new.log"), "ignored");
        write(&ws.join("build/deep/x.o"), "ignored");
    });
    step(&f, "tracked file becomes ignored, then changes", |ws| {
        write(&ws.join(".gitignore"), "*.log\nbuild/\ntool.sh\n");
        write(&ws.join("tool.sh"), "#!/bin/sh\nexit 0\n");
    });
    step(&f, "symlinks retargeted and replaced", |ws| {
        std::fs::remove_file(ws.join("link")).unwrap();
        symlink("nowhere", ws.join("link")).unwrap();
        std::fs::remove_file(ws.join("dirlink")).unwrap();
        write(&ws.join("dirlink"), "a file now");
        symlink("a.txt/inner.txt", ws.join("newlink")).unwrap();
    });
    step(&f, "file replaced by a symlink", |ws| {
        std::fs::remove_file(ws.join("dir")).unwrap();
        symlink("tool.sh", ws.join("dir")).unwrap();
    });
    step(&f, "empty directories only", |ws| {
        std::fs::create_dir_all(ws.join("e1/e2/e3")).unwrap();
    });
    step(&f, "nested new file under an empty directory", |ws| {
        write(&ws.join("e1/e2/e3/deep.txt"), "deep");
        write(&ws.join("n/o/p/q/r.txt"), "r");
    });
    step(&f, "nothing", |_| {});
    step(&f, "many at once", |ws| {
        for i in 0..60 {
            write(&ws.join(format!("many/{}/f{i}.txt", i % 7)), &i.to_string());
        }
        std::fs::remove_dir_all(ws.join("n")).unwrap();
        std::fs::remove_file(ws.join("many/3/f3.txt")).unwrap();
        chmod(&ws.join("many/4/f4.txt"), 0o755);
    });
    step(&f, "a whole directory deleted", |ws| {
        std::fs::remove_dir_all(ws.join("many")).unwrap()
    });
}

/// A commit's tree is written from its parent's, rewriting only the directories on the changed
/// paths: the edges of that rewrite, each against `git add -A`.
#[test]
fn trees_rewritten_from_the_parent_commit_what_git_add_all_stages() {
    let f = fixture();
    step(&f, "a large tree", |ws| {
        for d in 0..12 {
            for i in 0..40 {
                write(
                    &ws.join(format!("big/d{d:02}/f{i:02}.txt")),
                    &format!("{d} {i}"),
                );
            }
        }
        write(&ws.join("big/d07/e/f/g/h.txt"), "deep");
        write(&ws.join("solo/only.txt"), "only");
        write(&ws.join("x/y/z/last.txt"), "last");
        write(&ws.join("top.txt"), "top");
    });
    step(&f, "a deep path in the large tree", |ws| {
        write(&ws.join("big/d07/e/f/g/h.txt"), "deeper")
    });
    step(&f, "a sibling that sorts around a directory", |ws| {
        // `big.txt` and `big-x` sort before `big/`, `big0` after it, in git's order.
        write(&ws.join("big.txt"), "1");
        write(&ws.join("big-x"), "2");
        write(&ws.join("big0"), "3");
    });
    step(&f, "touched, content unchanged", |ws| {
        write(&ws.join("top.txt"), "top")
    });
    step(&f, "the last file of a directory deleted", |ws| {
        std::fs::remove_file(ws.join("solo/only.txt")).unwrap()
    });
    step(&f, "the last file of nested directories deleted", |ws| {
        std::fs::remove_file(ws.join("x/y/z/last.txt")).unwrap()
    });
    step(&f, "nested new directories, executable", |ws| {
        write(&ws.join("n1/n2/n3/run.sh"), "#!/bin/sh\n");
        chmod(&ws.join("n1/n2/n3/run.sh"), 0o755);
    });
    step(
        &f,
        "a file replaced by a directory with a directory in it",
        |ws| {
            std::fs::remove_file(ws.join("top.txt")).unwrap();
            write(&ws.join("top.txt/inner/f"), "f");
        },
    );
    step(&f, "a directory of directories replaced by a file", |ws| {
        std::fs::remove_dir_all(ws.join("n1")).unwrap();
        write(&ws.join("n1"), "file");
    });
    step(
        &f,
        "a file made into a directory and its sibling changed",
        |ws| {
            std::fs::remove_file(ws.join("big0")).unwrap();
            write(&ws.join("big0/x"), "x");
            write(&ws.join("big/d03/f01.txt"), "changed");
        },
    );
    step(&f, "a new symlink", |ws| {
        symlink("top.txt", ws.join("ln")).unwrap()
    });
    step(
        &f,
        "a symlink replaced by a directory, a file by a symlink",
        |ws| {
            std::fs::remove_file(ws.join("ln")).unwrap();
            write(&ws.join("ln/f"), "f");
            std::fs::remove_file(ws.join("big-x")).unwrap();
            symlink("ln/f", ws.join("big-x")).unwrap();
        },
    );
    step(&f, "an empty directory", |ws| {
        std::fs::create_dir_all(ws.join("hollow")).unwrap()
    });
    step(
        &f,
        "a file made in it, then it replaced by a symlink",
        |ws| {
            // The events name `hollow/x`, which through the symlink is `big/d05/x`: a path through
            // a symlink is not in the work tree for git.
            write(&ws.join("big/d05/x"), "x");
            write(&ws.join("hollow/x"), "gone");
            std::fs::remove_dir_all(ws.join("hollow")).unwrap();
            symlink("big/d05", ws.join("hollow")).unwrap();
        },
    );
    step(&f, "a file written through that symlink", |ws| {
        write(&ws.join("hollow/x"), "through")
    });
    step(&f, "deleted and made again in one task", |ws| {
        std::fs::remove_file(ws.join("big.txt")).unwrap();
        write(&ws.join("big.txt"), "again");
        std::fs::remove_dir_all(ws.join("big/d11")).unwrap();
        write(&ws.join("big/d11/f00.txt"), "again");
    });
    step(&f, "ignore rules, an ignored new file", |ws| {
        write(&ws.join(".gitignore"), "*.tmp\nscratch/\n");
        write(&ws.join("big/d02/a.tmp"), "ignored");
    });
    step(&f, "ignored, next task", |ws| {
        write(&ws.join("big/d02/b.tmp"), "ignored");
        write(&ws.join("scratch/c.txt"), "ignored");
        write(&ws.join("big/d02/c.txt"), "kept");
    });
    step(&f, "everything removed", |ws| {
        for e in std::fs::read_dir(ws).unwrap().flatten() {
            if e.file_name() == ".git" {
                continue;
            }
            let p = e.path();
            match p.is_dir() && !p.is_symlink() {
                true => std::fs::remove_dir_all(&p).unwrap(),
                false => std::fs::remove_file(&p).unwrap(),
            }
        }
    });
    step(&f, "and one file again", |ws| write(&ws.join("again"), "a"));
}

#[test]
fn failed_task_discard_then_next_commit_is_exact() {
    let f = fixture();
    step(&f, "seed", seed);
    // A failing task's changes are thrown away; the next task's commit must not see them.
    write(&f.ws.join("a.txt"), "zzzz");
    write(&f.ws.join("junk/x.txt"), "x");
    chmod(&f.ws.join("tool.sh"), 0o755);
    std::fs::remove_file(f.ws.join("b.txt")).unwrap();
    f.memory.discard().unwrap();
    assert_index_is_head(&f, "discard");
    step(&f, "after discard", |ws| write(&ws.join("b.txt"), "bb"));
    assert_eq!(std::fs::read_to_string(f.ws.join("a.txt")).unwrap(), "aaaa");
    assert!(!f.ws.join("junk").exists());
}

#[test]
fn isolated_checkout_holds_head_and_keeps_its_changes_to_itself() {
    let f = fixture();
    step(&f, "seed", seed);
    let before = head(&f);
    let iso = f.tmp.path().join("iso");
    f.memory.checkout_to(&iso).unwrap();
    // Exactly HEAD's tree: contents, modes and symlinks (ignored files are not in HEAD).
    assert_eq!(cli_tree(&f, &iso, before), tree_of(&f, before));
    assert!(!iso.join("keep.log").exists() && !iso.join(".git").exists());
    // Everything an isolated task may do, including writes in place through open files.
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(iso.join("a.txt"))
            .unwrap();
        file.write_all(b"XXXX").unwrap();
    }
    chmod(&iso.join("tool.sh"), 0o755);
    std::fs::remove_file(iso.join("b.txt")).unwrap();
    std::fs::rename(iso.join("dir/c.txt"), iso.join("c-moved.txt")).unwrap();
    std::fs::remove_dir_all(iso.join("dir")).unwrap();
    write(&iso.join("dir"), "file");
    write(&iso.join("new.txt"), "new");
    // None of it reaches the shared workspace or the memory.
    assert_eq!(std::fs::read_to_string(f.ws.join("a.txt")).unwrap(), "aaaa");
    assert_eq!(cli_tree(&f, &f.ws, before), tree_of(&f, before));
    assert_eq!(f.memory.commit_task("after isolated").unwrap(), None);
    assert_eq!(head(&f), before);
    // A second checkout is HEAD again, not what the first one was left as.
    let iso2 = f.tmp.path().join("iso2");
    f.memory.checkout_to(&iso2).unwrap();
    assert_eq!(cli_tree(&f, &iso2, before), tree_of(&f, before));
    // And a shared task afterwards still commits exactly.
    step(&f, "shared after isolated", |ws| {
        write(&ws.join("b.txt"), "b2")
    });
}

/// Every entry below `dir`: its path, and its kind, mode and contents (a link's target).
fn listing(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.path().symlink_metadata().unwrap();
            let body = if m.is_symlink() {
                std::fs::read_link(e.path())
                    .unwrap()
                    .into_os_string()
                    .into_vec()
            } else if m.is_dir() {
                todo.push(e.path());
                Vec::new()
            } else {
                std::fs::read(e.path()).unwrap()
            };
            let rel = e.path().strip_prefix(dir).unwrap().to_path_buf();
            out.insert(rel, (m.mode(), body));
        }
    }
    out
}

// A kept checkout (an isolated overlay's lower layer) moved to a newer HEAD by writing only what
// changed is entry for entry what a whole checkout of that HEAD writes: modes, links, and no
// directory a deletion left empty.
#[test]
fn an_advanced_checkout_is_a_whole_checkout_of_the_new_head() {
    let f = fixture();
    step(&f, "seed", seed);
    step(&f, "a lone file", |ws| {
        write(&ws.join("lone/deep/only.txt"), "o")
    });
    let before = head(&f);
    let kept = f.tmp.path().join("kept");
    assert_eq!(f.memory.checkout_to(&kept).unwrap(), before);
    step(&f, "every kind of change", |ws| {
        write(&ws.join("a.txt"), "changed");
        chmod(&ws.join("tool.sh"), 0o755);
        std::fs::remove_file(ws.join("b.txt")).unwrap();
        std::fs::rename(ws.join("dir/sub/d.txt"), ws.join("d-moved.txt")).unwrap();
        std::fs::remove_dir_all(ws.join("dir/sub")).unwrap();
        std::fs::remove_file(ws.join("dir/c.txt")).unwrap();
        std::fs::remove_dir(ws.join("dir")).unwrap();
        write(&ws.join("dir"), "a file where a directory was");
        std::fs::remove_file(ws.join("link")).unwrap();
        symlink("d-moved.txt", ws.join("link")).unwrap();
        std::fs::remove_file(ws.join("dirlink")).unwrap();
        write(
            &ws.join("dirlink/inside.txt"),
            "a directory where a link was",
        );
        write(&ws.join("new/deep/e.txt"), "e");
        std::fs::remove_dir_all(ws.join("lone")).unwrap();
    });
    let after = head(&f);
    assert_eq!(f.memory.advance_checkout(&kept, before).unwrap(), after);
    let whole = f.tmp.path().join("whole");
    f.memory.checkout_to(&whole).unwrap();
    assert_eq!(listing(&kept), listing(&whole));
    // And back again, through an unchanged HEAD (nothing to write).
    assert_eq!(f.memory.advance_checkout(&kept, after).unwrap(), after);
    assert_eq!(listing(&kept), listing(&whole));
}

/// HEAD and the index are kept in memory between saves: commits across several saves stay
/// exact, including rewrites of files written since the last save (racily clean for git), and
/// once saved the git CLI sees the last commit as HEAD and a clean work tree.
#[test]
fn commits_across_saves_are_exact_and_a_save_leaves_git_clean() {
    let f = fixture();
    step(&f, "seed", seed);
    for i in 0..(SAVE_EVERY * 2 + 3) {
        step(&f, &format!("write {i}"), |ws| {
            write(&ws.join(format!("w/{}/f{i}.txt", i % 5)), &i.to_string());
            // A file written in an earlier step, rewritten at the same size.
            if i > 0 {
                write(&ws.join(format!("w/{}/f{}.txt", (i - 1) % 5, i - 1)), "x");
            }
        });
    }
    f.memory.finish().unwrap();
    let cli = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(&f.ws)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", f.tmp.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    assert_eq!(cli(&["rev-parse", "HEAD"]), f.memory.head().to_string());
    assert_eq!(cli(&["status", "--porcelain"]), "");
}

fn loose_objects(f: &Fixture) -> usize {
    std::fs::read_dir(f.mem.join("objects"))
        .unwrap()
        .flatten()
        .filter(|d| d.file_name().len() == 2)
        .map(|d| std::fs::read_dir(d.path()).unwrap().count())
        .sum()
}

fn packs(f: &Fixture) -> usize {
    std::fs::read_dir(f.mem.join("objects/pack"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
        .count()
}

/// Loose objects are packed every PACK_EVERY commits and at the end; the packed memory is
/// whole (`git fsck`), every task ref still names its commit, and a crash after a pack (the
/// memory dropped unsaved, then reopened as a resume reopens it) loses nothing and goes on.
#[test]
fn loose_objects_are_packed_periodically_and_at_the_end_and_survive_a_reopen() {
    let f = fixture();
    step(&f, "seed", seed);
    let mut commits = Vec::new();
    for i in 0..PACK_EVERY + 2 {
        write(&f.ws.join(format!("p/{}/f{i}.txt", i % 9)), &i.to_string());
        commits.push((
            format!("p{i}"),
            f.memory.commit_task(&format!("p{i}")).unwrap().unwrap(),
        ));
    }
    assert_eq!(packs(&f), 1, "one pack after PACK_EVERY commits");
    assert!(loose_objects(&f) < 20, "{} loose", loose_objects(&f));
    let fsck = |f: &Fixture| git(f, &f.ws, &["fsck", "--strict", "--no-dangling"]);
    fsck(&f);
    // The task refs went into packed-refs with the objects (at the seed's and the first 255
    // writes' commits): the three made since are loose.
    let loose_refs = std::fs::read_dir(f.mem.join("refs/crucible/tasks"))
        .unwrap()
        .count();
    assert_eq!(loose_refs, 3, "task refs left loose after the pack");
    let listed = git(
        &f,
        &f.ws,
        &[
            "for-each-ref",
            "--format=%(objectname) %(refname)",
            "refs/crucible/tasks/",
        ],
    );
    for (name, oid) in &commits {
        assert!(
            listed.contains(&format!("{oid} {}", task_ref(name))),
            "git sees {name}'s ref"
        );
    }
    let kept = f.memory.head();
    // A crash now: nothing saved since the pack, HEAD and the index on disk are stale.
    let Fixture {
        tmp,
        ws,
        mem,
        memory,
    } = f;
    drop(memory);
    let start = reopen(&ws, &mem).unwrap();
    let f = Fixture {
        memory: Memory::open(&ws).unwrap(),
        tmp,
        ws,
        mem,
    };
    assert_eq!(f.memory.head(), start);
    let repo = Repository::open_bare(&f.mem).unwrap();
    for (name, oid) in &commits {
        assert_eq!(repo.refname_to_id(&task_ref(name)).unwrap(), *oid);
    }
    assert!(repo.find_commit(kept).is_ok());
    step(&f, "after reopen", |ws| {
        write(&ws.join("again.txt"), "again")
    });
    f.memory.finish().unwrap();
    assert_eq!(loose_objects(&f), 0);
    assert_eq!(packs(&f), 2);
    fsck(&f);
}

/// What makes staging only the paths a task touched risky (issue 18): every change must be seen
/// whatever way it was made, and whatever the kernel reports or fails to report, the commit is
/// still exactly `git add -A`'s.
#[test]
fn changes_however_made_are_committed_as_git_add_all_stages() {
    let f = fixture();
    assert!(f.memory.held().watch.is_some(), "the workspace is watched");
    step(&f, "seed", seed);
    // A writer that stays open across a commit (as a process a task left running would).
    let mut open = std::fs::OpenOptions::new()
        .append(true)
        .open(f.ws.join("dir/c.txt"))
        .unwrap();
    step(&f, "open writer, first write", |_| {
        use std::io::Write;
        open.write_all(b"1").unwrap();
    });
    step(&f, "open writer, same-second write", |_| {
        use std::io::Write;
        open.write_all(b"2").unwrap();
    });
    drop(open);
    step(&f, "through a shared mapping, written after close", |ws| {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(ws.join("b.txt"))
            .unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a one-byte shared mapping of a one-byte file, written then unmapped.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                1,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            drop(file);
            *(p as *mut u8) = b'M';
            libc::munmap(p, 1);
        }
    });
    step(&f, "content and mtime both put back", |ws| {
        let p = ws.join("tool.sh");
        let meta = std::fs::metadata(&p).unwrap();
        write(&p, "#!/bin/sh\n");
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(meta.modified().unwrap())
            .unwrap();
    });
    step(&f, "a directory renamed", |ws| {
        std::fs::rename(ws.join("dir/sub"), ws.join("moved")).unwrap()
    });
    step(&f, "a file in the renamed directory", |ws| {
        write(&ws.join("moved/after.txt"), "after")
    });
    step(&f, "a directory moved in from outside", |ws| {
        let outside = ws.parent().unwrap().join("outside");
        write(&outside.join("deep/o.txt"), "o");
        std::fs::rename(&outside, ws.join("inbound")).unwrap();
    });
    step(&f, "a file deep in the moved-in directory", |ws| {
        write(&ws.join("inbound/deep/p.txt"), "p")
    });
    step(
        &f,
        "an ignore rule dropped: untouched ignored files appear",
        |ws| write(&ws.join(".gitignore"), "build/\n"),
    );
    step(
        &f,
        "an ignore rule added: new matching files stay out",
        |ws| {
            write(&ws.join(".gitignore"), "build/\n*.tmp\n");
            write(&ws.join("x.tmp"), "x");
        },
    );
    step(&f, "a new directory with files made in it at once", |ws| {
        write(&ws.join("fresh/a/b/c.txt"), "c");
        write(&ws.join("fresh/a/d.txt"), "d");
    });
    step(&f, "a file in that directory, next task", |ws| {
        write(&ws.join("fresh/a/b/e.txt"), "e")
    });
    step(&f, "a directory replaced by a symlink", |ws| {
        std::fs::remove_dir_all(ws.join("fresh/a/b")).unwrap();
        symlink("../../moved", ws.join("fresh/a/b")).unwrap();
    });
    step(&f, "more changes than the kernel queues", |ws| {
        for i in 0..6_000 {
            write(&ws.join(format!("flood/{}/f{i}", i % 10)), "x");
        }
    });
    step(&f, "a file after the flood", |ws| {
        write(&ws.join("flood/3/f3"), "y")
    });
}

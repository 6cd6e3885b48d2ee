//! Benchmark (not a test) for declared-file capture and staging (issue 4, RFC-0002:C-TASK-FILES):
//! 1,000 files totalling 200 MiB are captured from a producer's workspace and staged into a
//! consumer's, and each step is compared with `cp -r` of the same tree. Target: within 1.5×.
//! Capture is measured twice: from a shared workspace, which keeps its files (a copy), and from
//! a disposable one, an isolated task's checkout (the `cp -r` copy), whose files it moves.
//!
//! Run: `cargo bench -p crucible-engine --bench files` (set `CRUCIBLE_BENCH_DIR` to choose the
//! file system; the default is the system temp dir). Prints the minimum and the median of seven rounds.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use crucible_engine::files::{
    capture, stage, unstage, CaptureRequest, Captured, FilesBudget, Mode, StagedSet,
    DEFAULT_MAX_FILES_BYTES,
};
use crucible_plan::FileDecl;

const FILES: usize = 1_000;
const TOTAL: u64 = 200 << 20;
const ROUNDS: usize = 7;

fn main() -> Result<()> {
    let base = std::env::var_os("CRUCIBLE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(&base).context("creating the bench directory")?;
    let producer = tmp.path().join("producer");
    let paths = generate(&producer)?;
    let decls: Vec<FileDecl> = paths
        .iter()
        .map(|p| FileDecl {
            path: p.clone(),
            schema: None,
        })
        .collect();

    let (mut cp, mut cap, mut moved, mut stg) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let dir = tmp.path().join(format!("round{round}"));
        std::fs::create_dir_all(&dir)?;

        settle()?;
        let t = Instant::now();
        let status = Command::new("cp")
            .arg("-r")
            .arg(&producer)
            .arg(dir.join("cp-copy"))
            .status()
            .context("running cp -r")?;
        ensure!(status.success(), "cp -r failed");
        cp.push(t.elapsed());

        let files_dir = dir.join("run/files");
        let budget = FilesBudget::new(DEFAULT_MAX_FILES_BYTES);
        let req = CaptureRequest {
            workspace: &producer,
            decls: &decls,
            files_dir: &files_dir,
            dir_name: "producer",
            disposable: false,
        };
        settle()?;
        let t = Instant::now();
        let set = match capture(&req, Mode::Passing, &budget)? {
            Captured::Published(set) => set,
            other => anyhow::bail!("capture did not publish: {other:?}"),
        };
        cap.push(t.elapsed());
        ensure!(set.bytes == TOTAL, "captured {} bytes", set.bytes);

        // The same set again, from the disposable copy (the first one removed untimed).
        crucible_engine::files::remove_set(&files_dir, "producer", &budget)?;
        let isolated = dir.join("cp-copy");
        let req = CaptureRequest {
            workspace: &isolated,
            disposable: true,
            ..req
        };
        settle()?;
        let t = Instant::now();
        let again = capture(&req, Mode::Passing, &budget)?;
        moved.push(t.elapsed());
        ensure!(
            matches!(&again, Captured::Published(s) if s.bytes == TOTAL),
            "the disposable capture did not publish: {again:?}"
        );

        let consumer = dir.join("consumer");
        std::fs::create_dir_all(&consumer)?;
        let sets = [StagedSet {
            task: "producer".into(),
            key: None,
            dir_name: "producer".into(),
            source: set.dir.clone(),
        }];
        settle()?;
        let t = Instant::now();
        stage(&consumer, &sets)?;
        stg.push(t.elapsed());

        // Free the round's 600 MiB before the next one.
        unstage(&consumer)?;
        crucible_engine::files::remove_set(&files_dir, "producer", &budget)?;
        std::fs::remove_dir_all(&dir)?;
    }

    println!(
        "files bench: {FILES} files, {} MiB, {ROUNDS} rounds, in {}",
        TOTAL >> 20,
        base.display()
    );
    // The minimum is the cost without interference from other load on the machine; the
    // median shows how much that load moved it.
    for (label, pick) in [
        ("min", min as fn(&[Duration]) -> Duration),
        ("median", median),
    ] {
        let (cp, cap, moved, stg) = (pick(&cp), pick(&cap), pick(&moved), pick(&stg));
        let ratio = |d: Duration| d.as_secs_f64() / cp.as_secs_f64();
        println!("  {label}:");
        println!("    cp -r            {:>8.1} ms", ms(cp));
        println!(
            "    capture          {:>8.1} ms  ({:.2}x cp -r)",
            ms(cap),
            ratio(cap)
        );
        println!(
            "    capture, moved   {:>8.1} ms  ({:.2}x cp -r)",
            ms(moved),
            ratio(moved)
        );
        println!(
            "    stage            {:>8.1} ms  ({:.2}x cp -r)",
            ms(stg),
            ratio(stg)
        );
        println!(
            "    capture + stage  {:>8.1} ms  ({:.2}x cp -r; {:.2}x with the capture moved)",
            ms(cap + stg),
            ratio(cap + stg),
            ratio(moved + stg)
        );
    }
    Ok(())
}

/// Write `FILES` files of pseudo-random bytes (so nothing is sparse or trivially compressible),
/// `TOTAL` bytes in all, spread over ten directories; their relative paths.
fn generate(root: &Path) -> Result<Vec<String>> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut paths = Vec::with_capacity(FILES);
    let mut written = 0u64;
    for i in 0..FILES {
        // Sizes vary up to ±50% around the mean in pairs that cancel out; the last file takes
        // the remainder.
        let mean = TOTAL / FILES as u64;
        let spread = (i as u64 / 2 * 7919) % (mean / 2);
        let size = if i + 1 == FILES {
            TOTAL - written
        } else if i % 2 == 0 {
            mean + spread
        } else {
            mean - spread
        };
        let rel = format!("d{}/f{i:04}.bin", i % 10);
        let path = root.join(&rel);
        std::fs::create_dir_all(path.parent().expect("has a parent"))?;
        let mut buf = Vec::with_capacity(size as usize);
        while (buf.len() as u64) < size {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            buf.extend_from_slice(&state.to_le_bytes());
        }
        buf.truncate(size as usize);
        std::fs::write(&path, &buf)?;
        written += size;
        paths.push(rel);
    }
    ensure!(written == TOTAL, "generated {written} bytes");
    Ok(paths)
}

/// Flush dirty pages before each timed step, so no step pays for the writeback of the one
/// before it (which otherwise lands on whichever step runs third).
fn settle() -> Result<()> {
    ensure!(Command::new("sync").status()?.success(), "sync failed");
    Ok(())
}

fn min(v: &[Duration]) -> Duration {
    *v.iter().min().expect("at least one round")
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

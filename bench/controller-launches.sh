#!/usr/bin/env bash
# The controller under load (issue 12): N concurrent launches (default 100) of a 20-task command
# playbook through the API, on SQLite and, when CRUCIBLE_TEST_POSTGRES names a server, on
# PostgreSQL, side by side. For each store it starts a fresh `crucible serve`, registers the
# pack, fires every launch at once, and from the first launch until the last run ended reads
# the run listing (`GET /v1/runs`) back to back; it prints the launch throughput, the run throughput (runs and tasks finished
# per second, first launch to last run ended), and the p50/p99 latency of the launches and of
# the reads under that load. Usage: bench/controller-launches.sh [path/to/crucible]; N=… TASKS=…
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export BIN N=${N:-100} TASKS=${TASKS:-20}
exec python3 - <<'PY'
import json, os, subprocess, sys, tempfile, threading, time, urllib.request, uuid

BIN, N, TASKS = os.environ["BIN"], int(os.environ["N"]), int(os.environ["TASKS"])
PG = os.environ.get("CRUCIBLE_TEST_POSTGRES", "")

def manifest():
    tasks = "".join(
        f'[[workflow.task]]\nname = "t{i}"\nkind = "command"\nrun = "echo \'{{}}\'"\n'
        for i in range(TASKS))
    return f'[workflow]\ntype = "playbook"\n{tasks}'

def call(url, token, method="GET", body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    t = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        answer = json.loads(r.read())
    return answer, time.monotonic() - t

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(len(xs) * p + 0.999999) - 1))] if xs else float("nan")

def bench(label, database):
    state = tempfile.mkdtemp(prefix="crucible-bench-")
    args = [BIN, "serve", "--addr", "127.0.0.1:0", "--state-dir", state]
    if database:
        args += ["--database", database]
    serve = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    pack = tempfile.mkdtemp(prefix="crucible-bench-pack-")
    try:
        url = serve.stdout.readline().strip().split(" on ", 1)[1]
        token = open(os.path.join(state, "admin.token")).read().strip()
        open(os.path.join(pack, "crucible.toml"), "w").write(manifest())
        digest = subprocess.run(
            [BIN, "remote", "--server", url, "--state-dir", state, "pack", "push", pack,
             "--name", "bench"], check=True, capture_output=True, text=True).stdout.strip()
        launches, ids, errors = [], [], []
        lock = threading.Lock()
        def launch():
            try:
                v, secs = call(f"{url}/v1/launches", token, "POST",
                               {"pack": digest, "max_cost": 1, "max_time": "30m"})
                with lock:
                    launches.append(secs); ids.append(v["id"])
            except Exception as e:  # a refusal under load is a finding, not a crash
                with lock:
                    errors.append(str(e))
        reads, done = [], threading.Event()
        def read():
            # The API under load: the run listing, read back to back from the first launch on.
            while not done.is_set():
                reads.append(call(f"{url}/v1/runs", token)[1])
        reader = threading.Thread(target=read)
        start = time.monotonic()
        reader.start()
        threads = [threading.Thread(target=launch) for _ in range(N)]
        for t in threads: t.start()
        for t in threads: t.join()
        launched = time.monotonic() - start
        pending, valid = set(ids), 0
        while pending:
            for run in sorted(pending):
                v, _ = call(f"{url}/v1/runs/{run}", token)
                if v["state"] != "running":
                    pending.discard(run)
                    valid += v["verdict"] == "valid"
            time.sleep(0.2)
        wall = time.monotonic() - start
        done.set()
        reader.join()
        print(f"{label}: {len(ids)}/{N} launched in {launched:.2f}s ({len(ids)/launched:.1f}/s), "
              f"{len(errors)} refused; all ended in {wall:.1f}s: {len(ids)/wall:.2f} runs/s, "
              f"{len(ids)*TASKS/wall:.1f} tasks/s, {valid} valid")
        print(f"  launch latency p50 {pct(launches, .5)*1000:.0f} ms, p99 {pct(launches, .99)*1000:.0f} ms")
        print(f"  GET /v1/runs under load ({len(reads)} reads) p50 {pct(reads, .5)*1000:.0f} ms, "
              f"p99 {pct(reads, .99)*1000:.0f} ms")
        for e in errors[:3]:
            print(f"  refused: {e}")
    finally:
        serve.kill(); serve.wait()
        subprocess.run(["rm", "-rf", state, pack])

bench("sqlite", None)
if PG:
    name = f"crucible_bench_{uuid.uuid4().hex[:12]}"
    subprocess.run(["psql", PG, "-qc", f"CREATE DATABASE {name}"], check=True)
    try:
        bench("postgresql", PG.rsplit("/", 1)[0] + "/" + name)
    finally:
        subprocess.run(["psql", PG, "-qc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"])
else:
    print("postgresql: skipped (set CRUCIBLE_TEST_POSTGRES=postgres://USER:PASS@HOST:PORT/postgres)")
PY

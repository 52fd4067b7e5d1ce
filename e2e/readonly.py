"""A read-only server beside the writer: `rocklake serve URL --read-only` on the SlateDB store a
running `rocklake serve` writes to. DuckDB reads the catalog (also by time travel) through the
reader, the writer is never fenced, the reader sees the writer's later commits within its poll
interval, and a write through the reader is refused.

Then the reader under a working writer (#22 item 10): for --load-seconds the writer commits one
row at a time (a value of its own each, so a table's (count, sum) names the commit it was read
at) and every few commits expires all but its latest snapshots and cleans up old files, while
the reader runs, in one DuckDB transaction each, time travel to a snapshot the writer still
keeps (two queries, compared with what the writer read at that snapshot) and a read of the
latest state (which must be the state of one commit, never a mix of two). A time travel that
fails is allowed only to a snapshot the writer had expired by then.

That phase runs only with --load-seconds (CI gives 10). Before the reader's views were
point-in-time (`SlateReader`'s generations, 2026-12-05), it failed here: within one DuckDB
transaction on the reader, the latest state read from the table was newer than the newest
snapshot `ducklake_snapshots()` listed (e.g. 70 rows, the writer's state at snapshot 61, while
the reader's newest snapshot was 51, where the writer had 60), a mix of two of the reader's
polls. Pointed at the writer instead, the same loop passed.

It prints the reader's staleness under that load: the time from a commit's acknowledgement on
the writer to the first new transaction on the reader that lists its snapshot (p50, p99, max;
sampled every 20 ms). The reader's poll interval bounds it (`--reader-poll-ms`, the URL's
`poll_ms`): a poll, then the open of a new generation; `--reader-max-staleness-ms` (the URL's
`max_staleness_ms`) bounds it tighter: a transaction begun past that bound after the reader's
last look at the store looks again first.

With --readers N, N read-only servers (separate processes, each with its own caches, as on N
machines) serve the catalog under that load, each read as above and probed for its staleness.

It also prints how long a time travel (two `count(*)`s at one snapshot) takes on the reader
and on the writer (medians), so `--store-url s3://bucket/prefix?simulate_latency_ms=20` (a new
store under that URL instead of a local folder; the data files stay local) shows what a bucket
20 ms away costs the reader.

usage: python readonly.py --rocklake-bin PATH [--ext-dir DIR] [--load-seconds N] [--reader-poll-ms N]
                          [--reader-max-staleness-ms N]
                          [--store-url URL] [--readers N]
"""
import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


connect = common.duck


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--load-seconds", type=float, default=0.0,
                    help="how long the reader reads while the writer commits and expires (0: "
                         "not at all)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--reader-poll-ms", type=int, default=None,
                    help="the reader's poll interval (its URL's poll_ms; default 1000)")
    ap.add_argument("--reader-max-staleness-ms", type=int, default=None,
                    help="the readers' bound on their lag (their URL's max_staleness_ms; "
                         "default none)")
    ap.add_argument("--store-url", default=None,
                    help="a new SlateDB store under this URL (its options kept) instead of a "
                         "local folder, e.g. s3://bucket/prefix?simulate_latency_ms=20")
    ap.add_argument("--readers", type=int, default=1,
                    help="read-only servers under load (separate processes; the first phase "
                         "uses the first)")
    a = ap.parse_args()
    if a.readers < 1:
        raise SystemExit("--readers must be at least 1")
    common.exit_on_sigterm()
    common.ensure_extensions(a.ext_dir)
    tmp = tempfile.mkdtemp(prefix="rocklake-readonly-")
    if a.store_url:
        base, _, options = a.store_url.partition("?")
        if "://" not in base:
            raise SystemExit(f"--store-url {a.store_url!r} is not a store URL (s3://bucket/prefix, ...)")
        url = f"{base.rstrip('/')}/readonly-{uuid.uuid4().hex[:8]}" + (f"?{options}" if options else "")
    else:
        url = common.engine_url("slatedb", os.path.join(tmp, "store"))
    data = os.path.join(tmp, "data")
    writer = common.Server(a.rocklake_bin, url, os.path.join(tmp, "writer.log"))
    joiner = "&" if "?" in url else "?"
    reader_url = url if a.reader_poll_ms is None else f"{url}{joiner}poll_ms={a.reader_poll_ms}"
    if a.reader_max_staleness_ms is not None:
        joiner = "&" if "?" in reader_url else "?"
        reader_url += f"{joiner}max_staleness_ms={a.reader_max_staleness_ms}"
    readers = [common.Server(a.rocklake_bin, reader_url, os.path.join(tmp, f"reader-{i}.log"),
                             extra_args=["--read-only"]) for i in range(a.readers)]
    reader = readers[0]
    problems = []
    try:
        writer.start()
        w = connect(a.ext_dir)
        w.execute(f"ATTACH 'ducklake:postgres:{writer.dsn()}' AS lake (DATA_PATH '{data}/')")
        w.execute("CREATE TABLE lake.t AS SELECT range AS i FROM range(10)")
        w.execute("INSERT INTO lake.t VALUES (100)")
        # The reader: same store, --read-only.
        reader.start()
        r = connect(a.ext_dir)
        r.execute(f"ATTACH 'ducklake:postgres:{reader.dsn()}' AS lake (DATA_PATH '{data}/', READ_ONLY)")
        got = r.execute("SELECT count(*), sum(i) FROM lake.t").fetchall()
        if got != [(11, 145)]:
            problems.append(f"reader read {got}, writer wrote [(11, 145)]")
        old = r.execute("SELECT count(*) FROM lake.t AT (VERSION => 1)").fetchall()
        if old != [(10,)]:
            problems.append(f"time travel through the reader read {old}, expected [(10,)]")
        w.execute("INSERT INTO lake.t VALUES (1000)")  # the writer is not fenced
        seen = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r2 = connect(a.ext_dir)
            r2.execute(f"ATTACH 'ducklake:postgres:{reader.dsn()}' AS lake (DATA_PATH '{data}/', READ_ONLY)")
            seen = r2.execute("SELECT count(*), sum(i) FROM lake.t").fetchall()
            r2.close()
            if seen == [(12, 1145)]:
                break
            time.sleep(0.5)
        if seen != [(12, 1145)]:
            problems.append(f"the reader never saw the writer's later commit: {seen}")
        # A table the writer creates after the reader started (#24 item 3), with rows DuckLake
        # keeps in an inlined-data table it creates too: read through a new connection and
        # through the one attached before the table existed.
        w.execute("CREATE TABLE lake.t2 (k INTEGER, v VARCHAR)")
        w.execute("INSERT INTO lake.t2 VALUES (1, 'one'), (2, 'two')")
        want2 = [(2, 3, "two")]
        seen2 = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r3 = connect(a.ext_dir)
            r3.execute(f"ATTACH 'ducklake:postgres:{reader.dsn()}' AS lake (DATA_PATH '{data}/', READ_ONLY)")
            try:
                seen2 = r3.execute("SELECT count(*), sum(k), max(v) FROM lake.t2").fetchall()
            except Exception as e:  # noqa: BLE001 - not there yet, or the failure to report
                seen2 = str(e).splitlines()[0][:200]
            r3.close()
            if seen2 == want2:
                break
            time.sleep(0.5)
        if seen2 != want2:
            problems.append(f"a new connection to the reader never read the table created after "
                            f"the reader started: {seen2}")
        try:
            old_con = r.execute("SELECT count(*), sum(k), max(v) FROM lake.t2").fetchall()
        except Exception as e:  # noqa: BLE001
            old_con = str(e).splitlines()[0][:200]
        if old_con != want2:
            problems.append(f"the reader's connection attached before the table was created "
                            f"read {old_con}")
        else:
            print("table created after the reader started: read through a new connection and "
                  "through one attached before")
        # A write through the reader (without DuckDB's own READ_ONLY guard) is refused.
        rw = connect(a.ext_dir)
        try:
            rw.execute(f"ATTACH 'ducklake:postgres:{reader.dsn()}' AS lake (DATA_PATH '{data}/')")
            rw.execute("INSERT INTO lake.t VALUES (5)")
            problems.append("a write through the read-only server succeeded")
        except Exception as e:  # noqa: BLE001 - the refusal is the point
            print(f"write through the reader refused: {str(e).splitlines()[0][:160]}")
        r.close()
        final = w.execute("SELECT count(*), sum(i) FROM lake.t").fetchall()
        if final != [(12, 1145)]:
            problems.append(f"the writer reads {final} at the end")
        w.close()
        if a.load_seconds > 0:
            for other in readers[1:]:
                other.start()
            problems += under_load(writer, readers, data, a)
    finally:
        for r in readers:
            r.stop()
        writer.stop()
    for p in problems:
        print(f"PROBLEM: {p}")
    print("readonly: " + ("passed" if not problems else "FAILED"))
    if problems:
        print(common.tail(reader.log_path, 20))
    sys.exit(1 if problems else 0)


def under_load(writer, readers, data, a):
    """The readers while the writer commits, expires and cleans up (see the module's docs)."""
    seed = a.seed if a.seed is not None else random.randrange(1 << 31)
    print(f"reader under load: {a.load_seconds:.0f} s, seed {seed} (--seed replays the reader's choices)")
    problems = []
    lock = threading.Lock()
    states = {}  # snapshot id -> (count, sum, even count) as the writer read it there
    acked_at = {}  # snapshot id -> when the writer's INSERT returned (time.monotonic())
    first_seen = [{} for _ in readers]  # per reader: snapshot id -> when its probe first saw it
    kept_from = [0]  # the writer expired every snapshot below this one
    expiring_from = [0]  # ... or is expiring them now
    stop = threading.Event()
    w = connect(a.ext_dir)
    w.execute(f"ATTACH 'ducklake:postgres:{writer.dsn()}' AS lake (DATA_PATH '{data}/')")
    # The table of the first phase (tables created after the reader started are checked there).
    created = w.execute("SELECT max(snapshot_id) FROM ducklake_snapshots('lake')").fetchone()[0]

    took = {"readers": [], "writer": []}  # seconds of each time travel (state_at with a version)

    def state_at(con, version=None, who=None):
        at = "" if version is None else f" AT (VERSION => {version})"
        started = time.monotonic()
        row = con.execute(f"SELECT count(*), coalesce(sum(i), 0) FROM lake.t{at}").fetchone()
        even = con.execute(
            f"SELECT count(*) FROM lake.t{at} WHERE i % 2 = 0").fetchone()[0]
        if who is not None:
            took[who].append(time.monotonic() - started)
        return (row[0], row[1], even)

    states[created] = state_at(w, created)

    def write():
        n = 0
        expired = set()
        try:
            while not stop.is_set():
                n += 1
                w.execute(f"INSERT INTO lake.t VALUES ({n * 7 + 3})")
                acked = time.monotonic()
                snap = w.execute(
                    "SELECT max(snapshot_id) FROM ducklake_snapshots('lake')").fetchone()[0]
                st = state_at(w, snap, "writer")
                with lock:
                    states[snap] = st
                    acked_at[snap] = acked
                if n % 10 == 0:
                    with lock:
                        keep = sorted(states)[-6:]
                        expiring_from[0] = keep[0]
                    # Expire what is older than the 6th-latest commit's snapshot, then clean up.
                    old = [v for v in sorted(states) if v < keep[0] and v not in expired]
                    if old:
                        w.execute(f"CALL ducklake_expire_snapshots('lake', versions => {old})")
                        expired.update(old)
                    w.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)")
                    with lock:
                        kept_from[0] = keep[0]
        except Exception as e:  # noqa: BLE001 - reported as a problem, not a crash
            problems.append(f"writer failed after {n} commits: {str(e).splitlines()[0][:200]}")
        finally:
            stop.set()

    def probe(reader, first_seen):
        # Staleness: from a commit's acknowledgement on the writer to the first time a new
        # transaction on the reader lists its snapshot (sampled every 20 ms).
        p = connect(a.ext_dir)
        p.execute(f"ATTACH 'ducklake:postgres:{reader.dsn()}' AS lake (DATA_PATH '{data}/', READ_ONLY)")
        bound = (a.reader_max_staleness_ms or 0) / 1000
        try:
            while not stop.is_set():
                began = time.monotonic()
                seen = p.execute(
                    "SELECT max(snapshot_id) FROM ducklake_snapshots('lake')").fetchone()[0]
                now = time.monotonic()
                with lock:
                    for v in acked_at:
                        if v <= seen and v not in first_seen:
                            first_seen[v] = now
                        # With a bound, a transaction must read every commit acknowledged
                        # more than the bound before it began.
                        if bound and v > seen and acked_at[v] < began - bound:
                            problems.append(
                                f"a reader transaction begun {(began - acked_at[v]) * 1000:.0f} "
                                f"ms after commit {v} was acknowledged did not read it "
                                f"(max_staleness_ms {a.reader_max_staleness_ms}); it read "
                                f"snapshot {seen}")
                            stop.set()
                time.sleep(0.02)
        except Exception as e:  # noqa: BLE001
            problems.append(f"the staleness probe failed: {str(e).splitlines()[0][:200]}")
        finally:
            p.close()

    def reading(i, reader, deadline, counts):
        """Reader i's loop: time travel to a kept snapshot and the latest state, one DuckDB
        transaction each, compared with what the writer read there."""
        rng_i = random.Random(seed + i)
        r = connect(a.ext_dir)
        r.execute(f"ATTACH 'ducklake:postgres:{reader.dsn()}' AS lake (DATA_PATH '{data}/', READ_ONLY)")
        travels = latest = refused = lagging = 0
        name = f"reader {i}" if len(readers) > 1 else "the reader"
        while time.monotonic() < deadline and not stop.is_set():
            version = seen = None
            try:
                r.execute("BEGIN")
                # The newest snapshot the reader sees (it trails the writer by up to its poll).
                seen = r.execute(
                    "SELECT max(snapshot_id) FROM ducklake_snapshots('lake')").fetchone()[0]
                with lock:
                    known = [v for v in sorted(states) if kept_from[0] <= v <= seen]
                    want_now = states.get(seen)
                if not known:
                    r.execute("COMMIT")
                    lagging += 1
                    time.sleep(0.05)
                    continue
                version = rng_i.choice(known[-6:])
                with lock:
                    want = states[version]
                got = state_at(r, version, "readers")
                now = state_at(r)
                r.execute("COMMIT")
            except Exception as e:  # noqa: BLE001
                try:
                    r.execute("ROLLBACK")
                except Exception:  # noqa: BLE001
                    pass
                with lock:
                    expired = version is not None and version < expiring_from[0]
                msg = str(e).splitlines()[0][:200]
                if expired:
                    refused += 1
                    continue
                problems.append(f"time travel to snapshot {version} (kept, {name}'s newest "
                                f"{seen}) failed on {name}: {msg}")
                break
            travels += 1
            if got != want:
                problems.append(f"time travel to snapshot {version}: {name} read {got}, "
                                f"the writer read {want} there")
                break
            # The latest state is the state of the reader's newest snapshot, never a mix of
            # two (a snapshot the writer has not recorded yet is skipped).
            if want_now is not None:
                latest += 1
                if now != want_now:
                    problems.append(f"{name}'s latest state {now} at its newest snapshot {seen} "
                                    f"is not the writer's {want_now} there (a mix of two versions?)")
                    break
        r.close()
        counts[i] = (travels, latest, refused, lagging)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    probes = [threading.Thread(target=probe, args=(rd, first_seen[i]), daemon=True)
              for i, rd in enumerate(readers)]
    for pt in probes:
        pt.start()
    deadline = time.monotonic() + a.load_seconds
    counts = [(0, 0, 0, 0)] * len(readers)
    rts = [threading.Thread(target=reading, args=(i, rd, deadline, counts), daemon=True)
           for i, rd in enumerate(readers)]
    for rt in rts:
        rt.start()
    for rt in rts:
        rt.join(timeout=a.load_seconds + 120)
    stop.set()
    t.join(timeout=30)
    for pt in probes:
        pt.join(timeout=30)
    w.close()

    def pct(lags, q):
        return lags[min(len(lags) - 1, int(q * len(lags)))] * 1000

    every = []
    for i, seen_at in enumerate(first_seen):
        lags = sorted(seen_at[v] - acked_at[v] for v in seen_at if v in acked_at)
        every += lags
        name = f"reader {i}" if len(readers) > 1 else "the reader"
        if not lags:
            problems.append(f"the staleness probe saw no commit of the writer on {name}")
        elif len(readers) > 1:
            print(f"reader under load: {name}: staleness p50 {pct(lags, 0.5):.0f} ms, "
                  f"p99 {pct(lags, 0.99):.0f} ms over {len(lags)} commits")
    if every:
        every.sort()
        print(f"reader under load: staleness (writer's acknowledgement to the reader listing the "
              f"snapshot, {len(every)} commits on {len(readers)} reader(s), 20 ms sampling): "
              f"p50 {pct(every, 0.5):.0f} ms, p99 {pct(every, 0.99):.0f} ms, max "
              f"{every[-1] * 1000:.0f} ms (poll interval {a.reader_poll_ms or 1000} ms, "
              f"max_staleness_ms {a.reader_max_staleness_ms or 'none'})")
    for who, times in took.items():
        if times:
            print(f"reader under load: a time travel (two count(*)s at one snapshot) on the {who}: "
                  f"median {statistics.median(times) * 1000:.1f} ms over {len(times)}")
    travels = sum(c[0] for c in counts)
    latest = sum(c[1] for c in counts)
    refused = sum(c[2] for c in counts)
    lagging = sum(c[3] for c in counts)
    print(f"reader under load: {len(states)} commits, expired below snapshot {kept_from[0]}; "
          f"{len(readers)} reader(s): {travels} time travels and {latest} latest reads compared "
          f"({', '.join(str(c[0]) for c in counts)} time travels each), {refused} travels "
          f"to an expired snapshot refused, {lagging} rounds behind the writer's last expiry")
    for i, c in enumerate(counts):
        if c[0] < max(5, 20 // len(readers)):
            problems.append(f"only {c[0]} time travels compared on reader {i} under load")
    if kept_from[0] == 0:
        problems.append("the writer never expired a snapshot under load")
    return problems


if __name__ == "__main__":
    main()

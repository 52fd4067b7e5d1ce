"""A read-only server beside the writer: `rocklake serve URL --read-only` on the SlateDB store a
running `rocklake serve` writes to. DuckDB reads the catalog (also by time travel) through the
reader, the writer is never fenced, the reader sees the writer's later commits within its poll
interval, and a write through the reader is refused.

usage: python readonly.py --rocklake-bin PATH [--ext-dir DIR]
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


connect = common.duck


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    a = ap.parse_args()
    common.exit_on_sigterm()
    common.ensure_extensions(a.ext_dir)
    tmp = tempfile.mkdtemp(prefix="rocklake-readonly-")
    url = common.engine_url("slatedb", os.path.join(tmp, "store"))
    data = os.path.join(tmp, "data")
    writer = common.Server(a.rocklake_bin, url, os.path.join(tmp, "writer.log"))
    reader = common.Server(a.rocklake_bin, url, os.path.join(tmp, "reader.log"),
                           extra_args=["--read-only"])
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
        # A write through the reader (without DuckDB's own READ_ONLY guard) is refused.
        rw = connect(a.ext_dir)
        try:
            rw.execute(f"ATTACH 'ducklake:postgres:{reader.dsn()}' AS lake (DATA_PATH '{data}/')")
            rw.execute("INSERT INTO lake.t VALUES (5)")
            problems.append("a write through the read-only server succeeded")
        except Exception as e:  # noqa: BLE001 - the refusal is the point
            print(f"write through the reader refused: {str(e).splitlines()[0][:160]}")
        final = w.execute("SELECT count(*), sum(i) FROM lake.t").fetchall()
        if final != [(12, 1145)]:
            problems.append(f"the writer reads {final} at the end")
    finally:
        reader.stop()
        writer.stop()
    for p in problems:
        print(f"PROBLEM: {p}")
    print("readonly: " + ("passed" if not problems else "FAILED"))
    if problems:
        print(common.tail(reader.log_path, 20))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

"""Install the DuckDB extensions the e2e suite needs into an extension directory.

usage: python setup_ext.py DIR

The extensions come from the duckdb-extension-* pip packages (no network needed at run time).
`INSTALL 'file'` is used (via duckdb_extensions.import_extension) because `LOAD 'path'` derives
the entry point from the file name and fails for postgres (whose entry point is postgres_scanner).
Idempotent: extensions already installed in DIR are skipped.
"""
import os
import sys

import duckdb
from duckdb_extensions import import_extension

EXTENSIONS = ["ducklake", "postgres", "httpfs"]
# Installed when its package is there (bench.py's SQLite-catalog column); a venv made before it
# was added to requirements.txt still runs every test.
OPTIONAL = ["sqlite_scanner"]
# The postgres extension registers itself as postgres_scanner.
INSTALLED_NAME = {"postgres": "postgres_scanner"}


def installed(con):
    rows = con.execute(
        "SELECT extension_name FROM duckdb_extensions() WHERE installed").fetchall()
    return {r[0] for r in rows}


def setup(ext_dir):
    os.makedirs(ext_dir, exist_ok=True)
    con = duckdb.connect(config={"extension_directory": os.path.abspath(ext_dir),
                                 "autoinstall_known_extensions": False})
    have = installed(con)
    for name in EXTENSIONS:
        if INSTALLED_NAME.get(name, name) not in have:
            import_extension(name, con=con)
    for name in OPTIONAL:
        if name not in have:
            try:
                import_extension(name, con=con)
            except Exception as e:  # the optional package is not installed
                print(f"setup_ext: {name} not installed ({e})", file=sys.stderr)
    missing = [n for n in EXTENSIONS if INSTALLED_NAME.get(n, n) not in installed(con)]
    con.close()
    if missing:
        raise SystemExit(f"setup_ext: failed to install {missing} into {ext_dir}")


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: python setup_ext.py DIR")
    setup(sys.argv[1])
    print(f"setup_ext: {', '.join(EXTENSIONS)} installed in {sys.argv[1]}")


if __name__ == "__main__":
    main()

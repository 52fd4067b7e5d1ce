# Sourced by .ci/run: starts the services the tests need, on loopback only, and stops them when
# the run ends. Tools live in a virtualenv under ~/.cache so repeated runs reuse it.

venv="${ROCKLAKE_VENV:-$HOME/.cache/rocklake/venv}"
if [ ! -x "$venv/bin/moto_server" ]; then
  step "installing moto[server] (S3 emulator) into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "moto[server]" boto3
fi

# A free port on loopback.
s3_port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
step "starting moto_server on 127.0.0.1:$s3_port"
"$venv/bin/moto_server" -H 127.0.0.1 -p "$s3_port" >"${TMPDIR:-/tmp}/rocklake-moto.log" 2>&1 &
moto_pid=$!
trap 'kill $moto_pid 2>/dev/null || true' EXIT

export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$s3_port"
for _ in $(seq 1 100); do
  if "$venv/bin/python" - <<PY 2>/dev/null
import boto3
boto3.client("s3", endpoint_url="$AWS_ENDPOINT_URL").create_bucket(Bucket="rocklake-test")
PY
  then break; fi
  sleep 0.2
done
export ROCKLAKE_TEST_S3_URL="s3://rocklake-test/run-$$"

# PostgreSQL 15 from Debian's packages, on loopback in a data folder of its own, for the tests
# that hold RockLake's answers to PostgreSQL's (ROCKLAKE_TEST_PG).
pg_bin=/usr/lib/postgresql/15/bin
if [ ! -x "$pg_bin/postgres" ]; then
  step "installing postgresql-15"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
fi
pg_data=$(mktemp -d "${TMPDIR:-/tmp}/rocklake-pg.XXXXXX")
chown postgres "$pg_data"
pg_port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
step "starting PostgreSQL 15 on 127.0.0.1:$pg_port"
runuser -u postgres -- "$pg_bin/initdb" -D "$pg_data/db" -A trust -U postgres -E UTF8 --locale=C.UTF-8 >"$pg_data/initdb.log" 2>&1
runuser -u postgres -- "$pg_bin/pg_ctl" -D "$pg_data/db" -l "$pg_data/server.log" -w \
  -o "-h 127.0.0.1 -p $pg_port -k $pg_data -c fsync=off" start >/dev/null  # a reference for answers, not for durability
stop_services() {
  kill "$moto_pid" 2>/dev/null || true
  runuser -u postgres -- "$pg_bin/pg_ctl" -D "$pg_data/db" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$pg_data"
}
trap stop_services EXIT
export ROCKLAKE_TEST_PG="host=127.0.0.1 port=$pg_port user=postgres dbname=postgres"

# Stock DuckDB 1.5.5 with the DuckLake, postgres and httpfs extensions from their pip packages,
# for the end-to-end suite (e2e/, run by `cargo test` through rocklake-cli's tests/e2e.rs).
duck_venv="${ROCKLAKE_DUCK_VENV:-$HOME/.cache/rocklake/duckdb-venv}"
if ! "$duck_venv/bin/python" -c 'import duckdb, duckdb_extensions; assert duckdb.__version__ == "1.5.5"' 2>/dev/null; then
  step "installing DuckDB 1.5.5 and its extension packages into $duck_venv"
  python3 -m venv "$duck_venv"
  "$duck_venv/bin/pip" install -q --disable-pip-version-check -r e2e/requirements.txt
fi
duck_ext="${ROCKLAKE_DUCK_EXT:-$HOME/.cache/rocklake/duckdb-ext}"
"$duck_venv/bin/python" e2e/setup_ext.py "$duck_ext"
export ROCKLAKE_E2E_PYTHON="$duck_venv/bin/python" ROCKLAKE_E2E_EXT="$duck_ext"

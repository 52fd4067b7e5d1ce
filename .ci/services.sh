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

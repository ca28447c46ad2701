# Throwaway services for the native-backends tests (issue 18). Source this file, then:
#
#   services_start   installs what is missing (Debian's `postgresql`; moto's server mode from
#                    PyPI, into a venv of its own: see _svc_install_moto), initdb's a PostgreSQL cluster in a temporary directory, starts it on a
#                    free loopback port, starts the S3 emulator (moto, an emulator for tests, not
#                    a store) on another, creates the database and the bucket, and exports:
#                      PERSIST_TEST_POSTGRES_URL  postgres://persist:PASSWORD@127.0.0.1:PORT/persist
#                      PERSIST_TEST_PG_CTL        a script that runs pg_ctl on that cluster as the
#                                                 right user: "$PERSIST_TEST_PG_CTL" restart
#                      PERSIST_TEST_PG_BIN        the directory of pg_ctl, psql, pgbench
#                      PERSIST_TEST_S3_ENDPOINT   http://127.0.0.1:PORT
#                      PERSIST_TEST_S3_BUCKET     an existing, empty bucket
#                      AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION (the emulator's)
#                    and registers services_stop on EXIT (after any EXIT trap already set).
#                    A second call in the same shell keeps the services already running.
#   services_stop    stops both and removes the temporary directory. Idempotent.
#
# PostgreSQL refuses to run as root: as root the cluster belongs to the `postgres` system user
# (created if missing); otherwise to the calling user. Works whether or not the packages are
# already installed, and never touches a cluster of the system's own.

_svc_log() { echo "[services] $*" >&2; }

_svc_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

_svc_pg_bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; fi
}

_svc_sudo() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

_svc_install_postgres() {
  if [ -n "$(_svc_pg_bindir)" ] && command -v psql >/dev/null 2>&1; then return 0; fi
  _svc_log "installing Debian's postgresql package"
  _svc_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 || {
    _svc_sudo apt-get update -qq
    _svc_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
  }
  [ -n "$(_svc_pg_bindir)" ] || { _svc_log "postgresql installed but no initdb under /usr/lib/postgresql"; return 1; }
}

# The Python that runs moto: python3 itself if it already has moto's server mode, else a venv of
# our own (PERSIST_TEST_VENV, default ~/.cache/persist-playground/moto-venv), made once and then
# reused. A venv, not `pip install` into the system: Debian's python3 is externally managed
# (PEP 668) and has no pip; the venv needs only Debian's python3-venv.
SVC_PY=

_svc_venv_dir() { echo "${PERSIST_TEST_VENV:-${HOME:-/root}/.cache/persist-playground/moto-venv}"; }

_svc_install_moto() {
  local check='import moto.server, boto3, flask'
  if ! command -v python3 >/dev/null 2>&1; then
    _svc_log "installing Debian's python3"
    _svc_sudo apt-get update -qq
    _svc_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
  fi
  if python3 -c "$check" >/dev/null 2>&1; then SVC_PY=python3; return 0; fi
  local venv; venv=$(_svc_venv_dir)
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
    SVC_PY="$venv/bin/python"; return 0
  fi
  _svc_log "installing moto's server mode from PyPI into the venv $venv"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian splits venv (and the pip it bootstraps) into python3-venv.
    rm -rf "$venv"
    _svc_sudo apt-get update -qq
    _svc_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv" || { _svc_log "python3 -m venv failed"; return 1; }
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check 'moto[server]' \
    || { _svc_log "pip could not install moto[server] into $venv"; return 1; }
  "$venv/bin/python" -c "$check" || { _svc_log "moto did not install"; return 1; }
  SVC_PY="$venv/bin/python"
}

_svc_append_exit_trap() {
  local existing
  existing=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
  if [ -n "$existing" ]; then
    trap "services_stop; $existing" EXIT
  else
    trap services_stop EXIT
  fi
}

services_start() {
  # Already started in this shell (another layer sourced it first): keep those.
  if [ -n "${SVC_DIR:-}" ] && [ -d "$SVC_DIR" ]; then return 0; fi
  _svc_install_postgres || return 1
  _svc_install_moto || return 1
  local bindir; bindir=$(_svc_pg_bindir)
  SVC_DIR=$(mktemp -d /tmp/persist-services.XXXXXX)
  chmod 755 "$SVC_DIR"
  _svc_append_exit_trap

  # --- PostgreSQL: a throwaway cluster owned by a non-root user.
  local pg_user; pg_user=$(id -un)
  if [ "$(id -u)" = 0 ]; then
    pg_user=postgres
    id -u postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
  fi
  local run=()
  if [ "$(id -u)" = 0 ]; then run=(runuser -u "$pg_user" --); fi
  local pg_pass; pg_pass="pw$(python3 -c 'import secrets; print(secrets.token_hex(8))')"
  mkdir -p "$SVC_DIR/pg" "$SVC_DIR/pg/sock"
  printf '%s\n' "$pg_pass" > "$SVC_DIR/pg/pwfile"
  chown -R "$pg_user" "$SVC_DIR/pg"
  chmod 700 "$SVC_DIR/pg"
  "${run[@]}" "$bindir/initdb" -D "$SVC_DIR/pg/data" -U persist --pwfile="$SVC_DIR/pg/pwfile" \
    --auth-host=scram-sha-256 --auth-local=trust -E UTF8 --locale=C.UTF-8 >"$SVC_DIR/initdb.log" 2>&1 \
    || "${run[@]}" "$bindir/initdb" -D "$SVC_DIR/pg/data" -U persist --pwfile="$SVC_DIR/pg/pwfile" \
      --auth-host=scram-sha-256 --auth-local=trust -E UTF8 --locale=C >"$SVC_DIR/initdb.log" 2>&1 \
    || { cat "$SVC_DIR/initdb.log" >&2; return 1; }
  rm -f "$SVC_DIR/pg/pwfile"
  local pg_port; pg_port=$(_svc_free_port)
  cat > "$SVC_DIR/pg_ctl.sh" <<EOF
#!/usr/bin/env bash
# pg_ctl on the throwaway cluster, as its owner: pg_ctl.sh restart | stop | status
exec ${run[*]} "$bindir/pg_ctl" -D "$SVC_DIR/pg/data" -l "$SVC_DIR/pg/server.log" -w -t 60 "\$@" -m fast
EOF
  chmod 755 "$SVC_DIR/pg_ctl.sh"
  "${run[@]}" "$bindir/pg_ctl" -D "$SVC_DIR/pg/data" -l "$SVC_DIR/pg/server.log" -w -t 60 \
    -o "-p $pg_port -k $SVC_DIR/pg/sock -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" start >/dev/null \
    || { cat "$SVC_DIR/pg/server.log" >&2; return 1; }
  PGPASSWORD="$pg_pass" "$bindir/psql" -q -h 127.0.0.1 -p "$pg_port" -U persist -d postgres \
    -c 'CREATE DATABASE persist' >/dev/null || return 1
  export PERSIST_TEST_POSTGRES_URL="postgres://persist:$pg_pass@127.0.0.1:$pg_port/persist"
  export PERSIST_TEST_PG_CTL="$SVC_DIR/pg_ctl.sh"
  export PERSIST_TEST_PG_BIN="$bindir"
  _svc_log "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$pg_port (cluster in $SVC_DIR/pg)"

  # --- The S3 emulator (moto's server mode), on another free loopback port.
  local s3_port; s3_port=$(_svc_free_port)
  "$SVC_PY" -m moto.server -H 127.0.0.1 -p "$s3_port" >"$SVC_DIR/moto.log" 2>&1 &
  SVC_MOTO_PID=$!
  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
  export PERSIST_TEST_S3_ENDPOINT="http://127.0.0.1:$s3_port"
  export PERSIST_TEST_S3_BUCKET=persist-test
  "$SVC_PY" - "$PERSIST_TEST_S3_ENDPOINT" "$PERSIST_TEST_S3_BUCKET" <<'EOF' || { cat "$SVC_DIR/moto.log" >&2; return 1; }
import sys, time, boto3
endpoint, bucket = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
for _ in range(300):
    try:
        s3.list_buckets()
        break
    except Exception:
        time.sleep(0.1)
s3.create_bucket(Bucket=bucket)
EOF
  _svc_log "S3 emulator (moto $("$SVC_PY" -c 'import moto; print(moto.__version__)')) on $PERSIST_TEST_S3_ENDPOINT, bucket $PERSIST_TEST_S3_BUCKET"
}

services_stop() {
  [ -n "${SVC_DIR:-}" ] || return 0
  if [ -n "${SVC_MOTO_PID:-}" ]; then
    kill "$SVC_MOTO_PID" 2>/dev/null || true
    wait "$SVC_MOTO_PID" 2>/dev/null || true
    SVC_MOTO_PID=
  fi
  if [ -x "$SVC_DIR/pg_ctl.sh" ] && [ -f "$SVC_DIR/pg/data/postmaster.pid" ]; then
    "$SVC_DIR/pg_ctl.sh" stop >/dev/null 2>&1 || true
  fi
  rm -rf "$SVC_DIR"
  SVC_DIR=
}

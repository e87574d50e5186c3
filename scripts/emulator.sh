#!/usr/bin/env bash
# The local AWS emulator: moto in server mode, from a pinned project-local virtualenv (.venv).
#
#   scripts/emulator.sh install        create .venv and install the pinned tools (idempotent)
#   scripts/emulator.sh start          start moto on a free loopback port; writes .emulator/env
#   scripts/emulator.sh env            print the exports for the running emulator (eval "$(…)")
#   scripts/emulator.sh stop           stop the emulator started by `start`
#   scripts/emulator.sh run -- CMD…    start a private emulator, run CMD against it, stop it
#
# Clients reach it through the standard AWS_ENDPOINT_URL; dummy credentials and a region are set.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
REQUIREMENTS="$ROOT/tools/requirements-emulator.txt"
PYTHON=${PYTHON:-python3}

die() { echo "emulator.sh: $*" >&2; exit 1; }

# shellcheck source=scripts/pinned-venv.sh
source "$ROOT/scripts/pinned-venv.sh"

install() { install_pinned_venv emulator.sh "$VENV" "$REQUIREMENTS" moto_server; }

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start STATE_DIR: starts moto, waits until it answers, writes STATE_DIR/{pid,env,moto.log}.
start_in() {
  local state=$1 port pid
  mkdir -p "$state"
  if [[ -f "$state/pid" ]] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
    echo "emulator.sh: already running (pid $(cat "$state/pid")); env in $state/env" >&2
    return 0
  fi
  install
  port=$(free_port)
  # setsid: own process group, so `stop` ends moto and any worker it forked.
  # tools/moto_server.py is moto's server with requests serialized (why: see that file).
  setsid "$VENV/bin/python" "$ROOT/tools/moto_server.py" -H 127.0.0.1 -p "$port" >"$state/moto.log" 2>&1 < /dev/null &
  pid=$!
  echo "$pid" > "$state/pid"
  for _ in $(seq 1 100); do
    if "$PYTHON" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/', timeout=1)" 2>/dev/null; then
      cat > "$state/env" <<ENV
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export AWS_ACCESS_KEY_ID=testing
export AWS_SECRET_ACCESS_KEY=testing
export AWS_SESSION_TOKEN=testing
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
export PATH="$VENV/bin:\$PATH"
ENV
      echo "emulator.sh: moto listening on 127.0.0.1:$port (pid $pid)" >&2
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { cat "$state/moto.log" >&2; die "moto exited during start-up (log above)"; }
    sleep 0.1
  done
  stop_in "$state"
  die "moto did not answer on port $port within 10 s; see $state/moto.log"
}

stop_in() {
  local state=$1 pid
  [[ -f "$state/pid" ]] || return 0
  pid=$(cat "$state/pid")
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$state/pid" "$state/env"
}

case "${1:-}" in
  install) install ;;
  start) start_in "$ROOT/.emulator" ;;
  stop) stop_in "$ROOT/.emulator" ;;
  env)
    [[ -f "$ROOT/.emulator/env" ]] || die "not running: run scripts/emulator.sh start"
    cat "$ROOT/.emulator/env" ;;
  run)
    shift
    [[ "${1:-}" == "--" ]] && shift
    [[ $# -gt 0 ]] || die "usage: scripts/emulator.sh run -- COMMAND [ARGS…]"
    state=$(mktemp -d "${TMPDIR:-/tmp}/outbox-emulator.XXXXXX")
    trap 'stop_in "$state"; rm -rf "$state"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start_in "$state"
    # shellcheck disable=SC1091
    source "$state/env"
    set +e
    "$@"
    status=$?
    set -e
    exit "$status" ;;
  *)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac

#!/usr/bin/env bash
# The local AWS emulators, at pinned versions, installed into the checkout on first use:
#   - AWS's DynamoDB Local (Java) for DynamoDB and DynamoDB Streams, in .dynamodb-local
#     (scripts/dynamodb-local.sh says where it comes from and how it is checked);
#   - moto in server mode (PyPI) for EventBridge and SQS, in the project-local virtualenv .venv;
#   - the local Custom Event Bus double (tools/custom_bus_double.py, in .venv) for EventBridge's Custom
#     Event Bus (EventsV2), which no emulator has; it delivers to its subscribers' queues on moto;
#   - an OTLP/HTTP receiver (tools/otlp_receiver.py, on the pinned opentelemetry-proto package, in
#     .venv) that keeps the spans a test's processes export, for the tests to read back.
#
#   scripts/emulator.sh install        install the pinned emulators and tools (idempotent)
#   scripts/emulator.sh start          start them on free loopback ports; writes .emulator/env
#   scripts/emulator.sh env            print the exports for the running emulators (eval "$(…)")
#   scripts/emulator.sh stop           stop the emulators started by `start`
#   scripts/emulator.sh run -- CMD…    start private emulators, run CMD against them, stop them
#
# Clients reach them through the SDK's standard endpoint variables: AWS_ENDPOINT_URL_DYNAMODB and
# AWS_ENDPOINT_URL_DYNAMODB_STREAMS (DynamoDB Local), AWS_ENDPOINT_URL_EVENTBRIDGEV2 (the Custom Event
# Bus double), AWS_ENDPOINT_URL (moto, everything else); dummy credentials and a region are set.
# OTLP_RECEIVER_ENDPOINT is the receiver's address: a test points a process at it with the standard
# OTEL_EXPORTER_OTLP_ENDPOINT (nothing else exports unless told to).
# CUSTOM_BUS_* variables set when starting pass through to the double (see its header), e.g.
# CUSTOM_BUS_DEDUP_WINDOW_SECONDS or CUSTOM_BUS_DELIVERY_DELAY_MS.
#
# A local global table, on request: EMULATOR_REGIONS=us-east-1,eu-west-1 (two or more region names)
# also starts one DynamoDB Local per listed region (-sharedDb: one database per region, whatever the
# access key) and the replicator between them (tools/global_table_replicator.py: every table present
# in every region, item by item, last writer wins; its header documents its control interface). The
# env then exports, as the emulator's own names (no SDK reads them):
#   OUTBOX_EMULATOR_REGIONS=us-east-1,eu-west-1         the regions, in the order given
#   OUTBOX_EMULATOR_DYNAMODB_<REGION_UPPER_SNAKE>=URL   each region's DynamoDB (and Streams) endpoint,
#                                                       e.g. OUTBOX_EMULATOR_DYNAMODB_EU_WEST_1
#   OUTBOX_EMULATOR_REPLICATOR=URL                      the replicator's control address
# A process in region X is started with the standard AWS_REGION=X and AWS_ENDPOINT_URL_DYNAMODB and
# AWS_ENDPOINT_URL_DYNAMODB_STREAMS set to X's endpoint. The default DynamoDB Local above stays as it
# is (a database per access key); without EMULATOR_REGIONS nothing else starts. `make test` asks for
# two regions.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
REQUIREMENTS="$ROOT/tools/requirements-emulator.txt"
PYTHON=${PYTHON:-python3}

die() { echo "emulator.sh: $*" >&2; exit 1; }

DYNAMODB_LOCAL="$ROOT/.dynamodb-local"

# shellcheck source=scripts/pinned-venv.sh
source "$ROOT/scripts/pinned-venv.sh"
# shellcheck source=scripts/dynamodb-local.sh
source "$ROOT/scripts/dynamodb-local.sh"

install() {
  install_pinned_venv emulator.sh "$VENV" "$REQUIREMENTS" moto_server
  install_dynamodb_local emulator.sh "$DYNAMODB_LOCAL"
  JAVA=$(java_or_install emulator.sh)
}

# free_ports N: N different free loopback ports, one a line (held open together while chosen, so
# none is handed out twice).
free_ports() {
  "$PYTHON" - "$1" <<'PY'
import socket, sys
sockets = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in sockets))
PY
}

# answers URL: true once anything answers HTTP at URL (an error status is an answer).
answers() {
  "$PYTHON" - "$1" <<'PY' 2>/dev/null
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=1)
except urllib.error.HTTPError:
    pass
PY
}

# regions_requested: the regions of EMULATOR_REGIONS, one per line, checked (none when unset).
regions_requested() {
  [[ -n "${EMULATOR_REGIONS:-}" ]] || return 0
  local region seen=" " list
  IFS=',' read -ra list <<< "$EMULATOR_REGIONS"
  for region in "${list[@]}"; do
    [[ $region =~ ^[a-z][a-z0-9-]*[a-z0-9]$ ]] || die "EMULATOR_REGIONS: '$region' is not a region name (such as us-east-1)"
    [[ $seen == *" $region "* ]] && die "EMULATOR_REGIONS: $region is listed twice"
    seen+="$region "
  done
  (( ${#list[@]} >= 2 )) || die "EMULATOR_REGIONS: a global table needs at least two regions, got '$EMULATOR_REGIONS'"
  printf '%s\n' "${list[@]}"
}

# upper_snake REGION: us-east-1 -> US_EAST_1
upper_snake() { tr 'a-z-' 'A-Z_' <<< "$1"; }

# start_dynamodb_local STATE_DIR PORT LOG [EXTRA_FLAG…]: one DynamoDB Local in the background; its pid.
start_dynamodb_local() {
  local state=$1 port=$2 log=$3
  shift 3
  # In memory (a fresh database per start), no telemetry; the native SQLite libraries ship beside the jar.
  # TieredStopAtLevel=1: the JVM's quick compiler only. With the full one, DynamoDB Local answers
  # the first few hundred writes up to 30 times slower while it compiles (conditional updates of
  # 20 to 50 ms at the start of the demo against under 3 ms later); short runs never recoup that.
  (cd "$state" && exec setsid "$JAVA" -XX:TieredStopAtLevel=1 -Djava.library.path="$DYNAMODB_LOCAL/DynamoDBLocal_lib" \
    -jar "$DYNAMODB_LOCAL/DynamoDBLocal.jar" -inMemory -disableTelemetry -port "$port" "$@" \
    >"$log" 2>&1 < /dev/null) &
  echo $!
}

# start STATE_DIR: starts moto, DynamoDB Local, the Custom Event Bus double and the OTLP receiver
# (and with EMULATOR_REGIONS a DynamoDB Local per region and the replicator), waits until all
# answer, writes STATE_DIR/{pids,env,*.log}.
start_in() {
  local state=$1 moto_port ddb_port bus_port otlp_port moto_pid ddb_pid bus_pid otlp_pid pid i
  local -a regions=() probes=() pids=() logs=() up=()
  local region port region_env="" replicator_port replicator_pid region_args=()
  mkdir -p "$state"
  if [[ -f "$state/pids" ]] && all_running "$state"; then
    echo "emulator.sh: already running (pids $(tr '\n' ' ' < "$state/pids")); env in $state/env" >&2
    return 0
  fi
  local listing
  listing=$(regions_requested) || exit 1
  [[ -z $listing ]] || mapfile -t regions <<< "$listing"
  install
  local -a ports
  mapfile -t ports < <(free_ports $((5 + ${#regions[@]})))
  moto_port=${ports[0]} ddb_port=${ports[1]} bus_port=${ports[2]} otlp_port=${ports[3]}
  replicator_port=${ports[4]}
  # setsid: each in its own process group, so `stop` ends it and anything it forked.
  # tools/moto_server.py is moto's server with requests handled one at a time (why: see that file).
  setsid "$VENV/bin/python" "$ROOT/tools/moto_server.py" -H 127.0.0.1 -p "$moto_port" >"$state/moto.log" 2>&1 < /dev/null &
  moto_pid=$!
  ddb_pid=$(start_dynamodb_local "$state" "$ddb_port" "$state/dynamodb-local.log")
  # The double delivers into moto's SQS with boto3, so it gets moto's endpoint, the region and
  # moto's dummy credentials; it is only called once moto answers.
  CUSTOM_BUS_SQS_ENDPOINT="http://127.0.0.1:$moto_port" AWS_REGION=us-east-1 \
    AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_SESSION_TOKEN=testing \
    setsid "$VENV/bin/python" "$ROOT/tools/custom_bus_double.py" -H 127.0.0.1 -p "$bus_port" \
    >"$state/custom-bus-double.log" 2>&1 < /dev/null &
  bus_pid=$!
  setsid "$VENV/bin/python" "$ROOT/tools/otlp_receiver.py" -H 127.0.0.1 -p "$otlp_port" \
    >"$state/otlp-receiver.log" 2>&1 < /dev/null &
  otlp_pid=$!
  probes=("http://127.0.0.1:$moto_port/moto-api/" "http://127.0.0.1:$ddb_port/" "http://127.0.0.1:$bus_port/" "http://127.0.0.1:$otlp_port/")
  pids=("$moto_pid" "$ddb_pid" "$bus_pid" "$otlp_pid")
  logs=("$state/moto.log" "$state/dynamodb-local.log" "$state/custom-bus-double.log" "$state/otlp-receiver.log")
  # The local global table: a DynamoDB Local per region (-sharedDb: the region's one database for
  # every access key, so the replicator sees every table), then the replicator between them.
  for i in "${!regions[@]}"; do
    region=${regions[$i]} port=${ports[$((5 + i))]}
    pids+=("$(start_dynamodb_local "$state" "$port" "$state/dynamodb-local-$region.log" -sharedDb)")
    probes+=("http://127.0.0.1:$port/")
    logs+=("$state/dynamodb-local-$region.log")
    region_args+=(--region "$region=http://127.0.0.1:$port")
    region_env+="export OUTBOX_EMULATOR_DYNAMODB_$(upper_snake "$region")=http://127.0.0.1:$port"$'\n'
  done
  if (( ${#regions[@]} > 0 )); then
    setsid "$VENV/bin/python" "$ROOT/tools/global_table_replicator.py" "${region_args[@]}" \
      -H 127.0.0.1 -p "$replicator_port" >"$state/global-table-replicator.log" 2>&1 < /dev/null &
    replicator_pid=$!
    pids+=("$replicator_pid")
    probes+=("http://127.0.0.1:$replicator_port/")
    logs+=("$state/global-table-replicator.log")
    region_env+="export OUTBOX_EMULATOR_REGIONS=$(IFS=','; echo "${regions[*]}")"$'\n'
    region_env+="export OUTBOX_EMULATOR_REPLICATOR=http://127.0.0.1:$replicator_port"$'\n'
  fi
  printf '%s\n' "${pids[@]}" > "$state/pids"
  for _ in $(seq 1 300); do
    local all_up=1
    for i in "${!probes[@]}"; do
      [[ -z ${up[$i]:-} ]] && answers "${probes[$i]}" && up[i]=1
      [[ -n ${up[$i]:-} ]] || all_up=""
    done
    if [[ -n $all_up ]]; then
      cat > "$state/env" <<ENV
export AWS_ENDPOINT_URL=http://127.0.0.1:$moto_port
export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$ddb_port
export AWS_ENDPOINT_URL_DYNAMODB_STREAMS=http://127.0.0.1:$ddb_port
export AWS_ENDPOINT_URL_EVENTBRIDGEV2=http://127.0.0.1:$bus_port
export OTLP_RECEIVER_ENDPOINT=http://127.0.0.1:$otlp_port
export AWS_ACCESS_KEY_ID=testing
export AWS_SECRET_ACCESS_KEY=testing
export AWS_SESSION_TOKEN=testing
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
export PATH="$VENV/bin:\$PATH"
ENV
      printf '%s' "$region_env" >> "$state/env"
      echo "emulator.sh: DynamoDB Local listening on 127.0.0.1:$ddb_port (pid $ddb_pid), moto on 127.0.0.1:$moto_port (pid $moto_pid), the Custom Event Bus double on 127.0.0.1:$bus_port (pid $bus_pid), the OTLP receiver on 127.0.0.1:$otlp_port (pid $otlp_pid)" >&2
      if (( ${#regions[@]} > 0 )); then
        echo "emulator.sh: a global table in ${regions[*]} (${region_args[*]}), its replicator's control on 127.0.0.1:$replicator_port (pid $replicator_pid)" >&2
      fi
      return 0
    fi
    for pid in "${pids[@]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        cat "${logs[@]}" >&2
        stop_in "$state"
        die "an emulator exited during start-up (logs above)"
      fi
    done
    sleep 0.1
  done
  stop_in "$state"
  die "the emulators did not answer within 30 s; see ${logs[*]}"
}

# all_running STATE_DIR: true when every process in STATE_DIR/pids is alive.
all_running() {
  local pid
  while read -r pid; do
    kill -0 "$pid" 2>/dev/null || return 1
  done < "$1/pids"
}

stop_in() {
  local state=$1 pid
  [[ -f "$state/pids" ]] || return 0
  while read -r pid; do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done < "$state/pids"
  while read -r pid; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done < "$state/pids"
  rm -f "$state/pids" "$state/env"
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
    # The command sees the regions as OUTBOX_EMULATOR_*; an emulator it starts itself (the demo's
    # test of Ctrl-C) starts no second global table unless asked.
    unset EMULATOR_REGIONS
    set +e
    "$@"
    status=$?
    set -e
    exit "$status" ;;
  *)
    sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac

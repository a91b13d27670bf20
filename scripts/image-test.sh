#!/usr/bin/env bash
# The container test (`make image-test`): builds the image from this tree, brings
# deploy/compose.yaml up with one command (docker-compose against podman), and uses it from the
# host as a user would: a password-grant token, an Account created and read back with SOQL,
# the browser CRM's index page; then kills one role's process and checks it is restarted and
# healthy again; then tears everything down (volumes too).
#
# The compose tool is docker-compose (Debian 12's 1.29) talking to podman's Docker-compatible
# API (`podman system service` on a private socket), so depends_on conditions
# (service_healthy, service_completed_successfully) are honoured as by Docker. podman-compose
# cannot run this file on Debian 12's podman 4.3: it ignores service_healthy before podman
# 4.6, and podman 4.3 refuses to start a container whose --requires chain is transitive.
# docker-compose 1.29 predates the top-level `name:`; the test passes -p and strips that line
# from a copy of the file (nothing else differs).
#
# No registry is reachable here: the base images (Python, Node 20, MariaDB 10.11) are built
# locally, once, by scripts/build-base-images.sh (debootstrap of Debian 12 from the mirror
# this machine's apt uses) and kept in podman's storage for the next run.
#
# Needs root and Debian 12; installs what it lacks from apt (podman, runc, iptables,
# debootstrap, docker-compose).
# Only loopback addresses are used: the gateway is published on 127.0.0.1:$PORT.
#
# Environment:
#   NEXUS_IMAGE_TEST_PORT      host port for the gateway (default 18000)
#   NEXUS_IMAGE_TEST_CACHE     where containers.conf is written (default /var/cache/nexus-image-test)
#   NEXUS_IMAGE_TEST_CONTEXT   build context (default: this checkout)
#   NEXUS_IMAGE_TEST_IMAGE     test this already built image instead of building one
#   NEXUS_IMAGE_TEST_TIMEOUT   bound on the whole run in seconds (default 2700)
#   NEXUS_IMAGE_TEST_KEEP=1    leave the stack running on success (for a look around)
#   NEXUS_BASE_REBUILD=1       rebuild the base images
# Exits non-zero on any failure, naming the step and printing each container's last logs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOTAL_TIMEOUT=${NEXUS_IMAGE_TEST_TIMEOUT:-2700}

# The whole run is bounded: re-run under timeout(1); its TERM reaches the running step too, then
# the EXIT trap tears the stack down (KILL 120 s later if that hangs).
if [[ -z "${_NEXUS_IMAGE_TEST_BOUNDED:-}" ]]; then
  export _NEXUS_IMAGE_TEST_BOUNDED=1
  exec timeout --kill-after=120 "$TOTAL_TIMEOUT" bash "${BASH_SOURCE[0]}" "$@"
fi

CACHE=${NEXUS_IMAGE_TEST_CACHE:-/var/cache/nexus-image-test}
CONTEXT=${NEXUS_IMAGE_TEST_CONTEXT:-$ROOT}
PORT=${NEXUS_IMAGE_TEST_PORT:-18000}
PROJECT=nexus-image-test
COMPOSE_FILE=$ROOT/deploy/compose.yaml
NEXUS_TEST_IMAGE=${NEXUS_IMAGE_TEST_IMAGE:-localhost/nexus:image-test}
BASE="http://127.0.0.1:$PORT"

STEP="start"
T_START=$SECONDS
declare -A TIMING=()
PUMP_PID=""
SERVICE_PID=""
WORK=$(mktemp -d /tmp/nexus-image-test.XXXXXX)

log() { printf '[image-test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
step() { STEP=$1; log "== $STEP"; }
fail() { log "FAILED in step '$STEP': $*"; exit 1; }
timed() {  # timed NAME CMD...: run CMD, record its duration under NAME
  local name=$1 t0=$SECONDS
  shift
  "$@"
  TIMING[$name]=$((SECONDS - t0))
  log "$name: ${TIMING[$name]}s"
}

[[ $(id -u) == 0 ]] || { echo "image-test: run as root (podman rootful, apt)" >&2; exit 2; }

# ---------------------------------------------------------------- tools
install_tools() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v curl >/dev/null || missing+=(curl)
  dpkg -s aardvark-dns >/dev/null 2>&1 || missing+=(aardvark-dns)  # container name resolution
  dpkg -s netavark >/dev/null 2>&1 || missing+=(netavark)
  [[ -x /usr/bin/docker-compose ]] || missing+=(docker-compose)
  if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    timeout 600 apt-get install -y -q --no-install-recommends "${missing[@]}" >"$WORK/apt.log" 2>&1 ||
      { timeout 300 apt-get update -q >>"$WORK/apt.log" 2>&1 &&
        timeout 600 apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$WORK/apt.log" 2>&1; } ||
      { tail -n 20 "$WORK/apt.log" >&2; fail "apt-get install ${missing[*]}"; }
  fi
  mkdir -p "$CACHE"
  # Rootful podman as this machine needs it, without touching /etc/containers: runc (crun
  # fails here), cgroupfs (no systemd), the host's hard nofile limit is 20000.
  cat >"$CACHE/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  export CONTAINERS_CONF=$CACHE/containers.conf
  timeout 60 podman info >/dev/null || fail "podman info"
}

# podman's Docker-compatible API on a socket of this run, for docker-compose
start_service() {
  podman system service --time=0 "unix://$WORK/podman.sock" >"$WORK/podman-service.log" 2>&1 &
  SERVICE_PID=$!
  export DOCKER_HOST="unix://$WORK/podman.sock"
  local i
  for i in $(seq 50); do
    curl -s -o /dev/null --max-time 2 --unix-socket "$WORK/podman.sock" http://d/_ping && return 0
    sleep 0.2
  done
  cat "$WORK/podman-service.log" >&2
  fail "podman system service did not answer"
}
stop_service() {
  [[ -n "$SERVICE_PID" ]] || return 0
  kill "$SERVICE_PID" 2>/dev/null || true
  wait "$SERVICE_PID" 2>/dev/null || true
  SERVICE_PID=""
}

# ---------------------------------------------------------------- the stack
compose() {
  timeout "${COMPOSE_TIMEOUT:-300}" docker-compose --ansi never -p "$PROJECT" \
    --project-directory "$ROOT/deploy" -f "$WORK/compose.yaml" "$@"
}
export COMPOSE_HTTP_TIMEOUT=300

export NEXUS_IMAGE=$NEXUS_TEST_IMAGE
export MARIADB_IMAGE=localhost/mariadb:10.11
export NEXUS_GATEWAY_BIND=127.0.0.1
export NEXUS_GATEWAY_PORT=$PORT
export NEXUS_PUBLIC_BASE_URL="http://localhost:$PORT"
NEXUS_BOOTSTRAP_ADMIN_PASSWORD="it-$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
export NEXUS_BOOTSTRAP_ADMIN_PASSWORD

project_containers() {  # [podman ps args...]: this project's containers
  podman ps -a --filter "label=com.docker.compose.project=$PROJECT" "$@"
}
container_of() {  # SERVICE: its container's name
  project_containers --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | head -n1
}
health_of() { podman inspect --format '{{.State.Health.Status}}' "$1" 2>/dev/null || echo none; }

# Podman starts no healthcheck timers without systemd (it uses systemd timers): run each
# container's healthcheck every 5 s, as the engine would.
start_health_pump() {
  (
    while true; do
      for c in $(project_containers --filter status=running --format '{{.Names}}'); do
        timeout 20 podman healthcheck run "$c" >/dev/null 2>&1 || true
      done
      sleep 5
    done
  ) &
  PUMP_PID=$!
}

dump_logs() {
  local c
  for c in $(project_containers --format '{{.Names}}' 2>/dev/null); do
    echo "---------------- $c ($(podman inspect --format '{{.State.Status}} exit={{.State.ExitCode}} restarts={{.RestartCount}}' "$c" 2>/dev/null), health: $(health_of "$c"))" >&2
    timeout 20 podman logs --tail 40 "$c" 2>&1 | cut -c1-600 >&2 || true
  done
}

teardown() {
  [[ -n "$PUMP_PID" ]] && { kill "$PUMP_PID" 2>/dev/null || true; wait "$PUMP_PID" 2>/dev/null || true; }
  PUMP_PID=""
  if [[ -n "$SERVICE_PID" ]] && kill -0 "$SERVICE_PID" 2>/dev/null; then
    COMPOSE_TIMEOUT=180 compose down -v --remove-orphans --timeout 30 >"$WORK/down.log" 2>&1 ||
      { log "compose down failed:"; tail -n 20 "$WORK/down.log" >&2; }
  fi
  # what down may leave: containers, the anonymous /app/var volumes, the network
  local ids
  ids=$(project_containers -q 2>/dev/null || true)
  [[ -n "$ids" ]] && timeout 120 podman rm -f -v $ids >/dev/null 2>&1
  ids=$(podman volume ls -q --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null || true)
  [[ -n "$ids" ]] && timeout 60 podman volume rm -f $ids >/dev/null 2>&1
  timeout 30 podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
}

on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  # a signal may land inside a step whose output goes to a log file: report on the original
  exec 1>&3 2>&4
  if ((rc != 0)); then
    log "FAILED (exit $rc) in step '$STEP'; the containers' last logs:"
    command -v podman >/dev/null && dump_logs
  fi
  if [[ "${NEXUS_IMAGE_TEST_KEEP:-}" == 1 && $rc == 0 ]]; then
    log "NEXUS_IMAGE_TEST_KEEP=1: the stack stays up on $BASE (admin / $NEXUS_BOOTSTRAP_ADMIN_PASSWORD);"
    log "  (no healthchecks run from now on); down: CONTAINERS_CONF=$CACHE/containers.conf podman rm -f -v \$(podman ps -aq --filter label=com.docker.compose.project=$PROJECT)"
    [[ -n "$PUMP_PID" ]] && kill "$PUMP_PID" 2>/dev/null
  elif command -v podman >/dev/null; then
    teardown
  fi
  stop_service
  rm -rf "$WORK"
  local name
  for name in base-images image-build compose-up-to-ready total; do
    [[ -n "${TIMING[$name]:-}" ]] && log "timing $name: ${TIMING[$name]}s"
  done
  if ((rc == 0)); then log "PASSED"; else log "FAILED: $STEP"; fi
  exit "$rc"
}
exec 3>&1 4>&2
trap on_exit EXIT
trap 'exit 143' TERM INT

# ---------------------------------------------------------------- HTTP helpers
# curl_json METHOD PATH [curl args...]: body to $WORK/body, status echoed; loopback only
http() {
  local method=$1 path=$2
  shift 2
  curl -sS -o "$WORK/body" -w '%{http_code}' --max-time 20 -X "$method" "$BASE$path" "$@" || echo 000
}
json_get() {  # json_get EXPR: evaluate EXPR over the last body (python: `d`)
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$WORK/body" "$1"
}
wait_until() {  # wait_until SECONDS DESCRIPTION CMD...: retry CMD every 2 s
  local limit=$1 what=$2 t0=$SECONDS
  shift 2
  until "$@"; do
    ((SECONDS - t0 < limit)) || fail "timed out after ${limit}s waiting for $what"
    sleep 2
  done
}
gateway_ready() { [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$BASE/readyz" || true) == 200 ]]; }
exited_ok() {  # exited_ok SERVICE: its one-shot container finished with 0 (fails at once otherwise)
  local c state code
  c=$(container_of "$1")
  [[ -n "$c" ]] || return 1
  state=$(podman inspect --format '{{.State.Status}}' "$c")
  [[ "$state" == exited ]] || return 1
  code=$(podman inspect --format '{{.State.ExitCode}}' "$c")
  [[ "$code" == 0 ]] || fail "$1 exited with $code"
}
healthy() { [[ $(health_of "$(container_of "$1")") == healthy ]]; }

# ---------------------------------------------------------------- run
step "install tools"
install_tools

step "base images"
timed base-images bash "$ROOT/scripts/build-base-images.sh"

step "image build"
if [[ -n "${NEXUS_IMAGE_TEST_IMAGE:-}" ]]; then
  podman image exists "$NEXUS_TEST_IMAGE" || fail "no image $NEXUS_TEST_IMAGE"
  log "testing the given image $NEXUS_TEST_IMAGE (no build)"
else
[[ -f "$CONTEXT/requirements/runtime.txt" ]] || fail "$CONTEXT/requirements/runtime.txt is missing (the hash-locked runtime requirements the Dockerfile installs)"
timed image-build timeout 1800 podman build --pull=never \
  --build-arg NODE_IMAGE=localhost/nexus-test/node:20 \
  --build-arg PYTHON_IMAGE=localhost/nexus-test/python:3.11 \
  -t "$NEXUS_TEST_IMAGE" -f "$ROOT/Dockerfile" "$CONTEXT" >"$WORK/build.log" 2>&1 ||
  { tail -n 40 "$WORK/build.log" >&2; fail "podman build"; }
fi

step "compose up"
start_service
sed '/^name: /d' "$COMPOSE_FILE" >"$WORK/compose.yaml"
COMPOSE_TIMEOUT=60 compose config -q || fail "compose config"
teardown  # a previous run killed hard may have left its stack
curl -s -o /dev/null --max-time 2 "$BASE/" && fail "something already listens on 127.0.0.1:$PORT"
t_up=$SECONDS
start_health_pump
COMPOSE_TIMEOUT=600 compose up -d >"$WORK/up.log" 2>&1 ||
  { tail -n 40 "$WORK/up.log" >&2; fail "compose up"; }

step "gateway ready"
wait_until 300 "the gateway's /readyz" gateway_ready
TIMING[compose-up-to-ready]=$((SECONDS - t_up))
log "gateway ready ${TIMING[compose-up-to-ready]}s after compose up"
for job in init-secrets migrate; do exited_ok "$job" || fail "$job has not finished"; done
wait_until 300 "install-apps to finish" exited_ok install-apps
for svc in runtime-api runtime-worker catalog integration app-sfcrm gateway; do
  wait_until 120 "$svc healthy" healthy "$svc"
done
podman stats --no-stream --format '{{.Name}} {{.MemUsage}} {{.CPUPerc}}' \
  $(project_containers --filter status=running --format '{{.Names}}') >&2 || true

step "roles: uid, read-only secrets, only their own private key"
for svc in runtime-api runtime-worker catalog integration app-sfcrm gateway; do
  c=$(container_of "$svc")
  [[ $(podman exec "$c" id -u) == 10001 ]] || fail "$svc does not run as uid 10001"
  keys=$(podman exec "$c" sh -c 'cd /app/var/secrets/workload && ls *.key' | tr '\n' ' ')
  [[ "$keys" == "$svc.key " ]] || fail "$svc holds private keys [$keys], expected only $svc.key"
  podman exec "$c" sh -c 'touch /app/var/secrets/probe' 2>/dev/null &&
    fail "$svc can write its secrets volume"
done

step "webhook secret (the operator command in compose.yaml)"
# (docker-compose 1.29's `run` needs container links, which podman's API lacks: `exec` here)
compose exec -T integration nexus hooks set-secret image-test-hook --generate >"$WORK/hook.log" 2>&1 ||
  { cat "$WORK/hook.log" >&2; fail "hooks set-secret"; }
podman exec "$(container_of integration)" test -s /app/var/secrets/webhooks/image-test-hook ||
  fail "the webhook secret is not in integration's /app/var/secrets/webhooks"

step "password-grant token"
status=$(http POST /services/oauth2/token -d grant_type=password -d username=admin \
  --data-urlencode "password=$NEXUS_BOOTSTRAP_ADMIN_PASSWORD")
[[ $status == 200 ]] || fail "token: HTTP $status $(head -c 300 "$WORK/body")"
TOKEN=$(json_get 'd["access_token"]')
AUTH=(-H "Authorization: Bearer $TOKEN")

step "create an Account"
status=$(http POST /services/data/v59.0/sobjects/Account "${AUTH[@]}" \
  -H 'Content-Type: application/json' -d '{"Name": "Acme"}')
[[ $status == 201 ]] || fail "create: HTTP $status $(head -c 300 "$WORK/body")"
ACCOUNT_ID=$(json_get 'd["id"]')
log "Account $ACCOUNT_ID"

soql_finds_acme() {
  local status
  status=$(http GET "/services/data/v59.0/query?q=SELECT+Id,Name,Owner.Name+FROM+Account" "${AUTH[@]}")
  [[ $status == 200 ]] || { log "query: HTTP $status $(head -c 300 "$WORK/body")"; return 1; }
  [[ $(json_get "[(r['Name'], (r.get('Owner') or {}).get('Name')) for r in d['records'] if r['Id'] == '$ACCOUNT_ID']") == "[('Acme', "* ]] ||
    { log "query: no Acme owned by someone in $(head -c 300 "$WORK/body")"; return 1; }
}

step "SOQL query"
soql_finds_acme || fail "the Account is not found by SOQL"

step "browser CRM index"
status=$(http GET / -H 'Accept: text/html')
[[ $status == 200 ]] || fail "GET /: HTTP $status"
grep -q '<div id="root">' "$WORK/body" && grep -q 'type="module"' "$WORK/body" ||
  fail "GET / is not the built index.html: $(head -c 300 "$WORK/body")"

step "crash and restart"
victim=$(container_of runtime-api)
old_start=$(podman inspect --format '{{.State.StartedAt}}' "$victim")
pid=$(podman inspect --format '{{.State.Pid}}' "$victim")
[[ "$pid" -gt 1 ]] || fail "no pid for $victim"
log "kill -9 $pid (runtime-api's nexus serve)"
kill -9 "$pid"
restarted() { [[ $(podman inspect --format '{{.State.StartedAt}}' "$victim") != "$old_start" ]]; }
wait_until 90 "runtime-api restarted by its restart policy" restarted
wait_until 180 "runtime-api's healthcheck passing again" podman healthcheck run "$victim"
wait_until 60 "the gateway ready again" gateway_ready
wait_until 60 "SOQL through the restarted runtime-api" soql_finds_acme
log "runtime-api restarted (restarts: $(podman inspect --format '{{.RestartCount}}' "$victim")) and healthy"

step "compose up again (the one-shot jobs are idempotent)"
started_at() { podman inspect --format '{{.State.StartedAt}}' "$(container_of "$1")"; }
before=$(started_at install-apps)
COMPOSE_TIMEOUT=600 compose up -d >"$WORK/up2.log" 2>&1 ||
  { tail -n 40 "$WORK/up2.log" >&2; fail "compose up (again)"; }
[[ $(started_at install-apps) != "$before" ]] || fail "install-apps did not run again"
wait_until 300 "install-apps to finish again" exited_ok install-apps
for job in init-secrets migrate; do exited_ok "$job" || fail "$job has not finished"; done
wait_until 60 "the gateway ready" gateway_ready
soql_finds_acme || fail "the Account is gone after compose up again"

step "compose down"
if [[ "${NEXUS_IMAGE_TEST_KEEP:-}" != 1 ]]; then
  teardown
  [[ -z "$(project_containers -q)" ]] || fail "containers left after down"
fi
TIMING[total]=$((SECONDS - T_START))
STEP="done"

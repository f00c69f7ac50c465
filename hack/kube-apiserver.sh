#!/usr/bin/env bash
# A real kube-apiserver (1.20.2) + etcd for Tidemark's tests.
#
#   hack/kube-apiserver.sh build              build kube-apiserver once into the cache (about 5 min)
#   hack/kube-apiserver.sh build-scheduler    build kube-scheduler from the same cached tree
#   hack/kube-apiserver.sh build-kubelet      build kubelet from the same cached tree (real-node cluster)
#   hack/kube-apiserver.sh build-kubectl      build kubectl 1.20.2 (kustomize built in) from the same tree
#   hack/kube-apiserver.sh build-controller-manager  build kube-controller-manager (DaemonSets, Deployments, tokens)
#   hack/kube-apiserver.sh build-kubemark     build kubemark (hollow nodes: a real kubelet, a fake runtime; fleet scale)
#   hack/kube-apiserver.sh start DIR [--authz RBAC|AlwaysAllow] [--user NAME[=GROUP,...]]... [--watch-pid PID]
#                              [--bind-address IP] [--secure-port PORT] [--service-accounts] [--audit-log FILE]
#   hack/kube-apiserver.sh stop DIR
#   hack/kube-apiserver.sh env                the binaries it would use, or why there are none
#
# Why build: Debian bookworm ships no kube-apiserver binary, but its source package src:kubernetes
# builds one with Debian's own Go, and Debian ships etcd 3.4. Everything lives in a cache outside
# the checkout (TIDEMARK_CACHE, else XDG_CACHE_HOME/tidemark, else ~/.cache/tidemark), so it is
# built once per machine. /etc/apt is never modified: the source is fetched with a private apt
# configuration. See docs/testing.md for the facts behind every flag below.
#
# Exit codes: 0 ok, 1 failure, 2 bad usage, 3 cannot build here (missing packages and not root,
# or no apt), with the reason (and the command to run) on stderr.
set -euo pipefail

readonly KUBE_VERSION=1.20.2
readonly DEB_SRC_VERSION=1.20.5+really1.20.2-1.1+deb12u1
readonly BUILD_DEPS=(golang-go etcd-server rsync jq golang-github-modern-go-reflect2-dev openssl curl)
readonly REFLECT2_DEBIAN=/usr/share/gocode/src/github.com/modern-go/reflect2
readonly CACHE_ROOT="${TIDEMARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark}"
readonly KUBE_CACHE="$CACHE_ROOT/kube-$KUBE_VERSION"
readonly BIN_DIR="$KUBE_CACHE/bin"
readonly SRC_DIR="$KUBE_CACHE/src"
readonly BUILD_LOG="$KUBE_CACHE/build.log"
# Users with a static bearer token: name and comma-separated groups. `admin` is the cluster admin;
# the component users start with no rights, so RBAC tests prove that the shipped roles suffice;
# tester-* are free for tests to bind roles to.
readonly DEFAULT_USERS=(
  "admin=system:masters"
  "tidemark-scheduler="
  "tidemark-agent="
  "kube-scheduler="
  "tester-1="
  "tester-2="
  "tester-3="
)
readonly READY_TIMEOUT=60

log() { printf '%s\n' "$*" >&2; }
die() { log "kube-apiserver.sh: $*"; exit 1; }
usage() {
  sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# --- locating binaries -------------------------------------------------------------------------

# Prints the kube-apiserver binary to use, or fails with the reason on stderr.
find_apiserver() {
  if [[ -n "${KUBE_APISERVER:-}" ]]; then
    [[ -x "$KUBE_APISERVER" ]] || { log "KUBE_APISERVER=$KUBE_APISERVER is not an executable file"; return 1; }
    printf '%s\n' "$KUBE_APISERVER"
  elif [[ -x "$BIN_DIR/kube-apiserver" ]]; then
    printf '%s\n' "$BIN_DIR/kube-apiserver"
  else
    log "no kube-apiserver: KUBE_APISERVER is unset and $BIN_DIR/kube-apiserver is not built (run: $0 build)"
    return 1
  fi
}

find_etcd() {
  if [[ -n "${ETCD:-}" ]]; then
    [[ -x "$ETCD" ]] || { log "ETCD=$ETCD is not an executable file"; return 1; }
    printf '%s\n' "$ETCD"
  elif command -v etcd >/dev/null 2>&1; then
    command -v etcd
  else
    log "no etcd: ETCD is unset and etcd is not on PATH (Debian: apt-get install etcd-server)"
    return 1
  fi
}

find_scheduler() {
  if [[ -n "${KUBE_SCHEDULER:-}" ]]; then
    [[ -x "$KUBE_SCHEDULER" ]] || { log "KUBE_SCHEDULER=$KUBE_SCHEDULER is not an executable file"; return 1; }
    printf '%s\n' "$KUBE_SCHEDULER"
  elif [[ -x "$BIN_DIR/kube-scheduler" ]]; then
    printf '%s\n' "$BIN_DIR/kube-scheduler"
  else
    log "no kube-scheduler: KUBE_SCHEDULER is unset and $BIN_DIR/kube-scheduler is not built (run: $0 build-scheduler)"
    return 1
  fi
}

cmd_env() {
  local ok=0 a e s
  a=$(find_apiserver) || ok=1
  e=$(find_etcd) || ok=1
  s=$(find_scheduler 2>/dev/null) || s=""
  [[ -n "${a:-}" ]] && printf 'KUBE_APISERVER=%s\n' "$a"
  [[ -n "${e:-}" ]] && printf 'ETCD=%s\n' "$e"
  [[ -n "$s" ]] && printf 'KUBE_SCHEDULER=%s\n' "$s"
  printf 'TIDEMARK_CACHE=%s\n' "$CACHE_ROOT"
  return "$ok"
}

# --- build ------------------------------------------------------------------------------------

stage() { log "[kube-apiserver build $1/5] $2"; }

missing_packages() {
  local p st
  for p in "${BUILD_DEPS[@]}"; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ "$st" == installed ]] || printf '%s\n' "$p"
  done
}

# Installs Debian's build dependencies (root), or says exactly what to run (exit 3).
ensure_deps() {
  command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 ||
    { log "cannot build kube-apiserver here: no apt/dpkg (this build needs Debian 12's src:kubernetes); set KUBE_APISERVER and ETCD to existing binaries instead"; exit 3; }
  local missing
  mapfile -t missing < <(missing_packages)
  ((${#missing[@]} == 0)) && return 0
  if ((EUID != 0)); then
    log "missing Debian packages: ${missing[*]}; run as root:"
    log "apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
    exit 3
  fi
  local p need_update=0
  for p in "${missing[@]}"; do
    apt-cache show "$p" >/dev/null 2>&1 || need_update=1
  done
  if ((need_update)); then
    log "  apt-get update"
    apt-get update -qq >>"$BUILD_LOG" 2>&1 || { tail -n 20 "$BUILD_LOG" >&2; die "apt-get update failed (log: $BUILD_LOG)"; }
  fi
  log "  apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$BUILD_LOG" 2>&1 ||
    { tail -n 20 "$BUILD_LOG" >&2; die "apt-get install failed (log: $BUILD_LOG)"; }
}

# Writes a deb-src entry for this machine's own Debian mirror into $1 (an apt SourceParts dir).
write_deb_src() {
  local parts=$1
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    # deb822: the same stanzas (mirror, suites, keyring), as source entries.
    sed -E 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$parts/tidemark-src.sources"
  elif [[ -f /etc/apt/sources.list ]]; then
    sed -nE 's/^[[:space:]]*deb[[:space:]]+/deb-src /p' /etc/apt/sources.list >"$parts/tidemark-src.list"
    [[ -s "$parts/tidemark-src.list" ]] || die "no 'deb' line in /etc/apt/sources.list to derive a deb-src entry from"
  else
    die "neither /etc/apt/sources.list.d/debian.sources nor /etc/apt/sources.list names a Debian mirror"
  fi
}

# Downloads and unpacks src:kubernetes into $SRC_DIR, with Debian's reflect2 (once).
fetch_source() {
  if [[ -f "$SRC_DIR/.tidemark-ready" ]]; then
    stage 2 "fetching source... (cached in $SRC_DIR)"
    stage 3 "unpacking source... (cached)"
    return 0
  fi
  stage 2 "fetching source kubernetes=$DEB_SRC_VERSION (private apt config, /etc/apt untouched)..."
  rm -rf "$KUBE_CACHE"/src.tmp.* # left by an interrupted run (we hold the build lock)
  local apt="$KUBE_CACHE/apt"
  rm -rf "$apt"
  mkdir -p "$apt/sources" "$apt/lists/partial" "$apt/cache/archives/partial" "$KUBE_CACHE/download"
  write_deb_src "$apt/sources"
  local opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt/sources"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache")
  ((EUID == 0)) && opts+=(-o "APT::Sandbox::User=root")
  apt-get "${opts[@]}" update >>"$BUILD_LOG" 2>&1 || { tail -n 20 "$BUILD_LOG" >&2; die "private apt-get update failed (log: $BUILD_LOG)"; }
  (cd "$KUBE_CACHE/download" && apt-get "${opts[@]}" source --download-only "kubernetes=$DEB_SRC_VERSION") >>"$BUILD_LOG" 2>&1 ||
    { tail -n 20 "$BUILD_LOG" >&2; die "apt-get source failed (log: $BUILD_LOG)"; }

  stage 3 "unpacking source and replacing vendored reflect2 with Debian's..."
  local tmp
  tmp=$(mktemp -d "$KUBE_CACHE/src.tmp.XXXXXX")
  local dsc="$KUBE_CACHE/download/kubernetes_${DEB_SRC_VERSION#*:}.dsc"
  if command -v dpkg-source >/dev/null 2>&1; then
    dpkg-source --no-copy --no-check -x "$dsc" "$tmp/tree" >>"$BUILD_LOG" 2>&1 || { tail -n 20 "$BUILD_LOG" >&2; die "dpkg-source -x failed"; }
  else
    # No dpkg-dev: unpack by hand and apply Debian's quilt series.
    mkdir -p "$tmp/tree"
    tar -xzf "$KUBE_CACHE"/download/kubernetes_*.orig.tar.gz -C "$tmp/tree" --strip-components=1
    tar -xJf "$KUBE_CACHE"/download/kubernetes_*.debian.tar.xz -C "$tmp/tree"
    local p
    while read -r p; do
      [[ -z "$p" || "$p" == \#* ]] && continue
      patch -d "$tmp/tree" -p1 -s <"$tmp/tree/debian/patches/$p" >>"$BUILD_LOG" 2>&1 || die "patch $p failed"
    done <"$tmp/tree/debian/patches/series"
  fi
  # The vendored reflect2 1.0.1 makes the server segfault on the first custom object create under
  # Go >= 1.18; Debian's copy is fixed.
  local vr="$tmp/tree/vendor/github.com/modern-go/reflect2"
  [[ -d "$vr" && -d "$REFLECT2_DEBIAN" ]] || die "reflect2 not found ($vr or $REFLECT2_DEBIAN)"
  rm -f "$vr"/*.go "$vr"/*.s
  cp "$REFLECT2_DEBIAN"/*.go "$vr"/
  compgen -G "$REFLECT2_DEBIAN/*.s" >/dev/null && cp "$REFLECT2_DEBIAN"/*.s "$vr"/
  touch "$tmp/tree/.tidemark-ready"
  rm -rf "$SRC_DIR"
  mv "$tmp/tree" "$SRC_DIR"
  rm -rf "$tmp"
}

# make WHAT=cmd/$1 in the cached tree, streaming the tree's own "+++" progress lines.
make_target() {
  local what=$1 stage_no=$2
  stage "$stage_no" "building $what (make WHAT=$what; about 5 min the first time; log: $BUILD_LOG)..."
  local started=$SECONDS rc=0
  (
    cd "$SRC_DIR"
    export KUBE_GIT_VERSION="v$KUBE_VERSION" KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean
    export KUBE_GIT_COMMIT=0000000000000000000000000000000000000000 CGO_ENABLED=0
    # Everything stays in the cache; the Go proxy is never asked (the tree is vendored).
    export GOPROXY=off GOFLAGS=-mod=vendor
    exec make WHAT="$what"
  ) >>"$BUILD_LOG" 2>&1 &
  local pid=$!
  # A heartbeat: compiling cmd/kube-apiserver alone prints nothing for minutes.
  (while sleep 30 && alive "$pid"; do log "  ... still building $what ($((SECONDS - started)) s)"; done) &
  local heartbeat=$!
  # shellcheck disable=SC2064 # expand the pids now
  trap "kill $pid $heartbeat 2>/dev/null || true" EXIT
  # Echo the tree's own progress lines while make runs; tail exits when make does.
  tail -n 0 -F --pid="$pid" "$BUILD_LOG" 2>/dev/null | grep --line-buffered -E '^\+\+\+ |^    [[:alnum:]./_-]+$' | sed -u 's/^/  /' >&2 || true
  wait "$pid" || rc=$?
  kill "$heartbeat" 2>/dev/null || true
  trap - EXIT
  if ((rc != 0)); then
    log "---- last 40 lines of $BUILD_LOG ----"
    tail -n 40 "$BUILD_LOG" >&2
    die "make WHAT=$what failed (exit $rc)"
  fi
  log "  built $what in $((SECONDS - started)) s"
}

# Copies the built binary next to its final name, then renames it: never a half binary.
install_binary() {
  local name=$1 stage_no=$2 built
  stage "$stage_no" "installing $BIN_DIR/$name..."
  built=$(readlink -f "$SRC_DIR/_output/bin/$name" 2>/dev/null || true)
  [[ -x "$built" ]] || built=$(find "$SRC_DIR/_output" -type f -name "$name" -perm -u+x -print -quit)
  [[ -x "$built" ]] || die "make succeeded but no $name binary under $SRC_DIR/_output"
  mkdir -p "$BIN_DIR"
  rm -f "$BIN_DIR/.$name".* # left by an interrupted run (we hold the build lock)
  local tmp
  tmp=$(mktemp "$BIN_DIR/.$name.XXXXXX")
  cp "$built" "$tmp"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$BIN_DIR/$name"
  log "  $BIN_DIR/$name"
}

# One build at a time per cache (two test sessions may start together).
with_build_lock() {
  mkdir -p "$KUBE_CACHE"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$KUBE_CACHE/build.lock"
    flock 9
  fi
}

cmd_build() {
  local name=${1:-kube-apiserver}
  if [[ -x "$BIN_DIR/$name" ]] && find_etcd >/dev/null 2>&1; then
    printf '%s\n' "$BIN_DIR/$name"
    return 0
  fi
  with_build_lock
  : >>"$BUILD_LOG"
  local t0=$SECONDS
  stage 1 "checking Debian build dependencies..."
  ensure_deps
  if [[ -x "$BIN_DIR/$name" ]]; then # built by a concurrent run, or only etcd was missing
    printf '%s\n' "$BIN_DIR/$name"
    return 0
  fi
  log "  log: $BUILD_LOG"
  printf '\n==== %s build %s (%s) ====\n' "$(date -u +%FT%TZ)" "$name" "$KUBE_VERSION" >>"$BUILD_LOG"
  fetch_source
  make_target "cmd/$name" 4
  install_binary "$name" 5
  log "[kube-apiserver build] done in $((SECONDS - t0)) s"
  printf '%s\n' "$BIN_DIR/$name"
}

# --- start / stop -----------------------------------------------------------------------------

# Prints N distinct free loopback TCP ports (held open together, so they differ).
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Polls until "$@" succeeds, the process $1 dies (return 2) or READY_TIMEOUT passes (return 1).
wait_for() {
  local pid=$1
  shift
  local deadline=$((SECONDS + READY_TIMEOUT))
  while ! "$@" >/dev/null 2>&1; do
    alive "$pid" || return 2
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}

# True while the process exists and is not a zombie.
alive() {
  [[ -r "/proc/$1/stat" ]] || return 1
  local stat
  stat=$(<"/proc/$1/stat") || return 1
  stat=${stat##*) }
  [[ "${stat%% *}" != Z ]]
}

# True iff pid $1's command line mentions DIR $2: never signal a recycled pid.
owned() {
  alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"
}

token() { openssl rand -hex 16; }

env_key() { # user name -> NAME_TOKEN variable
  local k=${1^^}
  k=${k//[^A-Z0-9]/_}
  printf '%s_TOKEN' "$k"
}

write_kubeconfig() { # file url user token
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tidemark-test
  cluster:
    server: $2
    insecure-skip-tls-verify: true
users:
- name: $3
  user:
    token: $4
contexts:
- name: $3@tidemark-test
  context:
    cluster: tidemark-test
    user: $3
current-context: $3@tidemark-test
EOF
  chmod 0600 "$1"
}

etcd_healthy() { curl -fsS --max-time 1 "$1/health" | grep -q '"health":"true"'; }
apiserver_ready() { curl -fsSk --max-time 1 -H "Authorization: Bearer $2" "$1/readyz" | grep -qx ok; }

cmd_start() {
  [[ $# -ge 1 ]] || usage
  local dir=$1
  shift
  local authz=RBAC watch_pid="" users=("${DEFAULT_USERS[@]}")
  # A real node's pods reach the server at a non-loopback address and fixed port, with
  # ServiceAccount tokens (the real-node cluster, localcluster/realnode.py); tests use the defaults.
  local bind_addr=127.0.0.1 fixed_port="" disabled_admission=ServiceAccount,TaintNodesByCondition audit_log=""
  while (($#)); do
    case $1 in
      --authz) authz=${2:?--authz needs RBAC or AlwaysAllow}; shift 2 ;;
      --authz=*) authz=${1#*=}; shift ;;
      --user) users+=("${2:?--user needs NAME[=GROUP,...]}"); shift 2 ;;
      --user=*) users+=("${1#*=}"); shift ;;
      --watch-pid) watch_pid=${2:?--watch-pid needs a pid}; shift 2 ;;
      --watch-pid=*) watch_pid=${1#*=}; shift ;;
      --bind-address) bind_addr=${2:?--bind-address needs an IP}; shift 2 ;;
      --secure-port) fixed_port=${2:?--secure-port needs a port}; shift 2 ;;
      --service-accounts) disabled_admission=TaintNodesByCondition; shift ;;
      --audit-log) audit_log=${2:?--audit-log needs a file}; shift 2 ;;
      *) usage ;;
    esac
  done
  case $authz in RBAC | AlwaysAllow) ;; *) log "--authz must be RBAC or AlwaysAllow"; exit 2 ;; esac
  [[ "$dir" =~ ^[A-Za-z0-9._/+@:,-]+$ ]] || { log "DIR must be a plain path (no spaces or quotes): $dir"; exit 2; }
  local apiserver etcd
  apiserver=$(find_apiserver) || exit 3
  etcd=$(find_etcd) || exit 3
  command -v openssl >/dev/null || { log "openssl is needed (service account key, tokens)"; exit 3; }
  command -v curl >/dev/null || { log "curl is needed (readiness checks)"; exit 3; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [[ -f "$dir/env" ]]; then
    local old
    old=$(sed -n 's/^KUBE_APISERVER_PID=//p' "$dir/env")
    [[ -n "$old" ]] && owned "$old" "$dir" && die "$dir is in use by running kube-apiserver pid $old (run: $0 stop $dir)"
  fi
  rm -rf "$dir/etcd-data" "$dir/certs" "$dir/kubeconfigs"
  rm -f "$dir/env" "$dir/kubeconfig"
  mkdir -p "$dir/certs" "$dir/kubeconfigs"
  local t0=$EPOCHREALTIME

  # Credentials: a fresh service account key and one static token per user.
  openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
  # A client CA: x509 authentication as in a cluster (kubelets, a systemd agent's tidemark:agent:<node>
  # certificate); tests sign client certificates with its key (CLIENT_CA_FILE, CLIENT_CA_KEY in env).
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
    -subj /CN=tidemark-test-client-ca -keyout "$dir/client-ca.key" -out "$dir/client-ca.crt" 2>/dev/null
  : >"$dir/tokens.csv"
  chmod 0600 "$dir/tokens.csv" "$dir/sa.key" "$dir/client-ca.key"
  local -A tok=()
  local spec name groups
  for spec in "${users[@]}"; do
    name=${spec%%=*}
    groups=""
    [[ "$spec" == *=* ]] && groups=${spec#*=}
    [[ -n "$name" && "$name" != *[,\"]* ]] || die "bad user spec: $spec"
    tok[$name]=$(token)
    if [[ -n "$groups" ]]; then
      printf '%s,%s,%s,"%s"\n' "${tok[$name]}" "$name" "$name" "$groups" >>"$dir/tokens.csv"
    else
      printf '%s,%s,%s\n' "${tok[$name]}" "$name" "$name" >>"$dir/tokens.csv"
    fi
  done
  [[ -n "${tok[admin]:-}" ]] || die "user admin is required"

  # etcd on free loopback ports; retried if another process grabbed a port meanwhile.
  local attempt etcd_pid="" etcd_url="" cport pport rc
  for attempt in 1 2 3; do
    read -r cport pport < <(free_ports 2)
    etcd_url="http://127.0.0.1:$cport"
    rm -rf "$dir/etcd-data"
    setsid "$etcd" --name tidemark --data-dir "$dir/etcd-data" \
      --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
      --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
      --initial-cluster "tidemark=http://127.0.0.1:$pport" --initial-cluster-state new \
      --unsafe-no-fsync=true --quota-backend-bytes=2147483648 \
      </dev/null >"$dir/etcd.log" 2>&1 &
    etcd_pid=$!
    rc=0
    wait_for "$etcd_pid" etcd_healthy "$etcd_url" || rc=$?
    ((rc == 0)) && break
    if ((rc == 2)) && grep -q 'address already in use' "$dir/etcd.log" && ((attempt < 3)); then
      continue
    fi
    owned "$etcd_pid" "$dir" && kill "$etcd_pid" 2>/dev/null || true
    tail -n 20 "$dir/etcd.log" >&2
    die "etcd did not become healthy (log: $dir/etcd.log)"
  done

  # Every request's metadata (user, verb, resource), one JSON line each: how the fleet benchmark counts
  # each client's API traffic (benchmarks/bench_fleet.py); a watch is logged when it starts.
  local audit=()
  if [[ -n "$audit_log" ]]; then
    printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' 'omitStages: [RequestReceived]' \
      'rules: [{level: Metadata}]' >"$dir/audit-policy.yaml"
    audit=(--audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$audit_log" --audit-log-format=json
      --audit-log-maxsize=0 --audit-log-mode=batch)
  fi
  local api_pid="" api_url="" sport
  for attempt in 1 2 3; do
    if [[ -n "$fixed_port" ]]; then sport=$fixed_port; else read -r sport < <(free_ports 1); fi
    api_url="https://$bind_addr:$sport"
    setsid "$apiserver" \
      --etcd-servers="$etcd_url" \
      --secure-port="$sport" --bind-address="$bind_addr" --advertise-address="$bind_addr" \
      --cert-dir="$dir/certs" \
      --token-auth-file="$dir/tokens.csv" \
      --client-ca-file="$dir/client-ca.crt" \
      --enable-aggregator-routing=true \
      --authorization-mode="$authz" \
      --service-account-issuer=https://tidemark.invalid \
      --service-account-key-file="$dir/sa.key" \
      --service-account-signing-key-file="$dir/sa.key" \
      --service-cluster-ip-range=10.96.0.0/16 \
      --disable-admission-plugins="$disabled_admission" \
      --enable-priority-and-fairness=false \
      --endpoint-reconciler-type=none \
      --allow-privileged=true \
      "${audit[@]}" \
      </dev/null >"$dir/kube-apiserver.log" 2>&1 &
    api_pid=$!
    rc=0
    wait_for "$api_pid" apiserver_ready "$api_url" "${tok[admin]}" || rc=$?
    ((rc == 0)) && break
    if ((rc == 2)) && [[ -z "$fixed_port" ]] && grep -q 'address already in use' "$dir/kube-apiserver.log" && ((attempt < 3)); then
      continue
    fi
    owned "$api_pid" "$dir" && kill "$api_pid" 2>/dev/null || true
    owned "$etcd_pid" "$dir" && kill "$etcd_pid" 2>/dev/null || true
    tail -n 20 "$dir/kube-apiserver.log" >&2
    ((rc == 1)) && die "kube-apiserver not ready after ${READY_TIMEOUT}s (log: $dir/kube-apiserver.log)"
    die "kube-apiserver exited (log: $dir/kube-apiserver.log)"
  done
  local ready_s
  ready_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')

  # The watchdog stops everything when the watched process (the test session) dies, even by
  # SIGKILL, so no server outlives its tests.
  local wd_pid=""
  if [[ -n "$watch_pid" ]]; then
    # (A zombie counts as dead: its parent may not have reaped it yet.)
    setsid bash -c 'while s=$(<"/proc/$1/stat") && s=${s##*) } && [[ ${s%% *} != Z ]]; do sleep 1; done 2>/dev/null
      exec bash "$2" stop "$3"' \
      tidemark-watchdog "$watch_pid" "$(readlink -f "$0")" "$dir" </dev/null >>"$dir/watchdog.log" 2>&1 &
    wd_pid=$!
  fi

  write_kubeconfig "$dir/kubeconfig" "$api_url" admin "${tok[admin]}"
  for name in "${!tok[@]}"; do
    write_kubeconfig "$dir/kubeconfigs/$name.kubeconfig" "$api_url" "$name" "${tok[$name]}"
  done
  {
    printf 'KUBE_API_URL=%s\n' "$api_url"
    printf 'KUBECONFIG=%s\n' "$dir/kubeconfig"
    printf 'KUBECONFIG_DIR=%s\n' "$dir/kubeconfigs"
    printf 'TOKEN_FILE=%s\n' "$dir/tokens.csv"
    printf 'CA_FILE=%s\n' "$dir/certs/apiserver.crt" # the server's self-signed certificate and its CA
    printf 'CLIENT_CA_FILE=%s\n' "$dir/client-ca.crt"
    printf 'CLIENT_CA_KEY=%s\n' "$dir/client-ca.key"
    printf 'ETCD_URL=%s\n' "$etcd_url"
    printf 'KUBE_APISERVER_BIN=%s\n' "$apiserver"
    printf 'ETCD_BIN=%s\n' "$etcd"
    printf 'KUBE_APISERVER_PID=%s\n' "$api_pid"
    printf 'ETCD_PID=%s\n' "$etcd_pid"
    printf 'WATCHDOG_PID=%s\n' "$wd_pid"
    printf 'AUTHORIZATION_MODE=%s\n' "$authz"
    printf 'STARTUP_SECONDS=%s\n' "$ready_s"
    for spec in "${users[@]}"; do
      name=${spec%%=*}
      printf '%s=%s\n' "$(env_key "$name")" "${tok[$name]}"
    done
  } >"$dir/env.tmp"
  chmod 0600 "$dir/env.tmp"
  mv -f "$dir/env.tmp" "$dir/env"
  log "kube-apiserver ready at $api_url in ${ready_s}s (etcd $etcd_url, authz $authz)"
  printf '%s\n' "$dir/env"
}

# Sends TERM, waits for the exit by polling, then KILL after 15 s.
stop_pid() {
  local pid=$1 dir=$2 what=$3
  [[ -n "$pid" ]] && owned "$pid" "$dir" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  local deadline=$((SECONDS + 15))
  while alive "$pid"; do
    if ((SECONDS >= deadline)); then
      log "$what (pid $pid) ignored SIGTERM for 15 s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 5))
    fi
    sleep 0.05
  done
}

cmd_stop() {
  [[ $# -eq 1 ]] || usage
  local dir
  dir=$(cd "$1" 2>/dev/null && pwd) || { log "no such directory: $1"; return 0; }
  [[ -f "$dir/env" ]] || { log "nothing to stop: $dir/env does not exist"; return 0; }
  local api etcd wd
  api=$(sed -n 's/^KUBE_APISERVER_PID=//p' "$dir/env")
  etcd=$(sed -n 's/^ETCD_PID=//p' "$dir/env")
  wd=$(sed -n 's/^WATCHDOG_PID=//p' "$dir/env")
  # Not the watchdog when it is the one calling stop.
  [[ -n "$wd" && "$wd" != "$$" && "$wd" != "$PPID" ]] && stop_pid "$wd" "$dir" watchdog
  stop_pid "$api" "$dir" kube-apiserver
  stop_pid "$etcd" "$dir" etcd
  mv -f "$dir/env" "$dir/env.stopped"
}

main() {
  [[ $# -ge 1 ]] || usage
  local cmd=$1
  shift
  case $cmd in
    build) [[ $# -eq 0 ]] || usage; cmd_build kube-apiserver ;;
    build-scheduler) [[ $# -eq 0 ]] || usage; cmd_build kube-apiserver >/dev/null; cmd_build kube-scheduler ;;
    build-kubelet) [[ $# -eq 0 ]] || usage; cmd_build kube-apiserver >/dev/null; cmd_build kubelet ;;
    build-kubectl) [[ $# -eq 0 ]] || usage; cmd_build kube-apiserver >/dev/null; cmd_build kubectl ;;
    build-controller-manager) [[ $# -eq 0 ]] || usage; cmd_build kube-apiserver >/dev/null; cmd_build kube-controller-manager ;;
    build-kubemark) [[ $# -eq 0 ]] || usage; cmd_build kube-apiserver >/dev/null; cmd_build kubemark ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    env) [[ $# -eq 0 ]] || usage; cmd_env ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"

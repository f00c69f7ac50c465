#!/usr/bin/env bash
# The Tidemark image (Containerfile), built with buildah, cached by content hash.
#
#   hack/image.sh build     build (or reuse) the image; prints the docker-archive path containerd imports
#   hack/image.sh ref       the image reference the manifests name (tidemark/tidemark:<version>)
#   hack/image.sh deps      install buildah + mmdebstrap (Debian, root), or say what is missing
#   hack/image.sh workload  build (or reuse) the small workload image (busybox-static); prints its archive
#
# Steps of `build`: (1) the project's wheel and all its dependencies as wheels (pip wheel, from the
# index pip is configured with), put in a build context with nothing else; (2) the FROM image: used
# if buildah's store has it; where mmdebstrap exists (Debian) it is made from Debian's packages
# (variant minbase, docs and locales left out as the official slim image does) and tagged with the
# FROM name, so no registry is asked; elsewhere buildah pulls it; (3) `buildah build` of the
# Containerfile (chroot isolation: the RUN steps use the host's network for apt); (4) the result
# exported as a docker-archive (`ctr images import`, `docker load`, `podman load` read it).
# The content hash covers the Containerfile, this script, pyproject.toml and the package sources:
# the same inputs give the cached archive back at once.
#
# Everything lives in TIDEMARK_CACHE/image (default ~/.cache/tidemark/image), buildah's store too.
# Environment: TIDEMARK_IMAGE (reference, default tidemark/tidemark:<version>), TIDEMARK_IMAGE_BASE
# (mmdebstrap|pull|auto; default auto). Exit codes: 0 ok, 1 failure, 2 usage, 3 cannot build here.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly REPO=$PWD
readonly CACHE_ROOT="${TIDEMARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark}"
readonly IMG_CACHE="$CACHE_ROOT/image"
readonly STORE=(--root "$IMG_CACHE/storage" --runroot "$IMG_CACHE/runroot" --storage-driver vfs)
readonly LOG="$IMG_CACHE/build.log"
readonly DEPS=(buildah mmdebstrap busybox-static)
SUITE=bookworm

log() { printf '%s\n' "$*" >&2; }
die() { log "image.sh: $*"; exit 1; }
usage() { sed -n '3,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# The one version source is tidemark.__version__ (pyproject's version is dynamic, read from it).
version() {
  local v
  v=$(sed -n 's/^__version__ = "\([^"]*\)".*/\1/p' tidemark/__init__.py | head -n 1)
  [[ -n "$v" ]] || v=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n 1)
  [[ -n "$v" ]] || die "no version in tidemark/__init__.py or pyproject.toml"
  printf '%s\n' "$v"
}
image_ref() { printf '%s\n' "${TIDEMARK_IMAGE:-tidemark/tidemark:$(version)}"; }
from_ref() { sed -n 's/^FROM[[:space:]]\{1,\}\([^[:space:]]*\).*/\1/p' Containerfile | head -n 1; }

missing_packages() {
  local p st
  for p in "${DEPS[@]}"; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ "$st" == installed ]] || printf '%s\n' "$p"
  done
}

cmd_deps() {
  command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 || {
    command -v buildah >/dev/null 2>&1 && return 0
    log "no buildah and no apt to install it: install buildah (https://buildah.io) and retry"; exit 3; }
  local missing
  mapfile -t missing < <(missing_packages)
  ((${#missing[@]} == 0)) && return 0
  if ((EUID != 0)); then
    log "missing Debian packages: ${missing[*]}; run as root:"
    log "apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
    exit 3
  fi
  log "  apt-get install ${missing[*]}"
  mkdir -p "$IMG_CACHE"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 \
    "${missing[@]}" >>"$LOG" 2>&1 || {
    apt-get update -qq -o DPkg::Lock::Timeout=600 >>"$LOG" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 \
      "${missing[@]}" >>"$LOG" 2>&1 || { tail -n 20 "$LOG" >&2; die "apt-get install failed (log: $LOG)"; }
  }
}

# sha256 over the inputs of the image, by content (not by git: uncommitted edits count).
content_hash() {
  python3 - "$@" <<'PY'
import hashlib, os, sys
h = hashlib.sha256()
files = ["Containerfile", "hack/image.sh", "pyproject.toml", "README.md"]
for top in ("agent", "scheduler_ext", "tidemark"):
    for d, dirs, names in os.walk(top):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        files += [os.path.join(d, n) for n in sorted(names) if not n.endswith((".pyc", ".pyo"))]
for f in files:
    h.update(f.encode() + b"\0")
    with open(f, "rb") as fh:
        h.update(hashlib.sha256(fh.read()).digest())
for extra in sys.argv[1:]:
    h.update(extra.encode() + b"\0")
print(h.hexdigest()[:16])
PY
}

bah() { buildah "${STORE[@]}" "$@"; }

with_lock() {
  mkdir -p "$IMG_CACHE"
  exec 8>"$IMG_CACHE/build.lock"
  flock 8
}

# The FROM image in buildah's store: present, made with mmdebstrap, or pulled.
ensure_base() {
  local from=$1 mode=${TIDEMARK_IMAGE_BASE:-auto}
  if bah inspect --type image "$from" >/dev/null 2>&1; then
    log "[image 2/4] base $from: in the store"
    return 0
  fi
  if [[ $mode == pull ]] || { [[ $mode == auto ]] && ! command -v mmdebstrap >/dev/null 2>&1; }; then
    log "[image 2/4] base $from: pulling"
    bah pull "$from" >>"$LOG" 2>&1 || { tail -n 20 "$LOG" >&2; die "buildah pull $from failed"; }
    return 0
  fi
  command -v mmdebstrap >/dev/null 2>&1 || die "TIDEMARK_IMAGE_BASE=mmdebstrap but mmdebstrap is not installed"
  local t0=$SECONDS mirror rootfs
  mirror=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -n 1)
  mirror=${mirror:-http://deb.debian.org/debian}
  log "[image 2/4] base $from: no registry asked; making it with mmdebstrap ($SUITE minbase from $mirror)..."
  rootfs="$IMG_CACHE/base-$SUITE.tar"
  rm -f "$rootfs.tmp"
  # As Debian's official slim images: minbase, no docs/man/locales, apt lists emptied.
  mmdebstrap --variant=minbase --mode=root --format=tar \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --aptopt='Acquire::Languages "none"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$SUITE" "$rootfs.tmp" "deb $mirror $SUITE main" "deb $mirror $SUITE-updates main" \
    "deb ${mirror%/debian}/debian-security $SUITE-security main" >>"$LOG" 2>&1 ||
    { tail -n 20 "$LOG" >&2; die "mmdebstrap failed (log: $LOG)"; }
  mv -f "$rootfs.tmp" "$rootfs"
  local ctr
  ctr=$(bah from --pull=false scratch)
  bah add "$ctr" "$rootfs" / >>"$LOG" 2>&1
  bah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  bah commit --rm -q "$ctr" "$from" >>"$LOG" 2>&1 || die "buildah commit of the base failed"
  rm -f "$rootfs"
  log "  base made in $((SECONDS - t0)) s"
}

cmd_build() {
  cmd_deps
  command -v buildah >/dev/null 2>&1 || { log "buildah is not installed"; exit 3; }
  ((EUID == 0)) || { log "building the image needs root here (buildah with chroot isolation)"; exit 3; }
  with_lock
  : >>"$LOG"
  local ref hash archive from t0=$SECONDS
  ref=$(image_ref)
  from=$(from_ref)
  hash=$(content_hash "$ref")
  archive="$IMG_CACHE/tidemark-$hash.tar"
  if [[ -s "$archive" ]]; then
    log "[image] $ref: cached ($archive)"
    printf '%s\n' "$archive"
    return 0
  fi
  printf '\n==== %s image %s (%s) ====\n' "$(date -u +%FT%TZ)" "$ref" "$hash" >>"$LOG"
  log "[image 1/4] wheels of tidemark and its dependencies (pip wheel)..."
  local ctx
  rm -rf "$IMG_CACHE"/ctx.*
  ctx=$(mktemp -d "$IMG_CACHE/ctx.XXXXXX")
  local py=python3
  [[ -x "$REPO/.venv/bin/python" ]] && py="$REPO/.venv/bin/python"
  "$py" -m pip wheel -q --wheel-dir "$ctx/wheels" "$REPO" >>"$LOG" 2>&1 ||
    { tail -n 20 "$LOG" >&2; die "pip wheel failed (log: $LOG)"; }
  ensure_base "$from"
  log "[image 3/4] buildah build -f Containerfile (log: $LOG)..."
  bah build --pull=false --isolation chroot --layers=false -f "$REPO/Containerfile" -t "$ref" "$ctx" >>"$LOG" 2>&1 ||
    { tail -n 30 "$LOG" >&2; die "buildah build failed (log: $LOG)"; }
  log "[image 4/4] exporting $archive (docker-archive)..."
  rm -f "$IMG_CACHE"/tidemark-*.tar "$archive.tmp"
  bah push -q "$ref" "docker-archive:$archive.tmp:$ref" >>"$LOG" 2>&1 || die "buildah push to docker-archive failed"
  mv -f "$archive.tmp" "$archive"
  rm -rf "$ctx"
  log "[image] built $ref in $((SECONDS - t0)) s: $archive ($(du -h "$archive" | cut -f1))"
  printf '%s\n' "$archive"
}

# A tiny image for workloads and the pod sandbox: busybox-static as /bin/*, no registry needed.
cmd_workload() {
  cmd_deps
  local bb=/bin/busybox
  [[ -x $bb ]] || die "busybox-static is not installed"
  mkdir -p "$IMG_CACHE"
  local hash archive
  hash=$(sha256sum "$bb" "$0" | sha256sum | cut -c1-16)
  archive="$IMG_CACHE/workload-$hash.tar"
  if [[ ! -s "$archive" ]]; then
    python3 - "$bb" "$archive.tmp" "${TIDEMARK_WORKLOAD_IMAGE:-localhost/tidemark/workload:1}" <<'PY'
import hashlib, io, json, subprocess, sys, tarfile
bb, out, ref = sys.argv[1:]
names = subprocess.run([bb, "--list"], capture_output=True, text=True, check=True).stdout.split()
layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w") as t:
    for d in ("bin", "tmp", "etc", "proc", "sys", "dev"):
        ti = tarfile.TarInfo(d); ti.type = tarfile.DIRTYPE; ti.mode = 0o1777 if d == "tmp" else 0o755
        t.addfile(ti)
    with open(bb, "rb") as fh:
        data = fh.read()
    ti = tarfile.TarInfo("bin/busybox"); ti.size = len(data); ti.mode = 0o755
    t.addfile(ti, io.BytesIO(data))
    for n in names:
        if n == "busybox":
            continue
        ti = tarfile.TarInfo("bin/" + n); ti.type = tarfile.SYMTYPE; ti.linkname = "busybox"
        t.addfile(ti)
    for name, text in (("etc/passwd", "root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"),
                       ("etc/group", "root:x:0:\nnobody:x:65534:\n")):
        b = text.encode(); ti = tarfile.TarInfo(name); ti.size = len(b); ti.mode = 0o644
        t.addfile(ti, io.BytesIO(b))
layer_bytes = layer.getvalue()
diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
config = {"architecture": "amd64", "os": "linux",
          "config": {"Env": ["PATH=/bin"], "Cmd": ["sleep", "infinity"]},
          "rootfs": {"type": "layers", "diff_ids": [diff_id]}, "history": [{"created_by": "hack/image.sh workload"}]}
cfg = json.dumps(config, sort_keys=True).encode()
cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
manifest = json.dumps([{"Config": cfg_name, "RepoTags": [ref], "Layers": ["layer.tar"]}]).encode()
with tarfile.open(out, "w") as t:
    for name, b in ((cfg_name, cfg), ("layer.tar", layer_bytes), ("manifest.json", manifest)):
        ti = tarfile.TarInfo(name); ti.size = len(b); ti.mode = 0o644
        t.addfile(ti, io.BytesIO(b))
PY
    mv -f "$archive.tmp" "$archive"
  fi
  printf '%s\n' "$archive"
}

main() {
  [[ $# -ge 1 ]] || usage
  case $1 in
    build) cmd_build ;;
    ref) image_ref ;;
    deps) cmd_deps ;;
    workload) cmd_workload ;;
    *) usage ;;
  esac
}
main "$@"

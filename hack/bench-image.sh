#!/usr/bin/env bash
# The colocation benchmark's workload image (benchmarks/bench_colocation.py): Debian's nginx-light and
# stress-ng in a minbase rootfs made with mmdebstrap, written as a docker-archive, cached by content hash.
#
#   hack/bench-image.sh build   build (or reuse) the image; prints the docker-archive path (`ctr images import`)
#   hack/bench-image.sh ref     the image reference inside the archive (localhost/tidemark/bench:<hash>)
#
# No registry is asked: mmdebstrap installs the packages from the machine's own Debian mirror (the URI in
# /etc/apt/sources.list.d/debian.sources, else deb.debian.org), as hack/image.sh makes the project image's
# base. The rootfs tar is the image's one layer; a small Python step writes the config and manifest around
# it. The hash covers this script (the package list and the suite are in it), so the same script gives the
# cached archive back at once; `TIDEMARK_BENCH_IMAGE_REBUILD=1` builds again (a newer point release).
# mmdebstrap comes from Debian (`hack/image.sh deps` installs it, as root). Everything lives in
# TIDEMARK_CACHE/image (default ~/.cache/tidemark/image). Exit codes: 0 ok, 1 failure, 2 usage, 3 cannot build here.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly CACHE_ROOT="${TIDEMARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark}"
readonly IMG_CACHE="$CACHE_ROOT/image"
readonly LOG="$IMG_CACHE/bench-build.log"
readonly SUITE=bookworm
# nginx-light: the online service; stress-ng: the offline interference; procps: ps/top for debugging a pod.
readonly PACKAGES=nginx-light,stress-ng,procps

log() { printf '%s\n' "$*" >&2; }
die() { log "bench-image.sh: $*"; exit 1; }
usage() { sed -n '5,6p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

content_hash() { sha256sum "$0" | cut -c1-16; }
image_ref() { printf 'localhost/tidemark/bench:%s\n' "$(content_hash)"; }

cmd_build() {
  ((EUID == 0)) || { log "building the bench image needs root (mmdebstrap --mode=root)"; exit 3; }
  command -v mmdebstrap >/dev/null 2>&1 || bash hack/image.sh deps
  command -v mmdebstrap >/dev/null 2>&1 || { log "mmdebstrap is not installed (Debian: apt-get install mmdebstrap)"; exit 3; }
  mkdir -p "$IMG_CACHE"
  exec 8>"$IMG_CACHE/bench-build.lock"
  flock 8
  local hash ref archive
  hash=$(content_hash)
  ref=$(image_ref)
  archive="$IMG_CACHE/bench-$hash.tar"
  if [[ -s "$archive" && -z "${TIDEMARK_BENCH_IMAGE_REBUILD:-}" ]]; then
    log "[bench image] $ref: cached ($archive)"
    printf '%s\n' "$archive"
    return 0
  fi
  local mirror rootfs t0=$SECONDS
  mirror=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -n 1)
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs="$IMG_CACHE/bench-rootfs.tar"
  printf '\n==== %s bench image %s ====\n' "$(date -u +%FT%TZ)" "$ref" >>"$LOG"
  log "[bench image 1/2] mmdebstrap $SUITE minbase + $PACKAGES from $mirror (log: $LOG)..."
  rm -f "$rootfs"
  # As hack/image.sh's base: no docs/man/locales, apt lists emptied. nginx's own log and pid paths stay.
  mmdebstrap --variant=minbase --mode=root --format=tar --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --aptopt='Acquire::Languages "none"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$SUITE" "$rootfs" "deb $mirror $SUITE main" "deb $mirror $SUITE-updates main" \
    "deb ${mirror%/debian}/debian-security $SUITE-security main" >>"$LOG" 2>&1 ||
    { tail -n 20 "$LOG" >&2; die "mmdebstrap failed (log: $LOG)"; }
  log "[bench image 2/2] docker-archive $archive..."
  python3 - "$rootfs" "$archive.tmp" "$ref" <<'PY'
import hashlib, io, json, os, sys, tarfile
rootfs, out, ref = sys.argv[1:]
h = hashlib.sha256()
with open(rootfs, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
diff_id = "sha256:" + h.hexdigest()
config = {"architecture": "amd64", "os": "linux",
          "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                     "Cmd": ["sleep", "infinity"]},
          "rootfs": {"type": "layers", "diff_ids": [diff_id]},
          "history": [{"created_by": "hack/bench-image.sh"}]}
cfg = json.dumps(config, sort_keys=True).encode()
cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
manifest = json.dumps([{"Config": cfg_name, "RepoTags": [ref], "Layers": ["layer.tar"]}]).encode()
with tarfile.open(out, "w") as t:
    for name, b in ((cfg_name, cfg), ("manifest.json", manifest)):
        ti = tarfile.TarInfo(name); ti.size = len(b); ti.mode = 0o644
        t.addfile(ti, io.BytesIO(b))
    ti = tarfile.TarInfo("layer.tar"); ti.size = os.path.getsize(rootfs); ti.mode = 0o644
    with open(rootfs, "rb") as f:
        t.addfile(ti, f)
PY
  rm -f "$IMG_CACHE"/bench-*.tar.old
  for old in "$IMG_CACHE"/bench-*.tar; do
    [[ "$old" == "$archive" || "$old" == "$rootfs" ]] || rm -f "$old"
  done
  mv -f "$archive.tmp" "$archive"
  rm -f "$rootfs"
  log "[bench image] built $ref in $((SECONDS - t0)) s: $archive ($(du -h "$archive" | cut -f1))"
  printf '%s\n' "$archive"
}

main() {
  [[ $# -ge 1 ]] || usage
  case $1 in
    build) cmd_build ;;
    ref) image_ref ;;
    *) usage ;;
  esac
}
main "$@"

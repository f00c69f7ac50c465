#!/usr/bin/env bash
# A real cgroup v2 kernel for Tidemark's tests: QEMU (TCG) + Debian's linux-image-amd64 + virtme-ng.
#
#   hack/vm.sh install        install what is missing (idempotent; Debian packages need root + apt)
#   hack/vm.sh env            print VNG= and KERNEL= (what `run` would use), or why there are none (exit 3)
#   hack/vm.sh run [--rwdir D] [--cwd D] [--cpus N] [--memory M] [--timeout S] -- CMD...
#                             boot one VM sharing this machine's userspace, run CMD as root, exit with its code
#
# Why a VM: this machine's host runs cgroup v1 (cgroup2 holds only hugetlb), and its /dev/kvm cannot
# run stock kernels, so QEMU's TCG boots Debian's 6.1 kernel with cgroup2 (cpu, memory, io, PSI) at
# /sys/fs/cgroup. virtme-ng shares the host's / read-only over 9p (throwaway writable overlays on
# /etc /tmp /var ...); only `--rwdir` directories are written through to the host. See
# docs/testing.md.
#
# What `install` does (each step only when missing):
#   - `qemu-system-x86`, `linux-image-amd64` and `busybox-static` (virtme-ng's initramfs) from Debian,
#     --no-install-recommends (root + apt);
#   - virtme-ng $VNG_VERSION from PyPI into its own tool venv in the cache (TIDEMARK_CACHE, else
#     XDG_CACHE_HOME/tidemark, else ~/.cache/tidemark): it is a test tool, not a project dependency.
# Overrides: TIDEMARK_VNG (a vng executable), TIDEMARK_VM_KERNEL (a kernel image whose modules are in
# /lib/modules/<release>).
#
# Exit codes: 0 ok, 1 failure, 2 bad usage, 3 cannot run here (missing and not installable), with the
# reason on stderr; `run` exits with the command's own code (124 on --timeout).
set -euo pipefail

readonly VNG_VERSION=1.42
# busybox-static: virtme-ng builds the guest's initramfs from a host busybox (Debian's kernel has 9p and
# virtio as modules); without one every boot stops at "initramfs is needed, and no busybox was found".
readonly DEB_PACKAGES=(qemu-system-x86 linux-image-amd64 busybox-static)
readonly CACHE_ROOT="${TIDEMARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark}"
readonly VNG_VENV="$CACHE_ROOT/virtme-ng-$VNG_VERSION"
readonly LOCK="$CACHE_ROOT/vm.lock"
readonly INSTALL_LOG="$CACHE_ROOT/vm-install.log"
# Modules udev would load for QEMU's emulated PC (kvm, crypto, ata, watchdogs, input...): none is
# needed and, under TCG, loading them costs 20-25 s of every boot.
readonly MODULE_BLACKLIST=kvm_amd,kvm_intel,kvm,irqbypass,ccp,crct10dif_pclmul,crc32_pclmul,crc32c_intel,ghash_clmulni_intel,sha512_ssse3,sha256_ssse3,sha1_ssse3,aesni_intel,crypto_simd,cryptd,sr_mod,cdrom,sg,ahci,libahci,libata,scsi_mod,iTCO_wdt,iTCO_vendor_support,intel_pmc_bxt,i6300esb,watchdog,evdev,psmouse,serio_raw,pcspkr,i2c_i801,i2c_smbus,lpc_ich,qemu_fw_cfg,button,drm,bochs,floppy,parport_pc,joydev

log() { printf '%s\n' "$*" >&2; }
usage() {
  sed -n '3,7p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
cannot() {
  log "vm.sh: $*"
  exit 3
}

# --- locating ---------------------------------------------------------------------------------

find_vng() {
  if [[ -n "${TIDEMARK_VNG:-}" ]]; then
    [[ -x "$TIDEMARK_VNG" ]] || { log "TIDEMARK_VNG=$TIDEMARK_VNG is not an executable file"; return 1; }
    printf '%s\n' "$TIDEMARK_VNG"
  elif [[ -f "$VNG_VENV/.tidemark-ready" ]]; then
    printf '%s\n' "$VNG_VENV/bin/vng"
  else
    log "no virtme-ng: TIDEMARK_VNG is unset and $VNG_VENV/bin/vng is not installed (run: $0 install)"
    return 1
  fi
}

# The newest /boot/vmlinuz-<release> whose modules are in /lib/modules/<release>.
find_kernel() {
  if [[ -n "${TIDEMARK_VM_KERNEL:-}" ]]; then
    [[ -r "$TIDEMARK_VM_KERNEL" ]] || { log "TIDEMARK_VM_KERNEL=$TIDEMARK_VM_KERNEL is not readable"; return 1; }
    printf '%s\n' "$TIDEMARK_VM_KERNEL"
    return 0
  fi
  local k rel best=""
  while read -r k; do
    rel=${k#/boot/vmlinuz-}
    [[ -r "$k" && -f "/lib/modules/$rel/modules.dep" ]] && best=$k
  done < <(compgen -G '/boot/vmlinuz-*' | sort -V)
  [[ -n "$best" ]] || { log "no kernel: no readable /boot/vmlinuz-<release> with /lib/modules/<release> (Debian: apt-get install linux-image-amd64)"; return 1; }
  printf '%s\n' "$best"
}

find_qemu() {
  command -v qemu-system-x86_64 >/dev/null 2>&1 ||
    { log "no qemu-system-x86_64 on PATH (Debian: apt-get install --no-install-recommends qemu-system-x86)"; return 1; }
}

# virtme-ng makes the guest's initramfs from a busybox on PATH (virtme/mkinitramfs.py: find_busybox).
find_busybox() {
  command -v busybox-static >/dev/null 2>&1 || command -v busybox.static >/dev/null 2>&1 ||
    command -v busybox >/dev/null 2>&1 ||
    { log "no busybox on PATH for virtme-ng's initramfs (Debian: apt-get install busybox-static)"; return 1; }
}

cmd_env() {
  local ok=0 v k
  v=$(find_vng) || ok=1
  k=$(find_kernel) || ok=1
  find_qemu || ok=1
  find_busybox || ok=1
  [[ -n "${v:-}" ]] && printf 'VNG=%s\n' "$v"
  [[ -n "${k:-}" ]] && printf 'KERNEL=%s\n' "$k"
  ((ok == 0)) || return 3
}

# --- install ----------------------------------------------------------------------------------

missing_packages() {
  local p st
  for p in "${DEB_PACKAGES[@]}"; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ "$st" == installed ]] || printf '%s\n' "$p"
  done
}

install_packages() {
  [[ -n "${TIDEMARK_VM_KERNEL:-}" ]] && find_qemu 2>/dev/null && return 0
  command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 ||
    cannot "no apt/dpkg: install QEMU (qemu-system-x86_64) and a cgroup v2 kernel yourself and set TIDEMARK_VM_KERNEL"
  local missing
  mapfile -t missing < <(missing_packages)
  ((${#missing[@]} == 0)) && return 0
  ((EUID == 0)) || cannot "missing Debian packages: ${missing[*]}; run as root: apt-get install -y --no-install-recommends ${missing[*]}"
  local p need_update=0
  for p in "${missing[@]}"; do
    apt-cache show "$p" >/dev/null 2>&1 || need_update=1
  done
  if ((need_update)); then
    log "  apt-get update"
    apt-get update -qq >>"$INSTALL_LOG" 2>&1 || { tail -n 20 "$INSTALL_LOG" >&2; cannot "apt-get update failed (log: $INSTALL_LOG)"; }
  fi
  log "  apt-get install --no-install-recommends ${missing[*]} (about 100 s)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" \
    >>"$INSTALL_LOG" 2>&1 || { tail -n 20 "$INSTALL_LOG" >&2; cannot "apt-get install failed (log: $INSTALL_LOG)"; }
}

install_vng() {
  [[ -n "${TIDEMARK_VNG:-}" || -f "$VNG_VENV/.tidemark-ready" ]] && return 0
  local py
  py=$(command -v python3) || cannot "no python3 to make virtme-ng's tool venv"
  log "  virtme-ng $VNG_VERSION from PyPI into $VNG_VENV"
  rm -rf "$VNG_VENV"
  "$py" -m venv "$VNG_VENV" >>"$INSTALL_LOG" 2>&1 || cannot "python3 -m venv failed (Debian: python3-venv; log: $INSTALL_LOG)"
  "$VNG_VENV/bin/pip" install -q --disable-pip-version-check "virtme-ng==$VNG_VERSION" >>"$INSTALL_LOG" 2>&1 ||
    { tail -n 20 "$INSTALL_LOG" >&2; rm -rf "$VNG_VENV"; cannot "pip install virtme-ng==$VNG_VERSION failed (log: $INSTALL_LOG)"; }
  touch "$VNG_VENV/.tidemark-ready"
}

cmd_install() {
  mkdir -p "$CACHE_ROOT"
  exec 9>"$LOCK"
  flock 9
  install_packages
  install_vng
  cmd_env >/dev/null || cannot "installed, but: $(cmd_env 2>&1 >/dev/null | tr '\n' ' ')"
  log "vm.sh: ready ($(cmd_env | tr '\n' ' '))"
}

# --- run --------------------------------------------------------------------------------------

cmd_run() {
  local rwdir="" cwd="$PWD" cpus=2 memory=2G timeout=0
  while (($#)); do
    case "$1" in
      --rwdir) rwdir=$2; shift 2 ;;
      --cwd) cwd=$2; shift 2 ;;
      --cpus) cpus=$2; shift 2 ;;
      --memory) memory=$2; shift 2 ;;
      --timeout) timeout=$2; shift 2 ;;
      --) shift; break ;;
      *) usage ;;
    esac
  done
  (($#)) || usage
  local vng kernel
  vng=$(find_vng) || exit 3
  kernel=$(find_kernel) || exit 3
  find_qemu || exit 3
  find_busybox || exit 3
  # vng runs virtme-run (and the guest init) from its own venv's bin directory
  export PATH="$(dirname "$vng"):$PATH"
  local cmd
  printf -v cmd '%q ' "$@"
  local args=(--disable-kvm --run "$kernel" --user root --cpus "$cpus" --memory "$memory" --cwd "$cwd"
    --append "module_blacklist=$MODULE_BLACKLIST" --exec "$cmd")
  [[ -n "$rwdir" ]] && args+=(--rwdir "$rwdir")
  if ((timeout > 0)); then
    exec timeout --kill-after=10 "$timeout" "$vng" "${args[@]}" </dev/null
  fi
  exec "$vng" "${args[@]}" </dev/null
}

case "${1:-}" in
  install) cmd_install ;;
  env) cmd_env ;;
  run) shift; cmd_run "$@" ;;
  *) usage ;;
esac

#!/usr/bin/env bash
# A production-shaped Kubernetes node in a VM for Tidemark: systemd as PID 1, cgroup v2 only, containerd
# with `SystemdCgroup = true`, kubelet --cgroup-driver=systemd (localcluster/v2node.py runs it).
#
#   hack/v2node.sh install    install what is missing: qemu-system-x86, linux-image-amd64, mmdebstrap (Debian, root)
#   hack/v2node.sh env        print QEMU=, KERNEL=, INITRD=, RELEASE=, APPEND= (what `rootfs` and the VM use), or why not (exit 3)
#   hack/v2node.sh rootfs     build (or reuse) the node's root filesystem image; prints its path
#   hack/v2node.sh images TIDEMARK.tar WORKLOAD.tar FULL_REF LOCAL_REF
#                             build (or reuse) the node's containerd disk holding both images; prints its path
#
# Why a VM: this project's machines run cgroup v1 with no hardware virtualisation; QEMU's TCG boots Debian's
# 6.1 kernel with `systemd.unified_cgroup_hierarchy=1`, as every current distribution and kubeadm run kubelet.
#
# The root filesystem (`rootfs`), cached by content hash in TIDEMARK_CACHE/v2node (default
# ~/.cache/tidemark/v2node) like the image's base: Debian bookworm minbase made with mmdebstrap from Debian's
# packages (systemd + systemd-sysv as init, dbus, udev, containerd, runc, containernetworking-plugins,
# iptables, qemu-guest-agent: the host's command channel, python3 + pip: the agent as a systemd service),
# the host kernel package's modules the node needs (overlay, bridge, veth, netfilter, 9p, virtio), and the
# node's own configuration: systemd-networkd on eth0 (a TAP link: the node 198.18.255.254, the host .253),
# /etc/resolv.conf, ip_forward, a 9p share at /mnt/tidemark (read-only), and two units,
# `tidemark-bootstrap.service` (runs /mnt/tidemark/bootstrap.sh before containerd: the run's containerd
# and kubelet configuration, kubeconfig, kubelet binary, containerd's disk, API forwarding) and
# `tidemark-images.service` (runs /mnt/tidemark/images.sh after containerd, before kubelet: are the images
# there). What changes per
# run lives in the share (localcluster/v2node.py writes it), so the image only changes with this script,
# the kernel or Debian's packages. `mkfs.ext4 -d` makes the image (sparse, 6 GiB); the VM boots it with
# `-snapshot`, so the cached image is never written.
#
# The images (`images`): imported by a throwaway containerd ON THE HOST (Debian's, the guest's version) into a
# root directory (k8s.io namespace, unpacked with the overlayfs snapshotter, FULL_REF also tagged LOCAL_REF),
# which becomes an ext4 image the guest mounts at /var/lib/containerd before its containerd starts. Under TCG
# `ctr images import` of the 400 MB project image took over 5 minutes in the guest; here it takes seconds.
# Cached by the archives' names (content hashes) and this script.
#
# Overrides: TIDEMARK_V2NODE_KERNEL (a vmlinuz whose modules are in /lib/modules/<release>, with its
# initrd next to it as initrd.img-<release>). Exit codes: 0 ok, 1 failure, 2 bad usage, 3 cannot run here
# (missing and not installable), with the reason on stderr.
set -euo pipefail
readonly SELF=$(readlink -f "$0")
cd "$(dirname "$0")/.."

readonly SUITE=bookworm
readonly DEB_PACKAGES=(qemu-system-x86 linux-image-amd64 mmdebstrap containerd)
readonly CACHE_ROOT="${TIDEMARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark}"
readonly NODE_CACHE="$CACHE_ROOT/v2node"
readonly LOG="$NODE_CACHE/build.log"
readonly IMAGE_SIZE=6G
# The guest's packages (minbase adds apt, dpkg, bash, coreutils, mount, util-linux...).
readonly GUEST_PACKAGES=(
  systemd systemd-sysv dbus udev kmod procps iproute2 iptables ca-certificates
  containerd runc containernetworking-plugins
  qemu-guest-agent python3 python3-pip
)
# Modules udev (and the initramfs) would load for QEMU's emulated PC: none is needed, and under TCG loading
# them costs seconds of every boot (hack/vm.sh has the same list, plus what an i440fx PC adds).
readonly MODULE_BLACKLIST=kvm_amd,kvm_intel,kvm,irqbypass,ccp,crct10dif_pclmul,crc32_pclmul,crc32c_intel,ghash_clmulni_intel,sha512_ssse3,sha256_ssse3,sha1_ssse3,aesni_intel,crypto_simd,cryptd,sr_mod,cdrom,sg,ahci,libahci,ata_piix,ata_generic,libata,scsi_mod,scsi_common,iTCO_wdt,iTCO_vendor_support,intel_pmc_bxt,i6300esb,watchdog,evdev,psmouse,serio_raw,pcspkr,i2c_i801,i2c_piix4,i2c_smbus,lpc_ich,qemu_fw_cfg,button,drm,bochs,floppy,parport_pc,joydev,cfg80211,rfkill,binfmt_misc
# The kernel command line: cgroup v2 only (kubelet's default on every current distribution), eth0.
readonly APPEND="root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 net.ifnames=0 module_blacklist=$MODULE_BLACKLIST"
# Kernel module directories the node needs (of /lib/modules/<release>/kernel).
readonly MODULE_DIRS=(fs net lib crypto arch block mm virt drivers/virtio drivers/block drivers/char drivers/net)

log() { printf '%s\n' "$*" >&2; }
die() { log "v2node.sh: $*"; exit 1; }
cannot() { log "v2node.sh: $*"; exit 3; }
usage() { sed -n '5,9p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# --- locating ---------------------------------------------------------------------------------

# The newest /boot/vmlinuz-<release> with its modules and its initrd.
find_kernel() {
  if [[ -n "${TIDEMARK_V2NODE_KERNEL:-}" ]]; then
    [[ -r "$TIDEMARK_V2NODE_KERNEL" ]] || { log "TIDEMARK_V2NODE_KERNEL=$TIDEMARK_V2NODE_KERNEL is not readable"; return 1; }
    printf '%s\n' "$TIDEMARK_V2NODE_KERNEL"
    return 0
  fi
  local k rel best=""
  while read -r k; do
    rel=${k#/boot/vmlinuz-}
    [[ -r "$k" && -f "/lib/modules/$rel/modules.dep" && -r "/boot/initrd.img-$rel" ]] && best=$k
  done < <(compgen -G '/boot/vmlinuz-*' | sort -V)
  [[ -n "$best" ]] || { log "no kernel: no readable /boot/vmlinuz-<release> with its initrd and /lib/modules/<release> (Debian: apt-get install linux-image-amd64)"; return 1; }
  printf '%s\n' "$best"
}

find_qemu() {
  command -v qemu-system-x86_64 2>/dev/null ||
    { log "no qemu-system-x86_64 on PATH (Debian: apt-get install --no-install-recommends qemu-system-x86)"; return 1; }
}

find_mmdebstrap() {
  command -v mmdebstrap >/dev/null 2>&1 && command -v mkfs.ext4 >/dev/null 2>&1 ||
    { log "no mmdebstrap or mkfs.ext4 (Debian: apt-get install --no-install-recommends mmdebstrap e2fsprogs)"; return 1; }
  command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 ||
    { log "no containerd and ctr (Debian: apt-get install --no-install-recommends containerd)"; return 1; }
}

cmd_env() {
  local ok=0 q k rel
  q=$(find_qemu) || ok=1
  k=$(find_kernel) || ok=1
  find_mmdebstrap || ok=1
  [[ -n "${q:-}" ]] && printf 'QEMU=%s\n' "$q"
  if [[ -n "${k:-}" ]]; then
    rel=$(basename "$k")
    rel=${rel#vmlinuz-}
    printf 'KERNEL=%s\nINITRD=%s\nRELEASE=%s\n' "$k" "$(dirname "$k")/initrd.img-$rel" "$rel"
    printf 'APPEND=%s\n' "$APPEND"
  fi
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

cmd_install() {
  mkdir -p "$NODE_CACHE"
  exec 9>"$NODE_CACHE/install.lock"
  flock 9
  command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 ||
    { cmd_env >/dev/null 2>&1 && return 0; cannot "no apt/dpkg: install QEMU, mmdebstrap and a Debian kernel with its initrd yourself (TIDEMARK_V2NODE_KERNEL)"; }
  local missing
  mapfile -t missing < <(missing_packages)
  if ((${#missing[@]})); then
    ((EUID == 0)) || cannot "missing Debian packages: ${missing[*]}; run as root: apt-get install -y --no-install-recommends ${missing[*]}"
    local p need_update=0
    for p in "${missing[@]}"; do
      apt-cache show "$p" >/dev/null 2>&1 || need_update=1
    done
    if ((need_update)); then
      log "  apt-get update"
      apt-get update -qq -o DPkg::Lock::Timeout=600 >>"$LOG" 2>&1 || { tail -n 20 "$LOG" >&2; cannot "apt-get update failed (log: $LOG)"; }
    fi
    log "  apt-get install --no-install-recommends ${missing[*]} (about 100 s)"
    # policy-rc.d: the package's own containerd service must not start (the images step runs its own).
    local made_rc=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d && made_rc=1
    fi
    local rc=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" \
      >>"$LOG" 2>&1 || rc=$?
    ((made_rc)) && rm -f /usr/sbin/policy-rc.d
    ((rc == 0)) || { tail -n 20 "$LOG" >&2; cannot "apt-get install failed (log: $LOG)"; }
  fi
  cmd_env >/dev/null || cannot "installed, but: $(cmd_env 2>&1 >/dev/null | tr '\n' ' ')"
  log "v2node.sh: ready ($(cmd_env | tr '\n' ' '))"
}

# --- the root filesystem ------------------------------------------------------------------------

# The files of the node's own configuration, written into the tree $1 (release $2).
configure_tree() {
  local root=$1 rel=$2
  printf 'tidemark-v2node\n' >"$root/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 tidemark-v2node\n' >"$root/etc/hosts"
  # A TAP link to the host (localcluster/v2node.py makes the host's end): the node is 198.18.255.254, the host
  # 198.18.255.253, in the benchmark range (RFC 2544). Nothing else is reachable and no name is resolved (pods
  # use dnsPolicy Default; the host has no DNS server there).
  rm -f "$root/etc/resolv.conf"
  printf 'nameserver 198.18.255.253\n' >"$root/etc/resolv.conf"
  mkdir -p "$root/etc/systemd/network"
  printf '[Match]\nName=eth0\n\n[Network]\nAddress=198.18.255.254/30\nGateway=198.18.255.253\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n' \
    >"$root/etc/systemd/network/20-eth0.network"
  cat >"$root/etc/fstab" <<'EOF'
/dev/vda / ext4 rw,noatime,errors=remount-ro 0 0
tidemark /mnt/tidemark 9p trans=virtio,version=9p2000.L,ro,msize=262144,nofail 0 0
EOF
  mkdir -p "$root/mnt/tidemark"
  printf '%s\n' overlay br_netfilter bridge veth 9p 9pnet_virtio virtio_console >"$root/etc/modules-load.d/tidemark.conf"
  printf 'net.ipv4.ip_forward=1\n' >"$root/etc/sysctl.d/90-tidemark.conf"
  # The run's configuration comes from the share (localcluster/v2node.py writes it).
  cat >"$root/etc/systemd/system/tidemark-bootstrap.service" <<'EOF'
[Unit]
Description=Tidemark node bootstrap: this run's configuration from /mnt/tidemark
DefaultDependencies=no
RequiresMountsFor=/mnt/tidemark
After=local-fs.target systemd-modules-load.service
Before=containerd.service kubelet.service network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh /mnt/tidemark/bootstrap.sh

[Install]
WantedBy=multi-user.target
EOF
  cat >"$root/etc/systemd/system/tidemark-images.service" <<'EOF'
[Unit]
Description=Tidemark node: this run's images into containerd (ctr images import)
Requires=containerd.service
After=containerd.service tidemark-bootstrap.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh /mnt/tidemark/images.sh

[Install]
WantedBy=multi-user.target
EOF
  # kubelet as kubeadm installs it: the flags in an environment file the bootstrap writes.
  cat >"$root/etc/systemd/system/kubelet.service" <<'EOF'
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target tidemark-images.service
After=network-online.target containerd.service tidemark-images.service

[Service]
EnvironmentFile=-/etc/default/kubelet
ExecStart=/usr/local/bin/kubelet $KUBELET_ARGS
Restart=always
RestartSec=2
StartLimitInterval=0

[Install]
WantedBy=multi-user.target
EOF
  local wants="$root/etc/systemd/system/multi-user.target.wants"
  mkdir -p "$wants"
  ln -sf /etc/systemd/system/tidemark-bootstrap.service "$wants/tidemark-bootstrap.service"
  ln -sf /etc/systemd/system/tidemark-images.service "$wants/tidemark-images.service"
  ln -sf /etc/systemd/system/kubelet.service "$wants/kubelet.service"
  ln -sf /lib/systemd/system/systemd-networkd.service "$wants/systemd-networkd.service"
  mkdir -p "$root/etc/systemd/system/sockets.target.wants" "$root/etc/systemd/system/network-online.target.wants"
  ln -sf /lib/systemd/system/systemd-networkd.socket "$root/etc/systemd/system/sockets.target.wants/systemd-networkd.socket"
  ln -sf /lib/systemd/system/systemd-networkd-wait-online.service \
    "$root/etc/systemd/system/network-online.target.wants/systemd-networkd-wait-online.service"
  # Nothing the node does not need at boot (each costs seconds under TCG).
  local u
  for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
    getty@tty1.service serial-getty@ttyS0.service systemd-timesyncd.service remote-fs.target \
    systemd-update-utmp.service systemd-update-utmp-runlevel.service systemd-binfmt.service \
    modprobe@fuse.service modprobe@loop.service modprobe@drm.service sys-kernel-debug.mount \
    sys-kernel-tracing.mount sys-fs-fuse-connections.mount systemd-user-sessions.service \
    systemd-pstore.service systemd-random-seed.service systemd-logind.service; do
    ln -sf /dev/null "$root/etc/systemd/system/$u"
  done
  mkdir -p "$root/etc/systemd/system/systemd-networkd-wait-online.service.d"
  printf '[Service]\nExecStart=\nExecStart=/lib/systemd/systemd-networkd-wait-online --any --timeout=60\n' \
    >"$root/etc/systemd/system/systemd-networkd-wait-online.service.d/any.conf"
  # The journal in memory only: the disk is a throwaway snapshot anyway.
  mkdir -p "$root/etc/systemd/journald.conf.d"
  printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=64M\n' >"$root/etc/systemd/journald.conf.d/tidemark.conf"
  # containerd's own unit stays Debian's (it reads /etc/containerd/config.toml, written by the bootstrap).
  # The kernel's modules the node loads.
  local src="/lib/modules/$rel" dst="$root/lib/modules/$rel" d
  mkdir -p "$dst/kernel"
  cp -a "$src"/modules.order "$src"/modules.builtin* "$dst/" 2>/dev/null || true
  for d in "${MODULE_DIRS[@]}"; do
    [[ -d "$src/kernel/$d" ]] || continue
    mkdir -p "$dst/kernel/$(dirname "$d")"
    cp -a "$src/kernel/$d" "$dst/kernel/$(dirname "$d")/"
  done
  depmod -b "$root" "$rel"
}

# sha256 over what makes the image: this script, the kernel release, the package list and the mirror.
rootfs_hash() {
  local rel=$1 mirror=$2
  { cat "$SELF"; printf '%s\n' "$rel" "$mirror" "${GUEST_PACKAGES[@]}"; } | sha256sum | cut -c1-16
}

# The Debian part alone (mmdebstrap, the slow step: 1.5-2.5 min), cached as a tar by package list and mirror.
debian_tar() {
  local mirror=$1 phash tar
  phash=$({ printf '%s\n' "$SUITE" "$mirror" "${GUEST_PACKAGES[@]}"; } | sha256sum | cut -c1-16)
  tar="$NODE_CACHE/debian-$phash.tar"
  if [[ ! -s "$tar" ]]; then
    log "[v2node rootfs 1/3] mmdebstrap $SUITE minbase + ${#GUEST_PACKAGES[@]} packages from $mirror (log: $LOG)..."
    local include
    include=$(IFS=,; printf '%s' "${GUEST_PACKAGES[*]}")
    rm -f "$tar.tmp"
    mmdebstrap --variant=minbase --mode=root --format=tar --include="$include" \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/info/*' \
      --aptopt='Acquire::Languages "none"' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
      "$SUITE" "$tar.tmp" "deb $mirror $SUITE main" "deb $mirror $SUITE-updates main" \
      "deb ${mirror%/debian}/debian-security $SUITE-security main" >>"$LOG" 2>&1 ||
      { tail -n 20 "$LOG" >&2; rm -f "$tar.tmp"; die "mmdebstrap failed (log: $LOG)"; }
    rm -f "$NODE_CACHE"/debian-*.tar
    mv -f "$tar.tmp" "$tar"
  else
    log "[v2node rootfs 1/3] Debian packages: cached ($tar)"
  fi
  printf '%s\n' "$tar"
}

cmd_rootfs() {
  local env rel
  env=$(cmd_env) || cannot "missing: $(cmd_env 2>&1 >/dev/null | tr '\n' ' ')(run: $0 install)"
  rel=$(sed -n 's/^RELEASE=//p' <<<"$env")
  ((EUID == 0)) || cannot "building the node's root filesystem needs root (mmdebstrap --mode=root, mkfs.ext4 -d)"
  local mirror
  mirror=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -n 1)
  mirror=${mirror:-http://deb.debian.org/debian}
  mkdir -p "$NODE_CACHE"
  local hash img
  hash=$(rootfs_hash "$rel" "$mirror")
  img="$NODE_CACHE/root-$hash.img"
  if [[ -s "$img" ]]; then
    log "[v2node rootfs] cached ($img)"
    printf '%s\n' "$img"
    return 0
  fi
  exec 9>"$NODE_CACHE/build.lock"
  flock 9
  if [[ -s "$img" ]]; then # built by a concurrent run
    printf '%s\n' "$img"
    return 0
  fi
  : >>"$LOG"
  printf '\n==== %s rootfs %s (kernel %s) ====\n' "$(date -u +%FT%TZ)" "$hash" "$rel" >>"$LOG"
  local t0=$SECONDS tmp tar
  tar=$(debian_tar "$mirror")
  tmp=$(mktemp -d "$NODE_CACHE/build.XXXXXX")
  # shellcheck disable=SC2064 # expand now
  trap "rm -rf '$tmp'" EXIT
  log "[v2node rootfs 2/3] the node's configuration and the modules of $rel..."
  mkdir "$tmp/root"
  tar --numeric-owner --xattrs --xattrs-include='*' -xpf "$tar" -C "$tmp/root"
  configure_tree "$tmp/root" "$rel"
  log "[v2node rootfs 3/3] mkfs.ext4 -d ($IMAGE_SIZE sparse)..."
  truncate -s "$IMAGE_SIZE" "$tmp/root.img"
  mkfs.ext4 -q -F -L tidemark-root -d "$tmp/root" "$tmp/root.img" >>"$LOG" 2>&1 ||
    { tail -n 20 "$LOG" >&2; die "mkfs.ext4 -d failed (log: $LOG)"; }
  rm -f "$NODE_CACHE"/root-*.img
  mv -f "$tmp/root.img" "$img"
  rm -rf "$tmp"
  trap - EXIT
  log "[v2node rootfs] built in $((SECONDS - t0)) s: $img ($(du -h "$img" | cut -f1) used)"
  printf '%s\n' "$img"
}

cmd_images() {
  (($# == 4)) || usage
  local archive=$1 workload=$2 full=$3 local_ref=$4
  [[ -s "$archive" && -s "$workload" ]] || die "no such image archive: $archive or $workload"
  ((EUID == 0)) || cannot "building the node's containerd disk needs root (containerd, mkfs.ext4 -d)"
  find_mmdebstrap || cannot "missing tools (run: $0 install)"
  mkdir -p "$NODE_CACHE"
  local hash img
  hash=$({ cat "$SELF"; printf '%s\n' "$(basename "$archive")" "$(basename "$workload")" "$full" "$local_ref"; } |
    sha256sum | cut -c1-16)
  img="$NODE_CACHE/containerd-$hash.img"
  if [[ -s "$img" ]]; then
    log "[v2node images] cached ($img)"
    printf '%s\n' "$img"
    return 0
  fi
  exec 9>"$NODE_CACHE/images.lock"
  flock 9
  [[ -s "$img" ]] && { printf '%s\n' "$img"; return 0; }
  local t0=$SECONDS tmp
  tmp=$(mktemp -d "$NODE_CACHE/ctrd.XXXXXX")
  [[ -d "$tmp" && "$tmp" == "$NODE_CACHE"/ctrd.* ]] || die "mktemp failed"
  CTRD_TMP=$tmp
  CTRD_PID=""
  trap images_cleanup EXIT
  mkdir -p "$tmp/root" "$tmp/state"
  printf '%s\n' 'version = 2' "root = \"$tmp/root\"" "state = \"$tmp/state\"" \
    'disabled_plugins = ["io.containerd.grpc.v1.cri"]' '[grpc]' "  address = \"$tmp/c.sock\"" \
    '[ttrpc]' "  address = \"$tmp/c.sock.ttrpc\"" '[debug]' '  address = ""' '[metrics]' '  address = ""' \
    >"$tmp/config.toml"
  log "[v2node images 1/2] importing the images with a throwaway containerd (k8s.io, overlayfs)..."
  containerd --config "$tmp/config.toml" >>"$tmp/containerd.log" 2>&1 &
  CTRD_PID=$!
  local i
  for i in $(seq 1 100); do
    ctr -a "$tmp/c.sock" version >/dev/null 2>&1 && break
    kill -0 "$CTRD_PID" 2>/dev/null || { tail -n 20 "$tmp/containerd.log" >&2; die "containerd exited"; }
    sleep 0.1
  done
  ctr -a "$tmp/c.sock" -n k8s.io images import --snapshotter overlayfs "$workload" >>"$LOG" 2>&1 &&
    ctr -a "$tmp/c.sock" -n k8s.io images import --snapshotter overlayfs "$archive" >>"$LOG" 2>&1 &&
    ctr -a "$tmp/c.sock" -n k8s.io images tag --force "$full" "$local_ref" >>"$LOG" 2>&1 ||
    { tail -n 20 "$LOG" >&2; die "ctr images import failed (log: $LOG)"; }
  stop_containerd
  log "[v2node images 2/2] mkfs.ext4 -d ($(du -sh "$tmp/root" | cut -f1) of containerd's root)..."
  truncate -s 4G "$tmp/containerd.img"
  mkfs.ext4 -q -F -L tidemark-ctrd -d "$tmp/root" "$tmp/containerd.img" >>"$LOG" 2>&1 ||
    { tail -n 20 "$LOG" >&2; die "mkfs.ext4 -d failed (log: $LOG)"; }
  rm -f "$NODE_CACHE"/containerd-*.img
  mv -f "$tmp/containerd.img" "$img"
  log "[v2node images] built in $((SECONDS - t0)) s: $img"
  printf '%s\n' "$img"
}

stop_containerd() {
  [[ -n "${CTRD_PID:-}" ]] || return 0
  kill "$CTRD_PID" 2>/dev/null || true
  local i
  for i in $(seq 1 100); do kill -0 "$CTRD_PID" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$CTRD_PID" 2>/dev/null || true
  CTRD_PID=""
}

images_cleanup() {
  stop_containerd
  if [[ -n "${CTRD_TMP:-}" && "$CTRD_TMP" == "$NODE_CACHE"/ctrd.* ]]; then
    # a layer mount left by an interrupted import, then the directory
    awk -v p="$CTRD_TMP/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l
    rm -rf "$CTRD_TMP"
  fi
}

case "${1:-}" in
  install) cmd_install ;;
  env) cmd_env ;;
  rootfs) cmd_rootfs ;;
  images) shift; cmd_images "$@" ;;
  *) usage ;;
esac

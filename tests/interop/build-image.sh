#!/bin/bash
# build-image.sh - the interop guest, built from Debian's packages, when it is missing.
#
#   build-image.sh            build unless $DIR holds a complete image of IMAGE_VERSION
#   build-image.sh --force    rebuild
#   build-image.sh --backports-kernel [--force]
#                             the second guest, in $DIR/bpo-kernel/ (same file names):
#                             bookworm with linux-image-amd64 from bookworm-backports (6.12)
#                             and libibverbs-dev, no siw; for the pairs that need a newer
#                             rxe than 6.1's (ATOMIC_WRITE and FLUSH came with 6.2). The
#                             6.1 image beside it is neither read nor changed.
#
# $DIR is ${RDMA_EMU_INTEROP_DIR:-$HOME/.cache/rdma-emu-interop}. Output there:
#   vmlinuz, initrd.img   Debian 12's own kernel (linux-image-amd64) and its initramfs
#   rootfs.ext4           Debian 12 minbase + rdma-core, ibverbs-utils, perftest, rdmacm-utils
#   kernel.txt            kernel package and version; image.ok: IMAGE_VERSION when complete
#   build.log, build-times.txt
# Needs root (mmdebstrap root mode, chroot) and the host packages of host-deps.sh.
#
# siw: Debian's kernels ship rdma_rxe.ko but are built without CONFIG_RDMA_SIW, so siw.ko
# is compiled out of tree from linux-source of exactly the installed kernel version,
# against its linux-headers, inside the rootfs (~25 s idle, 85 s here under load), into
# /lib/modules/$ABI/updates/, with its compiled-in MPA CRC policy turned into the module
# parameters mpa_crc_required and mpa_crc_strict.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR="${RDMA_EMU_INTEROP_DIR:-$HOME/.cache/rdma-emu-interop}"
# bump when the package list, the boot stub or the layout below changes
IMAGE_VERSION=2
SUITE=bookworm
IMG_SIZE=3G

FORCE=0 BPO=0
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    --backports-kernel) BPO=1 ;;
    *) sed -n '2,22p' "$0" >&2; exit 2 ;;
  esac
done
if [ "$BPO" = 1 ]; then
  # its own version: bumping it rebuilds this image only
  IMAGE_VERSION=bpo1
  DIR="$DIR/bpo-kernel"
fi
[ "$(id -u)" = 0 ] || { echo "build-image.sh needs root" >&2; exit 1; }
mkdir -p "$DIR"
exec 9>"$DIR/build.lock"
flock -w 900 9 || { echo "another build holds $DIR/build.lock" >&2; exit 1; }
if [ "$FORCE" = 0 ] && [ "$(cat "$DIR/image.ok" 2>/dev/null)" = "$IMAGE_VERSION" ] &&
   [ -s "$DIR/rootfs.ext4" ] && [ -s "$DIR/vmlinuz" ] && [ -s "$DIR/initrd.img" ]; then
  echo "image v$IMAGE_VERSION present in $DIR"
  exit 0
fi
rm -f "$DIR/image.ok"
for t in mmdebstrap mke2fs chroot; do
  command -v "$t" >/dev/null || { echo "missing $t: run host-deps.sh" >&2; exit 1; }
done

mirror() { # the host's own configured Debian archive ("main") or security archive
  apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null |
    awk -v want="$1" '(want == "security") == ($2 ~ /security/) {print $1; exit}'
}
MIRROR="${MIRROR:-$(mirror main)}"
SEC_MIRROR="${SEC_MIRROR:-$(mirror security)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian/}"
SEC_MIRROR="${SEC_MIRROR:-http://deb.debian.org/debian-security/}"

LOG="$DIR/build.log"
TIMES="$DIR/build-times.txt"
: >"$TIMES"
exec > >(tee "$LOG") 2>&1
T0=$(date +%s)
stamp() { echo "$1: $(( $(date +%s) - T0 )) s (cumulative)" | tee -a "$TIMES"; }

ROOTFS="$DIR/rootfs"
# A build killed half-way leaves mmdebstrap's proc, sys, dev/pts and dev/shm mounted in
# its tree: they are unmounted (deepest first) before the tree goes, and rm never crosses
# into a mount.
awk -v r="$ROOTFS/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r |
  while read -r m; do umount -l "$m"; done
rm -rf --one-file-system "$ROOTFS"
mkdir -p "$ROOTFS"
PKGS=(
  linux-image-amd64 linux-headers-amd64 gcc make xz-utils
  initramfs-tools zstd kmod
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
  iproute2 procps iputils-ping tcpdump
)
SOURCES=()
if [ "$BPO" = 1 ]; then
  # the kernel from backports (apt's pkg/release: its dependencies follow it there);
  # libibverbs-dev to compile the guest's test program in the guest
  PKGS=(linux-image-amd64/$SUITE-backports gcc libc6-dev libibverbs-dev
        initramfs-tools zstd kmod rdma-core ibverbs-providers ibverbs-utils
        iproute2 procps iputils-ping)
  SOURCES=("deb $MIRROR $SUITE-backports main")
fi
mmdebstrap --mode=root --variant=minbase --format=directory \
  --aptopt='APT::Install-Recommends "false"' \
  --aptopt='Acquire::Retries "3"' \
  --include="$(IFS=,; echo "${PKGS[*]}")" \
  --setup-hook='mkdir -p "$1/etc/initramfs-tools/conf.d"' \
  --setup-hook='printf "virtio_pci\nvirtio_blk\nvirtio_net\next4\n" > "$1/etc/initramfs-tools/modules"' \
  --setup-hook='echo COMPRESS=zstd > "$1/etc/initramfs-tools/conf.d/compress"' \
  "$SUITE" "$ROOTFS" \
  "deb $MIRROR $SUITE main" \
  "deb $MIRROR $SUITE-updates main" \
  "deb $SEC_MIRROR $SUITE-security main" "${SOURCES[@]}"
stamp rootfs

ABI=$(basename "$(ls -d "$ROOTFS"/lib/modules/*-amd64 | sort -V | tail -1)")
KVER=$(chroot "$ROOTFS" dpkg-query -W -f='${Version}' "linux-image-$ABI")
SRCPKG="linux-source-$(echo "$ABI" | cut -d. -f1,2)"
echo "kernel: linux-image-$ABI $KVER"
# siw's MPA CRC policy is compiled in (const mpa_crc_required / mpa_crc_strict, both
# false); the build turns the two into module parameters so that the iWARP pairs can run
# with MPA CRC off and on: modprobe siw mpa_crc_required=1 [mpa_crc_strict=1].
# A failure here leaves the image without siw.ko (the RoCE pairs do not need it).
build_siw() {
  local src="$ROOTFS/tmp/siwbuild/$SRCPKG/drivers/infiniband/sw/siw" v
  mkdir -p "$ROOTFS/tmp/siwbuild" || return 1
  chroot "$ROOTFS" sh -ec "apt-get -qq update; cd /tmp/siwbuild; apt-get -q download $SRCPKG=$KVER" || return 1
  ( cd "$ROOTFS/tmp/siwbuild" &&
    dpkg-deb --fsys-tarfile ./*.deb | tar -xO "./usr/src/$SRCPKG.tar.xz" |
      tar -xJ --wildcards "$SRCPKG/drivers/infiniband/sw/siw/*" ) || return 1
  for v in mpa_crc_required mpa_crc_strict; do
    sed -i "s/^extern const bool $v;/extern bool $v;/" "$src/siw.h" || return 1
    sed -i "s/^const bool $v;/bool $v;\nmodule_param($v, bool, 0444);/" "$src/siw_main.c" || return 1
    grep -q "^module_param($v, bool, 0444);" "$src/siw_main.c" || return 1
  done
  chroot "$ROOTFS" sh -ec "
    cd /tmp/siwbuild/$SRCPKG/drivers/infiniband/sw/siw
    make -s -C /usr/src/linux-headers-$ABI M=\$PWD CONFIG_RDMA_SIW=m modules
    install -D -m644 siw.ko /lib/modules/$ABI/updates/siw.ko
    depmod -a $ABI"
}
if [ "$BPO" = 1 ]; then
  SIW="siw.ko not built (image for the RoCE pairs that need a newer kernel)"
elif build_siw; then
  SIW="siw.ko built out of tree from $SRCPKG $KVER, with module parameters mpa_crc_required, mpa_crc_strict"
else
  SIW="siw.ko missing: building it from $SRCPKG=$KVER failed (see build.log)"
fi
chroot "$ROOTFS" sh -c 'apt-get clean; rm -rf /var/lib/apt/lists/*'
rm -rf "$ROOTFS/tmp/siwbuild"
echo "$SIW"
stamp siw

install -m755 "$HERE/guest/boot-stub" "$ROOTFS/usr/local/sbin/rdma-emu-boot-stub"
echo rdmaemu-guest >"$ROOTFS/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 rdmaemu-guest\n' >"$ROOTFS/etc/hosts"
printf '/dev/vda / ext4 rw,noatime 0 1\n' >"$ROOTFS/etc/fstab"
: >"$ROOTFS/etc/resolv.conf"
chroot "$ROOTFS" passwd -d root >/dev/null
chroot "$ROOTFS" update-initramfs -u -k "$ABI" >/dev/null
cp "$ROOTFS/boot/vmlinuz-$ABI" "$DIR/vmlinuz"
cp "$ROOTFS/boot/initrd.img-$ABI" "$DIR/initrd.img"
printf 'abi=%s\npackage=linux-image-%s %s\nsiw=%s\n' "$ABI" "$ABI" "$KVER" "$SIW" >"$DIR/kernel.txt"
stamp guest-config

rm -f "$DIR/rootfs.ext4.tmp"
mke2fs -q -t ext4 -L rdmaemu-root -d "$ROOTFS" "$DIR/rootfs.ext4.tmp" "$IMG_SIZE"
mv "$DIR/rootfs.ext4.tmp" "$DIR/rootfs.ext4"
rm -rf "$ROOTFS"
echo "$IMAGE_VERSION" >"$DIR/image.ok"
stamp ext4-image
echo "build done in $(( $(date +%s) - T0 )) s"

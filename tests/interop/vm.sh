#!/bin/bash
# vm.sh - boot the interop guest (built by build-image.sh) with its NICs on taps in a
# network namespace, and run guest/guest-main.sh in it.
#
#   vm.sh --netns NS --share DIR --tap TAP[=GUEST_CIDR] [--tap ...] [options]
#
#   --share DIR      per-run folder: the guest mounts it on /mnt/host (virtio-9p); vm.sh
#                    copies guest-main.sh into it and writes DIR/env (GUEST_IP<N>, SIW,
#                    MAX_SECONDS and every -e VAR=VALUE); the console goes to DIR/console.log
#   --tap TAP=CIDR   one virtio NIC per --tap, on tap TAP in NS: the guest's ethN, N in order
#   --timeout S      qemu is killed after S seconds (default 600); MAX_SECONDS = S - 20
#   --smp N --mem MiB   default 1 vCPU, 1024 MiB
#   --accel tcg|kvm  default tcg (docs/interop.md: a /dev/kvm may exist and still not boot the guest)
#   --image DIR      the image folder (vmlinuz, initrd.img, rootfs.ext4); default the cache
#                    folder, $DIR/bpo-kernel for build-image.sh --backports-kernel's guest
#   -e VAR=VALUE     passed to the guest
#
# The last command execs `ip netns exec NS timeout S qemu-system-x86_64 ...`, so the
# caller's child pid is timeout's: SIGTERM to it stops qemu. qemu's own pid is written to
# DIR/qemu.pid. Exit status: qemu's, 124 on timeout.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR="${RDMA_EMU_INTEROP_DIR:-$HOME/.cache/rdma-emu-interop}"
NS="" SHARE="" TAPS=() ENVS=() TIMEOUT=600 SMP=1 MEM=1024 ACCEL=tcg IMAGE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --netns) NS=$2; shift ;;
    --share) SHARE=$2; shift ;;
    --tap) TAPS+=("$2"); shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    --smp) SMP=$2; shift ;;
    --mem) MEM=$2; shift ;;
    --accel) ACCEL=$2; shift ;;
    --image) IMAGE=$2; shift ;;
    -e) ENVS+=("$2"); shift ;;
    *) sed -n '2,22p' "$0" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$NS" ] && [ -n "$SHARE" ] && [ ${#TAPS[@]} -gt 0 ] || { sed -n '2,22p' "$0" >&2; exit 2; }
[ -n "$IMAGE" ] && DIR=$IMAGE
for f in vmlinuz initrd.img rootfs.ext4; do
  [ -s "$DIR/$f" ] || { echo "vm.sh: missing $DIR/$f: run build-image.sh" >&2; exit 1; }
done
mkdir -p "$SHARE"
SHARE=$(realpath "$SHARE")
cp "$HERE/guest/guest-main.sh" "$SHARE/guest-main.sh"
rm -f "$SHARE/stop" "$SHARE/ready"
{
  echo "MAX_SECONDS=$(( TIMEOUT > 40 ? TIMEOUT - 20 : 20 ))"
  for e in "${ENVS[@]}"; do printf 'export %q\n' "$e"; done
} >"$SHARE/env"

NET=()
n=0
for t in "${TAPS[@]}"; do
  tap=${t%%=*}
  [ "$tap" != "$t" ] && printf 'GUEST_IP%d=%q\n' "$n" "${t#*=}" >>"$SHARE/env"
  NET+=(-netdev "tap,id=n$n,ifname=$tap,script=no,downscript=no"
        -device "virtio-net-pci,netdev=n$n,mac=52:54:00:e7:0$n:02,romfile=")
  n=$((n + 1))
done
case "$ACCEL" in
  tcg) ACC=(-accel tcg,thread=multi,tb-size=256 -cpu max) ;;
  kvm) ACC=(-accel kvm -cpu host) ;;
  *) echo "vm.sh: --accel tcg|kvm" >&2; exit 2 ;;
esac
CMDLINE="console=ttyS0,115200 root=/dev/vda rw init=/usr/local/sbin/rdma-emu-boot-stub net.ifnames=0 panic=-1 loglevel=4 tsc=reliable clocksource=hpet"
exec ip netns exec "$NS" timeout "$TIMEOUT" qemu-system-x86_64 "${ACC[@]}" -smp "$SMP" -m "$MEM" \
  -nodefaults -no-user-config -no-reboot -display none -vga none \
  -kernel "$DIR/vmlinuz" -initrd "$DIR/initrd.img" -append "$CMDLINE" \
  -drive "file=$DIR/rootfs.ext4,format=raw,if=virtio,snapshot=on" \
  -virtfs "local,path=$SHARE,mount_tag=host0,security_model=none,id=fs0" \
  -object rng-random,id=rng0,filename=/dev/urandom -device virtio-rng-pci,rng=rng0 \
  "${NET[@]}" -pidfile "$SHARE/qemu.pid" -serial "file:$SHARE/console.log"

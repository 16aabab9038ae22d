#!/bin/bash
# selftest.sh - checks the VM side alone, without rdma-emu: boots the guest on a tap in a
# namespace of its own, has the guest ping the host side, runs ib_write_bw server and
# client both on the guest's rxe0 (loopback through the kernel's rxe), and an rping client
# toward the host side (nobody answers; its RDMA CM REQs, RoCE v2 UD packets to QP1, show
# that the tap capture sees the guest's rxe traffic), then loads siw with MPA CRC required
# and strict and runs rping over siw0 on a dummy netdev in the guest. Everything is removed
# afterwards.
#
#   selftest.sh [OUT]     OUT defaults to $RDMA_EMU_INTEROP_DIR/selftest
# Output: OUT/share/jobs/*.out, OUT/tap.pcap, OUT/share/console.log, OUT/times.txt
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR="${RDMA_EMU_INTEROP_DIR:-$HOME/.cache/rdma-emu-interop}"
OUT="${1:-$DIR/selftest}"
NS="rdmaemu-selftest-$$"
TAP=rdmaemutap0
HOST_IP=10.213.0.1
GUEST_IP=10.213.0.2
rm -rf "$OUT"; mkdir -p "$OUT/share/jobs"
OUT=$(realpath "$OUT")
VM="" DUMP=""
cleanup() {
  [ -n "$VM" ] && kill "$VM" 2>/dev/null
  [ -n "$DUMP" ] && kill -INT "$DUMP" 2>/dev/null
  wait 2>/dev/null
  bash "$HERE/netns.sh" down "$NS"
}
trap cleanup EXIT
T0=$(date +%s.%N)
t() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

bash "$HERE/prepare.sh" >"$OUT/prepare.log" 2>&1
echo "prepare: $(t) s" | tee "$OUT/times.txt"
bash "$HERE/netns.sh" up "$NS" "$TAP" "$HOST_IP/24"
ip netns exec "$NS" tcpdump -i "$TAP" -U -s 0 -w "$OUT/tap.pcap" 2>"$OUT/tcpdump.log" &
DUMP=$!
nice -n 19 bash "$HERE/vm.sh" --netns "$NS" --share "$OUT/share" --tap "$TAP=$GUEST_IP/24" --timeout 400 &
VM=$!
for _ in $(seq 600); do [ -e "$OUT/share/ready" ] && break; kill -0 "$VM" 2>/dev/null || break; sleep 0.2; done
[ -e "$OUT/share/ready" ] || { echo "guest not ready; console:"; tail -30 "$OUT/share/console.log"; exit 1; }
echo "boot to ready: $(t) s" | tee -a "$OUT/times.txt"
cat "$OUT/share/ready"
G=$(sed -n 's/^rxe0_gid_index=//p' "$OUT/share/ready")

job() { # NAME SCRIPT: run SCRIPT in the guest, wait for it, print its output
  printf '%s\n' "$2" >"$OUT/share/jobs/$1.tmp"
  mv "$OUT/share/jobs/$1.tmp" "$OUT/share/jobs/$1.sh"
  for _ in $(seq 1500); do [ -e "$OUT/share/jobs/$1.rc" ] && break; sleep 0.2; done
  echo "=== $1: exit $(cat "$OUT/share/jobs/$1.rc" 2>/dev/null || echo none) at $(t) s" | tee -a "$OUT/times.txt"
  cat "$OUT/share/jobs/$1.out"
}
job ping "ping -c 3 -W 2 $HOST_IP"
job loopback "timeout 120 ib_write_bw -d rxe0 -x $G -F -s 65536 -n 500 -p 18700 & p=\$!
sleep 2; timeout 120 ib_write_bw -d rxe0 -x $G -F -s 65536 -n 500 -p 18700 $GUEST_IP; rc=\$?; wait \$p; exit \$rc"
job cm-unanswered "timeout 10 rping -c -a $HOST_IP -C 1 -v; echo \"rping rc=\$? (no peer: failure expected)\"; true"
job siw-crc "modprobe siw mpa_crc_required=1 mpa_crc_strict=1
grep . /sys/module/siw/parameters/*
ip link add siwdummy0 type dummy && ip addr add 10.99.0.1/24 dev siwdummy0 && ip link set siwdummy0 up
rdma link add siw0 type siw netdev siwdummy0 && rdma link show
timeout 60 rping -s -a 10.99.0.1 -p 7174 -C 3 -v & p=\$!
sleep 3; timeout 60 rping -c -a 10.99.0.1 -p 7174 -C 3 -v; rc=\$?; wait \$p; exit \$rc"
touch "$OUT/share/stop"
wait "$VM" || true
VM=""
echo "power off: $(t) s" | tee -a "$OUT/times.txt"
kill -INT "$DUMP"; wait "$DUMP" || true; DUMP=""
tcpdump -nr "$OUT/tap.pcap" 2>/dev/null | awk '{c[$0 ~ /4791/ ? "roce" : "other"]++} END {for (k in c) print k, c[k]}'

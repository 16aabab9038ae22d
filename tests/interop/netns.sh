#!/bin/bash
# netns.sh - the host side of the guest's network: a namespace of its own with taps.
#
#   netns.sh up NS TAP CIDR [TAP CIDR]...   create namespace NS (if missing), each TAP in
#                                           it (persistent tap, up) with address CIDR
#   netns.sh down NS                        delete NS and everything in it
#
# Addresses live inside NS only and nothing is routed or bridged to the outside: traffic
# stays between NS and the guest. qemu runs inside NS to open the taps (vm.sh does this).
set -euo pipefail
cmd=${1:-}; NS=${2:-}
[ -n "$NS" ] || { sed -n '2,10p' "$0"; exit 2; }
case "$cmd" in
  up)
    shift 2
    ip netns list | grep -qw "^$NS" || ip netns add "$NS"
    ip -n "$NS" link set lo up
    while [ $# -ge 2 ]; do
      ip -n "$NS" link show "$1" >/dev/null 2>&1 || ip -n "$NS" tuntap add dev "$1" mode tap
      ip -n "$NS" addr replace "$2" dev "$1"
      ip -n "$NS" link set "$1" up
      shift 2
    done
    ;;
  down) ip netns list | grep -qw "^$NS" && ip netns del "$NS"; true ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac

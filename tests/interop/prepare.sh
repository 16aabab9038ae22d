#!/bin/bash
# prepare.sh - everything the interop suite needs before a boot, each step bounded:
# the host packages (host-deps.sh) and the guest image (build-image.sh, only when
# $RDMA_EMU_INTEROP_DIR holds no complete image of the current version). Arguments go to
# build-image.sh (--backports-kernel: the second guest, with Debian's 6.12 kernel).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ "$(id -u)" = 0 ] || { echo "prepare.sh: needs root (apt-get, mmdebstrap, network namespaces)" >&2; exit 1; }
T0=$(date +%s)
nice -n 19 timeout 600 bash "$HERE/host-deps.sh"
echo "host packages: $(( $(date +%s) - T0 )) s"
T1=$(date +%s)
nice -n 19 timeout 1200 bash "$HERE/build-image.sh" "$@"
echo "guest image: $(( $(date +%s) - T1 )) s"

#!/bin/bash
# host-deps.sh - the host packages the interop harness needs, installed with apt-get (root).
#
#   qemu-system-x86  the VM (TCG is enough; KVM is used when it works)
#   mmdebstrap       builds the guest's root file system from Debian's packages
#   e2fsprogs        mke2fs -d packs it into an ext4 image without loop mounts
#   iproute2         the network namespace and the tap
#   tcpdump          captures every frame on the tap
#
# When a qemu-utils >= 8 (from bookworm-backports) is already installed, bookworm's
# qemu-system-x86 would conflict with it, so qemu-system-x86 then comes from
# bookworm-backports through a private apt configuration under $RDMA_EMU_INTEROP_DIR
# (nothing in /etc/apt changes).
set -euo pipefail
DIR="${RDMA_EMU_INTEROP_DIR:-$HOME/.cache/rdma-emu-interop}"
export DEBIAN_FRONTEND=noninteractive
[ "$(id -u)" = 0 ] || { echo "host-deps.sh: installing packages needs root" >&2; exit 1; }

need=()
for p in mmdebstrap e2fsprogs iproute2 tcpdump; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi

if command -v qemu-system-x86_64 >/dev/null; then
  exit 0
fi

mirror() { # $1: "security" or "main": the host's own configured Debian archive
  apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null |
    awk -v want="$1" '(want == "security") == ($2 ~ /security/) {print $1; exit}'
}
qu=$(dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null || true)
if [ -n "$qu" ] && dpkg --compare-versions "$qu" ge 1:8; then
  MIRROR="${MIRROR:-$(mirror main)}"
  SEC_MIRROR="${SEC_MIRROR:-$(mirror security)}"
  echo "qemu-utils $qu is installed: qemu-system-x86 from bookworm-backports"
  D="$DIR/apt-bpo"
  mkdir -p "$D/lists/partial" "$D/archives/partial"
  K=/usr/share/keyrings/debian-archive-keyring.gpg
  cat >"$D/sources.list" <<SRC
deb [signed-by=$K] $MIRROR bookworm main
deb [signed-by=$K] $MIRROR bookworm-updates main
deb [signed-by=$K] $SEC_MIRROR bookworm-security main
deb [signed-by=$K] $MIRROR bookworm-backports main
SRC
  A=(-o "Dir::Etc::sourcelist=$D/sources.list" -o Dir::Etc::sourceparts=-
     -o "Dir::State::lists=$D/lists" -o "Dir::Cache::archives=$D/archives"
     -o APT::Sandbox::User=root)
  apt-get "${A[@]}" update -qq
  apt-get "${A[@]}" install -y -q --no-install-recommends -t bookworm-backports qemu-system-x86
else
  apt-get update -qq
  apt-get install -y -q --no-install-recommends qemu-system-x86
fi
qemu-system-x86_64 --version | head -1

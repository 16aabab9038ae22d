#!/bin/sh
# Two "hosts" (network namespaces joined by a veth pair), one rdma-emud each serving rxe0,
# and two Python processes that move a KV-cache-sized buffer with Mooncake's Transfer
# Engine over RDMA, checked by SHA-256. No GPU, no RDMA hardware, no topology file.
#
#   sudo docs/examples/kv-cache-mooncake/run.sh [MIB]      (default 256)
#
# Needs: root (namespaces), python3 with venv, network for PyPI on the first run (the
# environment is kept in $VENV, default /tmp/rdma-emu-mooncake-venv), and the binaries:
# `cargo build --release -p emulator --bins && cargo xtask shim` (or set RDMA_EMU_BIN_DIR).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
mib=${1:-256}
bin=${RDMA_EMU_BIN_DIR:-$here/../../../target/release}
venv=${VENV:-/tmp/rdma-emu-mooncake-venv}
work=$(mktemp -d)
a=kvc-a-$$ b=kvc-b-$$

cleanup() {
    for p in "$work"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
    ip netns del "$a" 2>/dev/null || true
    ip netns del "$b" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

if ! "$venv/bin/python" -c "import mooncake.engine, numpy" 2>/dev/null; then
    echo "installing mooncake-transfer-engine-non-cuda into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
        mooncake-transfer-engine-non-cuda==0.3.13.post1 numpy
fi

ip netns add "$a"
ip netns add "$b"
ip link add "kv$$a" type veth peer name "kv$$b"
ip link set "kv$$a" netns "$a"
ip link set "kv$$b" netns "$b"
ip -n "$a" addr add 10.231.0.1/24 dev "kv$$a"
ip -n "$b" addr add 10.231.0.2/24 dev "kv$$b"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "kv$$a" up
ip -n "$b" link set "kv$$b" up

for side in a b; do
    eval ns=\$$side
    ip netns exec "$ns" "$bin/rdma-emud" --socket "$work/$side.sock" --netdev "kv$$$side" \
        >"$work/$side.log" 2>&1 &
    echo $! >"$work/$side.pid"
done
for side in a b; do
    eval ns=\$$side
    until ip netns exec "$ns" "$bin/rdma-emu" --socket "$work/$side.sock" link >/dev/null 2>&1; do
        sleep 0.2
    done
    # A RoCE host: Mooncake uses every device it discovers, and iWARP's siw0 cannot take
    # its RoCE-style connections (the kernel's siw refuses them the same way).
    ip netns exec "$ns" "$bin/rdma-emu" --socket "$work/$side.sock" link del siw0
done

run() {
    ns=$1 side=$2
    shift 2
    ip netns exec "$ns" env RDMA_EMU_SOCKET="$work/$side.sock" GLOG_minloglevel=1 \
        "$bin/rdma-emu" run -- "$venv/bin/python" "$here/mooncake_mover.py" "$@"
}
run "$a" a server 10.231.0.1 17100 "$mib" &
server=$!
run "$b" b client 10.231.0.2 10.231.0.1 17100 "$mib"
wait $server
for side in a b; do
    eval ns=\$$side
    ip netns exec "$ns" "$bin/rdma-emu" --socket "$work/$side.sock" stat rxe0 |
        grep -o "rxe0/1 sent_pkts [0-9]* rcvd_pkts [0-9]*" | sed "s/^/host $side: /"
done

#!/bin/sh
# rdma-emu for CI jobs: build and install rdma-emu, start the daemon as the current user,
# run a command under `rdma-emu run`, stop the daemon, and exit with the command's status.
#
#   ci/rdma-emu-ci.sh [OPTIONS] -- COMMAND [ARGS...]
#   ci/rdma-emu-ci.sh --install-only
#
# Options (or the environment variables in brackets):
#   --prefix DIR    install into DIR/bin and DIR/lib/rdma-emu   [RDMA_EMU_PREFIX, ~/.local]
#   --faults TEXT   faults in place from the start, `DEVICE KIND ...; ...` as
#                   `rdma-emu fault add` takes them (docs/faults.md)   [RDMA_EMU_FAULTS]
#   --log FILE      the daemon's log (printed when COMMAND fails)   [RDMA_EMU_LOG]
#   --install-only  build and install, start nothing
#
# Needs cargo (Rust >= 1.87) and a C linker to build; no root. Builds the sources this
# script belongs to (CARGO_TARGET_DIR is honoured). docs/ci.md has the GitHub Actions and
# GitLab CI forms; ci/Dockerfile runs this same script.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${RDMA_EMU_PREFIX:-${HOME:-/tmp}/.local}
faults=${RDMA_EMU_FAULTS:-}
log=${RDMA_EMU_LOG:-}
install_only=false

die() {
    echo "rdma-emu-ci: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case $1 in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a folder"; prefix=$2; shift 2 ;;
    --faults) [ $# -ge 2 ] || die "--faults needs a text"; faults=$2; shift 2 ;;
    --log) [ $# -ge 2 ] || die "--log needs a file"; log=$2; shift 2 ;;
    --install-only) install_only=true; shift ;;
    --) shift; break ;;
    *) die "unknown option $1 (usage: rdma-emu-ci.sh [--prefix DIR] [--faults TEXT] [--log FILE] -- COMMAND...)" ;;
    esac
done
if ! $install_only && [ $# -eq 0 ]; then
    die "no command to run (usage: rdma-emu-ci.sh [OPTIONS] -- COMMAND...)"
fi
command -v cargo >/dev/null || die "cargo is missing (install Rust: https://rustup.rs)"

# Build (a no-op when up to date) and install.
target=${CARGO_TARGET_DIR:-$here/target}
echo "rdma-emu-ci: building rdma-emu in $here" >&2
(cd "$here" && cargo build --release --locked -p emulator --bins >&2 && cargo xtask shim >&2)
mkdir -p "$prefix/bin" "$prefix/lib/rdma-emu"
for f in rdma-emud rdma-emu; do
    install -m 755 "$target/release/$f" "$prefix/bin/$f.new"
    mv -f "$prefix/bin/$f.new" "$prefix/bin/$f"
done
cp -P "$target/release/rdma-emu-lib/"* "$prefix/lib/rdma-emu/"
echo "rdma-emu-ci: installed into $prefix" >&2
$install_only && exit 0

# A daemon of our own, with a private socket.
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/rdma-emu-ci.XXXXXX")
socket=$run_dir/rdma-emud.sock
[ -n "$log" ] || log=$run_dir/rdma-emud.log
RDMA_EMU_FAULTS=$faults "$prefix/bin/rdma-emud" --socket "$socket" >"$log" 2>&1 &
daemon=$!
stop() {
    kill "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
}
trap 'stop; rm -rf "$run_dir"' EXIT
trap 'exit 130' INT TERM
tries=0
while [ ! -S "$socket" ]; do
    if ! kill -0 "$daemon" 2>/dev/null; then
        cat "$log" >&2
        die "rdma-emud did not start"
    fi
    tries=$((tries + 1))
    [ $tries -lt 200 ] || die "rdma-emud did not create $socket in 20 s"
    sleep 0.1
done

export RDMA_EMU_SOCKET="$socket" RDMA_EMU_LIB_DIR="$prefix/lib/rdma-emu"
status=0
"$prefix/bin/rdma-emu" run -- "$@" || status=$?
if [ $status -ne 0 ]; then
    echo "rdma-emu-ci: '$*' exited with $status; the daemon's log:" >&2
    cat "$log" >&2
fi
exit $status

"""Moves buffers between two Mooncake Transfer Engines over RDMA and checks them by hash.

    python mooncake_mover.py server ADDR PORT [MIB]
    python mooncake_mover.py client ADDR SERVER_ADDR PORT [MIB]
"""
import hashlib
import json
import socket
import sys
import time

import numpy as np
from mooncake.engine import TransferEngine

BATCH = 256
PIECE = 256 * 1024


def engine(addr):
    e = TransferEngine()
    # P2P handshake: no metadata server; an empty device list means "discover".
    if e.initialize(addr, "P2PHANDSHAKE", "rdma", "") != 0:
        sys.exit("initialize failed")
    return e


def buffer(e, size, fill):
    b = np.random.default_rng(fill).integers(0, 256, size, dtype=np.uint8) if fill else np.zeros(size, np.uint8)
    if e.register_memory(b.ctypes.data, b.nbytes) != 0:
        sys.exit("register_memory failed")
    return b


def sha(b):
    return hashlib.sha256(b.tobytes()).hexdigest()


def lines(sock):
    f = sock.makefile("rw")
    return lambda: json.loads(f.readline()), lambda m: (f.write(json.dumps(m) + "\n"), f.flush())


def server(addr, port, size):
    e = engine(addr)
    into, out, batch = buffer(e, size, 0), buffer(e, size, 1), buffer(e, BATCH * PIECE, 0)
    ls = socket.create_server((addr, port))
    conn, _ = ls.accept()
    recv, send = lines(conn)
    send({"session": f"{addr}:{e.get_rpc_port()}", "into": into.ctypes.data,
          "out": out.ctypes.data, "batch": batch.ctypes.data, "out_sha": sha(out)})
    got = recv()
    ok = got["into_sha"] == sha(into) and got["batch_sha"] == sha(batch)
    send({"ok": ok})
    print(f"server: {'ok' if ok else 'MISMATCH'}", flush=True)
    return 0 if ok else 1


def client(addr, server_addr, port, size):
    e = engine(addr)
    src, dst, bsrc = buffer(e, size, 2), buffer(e, size, 0), buffer(e, BATCH * PIECE, 3)
    for _ in range(600):
        try:
            conn = socket.create_connection((server_addr, port))
            break
        except OSError:
            time.sleep(0.1)
    recv, send = lines(conn)
    peer = recv()
    s = peer["session"]
    mib = size / (1 << 20)
    t = time.monotonic()
    if e.transfer_sync_write(s, src.ctypes.data, peer["into"], size) != 0:
        sys.exit("transfer_sync_write failed")
    print(f"client: write {size} B {mib / (time.monotonic() - t):.1f} MiB/s", flush=True)
    t = time.monotonic()
    if e.transfer_sync_read(s, dst.ctypes.data, peer["out"], size) != 0:
        sys.exit("transfer_sync_read failed")
    print(f"client: read {size} B {mib / (time.monotonic() - t):.1f} MiB/s", flush=True)
    read_ok = sha(dst) == peer["out_sha"]
    t = time.monotonic()
    ret = e.batch_transfer_sync_write(
        s, [bsrc.ctypes.data + i * PIECE for i in range(BATCH)],
        [peer["batch"] + i * PIECE for i in range(BATCH)], [PIECE] * BATCH)
    if ret != 0:
        sys.exit("batch_transfer_sync_write failed")
    print(f"client: batch {BATCH} x {PIECE} B {BATCH * PIECE / (1 << 20) / (time.monotonic() - t):.1f} MiB/s", flush=True)
    send({"into_sha": sha(src), "batch_sha": sha(bsrc)})
    ok = recv()["ok"] and read_ok
    print(f"client: {'ok' if ok else 'MISMATCH'} (read {'matches' if read_ok else 'differs'})", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "server":
        sys.exit(server(a[1], int(a[2]), int(a[3] if len(a) > 3 else 64) << 20))
    sys.exit(client(a[1], a[2], int(a[3]), int(a[4] if len(a) > 4 else 64) << 20))

"""Writes and reads a buffer between two NIXL agents (UCX backend, DRAM) and checks it.

    python nixl_mover.py target ADDR PORT [MIB]
    python nixl_mover.py initiator SERVER_ADDR PORT [MIB]
"""
import hashlib
import pickle
import socket
import struct
import sys
import time

import numpy as np

try:
    from nixl._api import nixl_agent, nixl_agent_config
except ImportError:
    from nixl_cu12._api import nixl_agent, nixl_agent_config


def send(sock, obj):
    data = pickle.dumps(obj)
    sock.sendall(struct.pack("!Q", len(data)) + data)


def recv(sock):
    def exact(n):
        b = b""
        while len(b) < n:
            chunk = sock.recv(n - len(b))
            if not chunk:
                raise EOFError("peer closed")
            b += chunk
        return b
    return pickle.loads(exact(struct.unpack("!Q", exact(8))[0]))


def agent(name, arrays):
    a = nixl_agent(name, nixl_agent_config(backends=["UCX"]))
    a.register_memory([(x.ctypes.data, x.nbytes, 0, "") for x in arrays], "DRAM")
    return a


def sha(x):
    return hashlib.sha256(x.tobytes()).hexdigest()


def wait(a, handle, what):
    state = a.transfer(handle)
    while state == "PROC":
        state = a.check_xfer_state(handle)
    if state != "DONE":
        sys.exit(f"{what}: {state}")


def target(addr, port, size):
    into = np.zeros(size, np.uint8)
    out = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
    a = agent("target", [into, out])
    conn, _ = socket.create_server((addr, port)).accept()
    send(conn, {"md": a.get_agent_metadata(), "into": into.ctypes.data,
                "out": out.ctypes.data, "out_sha": sha(out)})
    a.add_remote_agent(recv(conn)["md"])
    notifs = {}
    while b"written" not in notifs.get("initiator", []):
        for k, v in a.get_new_notifs().items():
            notifs.setdefault(k, []).extend(v)
    got = recv(conn)
    ok = got["into_sha"] == sha(into)
    send(conn, ok)
    recv(conn)  # the initiator is done with our memory
    print(f"target: {'ok' if ok else 'MISMATCH'}", flush=True)
    return 0 if ok else 1


def initiator(server, port, size):
    src = np.random.default_rng(2).integers(0, 256, size, dtype=np.uint8)
    dst = np.zeros(size, np.uint8)
    a = agent("initiator", [src, dst])
    for _ in range(600):
        try:
            conn = socket.create_connection((server, port))
            break
        except OSError:
            time.sleep(0.1)
    peer = recv(conn)
    send(conn, {"md": a.get_agent_metadata()})
    name = a.add_remote_agent(peer["md"])
    mib = size / (1 << 20)
    for op, local, remote in (("WRITE", src, peer["into"]), ("READ", dst, peer["out"])):
        t = time.monotonic()
        h = a.initialize_xfer(op, a.get_xfer_descs([(local.ctypes.data, size, 0)], "DRAM"),
                              a.get_xfer_descs([(remote, size, 0)], "DRAM"), name,
                              b"written" if op == "WRITE" else b"")
        wait(a, h, op)
        a.release_xfer_handle(h)
        print(f"initiator: {op} {size} B {mib / (time.monotonic() - t):.1f} MiB/s", flush=True)
    read_ok = sha(dst) == peer["out_sha"]
    send(conn, {"into_sha": sha(src)})
    ok = recv(conn) and read_ok
    send(conn, "done")
    a.remove_remote_agent(name)
    print(f"initiator: {'ok' if ok else 'MISMATCH'} (read {'matches' if read_ok else 'differs'})", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    a = sys.argv[1:]
    size = int(a[3] if len(a) > 3 else 64) << 20
    if a[0] == "target":
        sys.exit(target(a[1], int(a[2]), size))
    sys.exit(initiator(a[1], int(a[2]), size))

"""Allreduce, Bcast and Alltoall of numpy arrays from 8 B to 32 MiB, each result checked."""
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
bad = []
for nbytes in [8 << (3 * k) for k in range(8)] + [32 << 20]:
    n = nbytes // 8
    # Allreduce: element i of rank r is i * (r + 1); the sum is i * size * (size + 1) / 2.
    x = np.arange(n, dtype=np.int64) * (rank + 1)
    y = np.empty_like(x)
    t = time.monotonic()
    comm.Allreduce(x, y, op=MPI.SUM)
    dt = time.monotonic() - t
    if not np.array_equal(y, np.arange(n, dtype=np.int64) * (size * (size + 1) // 2)):
        bad.append(f"allreduce {nbytes}")
    # Bcast from the last rank.
    b = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    got = b.copy() if rank == size - 1 else np.zeros(nbytes, np.uint8)
    comm.Bcast(got, root=size - 1)
    if not np.array_equal(got, b):
        bad.append(f"bcast {nbytes}")
    # Alltoall: block j of rank r holds r * 31 + j; rank r receives j * 31 + r from rank j.
    per = max(nbytes // size, 1)
    send = np.concatenate([np.full(per, (rank * 31 + j) % 256, np.uint8) for j in range(size)])
    recv = np.zeros_like(send)
    comm.Alltoall(send, recv)
    want = np.concatenate([np.full(per, (j * 31 + rank) % 256, np.uint8) for j in range(size)])
    if not np.array_equal(recv, want):
        bad.append(f"alltoall {nbytes}")
    if rank == 0:
        print(f"allreduce {nbytes} B {nbytes / dt / 1e6:.1f} MB/s", flush=True)
print(f"rank {rank}: {'ok' if not bad else 'FAILED ' + ', '.join(bad)}", flush=True)
sys.exit(1 if bad else 0)

"""An RPC round trip of CPU tensors between two torch.distributed.rpc workers over
TensorPipe's ibv transport (its basic channel moves the tensors through the transport).

    python torch_rpc.py 0 MASTER_ADDR PORT IFACE [MIB]   # worker0, serves
    python torch_rpc.py 1 MASTER_ADDR PORT IFACE [MIB]   # worker1, calls worker0

worker1 sends a tensor of MIB MiB to worker0, which adds one to it and returns it;
worker1 checks every element of the answer, then a second call with a small tensor.
"""
import os
import sys
import time

import torch
import torch.distributed.rpc as rpc


def main():
    rank, master, port, iface = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    mib = int(sys.argv[5]) if len(sys.argv) > 5 else 16
    # Where Gloo (the agents' start-up barrier) and TensorPipe listen: without these both
    # take the address the hostname resolves to, a loopback address in a namespace.
    os.environ["GLOO_SOCKET_IFNAME"] = iface
    os.environ["TP_SOCKET_IFNAME"] = iface
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://{master}:{port}",
        # TensorPipe prefers ibv among its transports but would fall back to uv (TCP)
        # quietly; offered alone, it fails instead. Its default channels include cma
        # (process_vm_readv), which two processes of one machine reach even from two
        # network namespaces; the basic channel sends the tensors through the transport.
        _transports=["ibv"],
        _channels=["basic"],
        rpc_timeout=120,
    )
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2, rpc_backend_options=options)
    if rank == 1:
        n = (mib << 20) // 4
        sent = torch.arange(n, dtype=torch.int32)
        start = time.perf_counter()
        got = rpc.rpc_sync("worker0", torch.add, args=(sent, 1))
        took = time.perf_counter() - start
        if got.dtype != torch.int32 or not torch.equal(got, sent + 1):
            sys.exit(f"worker1: the answer to {mib} MiB differs")
        small = rpc.rpc_sync("worker0", torch.add, args=(torch.ones(3), torch.ones(3)))
        if not torch.equal(small, torch.full((3,), 2.0)):
            sys.exit(f"worker1: the small answer is {small}")
        print(f"worker1: {mib} MiB sent and returned plus one, checked; "
              f"round trip {took:.2f} s ({2 * mib / took:.1f} MiB/s both ways together)")
    rpc.shutdown()
    print(f"worker{rank}: ok")


if __name__ == "__main__":
    main()

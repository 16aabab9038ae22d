/* Two ranks: a ping-pong of growing messages (eager to rendezvous sizes, every byte
 * checked both ways), then an allreduce whose sum every rank checks. Prints
 * "rank R: pingpong ok N" and "rank R: allreduce ok"; any mismatch exits 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(int iter, size_t i, int dir)
{
    return (unsigned char)(i * 31 + iter * 7 + dir * 101);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        fprintf(stderr, "needs 2 ranks, got %d\n", size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const size_t max = 1 << 20;
    unsigned char *buf = malloc(max);
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 2);
    int iter = 0, peer = 1 - rank;
    for (size_t len = 1; len <= max; len *= 4) {
        for (int rep = 0; rep < 5; rep++, iter++) {
            if (rank == 0) {
                for (size_t i = 0; i < len; i++)
                    buf[i] = pattern(iter, i, 0);
                MPI_Send(buf, (int)len, MPI_BYTE, peer, iter, MPI_COMM_WORLD);
                memset(buf, 0, len);
                MPI_Recv(buf, (int)len, MPI_BYTE, peer, iter, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (size_t i = 0; i < len; i++)
                    if (buf[i] != pattern(iter, i, 1)) {
                        fprintf(stderr, "rank 0: pong %zu bytes: byte %zu is %u\n", len, i, buf[i]);
                        return 1;
                    }
            } else {
                MPI_Recv(buf, (int)len, MPI_BYTE, peer, iter, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (size_t i = 0; i < len; i++)
                    if (buf[i] != pattern(iter, i, 0)) {
                        fprintf(stderr, "rank 1: ping %zu bytes: byte %zu is %u\n", len, i, buf[i]);
                        return 1;
                    }
                for (size_t i = 0; i < len; i++)
                    buf[i] = pattern(iter, i, 1);
                MPI_Send(buf, (int)len, MPI_BYTE, peer, iter, MPI_COMM_WORLD);
            }
        }
    }
    printf("rank %d: pingpong ok %d\n", rank, iter);

    const int n = 100000;
    long *in = malloc(n * sizeof(long)), *out = malloc(n * sizeof(long));
    if (!in || !out)
        MPI_Abort(MPI_COMM_WORLD, 2);
    for (int i = 0; i < n; i++)
        in[i] = (long)(rank + 1) * i;
    MPI_Allreduce(in, out, n, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++)
        if (out[i] != 3L * i) {
            fprintf(stderr, "rank %d: allreduce[%d] = %ld, want %ld\n", rank, i, out[i], 3L * i);
            return 1;
        }
    printf("rank %d: allreduce ok\n", rank);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}

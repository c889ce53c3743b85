/*
 * The MPI peers of SAT's micro benchmarks (bench/micro.py): two ranks on one
 * node, point-to-point and MPI-3 one-sided (RMA), small and large messages.
 *
 *   mpirun --allow-run-as-root -n 2 --mca pml ob1 --mca btl self,vader \
 *       ./mpi_bench [-s SMALL] [-l LARGE] [-n SMALL_ITERS] [-N LARGE_ITERS]
 *
 * Defaults: 64 bytes, 64 MiB, 10000 and 7 iterations. Every figure is the
 * median of the per-iteration times taken by rank 0, after unmeasured
 * warm-up iterations (a tenth of the count, at least one). Rank 0 prints one
 * line per figure:
 *
 *   RESULT <name> <size in bytes> <median> us <min> <max>
 *
 * Figures:
 *   pt2pt.oneway  MPI_Send / MPI_Recv ping-pong, half the round trip: the
 *                 time for one message to go from one rank to the other.
 *   rma.put       MPI_Win_lock(EXCLUSIVE, 1) / MPI_Put / MPI_Win_unlock(1) on
 *                 rank 0; MPI_Win_unlock returns once the data is in rank 1's
 *                 window, the analogue of a SAT write scope whose version has
 *                 reached its home.
 *   rma.get       the same with MPI_Get from rank 1's window: the analogue of
 *                 a SAT read scope that fetches a version from its home.
 *   rma.handoff   the one-sided hand-off, see handoff_rma below.
 *
 * Buffers are allocated and touched before any timing, so page faults are
 * not measured; the data is not rewritten between iterations, as the SAT
 * bench writes only a version stamp into each chunk.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int warmup(int n)
{
    return n / 10 > 1 ? n / 10 : 1;
}

/* Sorts v and prints its median, minimum and maximum (rank 0 only). */
static void report(const char *name, size_t size, double *v, int n)
{
    if (rank != 0)
        return;
    qsort(v, n, sizeof *v, cmp_double);
    printf("RESULT %s %zu %.3f us %.3f %.3f\n", name, size, v[n / 2], v[0], v[n - 1]);
    fflush(stdout);
}

static void pt2pt_oneway(char *buf, size_t size, int n, double *t)
{
    int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < warmup(n) + n; i++) {
        if (rank == 0) {
            double t0 = MPI_Wtime();
            MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= warmup(n))
                t[i - warmup(n)] = (MPI_Wtime() - t0) * 1e6 / 2;
        } else {
            MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
    }
    report("pt2pt.oneway", size, t, n);
}

/* Passive-target put or get of `size` bytes between rank 0's buffer and
 * rank 1's window, timed on rank 0 from the lock to the unlock's return.
 * Rank 1 takes no part: it waits in the barrier that closes the run. */
static void rma_one(const char *name, int get, char *buf, MPI_Win win, size_t size, int n,
                    double *t)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        for (int i = 0; i < warmup(n) + n; i++) {
            double t0 = MPI_Wtime();
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
            if (get)
                MPI_Get(buf, (int)size, MPI_BYTE, 1, 0, (int)size, MPI_BYTE, win);
            else
                MPI_Put(buf, (int)size, MPI_BYTE, 1, 0, (int)size, MPI_BYTE, win);
            MPI_Win_unlock(1, win);
            if (i >= warmup(n))
                t[i - warmup(n)] = (MPI_Wtime() - t0) * 1e6;
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    report(name, size, t, n);
}

static void put_stamp(char *buf, size_t size, uint64_t v)
{
    memcpy(buf, &v, 8);
    memcpy(buf + size - 8, &v, 8);
}

/* Reads the stamp of this rank's own window, as a read scope would: under a
 * shared lock on itself, which also makes the window's public copy (what
 * the peer's puts wrote) visible to this process. A torn stamp (start and
 * end differ) reads as 0, "not there yet". */
static uint64_t read_own_stamp(MPI_Win win, const char *base, size_t size)
{
    uint64_t lo, hi;
    MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
    memcpy(&lo, base, 8);
    memcpy(&hi, base + size - 8, 8);
    MPI_Win_unlock(rank, win);
    return lo == hi ? lo : 0;
}

/*
 * The one-sided hand-off, the analogue of SAT's: the two ranks take turns.
 * A rank writes its buffer, stamped with the next value at both ends, into
 * the other's window (lock EXCLUSIVE / put / unlock: when unlock returns the
 * data is at the target), then reads its own window until the other's next
 * value shows. Rank 0 times a round; half a round is one hand-off: the
 * writer's put until the data is at the target, plus the time until the
 * target sees it.
 *
 * Why this is fair: in SAT's hand-off the writer's release sends the data to
 * the home and the reader learns of the new version by reading (its read
 * scopes hit locally until the invalidation arrives, then miss and fetch).
 * Here the reader also learns by reading, with no extra message: the put
 * itself is the only transfer, made straight into the reader's memory, and
 * the reader's polling under a shared lock on its own window is the RMA form
 * of a read scope. Nothing in the rounds is a second message or a barrier
 * that SAT does not have; what MPI is spared is the home: its one-sided put
 * moves the data once, SAT moves it twice (writer -> home -> reader).
 */
static void handoff_rma(char *buf, MPI_Win win, char *base, size_t size, int n, double *t)
{
    int peer = 1 - rank;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win); /* no stamp yet */
    memset(base, 0, size);
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int k = 0; k < warmup(n) + n; k++) {
        uint64_t mine = 2 * (uint64_t)k + 1 + (uint64_t)rank; /* rank 0 odd, rank 1 even */
        uint64_t theirs = rank == 0 ? mine + 1 : mine - 1;
        double t0 = MPI_Wtime();
        if (rank == 1)
            while (read_own_stamp(win, base, size) != theirs)
                ;
        put_stamp(buf, size, mine);
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, peer, 0, win);
        MPI_Put(buf, (int)size, MPI_BYTE, peer, 0, (int)size, MPI_BYTE, win);
        MPI_Win_unlock(peer, win);
        if (rank == 0) {
            while (read_own_stamp(win, base, size) != theirs)
                ;
            if (k >= warmup(n))
                t[k - warmup(n)] = (MPI_Wtime() - t0) * 1e6 / 2;
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    report("rma.handoff", size, t, n);
}

static void usage(void)
{
    if (rank == 0)
        fprintf(stderr, "usage: mpi_bench [-s SMALL] [-l LARGE] [-n SMALL_ITERS] [-N LARGE_ITERS], or mpi_bench -b [-n ROUNDS] (any number of ranks)\n");
    MPI_Finalize();
    exit(2);
}

/* -b: MPI_Barrier rounds over every rank, timed as sat-sync-bench times
 * SAT's: on rank 0, the interval between two consecutive returns from the
 * barrier, which in steady state is one full round. */
static void barrier_rounds(int n, int size, double *t)
{
    for (int i = 0; i < warmup(n); i++)
        MPI_Barrier(MPI_COMM_WORLD);
    double last = MPI_Wtime();
    for (int i = 0; i < n; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double now = MPI_Wtime();
        t[i] = (now - last) * 1e6;
        last = now;
    }
    report("barrier", (size_t)size, t, n);
}

int main(int argc, char **argv)
{
    size_t small = 64, large = (size_t)64 << 20;
    int small_n = 10000, large_n = 7, size, opt, provided;

    /* One thread: Open MPI 4.1's osc/pt2pt (one-sided over any byte
     * transfer layer, the one used over tcp) refuses MPI_THREAD_MULTIPLE. */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int barrier_only = 0;
    while ((opt = getopt(argc, argv, "s:l:n:N:b")) != -1) {
        switch (opt) {
        case 'b': barrier_only = 1; break;
        case 's': small = strtoull(optarg, NULL, 0); break;
        case 'l': large = strtoull(optarg, NULL, 0); break;
        case 'n': small_n = atoi(optarg); break;
        case 'N': large_n = atoi(optarg); break;
        default: usage();
        }
    }
    if (barrier_only) {
        double *t = malloc(sizeof(double) * (small_n > 0 ? small_n : 1));
        if (!t || small_n < 1) {
            fprintf(stderr, "mpi_bench: -b needs -n >= 1 and memory\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        barrier_rounds(small_n, size, t);
        free(t);
        MPI_Finalize();
        return 0;
    }
    if (size != 2 || small < 16 || large < small || small_n < 1 || large_n < 1 ||
        large > (size_t)1 << 30) {
        if (rank == 0)
            fprintf(stderr, "mpi_bench: needs 2 ranks, 16 <= SMALL <= LARGE <= 1 GiB, counts >= 1\n");
        usage();
    }

    int most = small_n > large_n ? small_n : large_n;
    double *t = malloc(sizeof(double) * most);
    char *buf = malloc(large), *base;
    if (!t || !buf) {
        fprintf(stderr, "mpi_bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(buf, 0xa5, large);
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)large, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
    memset(base, 0, large);
    MPI_Win_unlock(rank, win);

    if (rank == 0) {
        printf("INFO mpi_bench ranks=2 small=%zu large=%zu small_iters=%d large_iters=%d thread=%d\n",
               small, large, small_n, large_n, provided);
        fflush(stdout);
    }
    pt2pt_oneway(buf, small, small_n, t);
    pt2pt_oneway(buf, large, large_n, t);
    rma_one("rma.put", 0, buf, win, small, small_n, t);
    rma_one("rma.put", 0, buf, win, large, large_n, t);
    rma_one("rma.get", 1, buf, win, large, large_n, t);
    handoff_rma(buf, win, base, small, small_n, t);
    handoff_rma(buf, win, base, large, large_n, t);

    MPI_Win_free(&win);
    free(buf);
    free(t);
    MPI_Finalize();
    return 0;
}

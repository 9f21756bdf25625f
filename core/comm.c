/*
 * comm.c — communicators (ploss.h, "communicators"): the unique id, the shared-memory
 * rendezvous of the ranks, the CPU backend's collectives, and the dispatch of CUDA
 * contexts to the NCCL backend (kernels/comm_nccl.cu).
 *
 * The shared-memory segment (POSIX shm, named from the id) holds
 *   - a header: the rank count and backend its creator set, the abort word, NCCL's id;
 *   - one block per rank: its claim, pid, barrier arrival count and the descriptor of its
 *     current collective (double-buffered by the collective's parity);
 *   - CPU backend only: two sets (double buffering by step parity) of one staging slot per
 *     rank plus one result slot.
 * Barrier: each rank publishes its arrival count (release) and waits until every rank's
 * count has reached it (acquire), so writes made before a barrier are seen after it.  A
 * collective streams its data through the slots in chunks: every step (one chunk) writes
 * the set of its parity and reads it again only after the next step's first barrier, by
 * which time every rank is done with the set's previous use, so consecutive steps need no
 * barrier between them.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm_nccl.h"
#include "scalar.h"

_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2,
               "process-shared atomics must be lock-free (address-free)");

#define ID_RANDOM_BYTES 24          /* bytes 4 … 27 of the id; bytes 0 … 3: magic; 28 … 31: check */
#define CPU_MAX_RANKS 4096
#define DEFAULT_TIMEOUT 300.0
#define SEGMENT_READY 0x706c6373u   /* the header is filled in */
#define HEADER_MAP_BYTES 4096       /* what a joining rank maps first: the header */
#define SLOT_MAX_BYTES ((size_t)1 << 20)
#define SLOT_MIN_BYTES ((size_t)64 << 10)
#define SLOTS_BUDGET_BYTES ((size_t)32 << 20)
#define NCCL_ID_SPACE 128

static const uint8_t id_magic[4] = {'p', 'l', 'c', 1};

enum { BACKEND_CPU = 1, BACKEND_NCCL = 2 };
enum { KIND_ALL_REDUCE = 0, KIND_ALL_GATHER = 1, KIND_REDUCE_SCATTER = 2 };
static const char *const kind_names[] = {"all_reduce", "all_gather", "reduce_scatter"};
static const char *const op_names[] = {"sum", "max"};

/* The abort word: 0, or (reason << 16) | the rank it names. */
enum { ABORT_CALLED = 1, ABORT_TIMEOUT = 2, ABORT_EXITED = 3, ABORT_LEFT = 4, ABORT_MISMATCH = 5 };
enum { CLAIM_FREE = 0, CLAIM_JOINED = 1, CLAIM_LEFT = 2 };

typedef struct {
    _Atomic uint32_t ready; /* SEGMENT_READY once the fields below are set */
    uint32_t nranks;
    uint32_t backend;
    uint32_t unused;
    uint64_t slot_bytes;
    uint64_t total_bytes;
    _Alignas(64) _Atomic uint32_t aborted;
    _Alignas(64) unsigned char nccl_id[NCCL_ID_SPACE]; /* rank 0 writes it before it claims */
} shm_header;

typedef struct {
    uint32_t kind, op, dtype, unused;
    uint64_t count;
} op_desc;

typedef struct {
    _Alignas(64) _Atomic uint32_t claim; /* CLAIM_* */
    int32_t pid;
    uint64_t pid_ns;                     /* inode of the pid namespace (0: unknown) */
    _Atomic uint64_t arrived;            /* barriers this rank has reached */
    _Atomic uint32_t joined_all;         /* its own init saw every rank join */
    op_desc desc[2];                     /* its collective, by collective parity */
} rank_block;

_Static_assert(sizeof(shm_header) <= HEADER_MAP_BYTES, "the header must fit the first map");

struct ploss_comm {
    ploss_ctx_t *ctx;
    int nranks, rank;
    double timeout;
    int backend;
    int broken;             /* a timeout, exit or abort was seen: every later call fails */
    char failure[320];      /* the message of that failure */
    unsigned char *seg;     /* the mapped segment (CPU backend: for the communicator's life) */
    size_t seg_bytes;
    size_t slot_bytes;
    uint64_t barriers;      /* barriers passed (the arrival count) */
    uint64_t steps;         /* data steps taken: the parity of the next one's slot set */
    uint64_t collectives;   /* collectives started: the parity of the next one's descriptor */
    uint64_t pid_ns;
#ifdef PLOSS_HAVE_NCCL
    ploss_nccl *nccl;
#endif
};

/* ------------------------------------------------------------------------------------ */
/* Small helpers                                                                        */
/* ------------------------------------------------------------------------------------ */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t fnv1a(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; ++i)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static void store_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The inode of this process's pid namespace: peers' pids are only checked within it. */
static uint64_t pid_namespace(void)
{
    char buf[64];
    ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    unsigned long long ino = 0;
    return sscanf(buf, "pid:[%llu]", &ino) == 1 ? (uint64_t)ino : 0;
}

static size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

/* Staging slot per rank: at most 1 MiB, smaller for many ranks so that the two sets stay
 * within about 32 MiB of shared memory (/dev/shm is often small in containers). */
static size_t cpu_slot_bytes(int nranks)
{
    size_t s = SLOTS_BUDGET_BYTES / (2 * ((size_t)nranks + 1));
    s = s > SLOT_MAX_BYTES ? SLOT_MAX_BYTES : s < SLOT_MIN_BYTES ? SLOT_MIN_BYTES : s;
    return s / 4096 * 4096;
}

static size_t blocks_offset(void) { return round_up(sizeof(shm_header), 64); }
static size_t data_offset(int nranks)
{
    return round_up(blocks_offset() + (size_t)nranks * sizeof(rank_block), 4096);
}
static size_t segment_bytes(int nranks, int backend, size_t slot_bytes)
{
    size_t data = backend == BACKEND_CPU ? 2 * ((size_t)nranks + 1) * slot_bytes : 0;
    return data_offset(nranks) + data;
}

static shm_header *header_of(const ploss_comm_t *c) { return (shm_header *)c->seg; }
static rank_block *block_of(const ploss_comm_t *c, int q)
{
    return (rank_block *)(c->seg + blocks_offset()) + q;
}
/* Staging slot of rank q (q = nranks: the result slot) in the set of parity `set`. */
static unsigned char *slot_of(const ploss_comm_t *c, uint64_t set, int q)
{
    return c->seg + data_offset(c->nranks) +
           ((size_t)(set & 1) * ((size_t)c->nranks + 1) + (size_t)q) * c->slot_bytes;
}

static void segment_name(const ploss_comm_id *id, char *name, size_t len)
{
    int n = snprintf(name, len, "/ploss-comm-");
    for (int i = 0; i < ID_RANDOM_BYTES && n + 2 < (int)len; ++i)
        n += snprintf(name + n, len - (size_t)n, "%02x", id->bytes[4 + i]);
}

/* Record this rank's failure: every later call on the communicator repeats it. */
static ploss_status fail(ploss_comm_t *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static ploss_status fail(ploss_comm_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->failure, sizeof c->failure, fmt, ap);
    va_end(ap);
    c->broken = 1;
    return ploss_error(PLOSS_ERR_COMM, "%s", c->failure);
}

/* Set the shared abort word (the first reason wins). */
static void post_abort(ploss_comm_t *c, int reason, int rank)
{
    uint32_t expect = 0;
    atomic_compare_exchange_strong_explicit(&header_of(c)->aborted, &expect,
                                            (uint32_t)reason << 16 | (uint32_t)rank,
                                            memory_order_acq_rel, memory_order_acquire);
}

static ploss_status fail_aborted(ploss_comm_t *c, uint32_t word, const char *what)
{
    const int reason = (int)(word >> 16), q = (int)(word & 0xffff);
    static const char *const why[] = {
        "", "called ploss_comm_abort", "did not arrive in time: another rank timed out waiting for it",
        "has exited without destroying its communicator",
        "left: destroyed its communicator (or its process ended on an error, which destroys it)",
        "joined with another rank count or device type"};
    return fail(c, "%s: the communicator was aborted: rank %d %s", what, q,
                reason >= 1 && reason <= 5 ? why[reason] : "failed");
}

/* "1, 2, 5" (at most 16, then "…"): the ranks for which missing(c, q) holds. */
static void list_ranks(const ploss_comm_t *c, int (*missing)(const ploss_comm_t *, int, uint64_t),
                       uint64_t arg, char *buf, size_t len)
{
    size_t n = 0;
    int shown = 0;
    buf[0] = '\0';
    for (int q = 0; q < c->nranks && n + 16 < len; ++q) {
        if (!missing(c, q, arg))
            continue;
        if (shown == 16) {
            snprintf(buf + n, len - n, ", …");
            return;
        }
        n += (size_t)snprintf(buf + n, len - n, "%s%d", shown ? ", " : "", q);
        ++shown;
    }
}

/* A rank that has not joined yet; one that joined and has already left (destroyed its
 * communicator right after its own init) has joined: init succeeds, its next collective
 * fails. */
static int not_joined(const ploss_comm_t *c, int q, uint64_t unused)
{
    (void)unused;
    return atomic_load_explicit(&block_of(c, q)->claim, memory_order_acquire) == CLAIM_FREE;
}

static int not_arrived(const ploss_comm_t *c, int q, uint64_t target)
{
    return atomic_load_explicit(&block_of(c, q)->arrived, memory_order_acquire) < target;
}

/* Whether the /proc this process sees is of its own pid namespace (/proc/self is getpid()):
 * after `unshare -p` without a new /proc, /proc/<pid> is another namespace's process. */
static int proc_is_own(void)
{
    static atomic_int own = -1; /* unknown; then 0 or 1, the same for every thread */
    int v = atomic_load(&own);
    if (v < 0) {
        long self = -1;
        FILE *f = fopen("/proc/self/stat", "r");
        if (f) {
            if (fscanf(f, "%ld", &self) != 1)
                self = -1;
            fclose(f);
        }
        v = self == (long)getpid();
        atomic_store(&own, v);
    }
    return v;
}

/* Whether process `pid` (of this pid namespace) has ended: gone (ESRCH), or a zombie that
 * its parent has not collected yet (Linux's /proc/<pid>/stat state Z or X), which kill()
 * still finds (read only where /proc is this namespace's: else kill() alone decides).
 * Either way it writes nothing more. */
static int process_ended(int pid)
{
    if (kill((pid_t)pid, 0) == -1)
        return errno == ESRCH;
    if (!proc_is_own())
        return 0;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* after the command name, which may hold spaces and ')' */
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* A missing rank whose process is gone, or that destroyed its communicator: abort.  While
 * ranks join, the process of every rank that has joined is checked too: a rank killed after
 * it joined, or the dead claimant of a meeting place left by an earlier job, fails the join
 * instead of the first collective (a rank that destroyed its communicator after its own
 * init succeeded has left, which is no failure of the join). */
static ploss_status check_peers(ploss_comm_t *c, int (*missing)(const ploss_comm_t *, int, uint64_t),
                                uint64_t arg, const char *what)
{
    const int joining = missing == not_joined;
    for (int q = 0; q < c->nranks; ++q) {
        const int miss = q != c->rank && missing(c, q, arg);
        if (q == c->rank || (!joining && !miss))
            continue;
        rank_block *b = block_of(c, q);
        uint32_t claim = atomic_load_explicit(&b->claim, memory_order_acquire);
        if (claim == CLAIM_LEFT && miss) {
            post_abort(c, ABORT_LEFT, q);
            return fail_aborted(c, atomic_load(&header_of(c)->aborted), what);
        }
        /* a rank whose own init saw every rank join may have ended since (its init succeeded) */
        const int done = joining && atomic_load_explicit(&b->joined_all, memory_order_acquire);
        if (claim == CLAIM_JOINED && !done && c->pid_ns != 0 && b->pid_ns == c->pid_ns && b->pid > 0 &&
            process_ended(b->pid)) {
            /* its process is gone, so what it wrote before it ended is visible: read its words
             * again (this rank may have been descheduled since the loads above, while the other
             * saw every rank join, or destroyed its communicator, then ended) */
            claim = atomic_load_explicit(&b->claim, memory_order_acquire);
            if (claim == CLAIM_LEFT && miss) {
                post_abort(c, ABORT_LEFT, q);
                return fail_aborted(c, atomic_load(&header_of(c)->aborted), what);
            }
            if (claim == CLAIM_LEFT || (joining && atomic_load_explicit(&b->joined_all, memory_order_acquire)))
                continue;
            post_abort(c, ABORT_EXITED, q);
            return fail_aborted(c, atomic_load(&header_of(c)->aborted), what);
        }
    }
    return PLOSS_OK;
}

/* Wait until no rank is missing(c, q, arg), the abort word is set, or the timeout. */
static ploss_status wait_for_ranks(ploss_comm_t *c, int (*missing)(const ploss_comm_t *, int, uint64_t),
                                   uint64_t arg, const char *what, const char *waiting_for)
{
    const double start = now_seconds();
    double next_check = start + 0.05;
    for (unsigned iter = 0;; ++iter) {
        int all = 1;
        for (int q = 0; q < c->nranks && all; ++q)
            all = !missing(c, q, arg);
        if (all)
            return PLOSS_OK;
        uint32_t word = atomic_load_explicit(&header_of(c)->aborted, memory_order_acquire);
        if (word)
            return fail_aborted(c, word, what);
        if (iter < 64)
            continue;
        const double t = now_seconds();
        if (t >= next_check) {
            ploss_status st = check_peers(c, missing, arg, what);
            if (st != PLOSS_OK)
                return st;
            next_check = t + 0.05;
        }
        if (t - start > c->timeout) {
            char ranks[128];
            list_ranks(c, missing, arg, ranks, sizeof ranks);
            int late = 0; /* the abort names the first rank that did not arrive */
            while (late < c->nranks && (late == c->rank || !missing(c, late, arg)))
                ++late;
            post_abort(c, ABORT_TIMEOUT, late < c->nranks ? late : c->rank);
            return fail(c, "%s: timed out after %g s waiting for %s (rank%s %s); the communicator "
                        "is aborted on every rank", what, c->timeout, waiting_for,
                        strchr(ranks, ',') ? "s" : "", ranks);
        }
        if (iter < 2048) {
            sched_yield();
        } else {
            struct timespec ts = {0, 20000}; /* 20 µs */
            nanosleep(&ts, NULL);
        }
    }
}

static ploss_status barrier(ploss_comm_t *c, const char *what)
{
    const uint64_t target = ++c->barriers;
    atomic_store_explicit(&block_of(c, c->rank)->arrived, target, memory_order_release);
    return wait_for_ranks(c, not_arrived, target, what, "the other ranks to reach the collective");
}

/* ------------------------------------------------------------------------------------ */
/* Ids and joining                                                                      */
/* ------------------------------------------------------------------------------------ */

void ploss_comm_opts_init(ploss_comm_opts *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof *opts);
    opts->timeout = DEFAULT_TIMEOUT;
    opts->opts_tag = PLOSS_OPTS_TAG;
}

ploss_status ploss_comm_unique_id(ploss_comm_id *out)
{
    ploss_clear_error();
    if (!out)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "out: pointer is NULL");
    uint8_t *b = out->bytes;
    memcpy(b, id_magic, 4);
    size_t got = 0;
    while (got < ID_RANDOM_BYTES) {
        ssize_t n = getrandom(b + 4 + got, ID_RANDOM_BYTES - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ploss_error(PLOSS_ERR_UNSUPPORTED, "unique id: getrandom failed: %s", strerror(errno));
        got += (size_t)n;
    }
    store_le32(b + 28, fnv1a(b, 28));
    return PLOSS_OK;
}

/* Open (creating it if this rank is first) and map the segment; on success c->seg is the
 * whole segment and its header matches this rank's nranks and backend. */
static ploss_status open_segment(ploss_comm_t *c, const char *name, int backend, size_t slot_bytes,
                                 double deadline)
{
    const size_t total = segment_bytes(c->nranks, backend, slot_bytes);
    for (;;) {
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) { /* the creator: size (reserving the memory), fill in, publish */
            int e = posix_fallocate(fd, 0, (off_t)total);
            if (e == EINVAL || e == EOPNOTSUPP)
                e = ftruncate(fd, (off_t)total) == 0 ? 0 : errno;
            void *p = e ? MAP_FAILED : mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p == MAP_FAILED && !e)
                e = errno;
            close(fd);
            if (e) {
                shm_unlink(name);
                return ploss_error(e == ENOSPC || e == ENOMEM ? PLOSS_ERR_OUT_OF_MEMORY : PLOSS_ERR_COMM,
                                   "communicator: cannot reserve %zu bytes of shared memory for %s "
                                   "(/dev/shm): %s", total, name, strerror(e));
            }
            shm_header *h = p;
            h->nranks = (uint32_t)c->nranks;
            h->backend = (uint32_t)backend;
            h->slot_bytes = slot_bytes;
            h->total_bytes = total;
            atomic_store_explicit(&h->ready, SEGMENT_READY, memory_order_release);
            c->seg = p;
            c->seg_bytes = total;
            return PLOSS_OK;
        }
        if (errno != EEXIST)
            return ploss_error(PLOSS_ERR_COMM, "communicator: shm_open(%s): %s", name, strerror(errno));
        fd = shm_open(name, O_RDWR, 0600);
        if (fd < 0) {
            if (errno == ENOENT) /* unlinked in between: create it afresh */
                continue;
            return ploss_error(PLOSS_ERR_COMM, "communicator: shm_open(%s): %s", name, strerror(errno));
        }
        /* a joiner: wait until the creator has sized the segment and filled the header */
        struct stat st;
        for (;;) {
            if (fstat(fd, &st) != 0) {
                int e = errno;
                close(fd);
                return ploss_error(PLOSS_ERR_COMM, "communicator: fstat(%s): %s", name, strerror(e));
            }
            if ((size_t)st.st_size >= HEADER_MAP_BYTES)
                break;
            if (now_seconds() > deadline) {
                close(fd);
                return ploss_error(PLOSS_ERR_COMM, "communicator: timed out after %g s: the shared "
                                   "segment %s was never sized by the rank that created it", c->timeout, name);
            }
            sched_yield();
        }
        shm_header *h = mmap(NULL, HEADER_MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (h == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ploss_error(PLOSS_ERR_COMM, "communicator: mmap(%s): %s", name, strerror(e));
        }
        while (atomic_load_explicit(&h->ready, memory_order_acquire) != SEGMENT_READY) {
            if (now_seconds() > deadline) {
                munmap(h, HEADER_MAP_BYTES);
                close(fd);
                return ploss_error(PLOSS_ERR_COMM, "communicator: timed out after %g s waiting for the "
                                   "shared segment %s to be initialised", c->timeout, name);
            }
            sched_yield();
        }
        if (h->nranks != (uint32_t)c->nranks || h->backend != (uint32_t)backend ||
            h->total_bytes > (uint64_t)st.st_size) {
            const unsigned other_n = h->nranks, other_b = h->backend;
            uint32_t expect = 0;
            atomic_compare_exchange_strong(&h->aborted, &expect,
                                           (uint32_t)ABORT_MISMATCH << 16 | (uint32_t)c->rank);
            munmap(h, HEADER_MAP_BYTES);
            close(fd);
            return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                               "nranks: rank %d joins with nranks = %d on a %s context, but the ranks "
                               "that joined first have nranks = %u on %s contexts",
                               c->rank, c->nranks, backend == BACKEND_CPU ? "CPU" : "CUDA", other_n,
                               other_b == BACKEND_CPU ? "CPU" : "CUDA");
        }
        munmap(h, HEADER_MAP_BYTES);
        void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        int e = errno;
        close(fd);
        if (p == MAP_FAILED)
            return ploss_error(PLOSS_ERR_COMM, "communicator: mmap(%s): %s", name, strerror(e));
        c->seg = p;
        c->seg_bytes = total;
        return PLOSS_OK;
    }
}

static void unmap_segment(ploss_comm_t *c)
{
    if (c->seg)
        munmap(c->seg, c->seg_bytes);
    c->seg = NULL;
}

/* Join: open the segment, claim this rank (rank 0 first publishes NCCL's id), wait for
 * every rank, unlink the name. */
static ploss_status rendezvous(ploss_comm_t *c, const ploss_comm_id *id, void *nccl_id)
{
    char name[80];
    segment_name(id, name, sizeof name);
    const double deadline = now_seconds() + c->timeout;
    ploss_status st = open_segment(c, name, c->backend, c->slot_bytes, deadline);
    if (st != PLOSS_OK)
        return st;
    shm_header *h = header_of(c);
    rank_block *mine = block_of(c, c->rank);
    if (atomic_load_explicit(&mine->claim, memory_order_acquire) != CLAIM_FREE) {
        const int pid = mine->pid;
        const int gone = c->pid_ns != 0 && mine->pid_ns == c->pid_ns && pid > 0 && process_ended(pid);
        unmap_segment(c);
        if (gone)
            return ploss_error(PLOSS_ERR_COMM, "rank: rank %d of this id was taken by pid %d, which has exited: "
                               "the id's meeting place is left from a job that ended before every rank joined; "
                               "an id serves one job (make a new one: ploss_comm_unique_id)", c->rank, pid);
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "rank: rank %d of this id was already taken "
                           "(by pid %d): every process needs its own rank", c->rank, pid);
    }
#ifdef PLOSS_HAVE_NCCL
    if (c->backend == BACKEND_NCCL && c->rank == 0) {
        st = ploss_nccl_unique_id(h->nccl_id);
        if (st != PLOSS_OK) {
            post_abort(c, ABORT_CALLED, 0);
            shm_unlink(name);
            unmap_segment(c);
            return st;
        }
    }
#endif
    (void)nccl_id;
    mine->pid = (int32_t)getpid();
    mine->pid_ns = c->pid_ns;
    uint32_t expect = CLAIM_FREE;
    if (!atomic_compare_exchange_strong_explicit(&mine->claim, &expect, CLAIM_JOINED,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        unmap_segment(c);
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "rank: rank %d of this id was already taken "
                           "by another process: every process needs its own rank", c->rank);
    }
    st = wait_for_ranks(c, not_joined, 0, "ploss_comm_init", "the other ranks to join");
    if (st == PLOSS_OK) { /* every rank joined; none died before its own join ended (a dead
                             claimant of an earlier job's place never got that far) */
        atomic_store_explicit(&mine->joined_all, 1, memory_order_release);
        st = check_peers(c, not_joined, 0, "ploss_comm_init");
    }
    /* every rank has opened the segment by now (or it failed): nobody needs the name */
    shm_unlink(name);
    if (st != PLOSS_OK) {
        unmap_segment(c);
        return st;
    }
#ifdef PLOSS_HAVE_NCCL
    if (c->backend == BACKEND_NCCL)
        memcpy(nccl_id, h->nccl_id, PLOSS_NCCL_ID_BYTES);
#endif
    (void)h;
    return PLOSS_OK;
}

ploss_status ploss_comm_init(ploss_ctx_t *ctx, int nranks, int rank, const ploss_comm_id *id,
                             const ploss_comm_opts *opts, ploss_comm_t **out)
{
    ploss_clear_error();
    if (!out)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "out: pointer is NULL");
    *out = NULL;
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if (!id)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "id: pointer is NULL");
    if (nranks < 1)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "nranks: expected at least 1, got %d", nranks);
    if (rank < 0 || rank >= nranks)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "rank: expected a rank in [0, %d), got %d",
                           nranks, rank);
    if (memcmp(id->bytes, id_magic, 4) != 0 || load_le32(id->bytes + 28) != fnv1a(id->bytes, 28))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "id: not a unique id made by "
                           "ploss_comm_unique_id (its magic or check value does not match)");
    ploss_comm_opts o;
    ploss_comm_opts_init(&o);
    if (opts)
        o = *opts;
    if (o.opts_tag != PLOSS_OPTS_TAG)
        return ploss_opts_tag_error(o.opts_tag, "ploss_comm_opts_init");
    if (!(o.timeout > 0) || isinf(o.timeout))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "opts.timeout: expected a finite number of seconds > 0, got %s",
                           PLOSS_SHOWN(o.timeout));
    const int cuda = ctx->device.device_type == kDLCUDA;
#ifndef PLOSS_HAVE_NCCL
    if (cuda)
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "ctx: a communicator on cuda:%d needs NCCL, and this "
                           "ploss library was built without it", ctx->device.device_id);
#endif
    if (!cuda && nranks > CPU_MAX_RANKS)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "nranks: the CPU backend takes at most %d "
                           "ranks, got %d", CPU_MAX_RANKS, nranks);
    if (nranks > 0xffff)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "nranks: at most 65535 ranks, got %d", nranks);

    ploss_comm_t *c = calloc(1, sizeof *c);
    if (!c)
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "communicator: host allocation failed");
    c->ctx = ctx;
    c->nranks = nranks;
    c->rank = rank;
    c->timeout = o.timeout;
    c->backend = cuda ? BACKEND_NCCL : BACKEND_CPU;
    c->slot_bytes = cuda ? 0 : cpu_slot_bytes(nranks);
    c->pid_ns = pid_namespace();
    unsigned char nccl_id[NCCL_ID_SPACE];
    ploss_status st = rendezvous(c, id, nccl_id);
    if (st != PLOSS_OK) {
        free(c);
        return st;
    }
#ifdef PLOSS_HAVE_NCCL
    if (cuda) {
        /* the segment served only to pass NCCL's id */
        unmap_segment(c);
        st = ploss_nccl_init(ctx->device.device_id, nranks, rank, nccl_id, c->timeout, &c->nccl);
        if (st != PLOSS_OK) {
            free(c);
            return st;
        }
    }
#endif
    *out = c;
    return PLOSS_OK;
}

ploss_status ploss_comm_destroy(ploss_comm_t *c)
{
    ploss_clear_error();
    if (!c)
        return PLOSS_OK;
    ploss_status st = PLOSS_OK;
#ifdef PLOSS_HAVE_NCCL
    if (c->nccl)
        st = ploss_nccl_destroy(c->nccl);
#endif
    if (c->seg) {
        /* a rank still waiting for this one fails at once instead of after its timeout */
        atomic_store_explicit(&block_of(c, c->rank)->claim, CLAIM_LEFT, memory_order_release);
        unmap_segment(c);
    }
    free(c);
    return st;
}

ploss_status ploss_comm_abort(ploss_comm_t *c)
{
    ploss_clear_error();
    if (!c)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "comm: communicator is NULL");
#ifdef PLOSS_HAVE_NCCL
    if (c->nccl)
        ploss_nccl_abort(c->nccl);
#endif
    if (c->seg)
        post_abort(c, ABORT_CALLED, c->rank);
    if (!c->broken) {
        c->broken = 1;
        snprintf(c->failure, sizeof c->failure, "rank %d called ploss_comm_abort", c->rank);
    }
    return PLOSS_OK;
}

int ploss_comm_rank(const ploss_comm_t *c) { return c ? c->rank : -1; }
int ploss_comm_size(const ploss_comm_t *c) { return c ? c->nranks : -1; }
ploss_ctx_t *ploss_comm_context(const ploss_comm_t *c) { return c ? c->ctx : NULL; }

ploss_status ploss_comm_synchronize(ploss_comm_t *c)
{
    ploss_clear_error();
    if (!c)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "comm: communicator is NULL");
    if (c->broken)
        return ploss_error(PLOSS_ERR_COMM, "synchronize: the communicator is unusable after an "
                           "earlier failure (%s); destroy it", c->failure);
#ifdef PLOSS_HAVE_NCCL
    if (c->nccl) {
        ploss_status st = ploss_nccl_wait(c->nccl, c->ctx->stream);
        if (st != PLOSS_OK) {
            c->broken = 1;
            snprintf(c->failure, sizeof c->failure, "%s", ploss_last_error());
        }
        return st;
    }
#endif
    return PLOSS_OK;
}

/* ------------------------------------------------------------------------------------ */
/* The CPU backend's reductions                                                         */
/* ------------------------------------------------------------------------------------ */

/* out[i] = src[0][i] ⊕ src[1][i] ⊕ … in rank order, for i in [lo, lo + len). */
#define REDUCE_LOOP(T, COMBINE)                                                          \
    do {                                                                                 \
        T *o_ = (T *)out + lo;                                                           \
        const T *s0_ = (const T *)src[0] + lo;                                           \
        for (size_t i_ = 0; i_ < len; ++i_)                                              \
            o_[i_] = s0_[i_];                                                            \
        for (int q_ = 1; q_ < n; ++q_) {                                                 \
            const T *s_ = (const T *)src[q_] + lo;                                       \
            for (size_t i_ = 0; i_ < len; ++i_)                                          \
                o_[i_] = COMBINE(o_[i_], s_[i_]);                                        \
        }                                                                                \
    } while (0)
#define ADD(a, b) ((a) + (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* f16 / bf16: in f32, rounded once at the end, a block at a time. */
static void reduce_half(int bf16, ploss_reduce_op op, const unsigned char *const *src, int n,
                        size_t lo, size_t len, void *out)
{
    float acc[256];
    for (size_t b = 0; b < len; b += 256) {
        const size_t m = len - b < 256 ? len - b : 256;
        for (int q = 0; q < n; ++q) {
            const uint16_t *s = (const uint16_t *)src[q] + lo + b;
            for (size_t i = 0; i < m; ++i) {
                const float v = bf16 ? ploss_bf16_to_f32(s[i]) : ploss_half_to_f32(s[i]);
                acc[i] = q == 0 ? v : op == PLOSS_REDUCE_SUM ? acc[i] + v : fmaxf(acc[i], v);
            }
        }
        uint16_t *o = (uint16_t *)out + lo + b;
        for (size_t i = 0; i < m; ++i)
            o[i] = bf16 ? ploss_f32_to_bf16(acc[i]) : ploss_f32_to_half(acc[i]);
    }
}

static void reduce_slots(ploss_dtype dt, ploss_reduce_op op, const unsigned char *const *src, int n,
                         size_t lo, size_t len, void *out)
{
    const int sum = op == PLOSS_REDUCE_SUM;
    switch (dt) {
    case PLOSS_F32: if (sum) REDUCE_LOOP(float, ADD); else REDUCE_LOOP(float, fmaxf); break;
    case PLOSS_F64: if (sum) REDUCE_LOOP(double, ADD); else REDUCE_LOOP(double, fmax); break;
    case PLOSS_F16: reduce_half(0, op, src, n, lo, len, out); break;
    case PLOSS_BF16: reduce_half(1, op, src, n, lo, len, out); break;
    /* integer sums in unsigned arithmetic: they wrap around instead of overflowing */
    case PLOSS_I64: if (sum) REDUCE_LOOP(uint64_t, ADD); else REDUCE_LOOP(int64_t, MAX); break;
    case PLOSS_I32: if (sum) REDUCE_LOOP(uint32_t, ADD); else REDUCE_LOOP(int32_t, MAX); break;
    case PLOSS_U8:
        if (sum) {
            uint8_t *o = (uint8_t *)out + lo;
            for (size_t i = 0; i < len; ++i)
                o[i] = src[0][lo + i];
            for (int q = 1; q < n; ++q)
                for (size_t i = 0; i < len; ++i)
                    o[i] = (uint8_t)(o[i] + src[q][lo + i]);
        } else {
            REDUCE_LOOP(uint8_t, MAX);
        }
        break;
    default: break;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Collectives                                                                          */
/* ------------------------------------------------------------------------------------ */

/* The checks every collective shares; on success sv / rv are the views. */
static ploss_status check_call(ploss_comm_t *c, int kind, const DLTensor *send, const DLTensor *recv,
                               int op, ploss_view *sv, ploss_view *rv)
{
    const char *what = kind_names[kind];
    if (!c)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "comm: communicator is NULL");
    if (kind != KIND_ALL_GATHER && (op < 0 || op >= PLOSS_REDUCE_OP_COUNT))
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "op: expected PLOSS_REDUCE_SUM (0) or "
                           "PLOSS_REDUCE_MAX (1), got %d", op);
    ploss_status st = ploss_view_init(sv, send, "send");
    if (st == PLOSS_OK)
        st = ploss_view_init(rv, recv, "recv");
    if (st == PLOSS_OK)
        st = ploss_view_check_device(sv, c->ctx, "send");
    if (st == PLOSS_OK)
        st = ploss_view_check_device(rv, c->ctx, "recv");
    if (st != PLOSS_OK)
        return st;
    char a[200], b[200];
    if (rv->dtype != sv->dtype)
        return ploss_error(PLOSS_ERR_DTYPE, "recv: expected %s (send's dtype), got %s",
                           ploss_dtype_name(sv->dtype), ploss_view_describe(rv, b, sizeof b));
    if (!ploss_view_is_contiguous(sv))
        return ploss_error(PLOSS_ERR_LAYOUT, "send: a collective needs contiguous row-major memory, "
                           "got %s with other strides", ploss_view_describe(sv, a, sizeof a));
    if (!ploss_view_is_contiguous(rv))
        return ploss_error(PLOSS_ERR_LAYOUT, "recv: a collective needs contiguous row-major memory, "
                           "got %s with other strides", ploss_view_describe(rv, b, sizeof b));
    const int64_t n = c->nranks;
    if (kind == KIND_ALL_REDUCE && rv->numel != sv->numel)
        return ploss_error(PLOSS_ERR_SHAPE, "recv: expected %lld elements (send's), got %s",
                           (long long)sv->numel, ploss_view_describe(rv, b, sizeof b));
    if (kind == KIND_ALL_GATHER && rv->numel != n * sv->numel)
        return ploss_error(PLOSS_ERR_SHAPE, "recv: expected %lld elements (%d ranks × send's %lld), got %s",
                           (long long)(n * sv->numel), c->nranks, (long long)sv->numel,
                           ploss_view_describe(rv, b, sizeof b));
    if (kind == KIND_REDUCE_SCATTER && sv->numel != n * rv->numel)
        return ploss_error(PLOSS_ERR_SHAPE, "send: expected %lld elements (%d ranks × recv's %lld), got %s",
                           (long long)(n * rv->numel), c->nranks, (long long)rv->numel,
                           ploss_view_describe(sv, a, sizeof a));
    const int in_place = kind == KIND_ALL_REDUCE && sv->data == rv->data;
    if (!in_place && (st = ploss_check_no_alias(rv, "recv", sv, "send")) != PLOSS_OK)
        return st;
    if (c->broken)
        return ploss_error(PLOSS_ERR_COMM, "%s: the communicator is unusable after an earlier failure "
                           "(%s); destroy it", what, c->failure);
    return PLOSS_OK;
}

/* After the first barrier: every rank must have described the same collective. */
static ploss_status check_descriptors(ploss_comm_t *c, uint64_t parity, const op_desc *mine)
{
    for (int q = 0; q < c->nranks; ++q) {
        const op_desc *d = &block_of(c, q)->desc[parity];
        if (d->kind == mine->kind && d->op == mine->op && d->dtype == mine->dtype && d->count == mine->count)
            continue;
        const int reduces = (int)d->kind != KIND_ALL_GATHER, mine_reduces = (int)mine->kind != KIND_ALL_GATHER;
        return ploss_error(PLOSS_ERR_COMM,
                           "%s: rank %d called %s on %llu %s elements%s%s while rank %d called %s on "
                           "%llu %s elements%s%s: every rank must call the same collectives in the same "
                           "order, with the same dtype, op and element count",
                           kind_names[mine->kind], q, kind_names[d->kind < 3 ? d->kind : 0],
                           (unsigned long long)d->count,
                           d->dtype < PLOSS_DTYPE_COUNT ? ploss_dtype_name((ploss_dtype)d->dtype) : "?",
                           reduces ? " with op " : "", reduces ? op_names[d->op & 1] : "", c->rank,
                           kind_names[mine->kind], (unsigned long long)mine->count,
                           ploss_dtype_name((ploss_dtype)mine->dtype), mine_reduces ? " with op " : "",
                           mine_reduces ? op_names[mine->op & 1] : "");
    }
    return PLOSS_OK;
}

/* The CPU backend: the data goes through the staging slots a chunk (step) at a time; the
 * descriptor travels with the first step.  Every rank takes the same number of steps. */
static ploss_status cpu_collective(ploss_comm_t *c, int kind, const ploss_view *sv, ploss_view *rv,
                                   ploss_reduce_op op)
{
    const char *what = kind_names[kind];
    const int nr = c->nranks, me = c->rank;
    const size_t es = ploss_dtype_size(sv->dtype);
    const size_t slot_elems = c->slot_bytes / es;
    /* elements of one step: of the send buffer (all-reduce, all-gather), of each rank's
     * block (reduce-scatter: the slot holds one piece for every destination rank) */
    const size_t total = (size_t)(kind == KIND_REDUCE_SCATTER ? rv->numel : sv->numel);
    const size_t chunk = kind == KIND_REDUCE_SCATTER ? slot_elems / (size_t)nr : slot_elems;
    const size_t steps = total == 0 ? 1 : (total + chunk - 1) / chunk;
    const unsigned char *send = (const unsigned char *)sv->data;
    unsigned char *recv = (unsigned char *)rv->data;

    const uint64_t parity = c->collectives++ & 1;
    op_desc *mine = &block_of(c, me)->desc[parity];
    mine->kind = (uint32_t)kind;
    mine->op = kind == KIND_ALL_GATHER ? 0 : (uint32_t)op;
    mine->dtype = (uint32_t)sv->dtype;
    mine->count = (uint64_t)sv->numel;

    const unsigned char *src[CPU_MAX_RANKS];
    for (size_t j = 0; j < steps; ++j) {
        const uint64_t set = c->steps++;
        const size_t off = j * chunk, len = total - off < chunk ? total - off : chunk;
        unsigned char *my_slot = slot_of(c, set, me);
        if (kind == KIND_REDUCE_SCATTER) {
            for (int q = 0; q < nr; ++q)
                memcpy(my_slot + (size_t)q * len * es, send + ((size_t)q * total + off) * es, len * es);
        } else {
            memcpy(my_slot, send + off * es, len * es);
        }
        ploss_status st = barrier(c, what);
        if (st == PLOSS_OK && j == 0)
            st = check_descriptors(c, parity, mine);
        if (st != PLOSS_OK)
            return st;
        if (kind == KIND_ALL_GATHER) {
            for (int q = 0; q < nr; ++q)
                memcpy(recv + ((size_t)q * total + off) * es, slot_of(c, set, q), len * es);
        } else if (kind == KIND_REDUCE_SCATTER) {
            for (int q = 0; q < nr; ++q)
                src[q] = slot_of(c, set, q) + (size_t)me * len * es;
            reduce_slots(sv->dtype, op, src, nr, 0, len, recv + off * es);
        } else {
            /* each rank reduces its share of the chunk into the result slot, once for all */
            for (int q = 0; q < nr; ++q)
                src[q] = slot_of(c, set, q);
            const size_t lo = len * (size_t)me / (size_t)nr, hi = len * ((size_t)me + 1) / (size_t)nr;
            reduce_slots(sv->dtype, op, src, nr, lo, hi - lo, slot_of(c, set, nr));
            if ((st = barrier(c, what)) != PLOSS_OK)
                return st;
            memcpy(recv + off * es, slot_of(c, set, nr), len * es);
        }
    }
    return PLOSS_OK;
}

static ploss_status collective(ploss_comm_t *c, int kind, const DLTensor *send, DLTensor *recv, int op)
{
    ploss_clear_error();
    ploss_view sv, rv;
    ploss_status st = check_call(c, kind, send, recv, op, &sv, &rv);
    if (st != PLOSS_OK)
        return st;
#ifdef PLOSS_HAVE_NCCL
    if (c->nccl) {
        static const int nccl_kind[] = {PLOSS_NCCL_ALL_REDUCE, PLOSS_NCCL_ALL_GATHER,
                                        PLOSS_NCCL_REDUCE_SCATTER};
        const size_t count = (size_t)(kind == KIND_ALL_GATHER ? sv.numel : rv.numel);
        st = ploss_nccl_collective(c->nccl, nccl_kind[kind], sv.data, rv.data, count, sv.dtype,
                                   (ploss_reduce_op)op, c->ctx->stream);
        if (st != PLOSS_OK && ploss_nccl_broken(c->nccl)) {
            c->broken = 1;
            snprintf(c->failure, sizeof c->failure, "%s", ploss_last_error());
        }
        return st;
    }
#endif
    return cpu_collective(c, kind, &sv, &rv, (ploss_reduce_op)op);
}

ploss_status ploss_comm_all_reduce(ploss_comm_t *comm, const DLTensor *send, DLTensor *recv,
                                   ploss_reduce_op op)
{
    return collective(comm, KIND_ALL_REDUCE, send, recv, (int)op);
}

ploss_status ploss_comm_all_gather(ploss_comm_t *comm, const DLTensor *send, DLTensor *recv)
{
    return collective(comm, KIND_ALL_GATHER, send, recv, 0);
}

ploss_status ploss_comm_reduce_scatter(ploss_comm_t *comm, const DLTensor *send, DLTensor *recv,
                                       ploss_reduce_op op)
{
    return collective(comm, KIND_REDUCE_SCATTER, send, recv, (int)op);
}

/* memory.c — allocation through a context, with per-device byte counters. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_CUDA_DEVICES 64

typedef struct {
    uint64_t current, peak, count;
} counters;

/* index 0: CPU; 1 + id: CUDA device id */
static counters stats[1 + MAX_CUDA_DEVICES];

/* pointer → size table (open addressing), so that ploss_free needs no size */
typedef struct {
    uintptr_t ptr; /* 0 = empty, 1 = tombstone */
    size_t bytes;
    int slot;      /* stats index */
} entry;
static entry *table;
static size_t table_cap, table_used;

/* A POSIX mutex, statically initialised: ThreadSanitizer sees it (it does not intercept
 * glibc's C11 mtx_lock, and would report every access to the table as a race). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int stats_index(DLDevice d)
{
    if (d.device_type == kDLCPU)
        return 0;
#ifndef PLOSS_HAVE_CUDA
    if (d.device_type == kDLCUDA)
        return -1; /* no CUDA in this build: no counters to read (stats_error says so) */
#endif
    if (d.device_type == kDLCUDA && d.device_id >= 0 && d.device_id < MAX_CUDA_DEVICES)
        return 1 + d.device_id;
    return -1;
}

/* The error of a device without counters (stats_index < 0). */
static ploss_status stats_error(DLDevice d)
{
    if (d.device_type == kDLCUDA && !ploss_built_with_cuda())
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "device: a CUDA device, but this ploss library was built without CUDA");
    return ploss_error(PLOSS_ERR_DEVICE, "device: not a CPU or CUDA device within range");
}

/* The counters' slot (*slot) of a device the caller names (the stats API): stats_index's,
 * and only for a device that exists — cpu:0 (a context's CPU is device 0 whatever id it
 * was made with) or a visible GPU.  A mistyped id would otherwise read another device's
 * counters (the CPU's) or those of a GPU that never counted anything. */
static ploss_status named_stats_index(DLDevice d, int *slot)
{
    if (d.device_type == kDLCPU && d.device_id != 0)
        return ploss_error(PLOSS_ERR_DEVICE, "device: cpu:%d does not exist (the CPU is device 0)", d.device_id);
#ifdef PLOSS_HAVE_CUDA
    if (d.device_type == kDLCUDA) {
        const int n = ploss_cuda_count();
        if (d.device_id < 0 || d.device_id >= n)
            return ploss_error(PLOSS_ERR_DEVICE, "device: cuda:%d does not exist (%d CUDA device%s visible)",
                               d.device_id, n, n == 1 ? "" : "s");
    }
#endif
    *slot = stats_index(d);
    return *slot < 0 ? stats_error(d) : PLOSS_OK;
}

static size_t hash(uintptr_t p) { return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull); }

static int table_insert(uintptr_t p, size_t bytes, int slot)
{
    if ((table_used + 1) * 2 > table_cap) {
        size_t ncap = table_cap ? table_cap * 2 : 1024;
        entry *nt = calloc(ncap, sizeof *nt);
        if (!nt)
            return 0;
        for (size_t i = 0; i < table_cap; ++i) {
            if (table[i].ptr > 1) {
                size_t h = hash(table[i].ptr) & (ncap - 1);
                while (nt[h].ptr)
                    h = (h + 1) & (ncap - 1);
                nt[h] = table[i];
            }
        }
        free(table);
        table = nt;
        table_cap = ncap;
        size_t live = 0;
        for (size_t i = 0; i < ncap; ++i)
            live += table[i].ptr > 1;
        table_used = live;
    }
    size_t h = hash(p) & (table_cap - 1);
    while (table[h].ptr > 1)
        h = (h + 1) & (table_cap - 1);
    if (!table[h].ptr)
        ++table_used;
    table[h].ptr = p;
    table[h].bytes = bytes;
    table[h].slot = slot;
    return 1;
}

static entry *table_find(uintptr_t p)
{
    if (!table_cap)
        return NULL;
    size_t h = hash(p) & (table_cap - 1);
    while (table[h].ptr) {
        if (table[h].ptr == p)
            return &table[h];
        h = (h + 1) & (table_cap - 1);
    }
    return NULL;
}

ploss_status ploss_alloc(ploss_ctx_t *ctx, size_t bytes, void **out)
{
    if (out)
        *out = NULL; /* on every failure (ploss.h's conventions) */
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    if (!out)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "out: pointer is NULL");
    int slot = stats_index(ctx->device);
    if (slot < 0)
        return ploss_error(PLOSS_ERR_DEVICE, "ctx: device id out of range");
    size_t rounded = (bytes + 255) & ~(size_t)255;
    if (rounded == 0)
        rounded = 256;
    if (rounded < bytes)
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "bytes: %zu is too large", bytes);
    void *p = NULL;
    if (ctx->device.device_type == kDLCPU) {
        p = aligned_alloc(256, rounded);
        if (!p)
            return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "host allocation of %zu bytes failed", bytes);
    } else {
#ifdef PLOSS_HAVE_CUDA
        ploss_status st = ploss_cuda_malloc(ctx->device.device_id, rounded, &p);
        if (st != PLOSS_OK)
            return st;
#else
        return ploss_error(PLOSS_ERR_UNSUPPORTED, "ctx: CUDA allocation in a library built without CUDA");
#endif
    }
    pthread_mutex_lock(&lock);
    int ok = table_insert((uintptr_t)p, rounded, slot);
    if (ok) {
        stats[slot].current += rounded;
        stats[slot].count++;
        if (stats[slot].current > stats[slot].peak)
            stats[slot].peak = stats[slot].current;
    }
    pthread_mutex_unlock(&lock);
    if (!ok) {
        if (ctx->device.device_type == kDLCPU)
            free(p);
#ifdef PLOSS_HAVE_CUDA
        else
            ploss_cuda_free(ctx->device.device_id, p);
#endif
        return ploss_error(PLOSS_ERR_OUT_OF_MEMORY, "allocation table could not grow");
    }
    *out = p;
    return PLOSS_OK;
}

ploss_status ploss_free(ploss_ctx_t *ctx, void *ptr)
{
    if (!ptr)
        return PLOSS_OK;
    if (!ctx)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "ctx: context is NULL");
    int slot = stats_index(ctx->device);
    pthread_mutex_lock(&lock);
    entry *e = table_find((uintptr_t)ptr);
    int ok = e && e->slot == slot;
    if (ok) {
        stats[slot].current -= e->bytes;
        e->ptr = 1; /* tombstone */
    }
    pthread_mutex_unlock(&lock);
    if (!ok)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                           "ptr: %p was not allocated by ploss_alloc on this context's device", ptr);
    if (ctx->device.device_type == kDLCPU) {
        free(ptr);
        return PLOSS_OK;
    }
#ifdef PLOSS_HAVE_CUDA
    return ploss_cuda_free(ctx->device.device_id, ptr);
#else
    return PLOSS_OK;
#endif
}

ploss_status ploss_memory_stats_get(DLDevice device, ploss_memory_stats *out)
{
    ploss_clear_error();
    if (!out)
        return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "out: pointer is NULL");
    int i;
    ploss_status st = named_stats_index(device, &i);
    if (st)
        return st;
    pthread_mutex_lock(&lock);
    out->current_bytes = stats[i].current;
    out->peak_bytes = stats[i].peak;
    out->alloc_count = stats[i].count;
    pthread_mutex_unlock(&lock);
    return PLOSS_OK;
}

ploss_status ploss_memory_reset_peak(DLDevice device)
{
    ploss_clear_error();
    int i;
    ploss_status st = named_stats_index(device, &i);
    if (st)
        return st;
    pthread_mutex_lock(&lock);
    stats[i].peak = stats[i].current;
    pthread_mutex_unlock(&lock);
    return PLOSS_OK;
}

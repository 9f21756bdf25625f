/*
 * fuzz.h — the table that tells the libFuzzer harness (fuzz/fuzz_api.c) how to call each
 * public entry point.  To cover a new function, add one fz_entry to fuzz/entries.c:
 *
 *   - slots: the DLTensor arguments in order, each with its role (input or output,
 *     optional = may be NULL), a shape pattern and a dtype hint (below);
 *   - opts: the options struct (size, default initialiser, and the fields to mutate);
 *   - call: a thunk that unpacks t[] and opts into the real call.
 *
 * The harness builds every descriptor over a real heap buffer sized from its shape and
 * strides (or over a small poisoned guard buffer when the descriptor is invalid by the
 * ABI's contract and must be refused), poisons all buffers, calls, and checks:
 *   - no crash, no ASan/UBSan report (buffers are separate mallocs, so any read or write
 *     outside them is caught);
 *   - the status is a known ploss_status and an error comes with a non-empty message;
 *   - on an error, every buffer is bit-identical to its contents before the call;
 *   - on PLOSS_OK, no byte outside the elements of the output descriptors changed (inputs
 *     are never written, gaps between strided output elements are never written);
 *   - a call given a descriptor the contract forbids (NULL required tensor, NULL data
 *     with elements, negative size, element count overflowing int64, elements more than
 *     2^62 bytes apart, a data pointer or byte_offset not a multiple of the element size,
 *     unsupported dtype, non-CPU device on a CPU context) never returns PLOSS_OK.
 */
#ifndef PLOSS_FUZZ_H
#define PLOSS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "ploss.h"

#define FZ_MAX_SLOTS 12 /* the fused linear cross-entropy has 11 */
#define FZ_MAX_FIELDS 16 /* option fields of one entry: the margin losses have 13 */

/* Slot flags.  FZ_MAY_IGNORE: the function documents that it may ignore this tensor (e.g.
 * SGD's momentum buffer when momentum = 0), so an invalid descriptor there need not be
 * refused; it must still never be touched. */
enum { FZ_IN = 0u, FZ_OUT = 1u, FZ_OPTIONAL = 2u, FZ_MAY_IGNORE = 4u };

/*
 * shape: alternatives separated by '|', each a string of letters for the shared sizes of
 *        one fuzz input: N (batch), C (classes), d (all spatial dims d1..dk, k in 0..3),
 *        D (d1 alone, 2 when k = 0: a third size, e.g. GEMM's K), a digit (that literal
 *        size).  "" is a 0-d tensor.  e.g. "NCd" input, "Nd|NCd" target, "N3d" state.
 * dtype: alternatives separated by '|': f (any float: f32 f16 bf16 f64), i (i64 or i32),
 *        u (u8), x (slot 0's dtype), a (slot 0's accumulation dtype: f64 for f64, else
 *        f32), * (any supported dtype).
 * The harness follows the hints most of the time and breaks them (rank, sizes, dtype,
 * device, strides, aliasing) the rest of the time.
 */
typedef struct fz_slot {
    const char *name;
    unsigned flags;
    const char *shape;
    const char *dtype;
} fz_slot;

/* Kinds of option fields; enums are int-sized (C enums with small values). */
typedef enum { FZ_ENUM, FZ_INT, FZ_I64, FZ_U64, FZ_F64 } fz_kind;

typedef struct fz_field {
    size_t offset;
    fz_kind kind;
    int64_t lo, hi; /* FZ_ENUM / FZ_INT: the valid range (inclusive), mostly drawn from */
} fz_field;

#define FZ_FIELD(type, member, kind, lo, hi) {offsetof(type, member), kind, lo, hi}

typedef struct fz_entry {
    const char *name;
    /* t[i] is NULL or the descriptor of slot i; opts is NULL (when opts_nullable) or a
     * struct of opts_size bytes. */
    ploss_status (*call)(ploss_ctx_t *ctx, DLTensor *const t[], const void *opts);
    int nslots;
    fz_slot slots[FZ_MAX_SLOTS];
    size_t opts_size;             /* 0: no options */
    void (*opts_init)(void *opts); /* defaults; NULL: zero-filled */
    int opts_nullable;            /* the function accepts opts == NULL (defaults) */
    int nfields;
    fz_field fields[FZ_MAX_FIELDS];
} fz_entry;

extern const fz_entry fz_entries[];
extern const int fz_nentries;

#endif

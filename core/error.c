/* error.c — status names and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

static _Thread_local char last_error[1024];

const char *ploss_status_string(ploss_status status)
{
    static const char *const names[PLOSS_STATUS_COUNT] = {
        "PLOSS_OK",          "PLOSS_ERR_INVALID_ARGUMENT", "PLOSS_ERR_SHAPE",
        "PLOSS_ERR_DTYPE",   "PLOSS_ERR_DEVICE",           "PLOSS_ERR_LAYOUT",
        "PLOSS_ERR_ALIAS",   "PLOSS_ERR_INVALID_LABEL",    "PLOSS_ERR_OUT_OF_MEMORY",
        "PLOSS_ERR_UNSUPPORTED", "PLOSS_ERR_CUDA",   "PLOSS_ERR_INVALID_BOX",
        "PLOSS_ERR_COMM",
    };
    if ((int)status < 0 || status >= PLOSS_STATUS_COUNT)
        return "PLOSS_UNKNOWN_STATUS";
    return names[status];
}

const char *ploss_last_error(void) { return last_error; }

void ploss_clear_error(void) { last_error[0] = '\0'; }

ploss_status ploss_error(ploss_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

const char *ploss_shown_text(char *buf, size_t len, double v)
{
    if (v != v) {
        snprintf(buf, len, "nan");
        return buf;
    }
    for (int digits = 15; digits <= 17; ++digits) {
        snprintf(buf, len, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

ploss_status ploss_opts_tag_error(uint32_t tag, const char *init)
{
    return ploss_error(PLOSS_ERR_INVALID_ARGUMENT,
                       "opts: not filled by %s() (opts_tag is 0x%08x): call it first, then set the fields you "
                       "change; a struct filled by hand would have 0, not the defaults, in the others",
                       init, (unsigned)tag);
}

ploss_status ploss_check_flag(int v, const char *name)
{
    if (v == 0 || v == 1)
        return PLOSS_OK;
    return ploss_error(PLOSS_ERR_INVALID_ARGUMENT, "%s: %d is neither 0 (false) nor 1 (true)", name, v);
}

int ploss_abi_version(void) { return PLOSS_ABI_VERSION; }

/* PLOSS_VERSION comes from meson.build (c_args) */
const char *ploss_version(void) { return PLOSS_VERSION; }

int ploss_built_with_cuda(void)
{
#ifdef PLOSS_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int ploss_cuda_device_count(void)
{
#ifdef PLOSS_HAVE_CUDA
    return ploss_cuda_count();
#else
    return 0;
#endif
}

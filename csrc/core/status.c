/* status.c -- the thread-local error message behind every non-OK sw_status. */
#include <stdarg.h>  /* va_list */
#include <stdio.h>   /* vsnprintf */

#include "internal.h"

static _Thread_local char last_error[1024];

const char *sw_last_error(void) { return last_error; }

sw_status sw_set_error(sw_status status, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    /* file:line helps when a message reaches a bug report; a refusal (a limit the user
     * hit and can lift) is not a bug and speaks to the user alone */
    if (status != SW_ERR_TOO_LARGE && n >= 0 && (size_t)n < sizeof last_error - 64) {
        snprintf(last_error + n, sizeof last_error - (size_t)n, " [%s:%d]", file, line);
    }
    return status;
}

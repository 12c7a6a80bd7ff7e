/* export_internal.h - the state of one export run (export.c): the format's
 * plan (xfmt/xfmt.h) plus the files, shards and resume state. Not a public
 * API. */
#ifndef DSQ_EXPORT_INTERNAL_H
#define DSQ_EXPORT_INTERNAL_H

#include "dsq_dpw.h"
#include "export.h"
#include "xfmt.h"

#include <json-c/json.h>

struct dsq_export {
    dsq_xplan p;                  /* the format's decisions, target tensors */
    dsq_export_opts o;
    json_object *meta;            /* parsed metadata */
    int nshards;
    char *dir;                    /* final */
    char *tmpdir;                 /* partial */
    size_t resume_from;
    int committed;
    /* current shard */
    int cur;
    int fd;
    dsq_dpw dpw;                  /* fd's writes, past the page cache */
    uint64_t data_start;
    size_t next;                  /* next source index expected */
    dsq_export_summary sum;
};

#endif

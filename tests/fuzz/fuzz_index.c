/* fuzz_index.c - libFuzzer target for both sharded-index parsers: the input
 * is written as model.safetensors.index.json next to two small safetensors
 * shards (dsq_st_open) and as model.dsq.index.json next to two small .dsq
 * shards (dsq_ctr_set_open). The shards hold tensors "a" (shard 1) and "b"
 * (shard 2), so well-formed seeds get past the parse into the cross-checks
 * (missing shard, tensor listed for the wrong shard, unlisted tensor, foreign
 * file names, path escapes). Seeds: corpus/index/. */
#include "container.h"
#include "container_set.h"
#include "safetensors.h"
#include "fuzz_util.h"

#include <stdint.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *st_dir, *dsq_dir;   /* live for the whole process */

static void st_shard(const char *name, const char *tensor)
{
    char hdr[128], path[600];
    int n = snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", tensor);
    while (n % 8) hdr[n++] = ' ';
    uint8_t buf[8 + 128 + 8] = {0};
    uint64_t hl = (uint64_t)n;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hl >> (8 * i));
    memcpy(buf + 8, hdr, (size_t)n);
    snprintf(path, sizeof path, "%s/%s", st_dir, name);
    fz_write(path, buf, 8 + (size_t)n + 8);
}

static void dsq_shard(const char *name, const char *tensor)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dsq_dir, name);
    dsq_ctr_writer *w;
    dsq_ctr_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = tensor;
    t.src_dtype = "F32";
    t.ndim = 1;
    t.shape[0] = 2;
    float v[2] = { 1.0f, 2.0f };
    if (dsq_ctr_writer_open(&w, path, DSQ_OUT_OVERWRITE, NULL) != DSQ_OK) abort();
    if (dsq_ctr_writer_add(w, &t, v, sizeof v, 0, NULL) != DSQ_OK) abort();
    if (dsq_ctr_writer_finish(w, NULL) != DSQ_OK) abort();
}

static void setup(void)
{
    st_dir = strdup(fz_path(0, "st"));
    dsq_dir = strdup(fz_path(1, "dsq"));
    if (!st_dir || !dsq_dir) abort();
    if (mkdir(st_dir, 0755) != 0 || mkdir(dsq_dir, 0755) != 0) abort();
    st_shard("model-00001-of-00002.safetensors", "a");
    st_shard("model-00002-of-00002.safetensors", "b");
    dsq_shard("model-00001-of-00002.dsq", "a");
    dsq_shard("model-00002-of-00002.dsq", "b");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) { setup(); ready = 1; }
    char path[700];
    dsq_diag d;

    snprintf(path, sizeof path, "%s/model.safetensors.index.json", st_dir);
    fz_write(path, data, size);
    dsq_st_model *m = NULL;
    dsq_diag_clear(&d);
    if (dsq_st_open(&m, path, &d) == DSQ_OK) {
        for (size_t i = 0; i < dsq_st_count(m); i++) (void)dsq_st_find(m, dsq_st_get(m, i)->name);
        dsq_st_close(m);
    }

    snprintf(path, sizeof path, "%s/model.dsq.index.json", dsq_dir);
    fz_write(path, data, size);
    dsq_ctr_set *s = NULL;
    dsq_diag_clear(&d);
    if (dsq_ctr_set_open(&s, path, &d) == DSQ_OK) {
        dsq_ctr *sh;
        (void)dsq_ctr_set_find(s, "a", &sh);
        (void)dsq_ctr_set_find(s, "b", &sh);
        dsq_ctr_set_close(s);
    }
    return 0;
}

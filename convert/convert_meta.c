/* convert_meta.c - metadata JSON, fingerprint, shard index (see convert_meta.h). */
#include "convert_meta.h"
#include "convert_check.h"
#include "dsq_file.h"
#include "dsq_sbuf.h"
#include "dsq_sha256.h"
#include "model_config.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ================= string builder ================= */


/* ================= side files ================= */

/* Validate text as one strict JSON value (the container's rules) and return
 * the parsed object (caller puts it) plus the trimmed span. */
static int parse_json(const char *path, const char *text, size_t len, json_object **out,
                      size_t *b, size_t *e, dsq_diag *d)
{
    size_t s = 0;
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) s = 3;  /* UTF-8 BOM */
    while (s < len && strchr(" \t\r\n", text[s])) s++;
    json_tokener *tok = json_tokener_new_ex(200);
    if (!tok) return dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *o = json_tokener_parse_ex(tok, text + s, (int)(len - s));
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t used = s + json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!o || err != json_tokener_success) {
        json_object_put(o);
        return dsq_fail(d, DSQ_ERR_JSON, path, NULL, (int64_t)used, "malformed JSON: %s",
                        err == json_tokener_continue ? "unexpected end" : json_tokener_error_desc(err));
    }
    size_t end = used;
    while (used < len && strchr(" \t\r\n", text[used])) used++;
    if (used != len) {
        json_object_put(o);
        return dsq_fail(d, DSQ_ERR_JSON, path, NULL, (int64_t)used, "trailing data after JSON");
    }
    if (!json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return dsq_fail(d, DSQ_ERR_JSON, path, NULL, 0, "not a JSON object");
    }
    *out = o;
    *b = s;
    *e = end;
    return DSQ_OK;
}

/* Append `"key": <file content>` if dir/name exists. */
int dsq_conv_input_is_tensor_file(const char *input)
{
    struct stat st;
    if (!input || stat(input, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    size_t n = strlen(input);
    static const char suf[] = ".index.json";
    return !(n >= sizeof suf - 1 && strcmp(input + n - (sizeof suf - 1), suf) == 0);
}

static int embed_file(dsq_sbuf *b, const char *dir, const char *name, const char *key, int *first,
                      json_object **keep, dsq_diag *d)
{
    char *p = dsq_path_join(dir, name);
    if (!p) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (!dsq_path_exists(p)) { free(p); return 0; }
    char *txt = NULL;
    size_t len = 0;
    int rc = dsq_read_file(p, 200u << 20, &txt, &len, d);
    json_object *o = NULL;
    size_t s = 0, e = 0;
    if (rc == DSQ_OK) rc = parse_json(p, txt, len, &o, &s, &e, d);
    if (rc == DSQ_OK) {
        if (!*first) dsq_sb_puts(b, ", ");
        *first = 0;
        dsq_sb_json_str(b, key);
        dsq_sb_puts(b, ": ");
        dsq_sb_add(b, txt + s, e - s);
        if (keep) *keep = o;
        else json_object_put(o);
    } else if (d && !d->msg[0]) {
        dsq_fail(d, rc, p, NULL, -1, "cannot read");
    }
    free(txt);
    free(p);
    return rc < 0 ? rc : 1;
}

/* ================= metadata ================= */

static int header_sha(const char *path, uint64_t *size, int64_t *mtime_ns, char hex[65], dsq_diag *d)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dsq_fail_errno(d, errno, path, "cannot open");
    struct stat st;
    uint8_t n8[8];
    int rc = DSQ_OK;
    if (fstat(fd, &st) != 0) rc = dsq_fail_errno(d, errno, path, "cannot stat");
    else if (pread(fd, n8, 8, 0) != 8) rc = dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, 0, "short read");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | n8[i];
    if (rc == DSQ_OK && n > DSQ_ST_MAX_HEADER) rc = dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, 0, "header too large");
    uint8_t *buf = rc == DSQ_OK ? malloc(8 + n) : NULL;
    if (rc == DSQ_OK && !buf) rc = dsq_fail(d, DSQ_ERR_NOMEM, path, NULL, -1, "out of memory");
    if (rc == DSQ_OK && pread(fd, buf, 8 + n, 0) != (ssize_t)(8 + n))
        rc = dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, 8, "short read of header");
    if (rc == DSQ_OK) {
        uint8_t h[DSQ_SHA256_LEN];
        rc = dsq_sha256_buf(buf, 8 + n, h);
        dsq_sha256_hex(h, hex);
        *size = (uint64_t)st.st_size;
        *mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    }
    free(buf);
    close(fd);
    return rc;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void recipe_json(dsq_sbuf *b, const dsq_convert *c)
{
    const dsq_recipe *r = c->o.recipe;
    const dsq_scheme *main_sc = r->role_scheme[DSQ_ROLE_ATTN_LINEAR];
    dsq_sb_puts(b, "{\"scheme\": ");
    if (r->preset) dsq_sb_puts(b, "null");
    else dsq_sb_json_str(b, main_sc ? main_sc->name : "keep");
    dsq_sb_puts(b, ", \"preset\": ");
    if (r->preset) dsq_sb_json_str(b, r->preset);
    else dsq_sb_puts(b, "null");
    if (r->group_size == DSQ_GROUP_DEFAULT) dsq_sb_puts(b, ", \"group_size\": \"default\"");
    else dsq_sb_printf(b, ", \"group_size\": %d", (int)r->group_size);
    dsq_sb_puts(b, ", \"rules\": [");
    for (size_t i = 0; i < r->nrules; i++) {
        dsq_sb_puts(b, i ? ", {\"pattern\": " : "{\"pattern\": ");
        dsq_sb_json_str(b, r->rules[i].pattern);
        dsq_sb_puts(b, ", \"scheme\": ");
        dsq_sb_json_str(b, r->rules[i].scheme ? r->rules[i].scheme->name : "keep");
        dsq_sb_puts(b, i < r->nuser ? ", \"from\": \"user\"}" : ", \"from\": \"preset\"}");
    }
    dsq_sb_puts(b, "], \"roles\": {");
    int first = 1;
    for (uint32_t role = 0; role < DSQ_ROLE_COUNT; role++) {
        if (role == DSQ_ROLE_QUANT_AUX || role == DSQ_ROLE_CALIB_STATS) continue;
        if (!first) dsq_sb_puts(b, ", ");
        first = 0;
        dsq_sb_json_str(b, dsq_role_name(role));
        dsq_sb_puts(b, ": ");
        dsq_sb_json_str(b, r->role_scheme[role] ? r->role_scheme[role]->name : "keep");
    }
    dsq_sb_puts(b, "}, \"mtp_experts\": ");
    if (r->mtp_expert_scheme) dsq_sb_json_str(b, r->mtp_expert_scheme->name);
    else dsq_sb_puts(b, "\"as experts\"");
    dsq_sb_printf(b, ", \"keep_means\": \"source float type (BF16 and FP8 -> bf16, F32/F16/F64 -> f32)\""
                 ", \"calibration\": %s, \"clip_search\": %s, \"range_search\": %s, \"allow_nonfinite\": %s"
                 ", \"zstd_level\": %d}",
              c->o.calib_json ? c->o.calib_json : "\"none (RTN)\"", c->o.clip_search ? "true" : "false",
              c->o.range_search > 0 ? "\"on\"" : c->o.range_search < 0 ? "\"off\"" : "\"default (w4a8 RTN)\"",
              c->o.allow_nonfinite ? "true" : "false", c->o.zstd_level);
}

int dsq_conv_build_metadata(dsq_convert *c, dsq_diag *d)
{
    const char *dir = dsq_st_dir(c->m);
    dsq_sbuf b = { 0 };
    dsq_sb_puts(&b, "{\"format\": \"dsq\", \"tool\": ");
    dsq_sb_json_str(&b, c->o.tool);
    dsq_sb_puts(&b, ", \"source\": {\"path\": ");
    dsq_sb_json_str(&b, c->o.input);
    dsq_sb_printf(&b, ", \"format\": \"safetensors\", \"total_bytes\": %llu, \"files\": [",
              (unsigned long long)dsq_st_total_bytes(c->m));
    int rc = DSQ_OK;
    for (int i = 0; i < dsq_st_shard_count(c->m) && rc == DSQ_OK; i++) {
        const char *p = dsq_st_shard_path(c->m, i);
        uint64_t size;
        int64_t mt;
        char hex[65];
        rc = header_sha(p, &size, &mt, hex, d);
        if (rc < 0) break;
        dsq_sb_puts(&b, i ? ", {\"name\": " : "{\"name\": ");
        dsq_sb_json_str(&b, base_name(p));
        dsq_sb_printf(&b, ", \"size\": %llu, \"header_sha256\": \"%s\"}", (unsigned long long)size, hex);
    }
    dsq_sb_puts(&b, "]}");

    json_object *cfg = NULL;
    int first = 0;   /* we are inside the top-level object already */
    if (rc == DSQ_OK) {
        int got = embed_file(&b, dir, "config.json", "config", &first, &cfg, d);
        if (got < 0) rc = got;
        c->have_config = got == 1;
        /* A model directory or shard index without config.json cannot be
         * checked against its shapes, and ds-eval could not run what came
         * out (issue 14.7): refused. A single .safetensors file named on
         * purpose is a tensor-only conversion and stays allowed (the CLI
         * says what it gives). */
        if (rc == DSQ_OK && !c->have_config && !dsq_conv_input_is_tensor_file(c->o.input)) {
            char *cp = dsq_path_join(dir, "config.json");
            rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, cp ? cp : "config.json", NULL, -1,
                          "the model has no config.json: without it the tensors cannot be checked and "
                          "ds-eval cannot run the output; put the model's config.json beside the shards, "
                          "or name one .safetensors file for a tensor-only conversion");
            free(cp);
        }
    }
    if (rc == DSQ_OK && cfg) {
        json_object *v;
        if (json_object_object_get_ex(cfg, "num_hidden_layers", &v) && json_object_is_type(v, json_type_int))
            c->num_hidden_layers = json_object_get_int64(v);
        /* The recipe assigns schemes by tensor role, which is only right for
         * the architectures dsq knows: an unknown one is refused here, not
         * converted by luck of names. */
        dsq_model_config mc;
        memset(&mc, 0, sizeof mc);
        rc = dsq_model_config_load(&mc, dir, d);
        if (rc == DSQ_OK) {
            char *cp = dsq_path_join(dir, "config.json");
            rc = dsq_conv_check_config(&mc, c->m, cp ? cp : "config.json", d);
            free(cp);
        }
        dsq_model_config_release(&mc);
    }
    json_object_put(cfg);

    static const char *const tok_files[] = { "tokenizer.json", "tokenizer_config.json",
                                             "special_tokens_map.json" };
    if (rc == DSQ_OK) {
        dsq_sbuf inner = { 0 };
        int ifirst = 1;
        for (size_t i = 0; i < sizeof tok_files / sizeof tok_files[0] && rc == DSQ_OK; i++) {
            int got = embed_file(&inner, dir, tok_files[i], tok_files[i], &ifirst, NULL, d);
            if (got < 0) rc = got;
        }
        if (rc == DSQ_OK && !ifirst) {
            dsq_sb_puts(&b, ", \"tokenizer\": {");
            dsq_sb_add(&b, inner.p, inner.n);
            dsq_sb_puts(&b, "}");
        }
        if (inner.oom) b.oom = 1;
        free(inner.p);
    }
    if (rc == DSQ_OK) {
        int got = embed_file(&b, dir, "generation_config.json", "generation_config", &first, NULL, d);
        if (got < 0) rc = got;
    }
    if (rc == DSQ_OK) {
        dsq_sb_puts(&b, ", \"recipe\": ");
        recipe_json(&b, c);
        dsq_sb_puts(&b, "}");
    }
    if (rc == DSQ_OK && b.oom) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (rc < 0) {
        free(b.p);
        return rc;
    }
    c->meta = b.p;
    return DSQ_OK;
}

/* ================= fingerprint ================= */

int dsq_conv_fingerprint(dsq_convert *c, dsq_diag *d)
{
    dsq_sha256 h;
    if (dsq_sha256_init(&h) < 0) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    dsq_sbuf b = { 0 };
    /* 3: the resume ledger's record is over CRC-32C block records
     * (convert_ledger.h; 2 was SHA-256 piece digests): a partial left by an
     * older build is refused here, as made with other options, instead of
     * every tensor failing the ledger check. */
    dsq_sb_printf(&b, "dsq-convert 3\n%s\nlevel %d clip %d search %d nonfinite %d stream %llu piece %llu shard %llu\n",
              c->o.tool, c->o.zstd_level, c->o.clip_search, c->o.range_search, c->o.allow_nonfinite,
              (unsigned long long)c->o.stream_bytes, (unsigned long long)c->o.piece_bytes,
              (unsigned long long)c->o.shard_bytes);
    for (int i = 0; i < dsq_st_shard_count(c->m); i++) {
        const char *p = dsq_st_shard_path(c->m, i);
        uint64_t size;
        int64_t mt;
        char hex[65];
        int rc = header_sha(p, &size, &mt, hex, d);
        if (rc < 0) { free(b.p); dsq_sha256_release(&h); return rc; }
        dsq_sb_printf(&b, "file %s %llu %lld %s\n", base_name(p), (unsigned long long)size, (long long)mt, hex);
    }
    if (c->o.calib) {
        char hx[65];
        int rc = dsq_calib_fingerprint(c->o.calib, hx);
        if (rc < 0) { free(b.p); dsq_sha256_release(&h); return dsq_fail(d, rc, NULL, NULL, -1, "out of memory"); }
        dsq_sb_printf(&b, "calib %s\n", hx);
    }
    dsq_sha256_update(&h, b.p, b.n);
    free(b.p);
    for (size_t i = 0; i < c->plan.n; i++) {
        const dsq_plan_entry *e = &c->plan.v[i];
        char line[1400];
        int n = snprintf(line, sizeof line, "t %s %u %d %llu\n", e->name, e->scheme->id,
                         (int)e->qshape.group_size, (unsigned long long)e->est_bytes);
        dsq_sha256_update(&h, line, (size_t)n);
    }
    /* The metadata is not part of it: it is written at finish, so a resumed
     * run carries the metadata of its own invocation (e.g. the input path as
     * spelled then), exactly like a clean run with those arguments. */
    uint8_t out[DSQ_SHA256_LEN];
    dsq_sha256_final(&h, out);
    dsq_sha256_hex(out, c->fingerprint);
    return b.oom ? dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory") : DSQ_OK;
}

/* ================= shard index ================= */

char *dsq_conv_index_json(const dsq_convert *c)
{
    dsq_sbuf b = { 0 };
    uint64_t total = 0;
    for (size_t i = 0; i < c->plan.n; i++) total += c->results[i].raw_bytes;
    dsq_sb_printf(&b, "{\"metadata\": {\"format\": \"dsq\", \"total_size\": %llu, \"shards\": %d},\n"
                  " \"weight_map\": {", (unsigned long long)total, c->nshards);
    for (size_t i = 0; i < c->plan.n; i++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.dsq", c->ct[i].shard + 1, c->nshards);
        dsq_sb_puts(&b, i ? ",\n  " : "\n  ");
        dsq_sb_json_str(&b, c->plan.v[i].name);
        dsq_sb_puts(&b, ": ");
        dsq_sb_json_str(&b, name);
    }
    dsq_sb_puts(&b, "\n}}\n");
    if (b.oom) { free(b.p); return NULL; }
    return b.p;
}

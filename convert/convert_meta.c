/* convert_meta.c - metadata JSON, fingerprint, shard index (see convert_meta.h). */
#include "convert_meta.h"
#include "convert_preflight.h"
#include "dsq_file.h"
#include "dsq_sbuf.h"
#include "dsq_sha256.h"
#include "model_config.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ================= side files ================= */

/* Validate text as one strict JSON object (the container's rules) and return
 * it parsed (caller puts it). */
static int parse_json(const char *path, const char *text, size_t len, json_object **out, dsq_diag *d)
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
    return DSQ_OK;
}

/* 1 if input is one tensor file (a .safetensors, not a shard index). */
int dsq_conv_input_is_tensor_file(const char *input)
{
    struct stat st;
    if (!input || stat(input, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    size_t n = strlen(input);
    static const char suf[] = ".index.json";
    return !(n >= sizeof suf - 1 && strcmp(input + n - (sizeof suf - 1), suf) == 0);
}

/* Put v under key in o, or note the failure (json-c returns NULL or -1 on
 * allocation failure): one flag checked at the end keeps the builders below
 * straight-line. v is consumed either way. */
static void put(json_object *o, const char *key, json_object *v, int *oom)
{
    if (!o || !v || json_object_object_add(o, key, v) != 0) { json_object_put(v); *oom = 1; }
}

static void push(json_object *a, json_object *v, int *oom)
{
    if (!a || !v || json_object_array_add(a, v) != 0) { json_object_put(v); *oom = 1; }
}

/* dir/name parsed (the container's strict rules) into *out, or *out = NULL
 * if the file does not exist. */
static int read_side_file(const char *dir, const char *name, json_object **out, dsq_diag *d)
{
    *out = NULL;
    char *p = dsq_path_join(dir, name);
    if (!p) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (!dsq_path_exists(p)) { free(p); return DSQ_OK; }
    char *txt = NULL;
    size_t len = 0;
    int rc = dsq_read_file(p, 200u << 20, &txt, &len, d);
    if (rc == DSQ_OK) rc = parse_json(p, txt, len, out, d);
    if (rc < 0 && d && !d->msg[0]) dsq_fail(d, rc, p, NULL, -1, "cannot read");
    free(txt);
    free(p);
    return rc;
}

/* ================= metadata ================= */

static int header_sha(const char *path, uint64_t *size, int64_t *mtime_ns, char hex[65], dsq_diag *d)
{
    int fd = dsq_open_regular(path, d);
    if (fd < 0) return fd;
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

/* key: str, or JSON null when str is NULL */
static void put_str_or_null(json_object *o, const char *key, const char *str, int *oom)
{
    json_object *v = NULL;
    if (str && !(v = json_object_new_string(str))) { *oom = 1; return; }
    if (!o || json_object_object_add(o, key, v) != 0) { json_object_put(v); *oom = 1; }
}

static json_object *recipe_json(const dsq_convert *c, int *oom)
{
    const dsq_recipe *r = c->o.recipe;
    const dsq_scheme *main_sc = r->role_scheme[DSQ_ROLE_ATTN_LINEAR];
    json_object *o = json_object_new_object();
    if (!o) { *oom = 1; return NULL; }
    put_str_or_null(o, "scheme", r->preset ? NULL : main_sc ? main_sc->name : "keep", oom);
    put_str_or_null(o, "preset", r->preset, oom);
    put(o, "group_size", r->group_size == DSQ_GROUP_DEFAULT ? json_object_new_string("default")
                                                            : json_object_new_int(r->group_size), oom);
    json_object *rules = json_object_new_array();
    for (size_t i = 0; i < r->nrules; i++) {
        json_object *ru = json_object_new_object();
        put(ru, "pattern", json_object_new_string(r->rules[i].pattern), oom);
        put(ru, "scheme", json_object_new_string(r->rules[i].scheme ? r->rules[i].scheme->name : "keep"), oom);
        put(ru, "from", json_object_new_string(i < r->nuser ? "user" : "preset"), oom);
        push(rules, ru, oom);
    }
    put(o, "rules", rules, oom);
    json_object *roles = json_object_new_object();
    for (uint32_t role = 0; role < DSQ_ROLE_COUNT; role++) {
        if (role == DSQ_ROLE_QUANT_AUX || role == DSQ_ROLE_CALIB_STATS) continue;
        put(roles, dsq_role_name(role),
            json_object_new_string(r->role_scheme[role] ? r->role_scheme[role]->name : "keep"), oom);
    }
    put(o, "roles", roles, oom);
    put(o, "mtp_experts", json_object_new_string(r->mtp_expert_scheme ? r->mtp_expert_scheme->name
                                                                       : "as experts"), oom);
    put(o, "keep_means", json_object_new_string("source float type (BF16 and FP8 -> bf16, F32/F16/F64 -> f32)"),
        oom);
    /* calib_json is the calibration's own summary, built by the CLI */
    json_object *cal = c->o.calib_json ? json_tokener_parse(c->o.calib_json) : json_object_new_string("none (RTN)");
    put(o, "calibration", cal, oom);
    put(o, "clip_search", json_object_new_boolean(c->o.clip_search), oom);
    put(o, "range_search", json_object_new_string(c->o.range_search > 0 ? "on" : c->o.range_search < 0 ? "off"
                                                  : "default (off)"), oom);
    put(o, "allow_nonfinite", json_object_new_boolean(c->o.allow_nonfinite), oom);
    put(o, "zstd_level", json_object_new_int(c->o.zstd_level), oom);
    return o;
}

int dsq_conv_build_metadata(dsq_convert *c, dsq_diag *d)
{
    const char *dir = dsq_st_dir(c->m);
    int oom = 0, rc = DSQ_OK;
    json_object *root = json_object_new_object(), *src = json_object_new_object(),
                *files = json_object_new_array();
    put(root, "format", json_object_new_string("dsq"), &oom);
    put(root, "tool", json_object_new_string(c->o.tool), &oom);
    put(src, "path", json_object_new_string(c->o.input), &oom);
    put(src, "format", json_object_new_string("safetensors"), &oom);
    put(src, "total_bytes", json_object_new_int64((int64_t)dsq_st_total_bytes(c->m)), &oom);
    for (int i = 0; i < dsq_st_shard_count(c->m) && rc == DSQ_OK; i++) {
        const char *p = dsq_st_shard_path(c->m, i);
        uint64_t size;
        int64_t mt;
        char hex[65];
        rc = header_sha(p, &size, &mt, hex, d);
        if (rc < 0) break;
        json_object *f = json_object_new_object();
        put(f, "name", json_object_new_string(base_name(p)), &oom);
        put(f, "size", json_object_new_int64((int64_t)size), &oom);
        put(f, "header_sha256", json_object_new_string(hex), &oom);
        push(files, f, &oom);
    }
    put(src, "files", files, &oom);
    put(root, "source", src, &oom);

    json_object *cfg = NULL;
    if (rc == DSQ_OK) {
        rc = read_side_file(dir, "config.json", &cfg, d);
        c->have_config = cfg != NULL;
        /* A model directory or shard index without config.json cannot be
         * checked against its shapes, and ds-eval could not run what came
         * out: refused. A single .safetensors file named on
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
    if (cfg) put(root, "config", cfg, &oom);   /* the parsed object: json-c keeps number texts */

    static const char *const tok_files[] = { "tokenizer.json", "tokenizer_config.json",
                                             "special_tokens_map.json" };
    json_object *tok = NULL;
    for (size_t i = 0; i < sizeof tok_files / sizeof tok_files[0] && rc == DSQ_OK; i++) {
        json_object *f = NULL;
        rc = read_side_file(dir, tok_files[i], &f, d);
        if (rc == DSQ_OK && f) {
            if (!tok && !(tok = json_object_new_object())) oom = 1;
            put(tok, tok_files[i], f, &oom);
        }
    }
    if (tok) put(root, "tokenizer", tok, &oom);
    if (rc == DSQ_OK) {
        json_object *g = NULL;
        rc = read_side_file(dir, "generation_config.json", &g, d);
        if (g) put(root, "generation_config", g, &oom);
    }
    if (rc == DSQ_OK) put(root, "recipe", recipe_json(c, &oom), &oom);
    const char *txt = rc == DSQ_OK && !oom
        ? json_object_to_json_string_ext(root, JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE) : NULL;
    if (rc == DSQ_OK && (!txt || !(c->meta = strdup(txt))))
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    json_object_put(root);
    return rc;
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
    uint64_t total = 0;
    int oom = 0;
    for (size_t i = 0; i < c->plan.n; i++) total += c->results[i].raw_bytes;
    json_object *root = json_object_new_object(), *meta = json_object_new_object(),
                *map = json_object_new_object();
    put(meta, "format", json_object_new_string("dsq"), &oom);
    put(meta, "total_size", json_object_new_int64((int64_t)total), &oom);
    put(meta, "shards", json_object_new_int(c->nshards), &oom);
    put(root, "metadata", meta, &oom);
    for (size_t i = 0; i < c->plan.n && !oom; i++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.dsq", c->ct[i].shard + 1, c->nshards);
        put(map, c->plan.v[i].name, json_object_new_string(name), &oom);
    }
    put(root, "weight_map", map, &oom);
    const char *txt = oom ? NULL : json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                                  JSON_C_TO_STRING_SPACED |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE);
    char *out = txt ? malloc(strlen(txt) + 2) : NULL;
    if (out) sprintf(out, "%s\n", txt);
    json_object_put(root);
    return out;
}

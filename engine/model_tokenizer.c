/* model_tokenizer.c - the tokenizer of a model (see model_tokenizer.h). */
#include "model_tokenizer.h"
#include "container.h"
#include "container_set.h"
#include "dsq_file.h"
#include "llama2c.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A metadata entry as JSON text: objects (what ds-quant embeds) are
 * serialized, strings taken as they are. NULL when absent or null. */
static const char *meta_text(json_object *tok, const char *key, size_t *len)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(tok, key, &v) || !v) return NULL;
    if (json_object_is_type(v, json_type_string)) {
        *len = (size_t)json_object_get_string_len(v);
        return json_object_get_string(v);
    }
    return json_object_to_json_string_length(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, len);
}

/* The tokenizer ds-quant copies into a .dsq's metadata:
 * {"tokenizer": {"tokenizer.json": {..}, "tokenizer_config.json": {..}}}.
 * 1 loaded, 0 the metadata has none, < 0 error (diag names the .dsq). */
int dsq_tokenizer_from_dsq(const char *path, dsq_tokenizer **tok, dsq_diag *d)
{
    dsq_ctr_set *set = NULL;   /* one .dsq, or a sharded set: every shard carries the metadata */
    DSQ_TRY(dsq_ctr_set_open(&set, path, d));
    size_t ml = 0;
    const char *meta = dsq_ctr_metadata(dsq_ctr_set_shard(set, 0), &ml);
    json_tokener *tk = json_tokener_new_ex(64);
    json_object *root = tk && ml <= INT32_MAX ? json_tokener_parse_ex(tk, meta, (int)ml) : NULL;
    json_tokener_free(tk);
    dsq_ctr_set_close(set); /* the parsed copy is all that is needed */
    if (!root) return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, -1, "cannot parse the metadata json");
    json_object *t = NULL;
    int rc = 0;
    size_t jl = 0, cl = 0;
    const char *js = NULL, *cs = NULL;
    if (json_object_object_get_ex(root, "tokenizer", &t) && t && json_object_is_type(t, json_type_object))
        js = meta_text(t, "tokenizer.json", &jl);
    if (js) {
        cs = meta_text(t, "tokenizer_config.json", &cl);
        rc = dsq_tokenizer_load_json(tok, js, jl, cs, d);
        if (rc < 0) {
            /* keep the loader's message, say where the text came from */
            char msg[sizeof d->msg], what[sizeof d->path];
            snprintf(msg, sizeof msg, "%s", d ? d->msg : "");
            snprintf(what, sizeof what, "%s", d && d->path[0] ? d->path : DSQ_TOK_MEM_JSON);
            if (d) dsq_diag_clear(d);
            dsq_fail(d, rc, path, NULL, -1, "tokenizer in the metadata (%s): %s", what, msg);
        } else {
            rc = 1;
        }
    }
    json_object_put(root);
    return rc;
}

/* The model's directory (or the model itself when it is one). */
static char *model_dir(const char *model)
{
    if (dsq_path_is_dir(model)) return strdup(model);
    char *c = strdup(model);
    if (!c) return NULL;
    char *sl = strrchr(c, '/');
    if (!sl) { free(c); return strdup("."); }
    if (sl == c) sl[1] = 0; else *sl = 0;
    return c;
}

static void set_where(dsq_tok_origin *origin, dsq_tok_origin o, char *where, size_t wl, const char *path)
{
    if (origin) *origin = o;
    if (where && wl) snprintf(where, wl, "%s", path ? path : "");
}

int dsq_tokenizer_for_model(dsq_tokenizer **tok, const char *model, const char *tokenizer,
                            dsq_tok_origin *origin, char *where, size_t wl, dsq_diag *d)
{
    set_where(origin, DSQ_TOK_FROM_NONE, where, wl, NULL);
    if (tokenizer) {
        set_where(origin, DSQ_TOK_FROM_ARG, where, wl, tokenizer);
        return dsq_tokenizer_load(tok, tokenizer, d);
    }
    if (!model || !dsq_path_exists(model))
        return dsq_fail(d, DSQ_ERR_NOT_FOUND, model, NULL, -1, "no such model file or directory");
    int dsq = dsq_ctr_set_is_dsq(model);
    if (dsq) {
        set_where(origin, DSQ_TOK_FROM_DSQ_META, where, wl, model);
        int rc = dsq_tokenizer_from_dsq(model, tok, d);
        if (rc != 0) return rc < 0 ? rc : DSQ_OK;
        set_where(origin, DSQ_TOK_FROM_NONE, where, wl, NULL);
    }
    if (!dsq && dsq_llama2c_is_checkpoint(model)) {
        char *t = dsq_llama2c_find_tokenizer(model);
        if (!t)
            return dsq_fail(d, DSQ_ERR_NOT_FOUND, model, NULL, -1,
                            "no tokenizer.bin or tok<vocab>.bin beside this llama2.c checkpoint");
        set_where(origin, DSQ_TOK_FROM_FILE, where, wl, t);
        int rc = dsq_tokenizer_load(tok, t, d);
        free(t);
        return rc;
    }
    char *dir = model_dir(model);
    if (!dir) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    int rc;
    char *j = dsq_path_join(dir, "tokenizer.json"), *b = dsq_path_join(dir, "tokenizer.bin");
    if (!j || !b) {
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    } else if (!dsq_path_exists(j) && !dsq_path_exists(b)) {
        rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, model, NULL, -1, "%sno tokenizer.json or tokenizer.bin in %s",
                      dsq ? "no tokenizer in the .dsq metadata and " : "", dir);
    } else {
        set_where(origin, DSQ_TOK_FROM_DIR, where, wl, dir);
        rc = dsq_tokenizer_load(tok, dir, d);
    }
    free(j);
    free(b);
    free(dir);
    return rc;
}

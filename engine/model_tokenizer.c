/* model_tokenizer.c - the tokenizer embedded in a .dsq's metadata (see
 * model_tokenizer.h). */
#include "model_tokenizer.h"
#include "container.h"
#include "container_set.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>

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

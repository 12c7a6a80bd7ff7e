/* chat_template.c - the DeepSeek chat templates' rules (see chat_template.h).
 *
 * Each official template text is one table row: its SHA-256 and the few
 * choices in which the templates differ. Read without their tool branches,
 * the templates fall into three shapes:
 *
 *  classic (V3, V3-0324, the R1 family): BOS, the system prompt, then per
 *    turn "<｜User｜>" + content [+ "<｜Assistant｜>"] and
 *    ["<｜Assistant｜>"] + content + "<｜end▁of▁sentence｜>"; the generation
 *    prompt is "<｜Assistant｜>" (R1 and the R1-Distill revision force
 *    "<think>\n" after it; V3-0324 and R1-0528 print it only when the last
 *    turn was not a user turn, whose own tail already wrote it).
 *  hybrid (V3.1, V3.2-Exp): an assistant turn right after a user turn
 *    starts "<｜Assistant｜></think>"; the generation prompt after a user
 *    turn is "<｜Assistant｜>" + "<think>" or "</think>" by the "thinking"
 *    kwarg. V3.2-Exp also prints it after assistant and system-only turns.
 *    ("prefix" messages, DeepSeek's chat-prefix extension, are not passed
 *    to templates by vLLM, so none is ever set here.)
 *  encoder (V3.2, encoding_dsv32.py): every user turn ends
 *    "<｜Assistant｜>" + "<think>" (the last one in thinking mode) or
 *    "</think>"; assistant turns after the last user turn carry
 *    reasoning_content + "</think>" in thinking mode; add_generation_prompt
 *    has no effect.
 *
 * Reasoning stored in assistant content: R1's templates keep the text after
 * the last "</think>", V3.1's and V3.2-Exp's after the first, V3's keep it
 * verbatim. System prompts are joined with "\n\n" except by R1 at release
 * and the R1-Distill revision, which keep the last one. */
#include "chat_template.h"

#include "container.h"
#include "container_set.h"
#include "dsq_file.h"
#include "dsq_json.h"
#include "dsq_sbuf.h"
#include "dsq_sha256.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TK_BOS   "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define TK_EOS   "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define TK_USER  "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define TK_ASST  "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define TK_THINK "<think>"
#define TK_ENDTH "</think>"

enum shape { SH_CLASSIC, SH_HYBRID, SH_ENCODER };
enum strip { STRIP_NONE, STRIP_AFTER_LAST, STRIP_AFTER_FIRST };
enum genwhen { GEN_ALWAYS, GEN_UNLESS_LAST_USER, GEN_AFTER_USER, GEN_EXP };

typedef struct tmpl_row {
    const char *id;
    const char *sha256;      /* NULL: no template text (V3.2's encoder) */
    enum shape shape;
    int sys_last_only;       /* keep only the last system message */
    const char *user_tail;   /* after a user turn's content */
    const char *asst_head;   /* before an assistant turn's content (classic) */
    enum strip strip;
    const char *gen;         /* generation prompt (classic) */
    enum genwhen gen_when;
} tmpl_row;

static const tmpl_row ROWS[] = {
    { "deepseek-v3", "1abb11869cb1ab4f7003d1c40de7c11b046c7844da22a67e6154d29e7d14d994",
      SH_CLASSIC, 0, "", TK_ASST, STRIP_NONE, TK_ASST, GEN_ALWAYS },
    { "deepseek-v3-0324", "86c9eb894f13402f6a30ad06ba7b05d436db0c7e1cc2ba84791a957fb4f6210d",
      SH_CLASSIC, 0, TK_ASST, "", STRIP_NONE, TK_ASST, GEN_UNLESS_LAST_USER },
    { "deepseek-r1-orig-20250120", "b6835114b7303ddd78919a82e4d9f7d8c26ed0d7dfc36beeb12d524f6144eab1",
      SH_CLASSIC, 1, "", TK_ASST, STRIP_AFTER_LAST, TK_ASST, GEN_ALWAYS },
    { "deepseek-r1-distill-think", "56a1447ad31926fdc21fb07e56e5642bd9c850c4f52d8c8af7bbe5f079a84f5f",
      SH_CLASSIC, 1, "", TK_ASST, STRIP_AFTER_LAST, TK_ASST TK_THINK "\n", GEN_ALWAYS },
    { "deepseek-r1", "563b1ce7d61d50a9b4c7439a912a1116f095b712df5b5e4d3e1116049874eb64",
      SH_CLASSIC, 0, "", TK_ASST, STRIP_AFTER_LAST, TK_ASST TK_THINK "\n", GEN_ALWAYS },
    { "deepseek-r1-0528-initial", "3a3036eeb96ca0e48565fc1f19b4d7d3fa17ada32bb1b3d5ed539ae74cf22923",
      SH_CLASSIC, 0, "", TK_ASST, STRIP_AFTER_LAST, TK_ASST, GEN_ALWAYS },
    { "deepseek-r1-0528", "f04e2c07c639ea5fb4d3ce97d23b64236bf28b2a7b28a280e41176abf393f5fb",
      SH_CLASSIC, 0, TK_ASST, "", STRIP_AFTER_LAST, TK_ASST, GEN_UNLESS_LAST_USER },
    { "deepseek-v3.1", "37cabd20b2b62e3efe7fa55533ef0bc6e1eae63b60cf77265b2a09632aa1358d",
      SH_HYBRID, 0, "", "", STRIP_AFTER_FIRST, NULL, GEN_AFTER_USER },
    { "deepseek-v3.2-exp", "53163748371ddd5efad7a4cb7d977cccab8f95c85b8b3a65d2c2c00527613051",
      SH_HYBRID, 0, "", "", STRIP_AFTER_FIRST, NULL, GEN_EXP },
    { "deepseek-v3.2", NULL, SH_ENCODER, 0, "", "", STRIP_NONE, NULL, GEN_ALWAYS },
};
#define N_ROWS (sizeof ROWS / sizeof ROWS[0])

struct dsq_chat_template {
    const tmpl_row *row;
    char *bos;
};

size_t dsq_chat_template_count(void) { return N_ROWS; }
const char *dsq_chat_template_id_at(size_t i) { return i < N_ROWS ? ROWS[i].id : NULL; }
const char *dsq_chat_template_sha256_at(size_t i) { return i < N_ROWS ? ROWS[i].sha256 : NULL; }
const char *dsq_chat_template_id(const dsq_chat_template *t) { return t->row->id; }
int dsq_chat_template_has_thinking(const dsq_chat_template *t) { return t->row->shape != SH_CLASSIC; }

int dsq_chat_template_opens_think(const dsq_chat_template *t, const dsq_chat_opts *o)
{
    const tmpl_row *r = t->row;
    if (r->shape == SH_CLASSIC) return r->gen && strstr(r->gen, TK_THINK) != NULL;
    if (r->shape == SH_HYBRID) return o->thinking;
    return o->thinking || o->enable_thinking;
}

static int make(dsq_chat_template **out, const tmpl_row *row, const char *bos, dsq_diag *d)
{
    dsq_chat_template *t = calloc(1, sizeof *t);
    /* V3.2's encoder writes its own BOS constant, not the tokenizer's. */
    const char *b = row->shape == SH_ENCODER ? TK_BOS : bos ? bos : "";
    if (t) t->bos = strdup(b);
    if (!t || !t->bos) {
        free(t);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    t->row = row;
    *out = t;
    return DSQ_OK;
}

void dsq_chat_template_free(dsq_chat_template *t)
{
    if (!t) return;
    free(t->bos);
    free(t);
}

int dsq_chat_template_by_id(dsq_chat_template **out, const char *id, const char *bos, dsq_diag *d)
{
    for (size_t i = 0; i < N_ROWS; i++)
        if (strcmp(ROWS[i].id, id) == 0) return make(out, &ROWS[i], bos, d);
    return dsq_fail(d, DSQ_ERR_NOT_FOUND, NULL, NULL, -1,
                    "unknown chat template '%s' (known: deepseek-v3, deepseek-v3-0324, "
                    "deepseek-r1-orig-20250120, deepseek-r1-distill-think, deepseek-r1, "
                    "deepseek-r1-0528-initial, deepseek-r1-0528, deepseek-v3.1, "
                    "deepseek-v3.2-exp, deepseek-v3.2)", id);
}

int dsq_chat_template_from_text(dsq_chat_template **out, const char *text, size_t len,
                                const char *bos, dsq_diag *d)
{
    uint8_t h[DSQ_SHA256_LEN];
    char hex[2 * DSQ_SHA256_LEN + 1];
    if (dsq_sha256_buf(text, len, h) != DSQ_OK)
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    dsq_sha256_hex(h, hex);
    for (size_t i = 0; i < N_ROWS; i++)
        if (ROWS[i].sha256 && strcmp(ROWS[i].sha256, hex) == 0) return make(out, &ROWS[i], bos, d);
    return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1,
                    "chat template with sha256 %s is not one dsq knows (it renders the official "
                    "DeepSeek templates exactly and no other); name a known one with "
                    "--chat-template ID or FILE", hex);
}

/* tokenizer_config's bos_token: a string or an AddedToken object. */
static const char *config_bos(json_object *cfg)
{
    json_object *b;
    if (!cfg || !json_object_object_get_ex(cfg, "bos_token", &b) || !b) return NULL;
    if (json_object_is_type(b, json_type_string)) return json_object_get_string(b);
    const char *s = NULL;
    if (json_object_is_type(b, json_type_object) && dsq_json_get_str(b, "content", &s) == DSQ_JSON_OK)
        return s;
    return NULL;
}

static int file_choice(dsq_chat_template **out, const char *path, const char *bos, dsq_diag *d)
{
    char *txt = NULL;
    size_t n = 0;
    int rc = dsq_read_file(path, 1 << 20, &txt, &n, d);
    if (rc < 0) return rc;
    rc = dsq_chat_template_from_text(out, txt, n, bos, d);
    free(txt);
    if (rc < 0 && d) snprintf(d->path, sizeof d->path, "%s", path);
    return rc;
}

int dsq_chat_template_open(dsq_chat_template **out, const char *tokenizer_config_json,
                           const char *template_file, const char *model_type,
                           const char *choice, dsq_diag *d)
{
    json_object *cfg = NULL;
    if (tokenizer_config_json) {
        cfg = json_tokener_parse(tokenizer_config_json);
        if (!cfg || !json_object_is_type(cfg, json_type_object)) {
            if (cfg) json_object_put(cfg);
            return dsq_fail(d, DSQ_ERR_JSON, "tokenizer_config.json", NULL, -1,
                            "not a JSON object");
        }
    }
    const char *bos = config_bos(cfg);
    int rc;
    if (choice) {
        int is_id = 0;
        for (size_t i = 0; i < N_ROWS; i++) is_id |= strcmp(ROWS[i].id, choice) == 0;
        rc = is_id ? dsq_chat_template_by_id(out, choice, bos, d) : file_choice(out, choice, bos, d);
    } else if (template_file) {
        rc = dsq_chat_template_from_text(out, template_file, strlen(template_file), bos, d);
    } else {
        json_object *ct = NULL;
        if (cfg) json_object_object_get_ex(cfg, "chat_template", &ct);
        if (ct && json_object_is_type(ct, json_type_array)) {
            json_object *pick = NULL;
            for (size_t i = 0; i < json_object_array_length(ct); i++) {
                json_object *e = json_object_array_get_idx(ct, i);
                const char *name = NULL;
                if (dsq_json_get_str(e, "name", &name) == DSQ_JSON_OK && strcmp(name, "default") == 0)
                    json_object_object_get_ex(e, "template", &pick);
            }
            ct = pick;
            if (!ct) {
                json_object_put(cfg);
                return dsq_fail(d, DSQ_ERR_UNSUPPORTED, "tokenizer_config.json", NULL, -1,
                                "chat_template: a list without a \"default\" entry");
            }
        }
        if (ct && json_object_is_type(ct, json_type_string)) {
            rc = dsq_chat_template_from_text(out, json_object_get_string(ct),
                                             (size_t)json_object_get_string_len(ct), bos, d);
        } else if (ct && !json_object_is_type(ct, json_type_null)) {
            rc = dsq_fail(d, DSQ_ERR_JSON, "tokenizer_config.json", NULL, -1,
                          "chat_template: not a string");
        } else if (model_type && strcmp(model_type, "deepseek_v32") == 0) {
            rc = dsq_chat_template_by_id(out, "deepseek-v3.2", bos, d);
        } else {
            rc = dsq_fail(d, DSQ_ERR_NOT_FOUND, NULL, NULL, -1,
                          "the model has no chat template (tokenizer_config.json chat_template, "
                          "chat_template.jinja); name one with --chat-template ID or FILE");
        }
    }
    if (cfg) json_object_put(cfg);
    return rc;
}

int dsq_chat_template_open_dir(dsq_chat_template **out, const char *dir, const char *choice,
                               dsq_diag *d)
{
    char *tc = NULL, *tf = NULL, *cj = NULL, *p;
    size_t n;
    dsq_diag ign;
    const char *model_type = NULL;
    json_object *cfg = NULL;
    if ((p = dsq_path_join(dir, "tokenizer_config.json")) && dsq_path_exists(p)) {
        dsq_diag_clear(&ign);
        if (dsq_read_file(p, 64u << 20, &tc, &n, &ign) < 0) tc = NULL;
    }
    free(p);
    if ((p = dsq_path_join(dir, "chat_template.jinja")) && dsq_path_exists(p)) {
        dsq_diag_clear(&ign);
        if (dsq_read_file(p, 1 << 20, &tf, &n, &ign) < 0) tf = NULL;
    }
    free(p);
    if ((p = dsq_path_join(dir, "config.json")) && dsq_path_exists(p)) {
        dsq_diag_clear(&ign);
        if (dsq_read_file(p, 16u << 20, &cj, &n, &ign) == DSQ_OK && (cfg = json_tokener_parse(cj)))
            if (dsq_json_get_str(cfg, "model_type", &model_type) != DSQ_JSON_OK) model_type = NULL;
    }
    free(p);
    int rc = dsq_chat_template_open(out, tc, tf, model_type, choice, d);
    if (cfg) json_object_put(cfg);
    free(tc);
    free(tf);
    free(cj);
    return rc;
}

/* ---- rendering ------------------------------------------------------------- */

static int is_role(const dsq_chat_msg *m, const char *r) { return strcmp(m->role, r) == 0; }

/* Text after the first / last "</think>" (the whole text when absent). */
static void stripped(const dsq_chat_msg *m, enum strip how, const char **s, size_t *n)
{
    *s = m->content;
    *n = m->content_len;
    if (how == STRIP_NONE) return;
    const char *end = m->content + m->content_len, *p = m->content, *hit = NULL;
    const size_t k = sizeof TK_ENDTH - 1;
    while ((p = memmem(p, (size_t)(end - p), TK_ENDTH, k))) {
        hit = p;
        p += k;
        if (how == STRIP_AFTER_FIRST) break;
    }
    if (hit) {
        *s = hit + k;
        *n = (size_t)(end - *s);
    }
}

static int render_templated(const dsq_chat_template *t, const dsq_chat_msg *m, size_t n,
                            const dsq_chat_opts *o, dsq_sbuf *b, dsq_diag *d)
{
    const tmpl_row *r = t->row;
    for (size_t i = 0; i < n; i++)
        if (!is_role(&m[i], "system") && !is_role(&m[i], "user") && !is_role(&m[i], "assistant"))
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1,
                            "messages[%zu]: role '%s' is not rendered by the %s chat template",
                            i, m[i].role, r->id);
    /* the system prompt: all system messages joined, or only the last */
    size_t last_sys = n;
    for (size_t i = 0; i < n; i++) if (is_role(&m[i], "system")) last_sys = i;
    dsq_sb_puts(b, t->bos);
    int first_sys = 1;
    for (size_t i = 0; i < n; i++) {
        if (!is_role(&m[i], "system")) continue;
        if (r->sys_last_only && i != last_sys) continue;
        if (!first_sys) dsq_sb_puts(b, "\n\n");
        dsq_sb_add(b, m[i].content, m[i].content_len);
        first_sys = 0;
    }
    int last_user = 0;
    for (size_t i = 0; i < n; i++) {
        if (is_role(&m[i], "user")) {
            dsq_sb_puts(b, TK_USER);
            dsq_sb_add(b, m[i].content, m[i].content_len);
            dsq_sb_puts(b, r->user_tail);
            last_user = 1;
        } else if (is_role(&m[i], "assistant")) {
            const char *s;
            size_t sn;
            stripped(&m[i], r->strip, &s, &sn);
            if (r->shape == SH_CLASSIC) dsq_sb_puts(b, r->asst_head);
            else if (last_user) dsq_sb_puts(b, TK_ASST TK_ENDTH);
            dsq_sb_add(b, s, sn);
            dsq_sb_puts(b, TK_EOS);
            last_user = 0;
        }
    }
    if (!o->add_generation_prompt) return DSQ_OK;
    const char *think = o->thinking ? TK_ASST TK_THINK : TK_ASST TK_ENDTH;
    switch (r->gen_when) {
    case GEN_ALWAYS: dsq_sb_puts(b, r->gen); break;
    case GEN_UNLESS_LAST_USER: if (!last_user) dsq_sb_puts(b, r->gen); break;
    case GEN_AFTER_USER: if (last_user) dsq_sb_puts(b, think); break;
    case GEN_EXP: /* after a user turn, after system turns only, or when no
                   * assistant turn was a prefix (never, see the top): always */
        dsq_sb_puts(b, think);
        break;
    }
    return DSQ_OK;
}

static int render_encoder(const dsq_chat_template *t, const dsq_chat_msg *m, size_t n,
                          const dsq_chat_opts *o, dsq_sbuf *b, dsq_diag *d)
{
    const int thinking = o->thinking || o->enable_thinking;
    size_t last_user = (size_t)-1;
    for (size_t i = 0; i < n; i++)
        if (is_role(&m[i], "user") || is_role(&m[i], "developer")) last_user = i;
    dsq_sb_puts(b, t->bos);
    for (size_t i = 0; i < n; i++) {
        const char *mark = (i == last_user && thinking) ? TK_THINK : TK_ENDTH;
        if (is_role(&m[i], "system")) {
            dsq_sb_add(b, m[i].content, m[i].content_len);
        } else if (is_role(&m[i], "user")) {
            dsq_sb_puts(b, TK_USER);
            dsq_sb_add(b, m[i].content, m[i].content_len);
            dsq_sb_puts(b, TK_ASST);
            dsq_sb_puts(b, mark);
        } else if (is_role(&m[i], "developer")) {
            if (!m[i].content_len)
                return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                                "messages[%zu]: a developer message needs content", i);
            dsq_sb_puts(b, TK_USER "\n\n# The user's message is: ");
            dsq_sb_add(b, m[i].content, m[i].content_len);
            dsq_sb_puts(b, TK_ASST);
            dsq_sb_puts(b, mark);
        } else if (is_role(&m[i], "assistant")) {
            if (thinking && (last_user == (size_t)-1 || i > last_user)) {
                if (!m[i].reasoning || !m[i].reasoning_len)
                    return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1,
                                    "messages[%zu]: in thinking mode an assistant turn after the "
                                    "last user turn needs reasoning_content", i);
                dsq_sb_add(b, m[i].reasoning, m[i].reasoning_len);
                dsq_sb_puts(b, TK_ENDTH);
            }
            dsq_sb_add(b, m[i].content, m[i].content_len);
            dsq_sb_puts(b, TK_EOS);
        } else {
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1,
                            "messages[%zu]: role '%s' is not rendered by the %s chat template",
                            i, m[i].role, t->row->id);
        }
    }
    return DSQ_OK;
}

int dsq_chat_render(const dsq_chat_template *t, const dsq_chat_msg *m, size_t n,
                    const dsq_chat_opts *o, char **out, size_t *len, dsq_diag *d)
{
    dsq_sbuf b = { 0 };
    int rc = t->row->shape == SH_ENCODER ? render_encoder(t, m, n, o, &b, d)
                                         : render_templated(t, m, n, o, &b, d);
    if (rc == DSQ_OK && !b.p) dsq_sb_add(&b, "", 0);
    if (rc == DSQ_OK && (b.oom || !b.p)) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (rc < 0) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    if (len) *len = b.n;
    return DSQ_OK;
}

/* ---- request JSON ------------------------------------------------------------ */

int dsq_chat_json_truthy(json_object *v)
{
    if (!v) return 0;
    switch (json_object_get_type(v)) {
    case json_type_null: return 0;
    case json_type_boolean: return json_object_get_boolean(v);
    case json_type_int: return json_object_get_int64(v) != 0;
    case json_type_double: return json_object_get_double(v) != 0.0;
    case json_type_string: return json_object_get_string_len(v) != 0;
    case json_type_array: return json_object_array_length(v) != 0;
    case json_type_object: return json_object_object_length(v) != 0;
    }
    return 0;
}

int dsq_chat_kwargs_from_json(json_object *kw, dsq_chat_opts *o, dsq_diag *d)
{
    o->thinking = o->enable_thinking = 0;
    if (!kw || json_object_is_type(kw, json_type_null)) return DSQ_OK;
    if (!json_object_is_type(kw, json_type_object))
        return dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "chat_template_kwargs: not an object");
    static const char *reserved[] = { "messages", "tools", "add_generation_prompt", "bos_token",
                                      "eos_token", "documents", "conversation" };
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (json_object_object_get_ex(kw, reserved[i], NULL))
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1,
                            "chat_template_kwargs.%s: not supported (it would replace a "
                            "template variable)", reserved[i]);
    json_object *v;
    if (json_object_object_get_ex(kw, "thinking", &v)) o->thinking = dsq_chat_json_truthy(v);
    if (json_object_object_get_ex(kw, "enable_thinking", &v)) o->enable_thinking = dsq_chat_json_truthy(v);
    return DSQ_OK;
}

/* content: string, null or a list of text parts (joined with "\n"). */
static int msg_content(json_object *msg, size_t i, const char *key, const char **s, size_t *n,
                       dsq_sbuf *arena, size_t *arena_off, int *from_arena, dsq_diag *d)
{
    json_object *c = NULL;
    *s = "";
    *n = 0;
    *from_arena = 0;
    if (!json_object_object_get_ex(msg, key, &c) || !c || json_object_is_type(c, json_type_null))
        return DSQ_OK;
    if (json_object_is_type(c, json_type_string)) {
        *s = json_object_get_string(c);
        *n = (size_t)json_object_get_string_len(c);
        return DSQ_OK;
    }
    if (!json_object_is_type(c, json_type_array))
        return dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1,
                        "messages[%zu].%s: not a string, null or a list of parts", i, key);
    *arena_off = arena->n;
    for (size_t k = 0; k < json_object_array_length(c); k++) {
        json_object *part = json_object_array_get_idx(c, k);
        const char *type = NULL, *text = NULL;
        if (dsq_json_get_str(part, "type", &type) != DSQ_JSON_OK)
            return dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1,
                            "messages[%zu].%s[%zu]: no \"type\"", i, key, k);
        if (strcmp(type, "text") != 0)
            return dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1,
                            "messages[%zu].%s[%zu]: content of type '%s' is not supported (text only)",
                            i, key, k, type);
        if (dsq_json_get_str(part, "text", &text) != DSQ_JSON_OK)
            return dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1,
                            "messages[%zu].%s[%zu].text: not a string", i, key, k);
        json_object *tj;
        json_object_object_get_ex(part, "text", &tj);
        if (k) dsq_sb_puts(arena, "\n");
        dsq_sb_add(arena, text, (size_t)json_object_get_string_len(tj));
    }
    dsq_sb_add(arena, "", 1); /* a NUL between entries; keeps every entry terminated */
    *n = arena->n - 1 - *arena_off;
    *from_arena = 1;
    return DSQ_OK;
}

int dsq_chat_messages_from_json(json_object *arr, dsq_chat_msg **msgs, size_t *n, char **arena,
                                dsq_diag *d)
{
    *msgs = NULL;
    *n = 0;
    *arena = NULL;
    if (!arr || !json_object_is_type(arr, json_type_array))
        return dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "messages: not a list");
    size_t cnt = json_object_array_length(arr);
    if (cnt == 0) return dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "messages: empty list");
    dsq_chat_msg *m = calloc(cnt, sizeof *m);
    size_t *coff = calloc(cnt, sizeof *coff);
    char *ca = calloc(cnt, 1);
    dsq_sbuf ab = { 0 };
    int rc = DSQ_OK;
    if (!m || !coff || !ca) {
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < cnt && rc == DSQ_OK; i++) {
        json_object *msg = json_object_array_get_idx(arr, i), *v = NULL;
        if (!msg || !json_object_is_type(msg, json_type_object)) {
            rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "messages[%zu]: not an object", i);
            break;
        }
        if (dsq_json_get_str(msg, "role", &m[i].role) != DSQ_JSON_OK) {
            rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1, "messages[%zu].role: not a string", i);
            break;
        }
        const char *role = m[i].role;
        if (strcmp(role, "tool") == 0 || strcmp(role, "function") == 0) {
            rc = dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1,
                          "messages[%zu]: tool results are not supported", i);
            break;
        }
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
            strcmp(role, "developer")) {
            rc = dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1,
                          "messages[%zu]: role '%s' is not supported", i, role);
            break;
        }
        if ((json_object_object_get_ex(msg, "tool_calls", &v) && v &&
             !json_object_is_type(v, json_type_null)) ||
            (json_object_object_get_ex(msg, "function_call", &v) && v &&
             !json_object_is_type(v, json_type_null))) {
            rc = dsq_fail(d, DSQ_ERR_UNSUPPORTED, NULL, NULL, -1,
                          "messages[%zu]: tool calls are not supported", i);
            break;
        }
        int fa = 0;
        rc = msg_content(msg, i, "content", &m[i].content, &m[i].content_len, &ab, &coff[i], &fa, d);
        ca[i] = (char)fa;
        if (rc == DSQ_OK && strcmp(role, "assistant") == 0) {
            const char *key = json_object_object_get_ex(msg, "reasoning_content", NULL)
                                  ? "reasoning_content" : "reasoning";
            json_object *rv = NULL;
            json_object_object_get_ex(msg, key, &rv);
            if (rv && !json_object_is_type(rv, json_type_null)) {
                if (!json_object_is_type(rv, json_type_string)) {
                    rc = dsq_fail(d, DSQ_ERR_JSON, NULL, NULL, -1,
                                  "messages[%zu].%s: not a string", i, key);
                    break;
                }
                m[i].reasoning = json_object_get_string(rv);
                m[i].reasoning_len = (size_t)json_object_get_string_len(rv);
            }
        }
    }
    if (rc == DSQ_OK && ab.oom) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (rc == DSQ_OK) {
        for (size_t i = 0; i < cnt; i++)
            if (ca[i]) m[i].content = ab.p + coff[i];
        *msgs = m;
        *n = cnt;
        *arena = ab.p;
        m = NULL;
        ab.p = NULL;
    }
done:
    free(m);
    free(coff);
    free(ca);
    free(ab.p);
    return rc;
}

/* ---- a model's template ------------------------------------------------------ */

/* tokenizer_config.json and config.json's model_type as a .dsq's metadata
 * carries them ({"tokenizer": {"tokenizer_config.json": ..}, "config": ..}). */
static int open_dsq(dsq_chat_template **out, const char *path, const char *choice, dsq_diag *d)
{
    dsq_ctr_set *set = NULL;
    DSQ_TRY(dsq_ctr_set_open(&set, path, d));
    size_t ml = 0;
    const char *meta = dsq_ctr_metadata(dsq_ctr_set_shard(set, 0), &ml);
    json_tokener *tk = json_tokener_new_ex(64);
    json_object *root = tk && ml <= INT32_MAX ? json_tokener_parse_ex(tk, meta, (int)ml) : NULL;
    json_tokener_free(tk);
    dsq_ctr_set_close(set);
    if (!root) return dsq_fail(d, DSQ_ERR_FORMAT, path, NULL, -1, "cannot parse the metadata json");
    json_object *tok = NULL, *tc = NULL, *cfg = NULL;
    const char *tc_text = NULL, *model_type = NULL;
    if (json_object_object_get_ex(root, "tokenizer", &tok) && tok &&
        json_object_object_get_ex(tok, "tokenizer_config.json", &tc) && tc)
        tc_text = json_object_is_type(tc, json_type_string)
                      ? json_object_get_string(tc)
                      : json_object_to_json_string_ext(tc, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    if (json_object_object_get_ex(root, "config", &cfg) && cfg &&
        dsq_json_get_str(cfg, "model_type", &model_type) != DSQ_JSON_OK)
        model_type = NULL;
    int rc = dsq_chat_template_open(out, tc_text, NULL, model_type, choice, d);
    json_object_put(root);
    return rc;
}

int dsq_chat_template_for_model(dsq_chat_template **out, const char *model_path,
                                const char *tokenizer_path, const char *choice, dsq_diag *d)
{
    const char *src = tokenizer_path ? tokenizer_path : model_path;
    if (!tokenizer_path && dsq_ctr_set_is_dsq(model_path)) return open_dsq(out, model_path, choice, d);
    char *dir = strdup(src);
    if (!dir) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    if (!dsq_path_is_dir(dir)) {
        char *sl = strrchr(dir, '/');
        if (!sl) strcpy(dir, ".");
        else if (sl == dir) sl[1] = 0;
        else *sl = 0;
    }
    int rc = dsq_chat_template_open_dir(out, dir, choice, d);
    free(dir);
    return rc;
}

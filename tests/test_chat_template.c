/* test_chat_template.c - chat prompts byte for byte as the DeepSeek templates
 * render them.
 *
 * The official template texts (../shared/data/chat-templates, with their
 * SHA-256 in INDEX.json) are rendered by Jinja2 (tests/chat_template_oracle.py,
 * transformers' settings) for a grid of conversations: system messages,
 * multi-turn with stored reasoning, empty content, CJK and emoji,
 * special-token strings inside user text, thinking on and off,
 * add_generation_prompt both ways. dsq's renderer must give the same bytes.
 * Skips with a message when the folder or python3-jinja2 is absent.
 * V3.2's encoder (no template text) is checked against its rules. */
#include "dsq_test.h"

#include "chat_template.h"
#include "dsq_file.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define USR "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define AST "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"

/* Conversations (JSON): each is rendered with add_generation_prompt both
 * ways and with no kwargs, thinking true, thinking false, enable_thinking. */
static const char *CONVS[] = {
    "[{\"role\":\"user\",\"content\":\"What is 2+3?\"}]",
    "[{\"role\":\"system\",\"content\":\"You are terse.\"},{\"role\":\"user\",\"content\":\"Hi\"}]",
    "[{\"role\":\"system\",\"content\":\"A\"},{\"role\":\"system\",\"content\":\"B\"},"
    "{\"role\":\"user\",\"content\":\"Hi\"}]",
    "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"q1\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>\\nstep one\\n</think>\\n\\nanswer 1\"},"
    "{\"role\":\"user\",\"content\":\"q2\"}]",
    "[{\"role\":\"user\",\"content\":\"q1\"},"
    "{\"role\":\"assistant\",\"content\":\"r1</think>mid</think>tail\",\"reasoning_content\":\"why\"},"
    "{\"role\":\"user\",\"content\":\"q2\"},{\"role\":\"assistant\",\"content\":\"a2\"}]",
    "[{\"role\":\"system\",\"content\":\"\"},{\"role\":\"user\",\"content\":\"\"},"
    "{\"role\":\"assistant\",\"content\":\"\"},{\"role\":\"user\",\"content\":\"\"}]",
    "[{\"role\":\"user\",\"content\":\"\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c "
    "\xf0\x9f\x98\x80 \xc2\xbd \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\"},"
    "{\"role\":\"assistant\",\"content\":\"\xe5\xa5\xbd \xf0\x9f\x91\x8d\"},"
    "{\"role\":\"user\",\"content\":\"\xf0\x9f\xa7\xae?\"}]",
    "[{\"role\":\"user\",\"content\":\"" USR "x" AST "</think><think>" EOS BOS "y\"}]",
    "[{\"role\":\"system\",\"content\":\"only\"}]",
    "[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":\"a\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>b</think>c\"}]",
    "[{\"role\":\"user\",\"content\":\"u1\"},{\"role\":\"user\",\"content\":\"u2\\n\\nline\"},"
    "{\"role\":\"system\",\"content\":\"late system\"}]",
    "[{\"role\":\"assistant\",\"content\":\"first\"},{\"role\":\"user\",\"content\":\"then\"}]",
};
static const char *KWARGS[] = { NULL, "{\"thinking\":true}", "{\"thinking\":false}",
                                "{\"enable_thinking\":true}" };
#define N_CONV (sizeof CONVS / sizeof CONVS[0])
#define N_KW (sizeof KWARGS / sizeof KWARGS[0])

static void opts_for(size_t k, int agp, dsq_chat_opts *o)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    json_object *kw = KWARGS[k] ? json_tokener_parse(KWARGS[k]) : NULL;
    assert_int_equal(dsq_chat_kwargs_from_json(kw, o, &d), DSQ_OK);
    o->add_generation_prompt = agp;
    if (kw) json_object_put(kw);
}

static char *render_json(const dsq_chat_template *t, const char *conv, const dsq_chat_opts *o,
                         int *rc)
{
    dsq_diag d;
    dsq_diag_clear(&d);
    json_object *arr = json_tokener_parse(conv);
    assert_non_null(arr);
    dsq_chat_msg *m;
    size_t n;
    char *arena, *out = NULL;
    assert_int_equal(dsq_chat_messages_from_json(arr, &m, &n, &arena, &d), DSQ_OK);
    *rc = dsq_chat_render(t, m, n, o, &out, NULL, &d);
    free(m);
    free(arena);
    json_object_put(arr);
    return out;
}

static char *tmpl_dir(void) { return dsq_test_shared("chat-templates/INDEX.json"); }

/* The oracle's interpreter: $PYTHON, else Debian's (python3-jinja2), else python3 on PATH. */
static const char *python(void)
{
    const char *p = getenv("PYTHON");
    if (p && p[0]) return p;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

static void test_index_shas(void **state)
{
    (void)state;
    char *idx = tmpl_dir();
    if (!idx) { fprintf(stderr, "skip: ../shared/data/chat-templates absent (set DSQ_SHARED)\n"); skip(); }
    json_object *j = json_object_from_file(idx);
    assert_non_null(j);
    size_t seen = 0;
    for (size_t i = 0; i < json_object_array_length(j); i++) {
        json_object *e = json_object_array_get_idx(j, i), *v;
        assert_true(json_object_object_get_ex(e, "id", &v));
        const char *id = json_object_get_string(v);
        if (!json_object_object_get_ex(e, "sha256", &v)) continue; /* the encoder: no text */
        char path[4096];
        snprintf(path, sizeof path, "%.*s%s.jinja", (int)(strlen(idx) - strlen("INDEX.json")), idx, id);
        char *txt;
        size_t len;
        dsq_diag d;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_read_file(path, 1 << 20, &txt, &len, &d), DSQ_OK);
        dsq_chat_template *t = NULL;
        assert_int_equal(dsq_chat_template_from_text(&t, txt, len, BOS, &d), DSQ_OK);
        assert_string_equal(dsq_chat_template_id(t), id);
        dsq_chat_template_free(t);
        /* one byte more: another text, refused with its sha256 named */
        char *more = malloc(len + 2);
        memcpy(more, txt, len);
        more[len] = ' ';
        dsq_diag_clear(&d);
        assert_int_equal(dsq_chat_template_from_text(&t, more, len + 1, BOS, &d), DSQ_ERR_UNSUPPORTED);
        assert_non_null(strstr(d.msg, "sha256"));
        free(more);
        free(txt);
        seen++;
    }
    assert_int_equal(seen, dsq_chat_template_count() - 1);
    json_object_put(j);
    free(idx);
}

static void test_jinja_oracle(void **state)
{
    (void)state;
    char *idx = tmpl_dir();
    if (!idx) { fprintf(stderr, "skip: ../shared/data/chat-templates absent (set DSQ_SHARED)\n"); skip(); }
    char probe[512];
    snprintf(probe, sizeof probe, "%s -c 'import jinja2' 2>/dev/null", python());
    if (system(probe) != 0) {
        free(idx);
        fprintf(stderr, "skip: python3-jinja2 absent (apt-get install python3-jinja2)\n");
        skip();
    }
    char *dir = dsq_test_tmpdir();
    size_t compared = 0;
    for (size_t ti = 0; ti < dsq_chat_template_count(); ti++) {
        if (!dsq_chat_template_sha256_at(ti)) continue;
        const char *id = dsq_chat_template_id_at(ti);
        char tpath[4096], cpath[4200], cmd[8600];
        snprintf(tpath, sizeof tpath, "%.*s%s.jinja", (int)(strlen(idx) - strlen("INDEX.json")), idx, id);
        json_object *spec = json_object_new_object(), *cases = json_object_new_array();
        json_object_object_add(spec, "template", json_object_new_string(tpath));
        json_object_object_add(spec, "bos_token", json_object_new_string(BOS));
        json_object_object_add(spec, "eos_token", json_object_new_string(EOS));
        for (size_t c = 0; c < N_CONV; c++)
            for (int agp = 0; agp < 2; agp++)
                for (size_t k = 0; k < N_KW; k++) {
                    json_object *cs = json_object_new_object();
                    json_object_object_add(cs, "messages", json_tokener_parse(CONVS[c]));
                    json_object_object_add(cs, "add_generation_prompt", json_object_new_boolean(agp));
                    json_object_object_add(cs, "kwargs", KWARGS[k] ? json_tokener_parse(KWARGS[k])
                                                                   : json_object_new_object());
                    json_object_array_add(cases, cs);
                }
        json_object_object_add(spec, "cases", cases);
        snprintf(cpath, sizeof cpath, "%s/cases.json", dir);
        assert_int_equal(json_object_to_file_ext(cpath, spec, JSON_C_TO_STRING_PLAIN), 0);
        json_object_put(spec);
        snprintf(cmd, sizeof cmd, "%s tests/chat_template_oracle.py '%s'", python(), cpath);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        size_t cap = 1 << 20, n = 0;
        char *buf = malloc(cap);
        size_t got;
        while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
            n += got;
            if (n + 1 >= cap) buf = realloc(buf, cap *= 2);
        }
        buf[n] = 0;
        assert_int_equal(pclose(p), 0);
        json_object *want = json_tokener_parse(buf);
        free(buf);
        assert_non_null(want);

        char *txt;
        size_t len;
        dsq_diag d;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_read_file(tpath, 1 << 20, &txt, &len, &d), DSQ_OK);
        dsq_chat_template *t = NULL;
        assert_int_equal(dsq_chat_template_from_text(&t, txt, len, BOS, &d), DSQ_OK);
        free(txt);
        size_t at = 0;
        for (size_t c = 0; c < N_CONV; c++)
            for (int agp = 0; agp < 2; agp++)
                for (size_t k = 0; k < N_KW; k++, at++) {
                    dsq_chat_opts o;
                    opts_for(k, agp, &o);
                    int rc;
                    char *got_s = render_json(t, CONVS[c], &o, &rc);
                    assert_int_equal(rc, DSQ_OK);
                    const char *w = json_object_get_string(json_object_array_get_idx(want, at));
                    if (strcmp(got_s, w) != 0) {
                        fprintf(stderr, "%s: conversation %zu, add_generation_prompt=%d, kwargs %s\n"
                                        "  jinja: [%s]\n  dsq:   [%s]\n",
                                id, c, agp, KWARGS[k] ? KWARGS[k] : "{}", w, got_s);
                        fail();
                    }
                    free(got_s);
                    compared++;
                }
        dsq_chat_template_free(t);
        json_object_put(want);
    }
    fprintf(stderr, "chat templates: %zu renders identical to Jinja2\n", compared);
    assert_int_equal(compared, (dsq_chat_template_count() - 1) * N_CONV * 2 * N_KW);
    dsq_test_rmtree(dir);
    free(dir);
    free(idx);
}

/* V3.2's encoder, by its rules (encoding_dsv32.py encode_messages). */
static void test_v32_encoder(void **state)
{
    (void)state;
    dsq_chat_template *t;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_chat_template_by_id(&t, "deepseek-v3.2", "<bos>", &d), DSQ_OK);
    const char *conv =
        "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"hello\"},"
        "{\"role\":\"assistant\",\"content\":\"Hi\",\"reasoning_content\":\"thinking...\"},"
        "{\"role\":\"user\",\"content\":\"1+1=?\"}]";
    dsq_chat_opts o = { .add_generation_prompt = 1, .thinking = 1 };
    int rc;
    char *s = render_json(t, conv, &o, &rc);
    assert_int_equal(rc, DSQ_OK);
    /* its own BOS constant; earlier reasoning dropped; the last user turn opens <think> */
    assert_string_equal(s, BOS "S" USR "hello" AST "</think>Hi" EOS USR "1+1=?" AST "<think>");
    free(s);
    o.thinking = 0;
    o.add_generation_prompt = 0; /* has no effect on the encoder */
    s = render_json(t, conv, &o, &rc);
    assert_string_equal(s, BOS "S" USR "hello" AST "</think>Hi" EOS USR "1+1=?" AST "</think>");
    free(s);
    o.enable_thinking = 1;
    const char *after =
        "[{\"role\":\"user\",\"content\":\"q\"},"
        "{\"role\":\"assistant\",\"content\":\"A\",\"reasoning_content\":\"R\"}]";
    s = render_json(t, after, &o, &rc);
    assert_string_equal(s, BOS USR "q" AST "<think>R</think>A" EOS);
    free(s);
    const char *bare = "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"A\"}]";
    s = render_json(t, bare, &o, &rc);
    assert_int_equal(rc, DSQ_ERR_INVALID_ARG); /* thinking mode needs the reasoning */
    assert_null(s);
    o.enable_thinking = 0;
    s = render_json(t, bare, &o, &rc);
    assert_string_equal(s, BOS USR "q" AST "</think>A" EOS);
    free(s);
    s = render_json(t, "[{\"role\":\"developer\",\"content\":\"D\"}]", &o, &rc);
    assert_string_equal(s, BOS USR "\n\n# The user's message is: D" AST "</think>");
    free(s);
    dsq_chat_template_free(t);
}

static void test_messages_json(void **state)
{
    (void)state;
    dsq_chat_template *t;
    dsq_diag d;
    dsq_diag_clear(&d);
    assert_int_equal(dsq_chat_template_by_id(&t, "deepseek-v3", BOS, &d), DSQ_OK);
    dsq_chat_opts o = { .add_generation_prompt = 1 };
    int rc;
    /* null content -> "", text parts joined with "\n", "tool_calls": null ignored */
    char *s = render_json(t,
        "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":null},"
        "{\"role\":\"user\",\"content\":[]}]", &o, &rc);
    assert_string_equal(s, BOS USR "a\nb" AST EOS USR AST);
    free(s);
    static const struct { const char *conv; int rc; const char *say; } bad[] = {
        { "[{\"role\":\"tool\",\"content\":\"x\"}]", DSQ_ERR_UNSUPPORTED, "tool" },
        { "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\"}]}]", DSQ_ERR_UNSUPPORTED, "tool calls" },
        { "[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]", DSQ_ERR_UNSUPPORTED, "image_url" },
        { "[{\"role\":\"user\",\"content\":5}]", DSQ_ERR_JSON, "messages[0].content" },
        { "[{\"role\":7,\"content\":\"x\"}]", DSQ_ERR_JSON, "role" },
        { "[{\"role\":\"critic\",\"content\":\"x\"}]", DSQ_ERR_UNSUPPORTED, "critic" },
        { "[]", DSQ_ERR_JSON, "empty" },
        { "{}", DSQ_ERR_JSON, "not a list" },
        { "[{\"role\":\"assistant\",\"content\":\"x\",\"reasoning_content\":1}]", DSQ_ERR_JSON, "reasoning_content" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_object *arr = json_tokener_parse(bad[i].conv);
        dsq_chat_msg *m;
        size_t n;
        char *arena;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_chat_messages_from_json(arr, &m, &n, &arena, &d), bad[i].rc);
        if (!strstr(d.msg, bad[i].say)) fail_msg("%s: [%s]", bad[i].conv, d.msg);
        json_object_put(arr);
    }
    /* developer is V3.2's alone */
    s = render_json(t, "[{\"role\":\"developer\",\"content\":\"x\"}]", &o, &rc);
    assert_int_equal(rc, DSQ_ERR_UNSUPPORTED);
    dsq_chat_template_free(t);

    /* kwargs: Python truthiness; template variables cannot be replaced */
    json_object *kw = json_tokener_parse("{\"thinking\":\"false\",\"enable_thinking\":0,\"other\":1}");
    assert_int_equal(dsq_chat_kwargs_from_json(kw, &o, &d), DSQ_OK);
    assert_int_equal(o.thinking, 1); /* a non-empty string is true, as in Python */
    assert_int_equal(o.enable_thinking, 0);
    json_object_put(kw);
    kw = json_tokener_parse("{\"add_generation_prompt\":false}");
    dsq_diag_clear(&d);
    assert_int_equal(dsq_chat_kwargs_from_json(kw, &o, &d), DSQ_ERR_UNSUPPORTED);
    json_object_put(kw);
}

static void test_open(void **state)
{
    (void)state;
    dsq_chat_template *t = NULL;
    dsq_diag d;
    dsq_diag_clear(&d);
    /* no template, not V3.2 */
    assert_int_equal(dsq_chat_template_open(&t, "{\"bos_token\":\"<s>\"}", NULL, "deepseek_v3", NULL, &d),
                     DSQ_ERR_NOT_FOUND);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_chat_template_open(&t, "{}", NULL, "deepseek_v32", NULL, &d), DSQ_OK);
    assert_string_equal(dsq_chat_template_id(t), "deepseek-v3.2");
    dsq_chat_template_free(t);
    /* an unknown template text is refused, not approximated */
    dsq_diag_clear(&d);
    assert_int_equal(dsq_chat_template_open(&t, "{\"chat_template\":\"{{ messages }}\"}", NULL,
                                            "deepseek_v32", NULL, &d), DSQ_ERR_UNSUPPORTED);
    /* by id, with the tokenizer's BOS (an AddedToken object) */
    dsq_diag_clear(&d);
    assert_int_equal(dsq_chat_template_open(&t, "{\"bos_token\":{\"content\":\"<B>\"}}", NULL, NULL,
                                            "deepseek-r1", &d), DSQ_OK);
    dsq_chat_opts o = { .add_generation_prompt = 1 };
    int rc;
    char *s = render_json(t, "[{\"role\":\"user\",\"content\":\"x\"}]", &o, &rc);
    assert_string_equal(s, "<B>" USR "x" AST "<think>\n");
    assert_int_equal(dsq_chat_template_opens_think(t, &o), 1);
    free(s);
    dsq_chat_template_free(t);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_chat_template_open(&t, NULL, NULL, NULL, "deepseek-v9", &d), DSQ_ERR_NOT_FOUND);
}

/* A model directory: tokenizer_config.json's chat_template (recognised by
 * sha256), chat_template.jinja preferred over it, config.json's model_type. */
static void test_open_dir(void **state)
{
    (void)state;
    char *dir = dsq_test_tmpdir(), p[4200];
    dsq_chat_template *t = NULL;
    dsq_diag d;
    snprintf(p, sizeof p, "%s/config.json", dir);
    static const char v32[] = "{\"model_type\": \"deepseek_v32\"}";
    dsq_test_write(p, v32, sizeof v32 - 1);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_chat_template_open_dir(&t, dir, NULL, &d), DSQ_OK);
    assert_string_equal(dsq_chat_template_id(t), "deepseek-v3.2");
    dsq_chat_template_free(t);
    snprintf(p, sizeof p, "%s/chat_template.jinja", dir);
    dsq_test_write(p, "{{ messages }}", 14);
    dsq_diag_clear(&d);
    assert_int_equal(dsq_chat_template_open_dir(&t, dir, NULL, &d), DSQ_ERR_UNSUPPORTED);
    unlink(p);
    char *idx = tmpl_dir();
    if (idx) {
        char tp[4200];
        snprintf(tp, sizeof tp, "%.*sdeepseek-r1.jinja", (int)(strlen(idx) - strlen("INDEX.json")), idx);
        char *txt;
        size_t len;
        dsq_diag_clear(&d);
        assert_int_equal(dsq_read_file(tp, 1 << 20, &txt, &len, &d), DSQ_OK);
        json_object *cfg = json_object_new_object();
        json_object_object_add(cfg, "chat_template", json_object_new_string_len(txt, (int)len));
        json_object_object_add(cfg, "bos_token", json_object_new_string("<B>"));
        snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
        assert_int_equal(json_object_to_file_ext(p, cfg, JSON_C_TO_STRING_PLAIN), 0);
        json_object_put(cfg);
        dsq_diag_clear(&d);
        assert_int_equal(dsq_chat_template_open_dir(&t, dir, NULL, &d), DSQ_OK);
        assert_string_equal(dsq_chat_template_id(t), "deepseek-r1");
        dsq_chat_template_free(t);
        /* the model's file as --chat-template FILE */
        dsq_diag_clear(&d);
        assert_int_equal(dsq_chat_template_for_model(&t, dir, NULL, tp, &d), DSQ_OK);
        assert_string_equal(dsq_chat_template_id(t), "deepseek-r1");
        dsq_chat_template_free(t);
        free(txt);
        free(idx);
    } else {
        fprintf(stderr, "skip (part): ../shared/data/chat-templates absent\n");
    }
    dsq_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_shas),
        cmocka_unit_test(test_jinja_oracle),
        cmocka_unit_test(test_v32_encoder),
        cmocka_unit_test(test_messages_json),
        cmocka_unit_test(test_open),
        cmocka_unit_test(test_open_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

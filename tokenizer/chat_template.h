/* chat_template.h - DeepSeek chat prompts, rendered exactly as the models'
 * own templates render them.
 *
 * A model's chat template is the Jinja text in tokenizer_config.json
 * ("chat_template") or chat_template.jinja. dsq does not interpret Jinja:
 * it recognises the text by its SHA-256 among the official DeepSeek
 * templates (V3, V3-0324, R1 at release, R1-Distill with forced <think>,
 * R1, R1-0528 at release and after its update, V3.1, V3.2-Exp) and renders
 * conversations with that template's rules, byte for byte what transformers'
 * apply_chat_template(tokenize=False) gives (checked against Jinja2 in
 * tests/test_chat_template.c). DeepSeek-V3.2 ships no template: its prompts
 * come from DeepSeek's Python encoder (encoding_dsv32.py), selected by
 * config.json model_type "deepseek_v32". Any other template text is
 * refused (DSQ_ERR_UNSUPPORTED naming its SHA-256): a prompt is either the
 * template's or no prompt at all.
 *
 * What the rules cover: system, user and assistant turns (V3.2 also
 * "developer"), stored reasoning in assistant turns (each template's own
 * way of dropping it from history), add_generation_prompt both ways and the
 * "thinking" switch (V3.1, V3.2-Exp, V3.2). Tool definitions, tool calls and
 * tool results are refused, as is any role a template does not render.
 *
 * Messages arrive as an OpenAI / vLLM request has them and are normalised
 * as vLLM does before the template sees them: content null -> "", a list of
 * {"type":"text","text":...} parts -> the texts joined with "\n";
 * "tool_calls": null is no tool calls. */
#ifndef DSQ_CHAT_TEMPLATE_H
#define DSQ_CHAT_TEMPLATE_H

#include "dsq_error.h"

#include <json-c/json.h>
#include <stddef.h>

typedef struct dsq_chat_template dsq_chat_template;

typedef struct dsq_chat_msg {
    const char *role;       /* "system", "user", "assistant", "developer" */
    const char *content;    /* never NULL ("" for empty) */
    size_t content_len;
    const char *reasoning;  /* assistant "reasoning_content" (V3.2's encoder reads it), or NULL */
    size_t reasoning_len;
} dsq_chat_msg;

typedef struct dsq_chat_opts {
    int add_generation_prompt;
    /* chat_template_kwargs as the templates read them, Python truthiness:
     * "thinking" (V3.1, V3.2-Exp, V3.2), "enable_thinking" (V3.2 only, as
     * vLLM's deepseek_v32 tokenizer mode reads it). */
    int thinking;
    int enable_thinking;
} dsq_chat_opts;

/* Templates by name: the ids of the known templates ("deepseek-v3",
 * "deepseek-v3-0324", "deepseek-r1-orig-20250120", "deepseek-r1-distill-think",
 * "deepseek-r1", "deepseek-r1-0528-initial", "deepseek-r1-0528",
 * "deepseek-v3.1", "deepseek-v3.2-exp", "deepseek-v3.2"). */
size_t      dsq_chat_template_count(void);
const char *dsq_chat_template_id_at(size_t i);
/* Lowercase hex SHA-256 of the template text, or NULL for the V3.2 encoder. */
const char *dsq_chat_template_sha256_at(size_t i);

/* Recognise template text (len bytes) by its SHA-256. bos: the tokenizer's
 * BOS string (NULL or "" when it has none: the templates then print
 * nothing for it). DSQ_ERR_UNSUPPORTED for unknown text. */
int  dsq_chat_template_from_text(dsq_chat_template **out, const char *text, size_t len,
                                 const char *bos, dsq_diag *d);
/* A known template by its id (see above). */
int  dsq_chat_template_by_id(dsq_chat_template **out, const char *id, const char *bos,
                             dsq_diag *d);
/* The model's own template: tokenizer_config_json (NUL-terminated text or
 * NULL) supplies "chat_template" (a string, or a list of {name, template}
 * taken at "default") and "bos_token"; template_file (NULL or the text of
 * chat_template.jinja, which transformers prefers) overrides it;
 * model_type "deepseek_v32" without any template selects V3.2's encoder.
 * choice (NULL for the model's own) is a template id or the path of a file
 * holding a known template's text. DSQ_ERR_NOT_FOUND when the model has no
 * template and none was chosen. */
int  dsq_chat_template_open(dsq_chat_template **out, const char *tokenizer_config_json,
                            const char *template_file, const char *model_type,
                            const char *choice, dsq_diag *d);
/* The same reading a model directory's tokenizer_config.json,
 * chat_template.jinja and config.json. */
int  dsq_chat_template_open_dir(dsq_chat_template **out, const char *dir, const char *choice,
                                dsq_diag *d);
/* The template of a model as ds-eval and ds-serve open it: a .dsq's
 * metadata, else the directory of tokenizer_path (when given) or of the
 * model. */
int  dsq_chat_template_for_model(dsq_chat_template **out, const char *model_path,
                                 const char *tokenizer_path, const char *choice, dsq_diag *d);
void dsq_chat_template_free(dsq_chat_template *t);

const char *dsq_chat_template_id(const dsq_chat_template *t);
/* 1 when the template has a thinking switch ("thinking" kwarg). */
int  dsq_chat_template_has_thinking(const dsq_chat_template *t);
/* 1 when a prompt rendered with opts ends inside a reasoning section (the
 * generation prompt opens <think>), so the model's output begins with
 * reasoning. */
int  dsq_chat_template_opens_think(const dsq_chat_template *t, const dsq_chat_opts *o);

/* Render n messages. *out is malloc'd, NUL-terminated (*len excludes the
 * NUL). DSQ_ERR_UNSUPPORTED (a role the template does not render),
 * DSQ_ERR_INVALID_ARG (a conversation the template itself rejects, e.g.
 * V3.2 thinking mode without reasoning after the last user turn). */
int  dsq_chat_render(const dsq_chat_template *t, const dsq_chat_msg *m, size_t n,
                     const dsq_chat_opts *o, char **out, size_t *len, dsq_diag *d);

/* ---- request JSON -> messages --------------------------------------------- */

/* Parse an OpenAI "messages" array. Strings point into arr (or into
 * *arena for joined content parts; free it with free()); *msgs is malloc'd.
 * Refusals (DSQ_ERR_JSON for wrong types, DSQ_ERR_UNSUPPORTED for tools,
 * images and unknown roles) name the message index in d's message. */
int  dsq_chat_messages_from_json(json_object *arr, dsq_chat_msg **msgs, size_t *n,
                                 char **arena, dsq_diag *d);
/* Read chat_template_kwargs (an object or NULL) into o's thinking fields.
 * Keys that would replace the templates' own variables (messages, tools,
 * add_generation_prompt, bos_token, eos_token) are refused; others no
 * DeepSeek template reads are ignored, as the templates ignore them. */
int  dsq_chat_kwargs_from_json(json_object *kw, dsq_chat_opts *o, dsq_diag *d);
/* Python truthiness of a JSON value (null, false, 0, "", [], {} are false). */
int  dsq_chat_json_truthy(json_object *v);

#endif

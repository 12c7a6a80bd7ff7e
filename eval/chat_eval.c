/* chat_eval.c - the chat prompt suites, their answer extraction and the
 * sampled-accuracy aggregates (see chat_eval.h). */
#include "chat_eval.h"
#include "dsq_sbuf.h"

#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define THINK "<think>"
#define ENDTHINK "</think>"

static const char *const LMEVAL_LLAMA_STOPS[] = {
    "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>", "Q:", "</s>"
};

static const dsq_chat_suite SUITES[] = {
    { "aisbench-0shot-cot", DSQ_SUITE_AISBENCH, 0, 512, 0.01, 0, 0, NULL, 0 },
    { "aisbench-0shot-cot-nocomma", DSQ_SUITE_AISBENCH, 1, 512, 0.01, 0, 0, NULL, 0 },
    { "lm-eval-cot-llama", DSQ_SUITE_LMEVAL_COT_LLAMA, 0, 256, 0.0, 1, 1234, LMEVAL_LLAMA_STOPS, 4 },
};

const dsq_chat_suite *dsq_chat_suite_find(const char *name)
{
    for (size_t i = 0; i < sizeof SUITES / sizeof SUITES[0]; i++)
        if (!strcmp(SUITES[i].name, name)) return &SUITES[i];
    return NULL;
}

const char *dsq_chat_suite_names(void)
{
    return "aisbench-0shot-cot, aisbench-0shot-cot-nocomma, lm-eval-cot-llama";
}

/* ---- prompts ------------------------------------------------------------------------ */

static const char AIS_PROMPT[] =
    "Answer the following question.The last line of the response should follow this format: "
    "\"answer:$ANSWER\" (without quotes), where ANSWER is a number. Let's think step by step.\n\n"
    "Question: ";

/* gsm8k-cot-llama.yaml fewshot_config.samples (YAML plain scalars: the
 * line breaks fold into spaces). */
static const char *const LLAMA_SHOTS[8][2] = {
    { "There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are done, "
      "there will be 21 trees. How many trees did the grove workers plant today?",
      "There are 15 trees originally. Then there were 21 trees after some more were planted. So there must have "
      "been 21 - 15 = 6. The final answer is 6" },
    { "If there are 3 cars in the parking lot and 2 more cars arrive, how many cars are in the parking lot?",
      "There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5. The final answer is 5" },
    { "Leah had 32 chocolates and her sister had 42. If they ate 35, how many pieces do they have left in total?",
      "Originally, Leah had 32 chocolates. Her sister had 42. So in total they had 32 + 42 = 74. After eating 35, "
      "they had 74 - 35 = 39. The final answer is 39" },
    { "Jason had 20 lollipops. He gave Denny some lollipops. Now Jason has 12 lollipops. How many lollipops did "
      "Jason give to Denny?",
      "Jason started with 20 lollipops. Then he had 12 after giving some to Denny. So he gave Denny 20 - 12 = 8. "
      "The final answer is 8" },
    { "Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he have now?",
      "Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. 5 + 4 = 9. "
      "The final answer is 9" },
    { "There were nine computers in the server room. Five more computers were installed each day, from monday to "
      "thursday. How many computers are now in the server room?",
      "There were originally 9 computers. For each of 4 days, 5 more computers were added. So 5 * 4 = 20 computers "
      "were added. 9 + 20 is 29. The final answer is 29" },
    { "Michael had 58 golf balls. On tuesday, he lost 23 golf balls. On wednesday, he lost 2 more. How many golf "
      "balls did he have at the end of wednesday?",
      "Michael started with 58 golf balls. After losing 23 on tuesday, he had 58 - 23 = 35. After losing 2 more, "
      "he had 35 - 2 = 33 golf balls. The final answer is 33" },
    { "Olivia has $23. She bought five bagels for $3 each. How much money does she have left?",
      "Olivia had 23 dollars. 5 bagels for 3 dollars each will be 5 x 3 = 15 dollars. So she has 23 - 15 dollars "
      "left. 23 - 15 is 8. The final answer is 8" },
};

/* doc_to_text of gsm8k-cot-llama.yaml */
static void llama_text(dsq_sbuf *b, const char *q, size_t n)
{
    dsq_sb_puts(b, "Given the following problem, reason and give a final answer to the problem.\nProblem: ");
    dsq_sb_add(b, q, n);
    dsq_sb_puts(b, "\nYour response should end with \"The final answer is [answer]\" where [answer] is the "
                   "response to the problem.\n");
}

static void add_msg(json_object *arr, const char *role, const char *text, size_t n)
{
    json_object *m = json_object_new_object();
    json_object_object_add(m, "role", json_object_new_string(role));
    json_object_object_add(m, "content", json_object_new_string_len(text, (int)n));
    json_object_array_add(arr, m);
}

int dsq_chat_suite_messages(const dsq_chat_suite *s, const char *question, size_t qlen, char **json,
                            dsq_diag *d)
{
    json_object *arr = json_object_new_array();
    dsq_sbuf b = { 0 };
    if (s->kind == DSQ_SUITE_AISBENCH) {
        dsq_sb_puts(&b, AIS_PROMPT);
        dsq_sb_add(&b, question, qlen);
        if (!b.oom) add_msg(arr, "user", b.p, b.n);
    } else {
        for (int i = 0; i < 8; i++) {
            b.n = 0;
            llama_text(&b, LLAMA_SHOTS[i][0], strlen(LLAMA_SHOTS[i][0]));
            if (!b.oom) add_msg(arr, "user", b.p, b.n);
            add_msg(arr, "assistant", LLAMA_SHOTS[i][1], strlen(LLAMA_SHOTS[i][1]));
        }
        b.n = 0;
        llama_text(&b, question, qlen);
        if (!b.oom) add_msg(arr, "user", b.p, b.n);
    }
    int oom = b.oom;
    free(b.p);
    const char *t = oom ? NULL : json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    *json = t ? strdup(t) : NULL;
    json_object_put(arr);
    return *json ? DSQ_OK : dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
}

/* ---- predictions ---------------------------------------------------------------------- */

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* Python's str.strip() on the ASCII whitespace it strips. */
static void strip_ws(const char **s, size_t *n, int left, int right)
{
    while (left && *n && (isspace((unsigned char)**s) || **s == '\x1c' || **s == '\x1d' || **s == '\x1e' || **s == '\x1f')) { (*s)++; (*n)--; }
    while (right && *n && (isspace((unsigned char)(*s)[*n - 1]) || ((*s)[*n - 1] >= '\x1c' && (*s)[*n - 1] <= '\x1f'))) (*n)--;
}

int dsq_chat_prediction(const dsq_chat_suite *s, const char *content, size_t clen, int has_content,
                        const char *reasoning, size_t rlen, int has_reasoning,
                        const char *think_end, char **pred, size_t *plen)
{
    dsq_sbuf b = { 0 };
    if (!has_content) clen = 0;
    if (!has_reasoning) rlen = 0;
    if (s->kind == DSQ_SUITE_AISBENCH) {
        /* output.py: both -> reasoning + "</think>" + content; only reasoning -> it */
        if (rlen && clen) {
            dsq_sb_add(&b, reasoning, rlen);
            dsq_sb_puts(&b, ENDTHINK);
            dsq_sb_add(&b, content, clen);
        } else if (rlen) {
            dsq_sb_add(&b, reasoning, rlen);
        } else {
            dsq_sb_add(&b, content, clen);
        }
    } else {
        /* lm-eval reads message.content only; think_end_token split */
        const char *c = content ? content : "";
        size_t n = clen;
        if (think_end && think_end[0]) {
            size_t k = strlen(think_end);
            const char *p = c, *hit = NULL;
            while ((p = memmem(p, (size_t)(c + n - p), think_end, k))) { hit = p; p += k; }
            if (hit) { n = (size_t)(c + n - (hit + k)); c = hit + k; }
            strip_ws(&c, &n, 1, 0);
        }
        dsq_sb_add(&b, c, n);
    }
    dsq_sb_add(&b, "", 0);
    if (b.oom || !b.p) {
        free(b.p);
        return DSQ_ERR_NOMEM;
    }
    *pred = b.p;
    if (plen) *plen = b.n;
    return DSQ_OK;
}

int dsq_aisbench_non_reasoning(const char *text, size_t len, char **out, size_t *olen)
{
    const size_t ks = sizeof THINK - 1, ke = sizeof ENDTHINK - 1;
    const char *s;
    size_t n;
    dsq_sbuf b = { 0 };
    if (!memmem(text, len, THINK, ks) && memmem(text, len, ENDTHINK, ke)) {
        /* item.split("</think>")[-1].strip() */
        const char *p = text, *hit = NULL;
        while ((p = memmem(p, (size_t)(text + len - p), ENDTHINK, ke))) { hit = p; p += ke; }
        s = hit + ke;
        n = (size_t)(text + len - s);
        strip_ws(&s, &n, 1, 1);
        dsq_sb_add(&b, s, n);
    } else {
        /* re.sub(r"<think>(.*?)</think>", "", item, flags=DOTALL).strip() */
        const char *p = text, *e = text + len;
        while (p < e) {
            const char *st = memmem(p, (size_t)(e - p), THINK, ks);
            const char *en = st ? memmem(st + ks, (size_t)(e - st - ks), ENDTHINK, ke) : NULL;
            if (!st || !en) { dsq_sb_add(&b, p, (size_t)(e - p)); break; }
            dsq_sb_add(&b, p, (size_t)(st - p));
            p = en + ke;
        }
        dsq_sb_add(&b, "", 0);
        if (!b.oom && b.p) {
            s = b.p;
            n = b.n;
            strip_ws(&s, &n, 1, 1);
            memmove(b.p, s, n);
            b.n = n;
        }
    }
    dsq_sb_add(&b, "", 0);
    if (b.oom || !b.p) { free(b.p); return DSQ_ERR_NOMEM; }
    b.p[b.n] = 0;
    *out = b.p;
    if (olen) *olen = b.n;
    return DSQ_OK;
}

int dsq_aisbench_gsm8k_post(const char *text, size_t len, int strip_commas, char **out)
{
    const char *q = memmem(text, len, "Question:", 9);
    size_t n = q ? (size_t)(q - text) : len;
    char *t = malloc(n + 1);
    if (!t) return DSQ_ERR_NOMEM;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!(strip_commas && text[i] == ',')) t[m++] = text[i];
    /* re.findall(r"\-?\d+\.\d+|\-?\d+"): leftmost matches, first
     * alternative first; the last one wins */
    size_t bs = 0, be = 0, i = 0;
    int found = 0;
    while (i < m) {
        size_t j = i + (t[i] == '-');
        if (j < m && isdigit((unsigned char)t[j])) {
            size_t k = j;
            while (k < m && isdigit((unsigned char)t[k])) k++;
            size_t end = k;
            if (k + 1 < m && t[k] == '.' && isdigit((unsigned char)t[k + 1])) {
                end = k + 1;
                while (end < m && isdigit((unsigned char)t[end])) end++;
            }
            bs = i;
            be = end;
            found = 1;
            i = end;
        } else {
            i++;
        }
    }
    *out = found ? dup_n(t + bs, be - bs) : strdup("NULL");
    free(t);
    return *out ? DSQ_OK : DSQ_ERR_NOMEM;
}

int dsq_aisbench_reference(const char *answer, size_t len, char **out)
{
    const char *h = memmem(answer, len, "#### ", 5);
    const char *s = h ? h + 5 : answer;
    size_t n = (size_t)(answer + len - s);
    if (h) { /* split("#### ")[1]: up to a second "#### " */
        const char *h2 = memmem(s, n, "#### ", 5);
        if (h2) n = (size_t)(h2 - s);
    }
    char *t = malloc(n + 1);
    if (!t) return DSQ_ERR_NOMEM;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] != ',') t[m++] = s[i];
    t[m] = 0;
    *out = t;
    return DSQ_OK;
}

/* Python float(str) / int(str): surrounding whitespace allowed, '_' only
 * between digits; int takes an optional sign and decimal digits only. */
static int py_clean(const char *s, char *buf, size_t cap, int allow_float)
{
    size_t n = strlen(s);
    const char *p = s;
    strip_ws(&p, &n, 1, 1);
    if (!n || n >= cap) return -1;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '_') {
            if (!i || i + 1 >= n || !isdigit((unsigned char)p[i - 1]) || !isdigit((unsigned char)p[i + 1])) return -1;
            continue;
        }
        buf[m++] = p[i];
    }
    buf[m] = 0;
    if (!allow_float) {
        size_t i = (buf[0] == '+' || buf[0] == '-');
        if (!buf[i]) return -1;
        for (; buf[i]; i++)
            if (!isdigit((unsigned char)buf[i])) return -1;
        return 0;
    }
    /* float(): decimal or inf/nan; no hex (strtod would take it) */
    for (size_t i = 0; buf[i]; i++)
        if (buf[i] == 'x' || buf[i] == 'X') return -1;
    return 0;
}

int dsq_aisbench_is_equal(const char *pred, const char *ref)
{
    if (!strcmp(pred, ref)) return 1;
    char a[512], b[512];
    if (py_clean(pred, a, sizeof a, 1) < 0 || py_clean(ref, b, sizeof b, 0) < 0) return 0;
    char *end;
    errno = 0;
    double x = strtod(a, &end);
    if (*end || end == a) return 0;
    double y = strtod(b, &end); /* int(ref) converted to float for the difference */
    if (*end) return 0;
    if (isinf(y)) return 0;     /* Python: OverflowError, caught as not equal */
    return fabs(x - y) < 1e-6;
}

/* ---- scoring ------------------------------------------------------------------------ */

/* The last match of lm-eval's strict gsm8k_cot_llama filter, or "[invalid]". */
static int llama_strict(const char *text, size_t len, char **out)
{
    static const char pat[] = "The final answer is ((-?[$0-9.,]{2,})|(-?[0-9]+))";
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, 0, &err, &off, NULL);
    if (!re) return DSQ_ERR_INTERNAL;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) { pcre2_code_free(re); return DSQ_ERR_NOMEM; }
    const char *best = NULL;
    size_t best_n = 0;
    PCRE2_SIZE start = 0;
    int rc = DSQ_OK;
    while (start <= len) {
        int m = pcre2_match(re, (PCRE2_SPTR)text, len, start, 0, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) { rc = DSQ_ERR_INTERNAL; break; }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        best = NULL;
        for (int g = 1; g < m; g++)
            if (ov[2 * g] != PCRE2_UNSET && ov[2 * g + 1] > ov[2 * g]) {
                best = text + ov[2 * g];
                best_n = ov[2 * g + 1] - ov[2 * g];
                break;
            }
        start = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (rc < 0) return rc;
    if (!best) *out = strdup(DSQ_GSM8K_INVALID);
    else {
        strip_ws(&best, &best_n, 1, 1);
        *out = dup_n(best, best_n);
    }
    return *out ? DSQ_OK : DSQ_ERR_NOMEM;
}

/* exact_match with gsm8k_cot_llama's regexes_to_ignore: gsm8k's four, then
 * "\.$" once more. */
static int llama_match(dsq_gsm8k_scorer *sc, const char *pred, const char *ref, size_t rlen, int *match)
{
    char *a = NULL, *b = NULL;
    size_t an, bn;
    int rc = dsq_gsm8k_normalize(sc, pred, strlen(pred), &a, &an);
    if (rc == DSQ_OK) rc = dsq_gsm8k_normalize(sc, ref, rlen, &b, &bn);
    if (rc == DSQ_OK) {
        /* "\.$": a final '.', or one before a final newline (Python's $) */
        char *v[2] = { a, b };
        size_t *vn[2] = { &an, &bn };
        for (int k = 0; k < 2; k++) {
            size_t n = *vn[k];
            if (n && v[k][n - 1] == '.') { memmove(v[k] + n - 1, v[k] + n, 1); (*vn[k])--; }
            else if (n >= 2 && v[k][n - 1] == '\n' && v[k][n - 2] == '.') { v[k][n - 2] = '\n'; v[k][n - 1] = 0; (*vn[k])--; }
        }
        *match = an == bn && !memcmp(a, b, an);
    }
    free(a);
    free(b);
    return rc;
}

int dsq_chat_score_item(const dsq_chat_suite *s, dsq_gsm8k_scorer *sc, const char *pred, size_t plen,
                        const char *answer, size_t alen, dsq_chat_score *out)
{
    memset(out, 0, sizeof *out);
    int rc;
    if (s->kind == DSQ_SUITE_AISBENCH) {
        char *nr = NULL, *ref = NULL;
        size_t nl;
        rc = dsq_aisbench_non_reasoning(pred, plen, &nr, &nl);
        if (rc == DSQ_OK) rc = dsq_aisbench_gsm8k_post(nr, nl, s->strip_commas, &out->answer);
        if (rc == DSQ_OK) rc = dsq_aisbench_reference(answer, alen, &ref);
        if (rc == DSQ_OK) out->correct = dsq_aisbench_is_equal(out->answer, ref);
        free(nr);
        free(ref);
    } else {
        /* the reference: answer.split('####')[-1].strip() (the whole text for
         * other sets); exact_match's "(?s).*#### " removes the same part */
        const char *r = answer, *p = answer;
        size_t rn = alen;
        while ((p = memmem(p, (size_t)(answer + alen - p), "####", 4))) { r = p + 4; p += 4; }
        rn = (size_t)(answer + alen - r);
        strip_ws(&r, &rn, 1, 1);
        rc = llama_strict(pred, plen, &out->answer);
        if (rc == DSQ_OK) rc = dsq_gsm8k_extract(sc, DSQ_GSM8K_FLEXIBLE, pred, plen, &out->flexible);
        if (rc == DSQ_OK) rc = llama_match(sc, out->answer, r, rn, &out->correct);
        if (rc == DSQ_OK) rc = llama_match(sc, out->flexible, r, rn, &out->correct_flexible);
    }
    if (rc < 0) dsq_chat_score_release(out);
    return rc;
}

void dsq_chat_score_release(dsq_chat_score *s)
{
    if (!s) return;
    free(s->answer);
    free(s->flexible);
    memset(s, 0, sizeof *s);
}

/* ---- aggregates ------------------------------------------------------------------------- */

double dsq_pass_at_k(int n, int c, int k)
{
    if (k <= 0 || n <= 0 || k > n) return NAN;
    if (n - c < k) return 1.0;
    /* 1 - prod_{i = n-c+1}^{n} (1 - k / i) */
    double p = 1.0;
    for (int i = n - c + 1; i <= n; i++) p *= 1.0 - (double)k / (double)i;
    return 1.0 - p;
}

void dsq_chat_accuracy(const int *correct, size_t problems, int samples, double *mean, double *stderr_)
{
    double sum = 0;
    for (size_t i = 0; i < problems; i++) sum += (double)correct[i] / samples;
    double m = problems ? sum / (double)problems : NAN;
    double ss = 0;
    for (size_t i = 0; i < problems; i++) {
        double x = (double)correct[i] / samples - m;
        ss += x * x;
    }
    *mean = m;
    *stderr_ = problems > 1 ? sqrt(ss / (double)(problems - 1)) / sqrt((double)problems) : 0.0;
}

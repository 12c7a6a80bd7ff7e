/* stats.c - per-channel activation statistics, the collection hook and the
 * hidden-state store (see stats.h). */
#include "stats.h"
#include "dsq_rand.h"
#include "dsq_file.h"

#include <cblas.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- one site -------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const char *s)
{
    h ^= 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

int dsq_act_stats_init(dsq_act_stats *s, const char *name, int64_t in, int sample_cap, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    if (in <= 0 || sample_cap < 0) return DSQ_ERR_INVALID_ARG;
    size_t n = (size_t)in;
    s->name = strdup(name);
    s->in = in;
    s->absmax = calloc(n, sizeof(float));
    s->vmin = calloc(n, sizeof(float));
    s->vmax = calloc(n, sizeof(float));
    s->sum_abs = calloc(n, sizeof(double));
    s->sum_sq = calloc(n, sizeof(double));
    if (sample_cap > 0) s->sample = malloc((size_t)sample_cap * n * sizeof(float));
    s->sample_cap = sample_cap;
    s->rng = fnv(seed, name);
    if (!s->name || !s->absmax || !s->vmin || !s->vmax || !s->sum_abs || !s->sum_sq ||
        (sample_cap > 0 && !s->sample)) {
        dsq_act_stats_release(s);
        return DSQ_ERR_NOMEM;
    }
    return DSQ_OK;
}

void dsq_act_stats_release(dsq_act_stats *s)
{
    if (!s) return;
    free(s->name);
    free(s->absmax);
    free(s->vmin);
    free(s->vmax);
    free(s->sum_abs);
    free(s->sum_sq);
    free(s->sample);
    free(s->cov);
    free(s->seqs);
    memset(s, 0, sizeof *s);
}

int dsq_act_stats_keep_seq(dsq_act_stats *s, const float *x, int64_t T, int cap, int max_len)
{
    if (cap <= 0 || T <= 0 || s->seq_n >= cap) return DSQ_OK;
    int64_t len = max_len > 0 && T > max_len ? max_len : T;
    if (len > INT32_MAX / 2) return DSQ_ERR_INVALID_ARG;
    if (!s->seqs) {
        s->seqs = malloc((size_t)cap * (size_t)len * (size_t)s->in * sizeof *s->seqs);
        if (!s->seqs) return DSQ_ERR_NOMEM;
        s->seq_cap = cap;
        s->seq_len = (int)len;
    }
    if (len < s->seq_len) return DSQ_OK;   /* shorter than the first: skip, never pad */
    memcpy(s->seqs + (size_t)s->seq_n * (size_t)s->seq_len * (size_t)s->in, x,
           (size_t)s->seq_len * (size_t)s->in * sizeof *x);
    s->seq_n++;
    return DSQ_OK;
}

static int64_t cov_blocks(int64_t in) { return (in + DSQ_COV_BLOCK - 1) / DSQ_COV_BLOCK; }

int dsq_act_stats_enable_cov(dsq_act_stats *s)
{
    if (s->cov) return DSQ_OK;
    if (s->count) return DSQ_ERR_STATE;   /* would miss the rows already added */
    s->cov = calloc((size_t)cov_blocks(s->in) * DSQ_COV_BLOCK * DSQ_COV_BLOCK, sizeof *s->cov);
    return s->cov ? DSQ_OK : DSQ_ERR_NOMEM;
}

/* cov += X_b^T X_b per block. BLAS (single precision) does runs of at most
 * COV_ROWS rows, each run's sums are added in double: float rounding stays
 * that of a 256-term sum however many tokens the calibration has. */
#define COV_ROWS 256
static int cov_add(dsq_act_stats *s, const float *x, int64_t T)
{
    const int64_t B = DSQ_COV_BLOCK;
    float *tmp = malloc((size_t)B * (size_t)B * sizeof *tmp);
    if (!tmp) return DSQ_ERR_NOMEM;
    for (int64_t b = 0; b < cov_blocks(s->in); b++) {
        const int64_t c0 = b * B, w = s->in - c0 < B ? s->in - c0 : B;
        double *cv = s->cov + (size_t)b * (size_t)(B * B);
        for (int64_t t0 = 0; t0 < T; t0 += COV_ROWS) {
            const int64_t n = T - t0 < COV_ROWS ? T - t0 : COV_ROWS;
            cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)w, (int)n, 1.0f, x + t0 * s->in + c0,
                        (int)s->in, 0.0f, tmp, (int)B);
            for (int64_t i = 0; i < w; i++)
                for (int64_t k = i; k < w; k++) {
                    double v = (double)tmp[i * B + k];
                    cv[i * B + k] += v;
                    if (k != i) cv[k * B + i] += v;
                }
        }
    }
    free(tmp);
    return DSQ_OK;
}

double dsq_act_stats_rms(const dsq_act_stats *s, int64_t j)
{
    return s->count ? sqrt(s->sum_sq[j] / (double)s->count) : 0.0;
}

#define CHAN_CHUNK 256

typedef struct add_job {
    dsq_act_stats *s;
    const float *x;
    int64_t T;
    int64_t *bad;      /* [nchunks] first non-finite index or -1 */
    int scan;          /* phase: 1 scan, 0 accumulate */
} add_job;

static void add_task(void *ctx, size_t item, int tid)
{
    (void)tid;
    add_job *j = ctx;
    dsq_act_stats *s = j->s;
    const int64_t in = s->in, c0 = (int64_t)item * CHAN_CHUNK;
    const int64_t c1 = c0 + CHAN_CHUNK < in ? c0 + CHAN_CHUNK : in;
    if (j->scan) {
        j->bad[item] = -1;
        for (int64_t t = 0; t < j->T; t++) {
            const float *r = j->x + t * in;
            for (int64_t c = c0; c < c1; c++)
                if (!isfinite(r[c])) {
                    j->bad[item] = t * in + c;
                    return;
                }
        }
        return;
    }
    if (s->count == 0)   /* first rows: start the range at row 0 */
        for (int64_t c = c0; c < c1; c++) s->vmin[c] = s->vmax[c] = j->x[c];
    for (int64_t t = 0; t < j->T; t++) {
        const float *r = j->x + t * in;
        for (int64_t c = c0; c < c1; c++) {
            float v = r[c], a = fabsf(v);
            if (a > s->absmax[c]) s->absmax[c] = a;
            if (v < s->vmin[c]) s->vmin[c] = v;
            if (v > s->vmax[c]) s->vmax[c] = v;
            s->sum_abs[c] += (double)a;
            s->sum_sq[c] += (double)v * (double)v;
        }
    }
}

int dsq_act_stats_add(dsq_act_stats *s, const float *x, int64_t T, dsq_pool *pool, int64_t *bad)
{
    if (T <= 0) return DSQ_OK;
    size_t nchunks = (size_t)((s->in + CHAN_CHUNK - 1) / CHAN_CHUNK);
    int64_t stackbad[64], *bv = nchunks <= 64 ? stackbad : malloc(nchunks * sizeof *bv);
    if (!bv) return DSQ_ERR_NOMEM;
    /* small inputs: the pool costs more than it saves */
    dsq_pool *p = (uint64_t)T * (uint64_t)s->in >= (1u << 15) ? pool : NULL;
    add_job j = { s, x, T, bv, 1 };
    dsq_pool_run(p, nchunks, add_task, &j);
    int64_t first = -1;
    for (size_t i = 0; i < nchunks; i++)
        if (bv[i] >= 0 && (first < 0 || bv[i] < first)) first = bv[i];
    if (bv != stackbad) free(bv);
    if (first >= 0) {
        if (bad) *bad = first;
        return DSQ_ERR_NONFINITE;
    }
    if (s->cov) DSQ_TRY(cov_add(s, x, T));
    j.scan = 0;
    dsq_pool_run(p, nchunks, add_task, &j);
    /* reservoir (algorithm R): row g of the stream replaces a random slot */
    for (int64_t t = 0; t < T && s->sample_cap > 0; t++) {
        uint64_t g = s->count + (uint64_t)t;
        int64_t slot = -1;
        if (s->sample_n < s->sample_cap) {
            slot = s->sample_n++;
        } else {
            uint64_t r = dsq_splitmix64(&s->rng) % (g + 1);
            if (r < (uint64_t)s->sample_cap) slot = (int64_t)r;
        }
        if (slot >= 0) memcpy(s->sample + slot * s->in, x + t * s->in, (size_t)s->in * sizeof(float));
    }
    s->count += (uint64_t)T;
    return DSQ_OK;
}

int dsq_act_stats_merge(dsq_act_stats *dst, const dsq_act_stats *src)
{
    if (dst->in != src->in) return DSQ_ERR_SHAPE;
    if (src->count == 0) return DSQ_OK;
    if (dst->cov && !src->cov) return DSQ_ERR_STATE;   /* would be missing src's rows */
    for (int64_t c = 0; c < dst->in; c++) {
        if (dst->count == 0) {
            dst->vmin[c] = src->vmin[c];
            dst->vmax[c] = src->vmax[c];
        } else {
            if (src->vmin[c] < dst->vmin[c]) dst->vmin[c] = src->vmin[c];
            if (src->vmax[c] > dst->vmax[c]) dst->vmax[c] = src->vmax[c];
        }
        if (src->absmax[c] > dst->absmax[c]) dst->absmax[c] = src->absmax[c];
        dst->sum_abs[c] += src->sum_abs[c];
        dst->sum_sq[c] += src->sum_sq[c];
    }
    if (dst->cov) {
        const size_t nc = (size_t)cov_blocks(dst->in) * DSQ_COV_BLOCK * DSQ_COV_BLOCK;
        for (size_t i = 0; i < nc; i++) dst->cov[i] += src->cov[i];
    }
    dst->count += src->count;
    return DSQ_OK;
}

/* ---- one layer ------------------------------------------------------- */

int dsq_layer_stats_init(dsq_layer_stats *ls, int layer, int n_experts)
{
    memset(ls, 0, sizeof *ls);
    ls->layer = layer;
    ls->n_experts = n_experts > 0 ? n_experts : 0;
    ls->hcap = 64;
    ls->hash = malloc((size_t)ls->hcap * sizeof *ls->hash);
    if (ls->n_experts) ls->expert_tokens = calloc((size_t)ls->n_experts, sizeof *ls->expert_tokens);
    if (!ls->hash || (ls->n_experts && !ls->expert_tokens)) {
        dsq_layer_stats_release(ls);
        return DSQ_ERR_NOMEM;
    }
    for (int i = 0; i < ls->hcap; i++) ls->hash[i] = -1;
    return DSQ_OK;
}

void dsq_layer_stats_release(dsq_layer_stats *ls)
{
    if (!ls) return;
    for (int i = 0; i < ls->nsites; i++) dsq_act_stats_release(&ls->sites[i]);
    free(ls->sites);
    free(ls->hash);
    free(ls->expert_tokens);
    memset(ls, 0, sizeof *ls);
}

static uint64_t hstr(const char *s) { return fnv(0, s); }

dsq_act_stats *dsq_layer_stats_find(const dsq_layer_stats *ls, const char *site)
{
    if (!ls->hash) return NULL;
    for (uint64_t h = hstr(site);; h++) {
        int i = ls->hash[h & (uint64_t)(ls->hcap - 1)];
        if (i < 0) return NULL;
        if (strcmp(ls->sites[i].name, site) == 0) return &ls->sites[i];
    }
}

static int rehash(dsq_layer_stats *ls, int ncap)
{
    int *nh = malloc((size_t)ncap * sizeof *nh);
    if (!nh) return DSQ_ERR_NOMEM;
    for (int i = 0; i < ncap; i++) nh[i] = -1;
    for (int k = 0; k < ls->nsites; k++)
        for (uint64_t h = hstr(ls->sites[k].name);; h++)
            if (nh[h & (uint64_t)(ncap - 1)] < 0) {
                nh[h & (uint64_t)(ncap - 1)] = k;
                break;
            }
    free(ls->hash);
    ls->hash = nh;
    ls->hcap = ncap;
    return DSQ_OK;
}

int dsq_layer_stats_get(dsq_layer_stats *ls, const char *site, int64_t in, int sample_cap, uint64_t seed,
                        dsq_act_stats **out)
{
    dsq_act_stats *s = dsq_layer_stats_find(ls, site);
    if (s) {
        *out = s;
        return s->in == in ? DSQ_OK : DSQ_ERR_SHAPE;
    }
    if (ls->nsites == ls->cap) {
        int nc = ls->cap ? ls->cap * 2 : 32;
        dsq_act_stats *nv = realloc(ls->sites, (size_t)nc * sizeof *nv);
        if (!nv) return DSQ_ERR_NOMEM;
        ls->sites = nv;
        ls->cap = nc;
    }
    if ((ls->nsites + 1) * 2 > ls->hcap) DSQ_TRY(rehash(ls, ls->hcap * 2));
    uint64_t sd = seed ^ ((uint64_t)(uint32_t)ls->layer * 0x9e3779b97f4a7c15ull);
    DSQ_TRY(dsq_act_stats_init(&ls->sites[ls->nsites], site, in, sample_cap, sd));
    for (uint64_t h = hstr(site);; h++)
        if (ls->hash[h & (uint64_t)(ls->hcap - 1)] < 0) {
            ls->hash[h & (uint64_t)(ls->hcap - 1)] = ls->nsites;
            break;
        }
    *out = &ls->sites[ls->nsites++];
    return DSQ_OK;
}

int dsq_layer_stats_merge(dsq_layer_stats *dst, const dsq_layer_stats *src)
{
    if (dst->n_experts != src->n_experts) return DSQ_ERR_SHAPE;
    for (int i = 0; i < src->nsites; i++) {
        dsq_act_stats *s;
        DSQ_TRY(dsq_layer_stats_get(dst, src->sites[i].name, src->sites[i].in, 0, 0, &s));
        DSQ_TRY(dsq_act_stats_merge(s, &src->sites[i]));
    }
    for (int e = 0; e < dst->n_experts; e++) dst->expert_tokens[e] += src->expert_tokens[e];
    dst->tokens += src->tokens;
    return DSQ_OK;
}

/* ---- names ------------------------------------------------------------ */

static int replace_suffix(char *buf, size_t n, const char *name, const char *suf, const char *with)
{
    size_t a = strlen(name), b = strlen(suf);
    if (a < b || strcmp(name + a - b, suf) != 0) return 0;
    snprintf(buf, n, "%.*s%s", (int)(a - b), name, with);
    return 1;
}

const char *dsq_calib_site_of(const char *lin, int q_lora, char *buf, size_t n)
{
    if (replace_suffix(buf, n, lin, ".self_attn.k_proj.weight", ".self_attn.q_proj.weight") ||
        replace_suffix(buf, n, lin, ".self_attn.v_proj.weight", ".self_attn.q_proj.weight") ||
        replace_suffix(buf, n, lin, ".self_attn.kv_a_proj_with_mqa.weight",
                       q_lora ? ".self_attn.q_a_proj.weight" : ".self_attn.q_proj.weight") ||
        replace_suffix(buf, n, lin, ".mlp.shared_experts.gate_proj.weight", ".mlp.gate.weight") ||
        replace_suffix(buf, n, lin, ".mlp.shared_experts.up_proj.weight", ".mlp.gate.weight") ||
        replace_suffix(buf, n, lin, ".up_proj.weight", ".gate_proj.weight"))
        return buf;
    snprintf(buf, n, "%s", lin);
    return buf;
}

int dsq_calib_expert_of(const char *name)
{
    const char *p = strstr(name, ".mlp.experts.");
    if (!p) return -1;
    p += strlen(".mlp.experts.");
    char *end;
    long e = strtol(p, &end, 10);
    if (end == p || *end != '.' || e < 0 || e > 1 << 20) return -1;
    return (int)e;
}

/* ---- hidden-state store ------------------------------------------------ */

struct dsq_hstore {
    int n, T;
    int64_t hidden;
    size_t sample_bytes;
    float *ram;          /* RAM mode: [n][T][hidden], updated in place */
    int fd[2];
    char *path[2];
    int cur;             /* file holding the current state */
    int keep;
    float *buf;          /* file mode working buffer */
};

int dsq_hstore_is_file(const dsq_hstore *h) { return h->ram == NULL; }
void dsq_hstore_shape(const dsq_hstore *h, int *n, int *T)
{
    *n = h->n;
    *T = h->T;
}
int dsq_hstore_current(const dsq_hstore *h) { return h->cur; }

void dsq_hstore_free(dsq_hstore *h, int remove_files)
{
    if (!h) return;
    free(h->ram);
    free(h->buf);
    for (int i = 0; i < 2; i++) {
        if (h->fd[i] >= 0) close(h->fd[i]);
        if (h->path[i] && (remove_files || !h->keep)) unlink(h->path[i]);
        free(h->path[i]);
    }
    free(h);
}

int dsq_hstore_open(dsq_hstore **out, int n, int T, int64_t hidden, uint64_t ram_limit, const char *spill_base,
                    int keep, dsq_diag *d)
{
    *out = NULL;
    if (n < 1 || T < 1 || hidden < 1) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "bad hidden-state shape");
    dsq_hstore *h = calloc(1, sizeof *h);
    if (!h) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    h->fd[0] = h->fd[1] = -1;
    h->n = n;
    h->T = T;
    h->hidden = hidden;
    h->sample_bytes = (size_t)T * (size_t)hidden * sizeof(float);
    h->keep = keep;
    uint64_t total = (uint64_t)h->sample_bytes * (uint64_t)n;
    if (!spill_base && total <= ram_limit) {
        h->ram = malloc((size_t)total);
        if (!h->ram) {
            free(h);
            return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory for hidden states (%llu bytes)",
                            (unsigned long long)total);
        }
        *out = h;
        return DSQ_OK;
    }
    h->buf = malloc(h->sample_bytes);
    if (!h->buf) {
        dsq_hstore_free(h, 1);
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    for (int i = 0; i < 2; i++) {
        if (spill_base) {
            size_t len = strlen(spill_base) + 8;
            h->path[i] = malloc(len);
            if (!h->path[i]) {
                dsq_hstore_free(h, 1);
                return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
            }
            snprintf(h->path[i], len, "%s.h%d", spill_base, i);
            h->fd[i] = open(h->path[i], O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);   /* never through a link */
        } else {
            const char *tmp = getenv("TMPDIR");
            char tpl[4096];
            snprintf(tpl, sizeof tpl, "%s/dsq-calib-XXXXXX", tmp && *tmp ? tmp : "/tmp");
            h->fd[i] = mkstemp(tpl);
            if (h->fd[i] >= 0) unlink(tpl);   /* anonymous: gone when closed */
        }
        if (h->fd[i] < 0 || ftruncate(h->fd[i], (off_t)total) != 0) {
            int e = errno;
            int rc = dsq_fail_errno(d, e, h->path[i] ? h->path[i] : "$TMPDIR", "cannot create hidden-state file");
            dsq_hstore_free(h, 1);
            return rc;
        }
    }
    *out = h;
    return DSQ_OK;
}

static int pio(int fd, void *buf, size_t n, uint64_t off, int wr, const char *path, dsq_diag *d)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t k = wr ? pwrite(fd, p, n, (off_t)off) : pread(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) return dsq_fail(d, DSQ_ERR_TRUNCATED, path, NULL, (int64_t)off, "hidden-state file is short");
            return dsq_fail_errno(d, errno, path ? path : "hidden-state file", "%s failed",
                                  wr ? "write" : "read");
        }
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return DSQ_OK;
}

int dsq_hstore_get(dsq_hstore *h, int i, float **buf, dsq_diag *d)
{
    if (i < 0 || i >= h->n) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "sample %d out of range", i);
    if (h->ram) {
        *buf = h->ram + (size_t)i * ((size_t)h->T * (size_t)h->hidden);
        return DSQ_OK;
    }
    *buf = h->buf;
    return pio(h->fd[h->cur], h->buf, h->sample_bytes, (uint64_t)i * h->sample_bytes, 0, h->path[h->cur], d);
}

int dsq_hstore_put(dsq_hstore *h, int i, const float *buf, dsq_diag *d)
{
    if (i < 0 || i >= h->n) return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "sample %d out of range", i);
    if (h->ram) {
        float *dst = h->ram + (size_t)i * ((size_t)h->T * (size_t)h->hidden);
        if (dst != buf) memcpy(dst, buf, h->sample_bytes);
        return DSQ_OK;
    }
    int nx = 1 - h->cur;
    return pio(h->fd[nx], (void *)buf, h->sample_bytes, (uint64_t)i * h->sample_bytes, 1, h->path[nx], d);
}

int dsq_hstore_swap(dsq_hstore *h, dsq_diag *d)
{
    if (h->ram) return DSQ_OK;
    int nx = 1 - h->cur;
    if (h->path[nx] && fsync(h->fd[nx]) != 0) return dsq_fail_errno(d, errno, h->path[nx], "fsync failed");
    h->cur = nx;
    return DSQ_OK;
}

int dsq_hstore_adopt(dsq_hstore *h, int idx, const uint8_t sha[DSQ_SHA256_LEN], dsq_diag *d)
{
    if (h->ram || idx < 0 || idx > 1)
        return dsq_fail(d, DSQ_ERR_INVALID_ARG, NULL, NULL, -1, "hidden states are not in files");
    dsq_sha256 hs;
    if (dsq_sha256_init(&hs) < 0) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    for (int i = 0; i < h->n; i++) {
        int rc = pio(h->fd[idx], h->buf, h->sample_bytes, (uint64_t)i * h->sample_bytes, 0, h->path[idx], d);
        if (rc < 0) {
            dsq_sha256_release(&hs);
            return rc;
        }
        dsq_sha256_update(&hs, h->buf, h->sample_bytes);
    }
    uint8_t got[DSQ_SHA256_LEN];
    dsq_sha256_final(&hs, got);
    if (memcmp(got, sha, DSQ_SHA256_LEN) != 0)
        return dsq_fail(d, DSQ_ERR_STATE, h->path[idx], NULL, -1,
                        "hidden-state checkpoint does not match the stats journal (start again without --resume)");
    h->cur = idx;
    return DSQ_OK;
}

/* ---- collection ------------------------------------------------------- */

typedef struct collector {
    dsq_model *m;
    dsq_layer_stats *ls;
    const dsq_collect_opts *o;
    dsq_pool *pool;
    int q_lora, all;
    dsq_diag *d;
    /* all-experts mode: the router's choices, recomputed for the counts */
    dsq_router rt;
    float *logits, *scratch, *w;
    int *idx;
} collector;

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* DSQ_LAYER_ALL_EXPERTS hides which tokens were routed, so count them from
 * the router input the same way moe.c routes (ops.h dsq_route; the router
 * fields mirror model.c). */
static int count_routes(collector *c, const float *x, int T)
{
    const dsq_layer *ly = &dsq_model_weights(c->m)->layers[c->ls->layer];
    const int E = c->rt.n_experts, K = c->rt.top_k;
    float *lg = malloc((size_t)T * (size_t)E * sizeof *lg);
    if (!lg) return DSQ_ERR_NOMEM;
    int rc = ly->router.w.scheme->gemm(&ly->router.w, x, T, lg, c->pool, NULL, 0);
    dsq_router rt = c->rt;
    rt.bias = ly->router_bias;
    for (int t = 0; t < T && rc == DSQ_OK; t++) {
        dsq_route(&rt, lg + (size_t)t * E, c->scratch, c->idx, c->w);
        for (int k = 0; k < K; k++)
            if (c->idx[k] >= 0 && c->idx[k] < c->ls->n_experts) c->ls->expert_tokens[c->idx[k]]++;
    }
    free(lg);
    return rc;
}

static int hook(void *ctx, int layer, const char *name, const float *x, int T, int in, const int32_t *token_index)
{
    collector *c = ctx;
    if (layer != c->ls->layer) return DSQ_OK;
    char site[512];
    dsq_calib_site_of(name, c->q_lora, site, sizeof site);
    int e = dsq_calib_expert_of(name);
    if (e >= 0 && e < c->ls->n_experts && !c->all && ends_with(name, ".gate_proj.weight"))
        c->ls->expert_tokens[e] += (uint64_t)T;
    if (c->all && c->ls->n_experts > 0 && ends_with(name, ".mlp.gate.weight")) {
        int rc = count_routes(c, x, T);
        if (rc < 0) return dsq_fail(c->d, rc, NULL, name, -1, "cannot recompute routing");
    }
    if (strcmp(site, name) != 0) return DSQ_OK;   /* statistics taken at the first reader */
    dsq_act_stats *s;
    int cap = e >= 0 ? c->o->sample_cap_expert : c->o->sample_cap_dense;
    int rc = dsq_layer_stats_get(c->ls, site, in, cap, c->o->seed, &s);
    if (rc == DSQ_OK && c->o->cov) rc = dsq_act_stats_enable_cov(s);
    if (rc < 0) return dsq_fail(c->d, rc, NULL, name, -1, "cannot record statistics");
    int64_t bad = -1;
    rc = dsq_act_stats_add(s, x, T, c->pool, &bad);
    if (rc == DSQ_ERR_NONFINITE)
        return dsq_fail(c->d, rc, NULL, name, -1, "layer %d: input of this linear has a non-finite value at "
                        "row %lld column %lld", layer, (long long)(bad / in), (long long)(bad % in));
    if (rc < 0) return dsq_fail(c->d, rc, NULL, name, -1, "cannot record statistics");
    /* the attention input, whole sequences (token_index NULL: every token) */
    if (c->o->attn_seqs > 0 && !token_index && e < 0 &&
        (ends_with(site, ".self_attn.q_a_proj.weight") || ends_with(site, ".self_attn.q_proj.weight")) &&
        (rc = dsq_act_stats_keep_seq(s, x, T, c->o->attn_seqs, c->o->attn_seq_len)) < 0)
        return dsq_fail(c->d, rc, NULL, name, -1, "cannot keep calibration sequences");
    if (c->o->tap && (rc = c->o->tap(c->o->tap_ctx, site, x, T, in, token_index)) < 0)
        return dsq_fail(c->d, rc, NULL, name, -1, "cannot accumulate the GPTQ Hessian");
    return DSQ_OK;
}

int dsq_collect_layer(dsq_model *m, int layer, dsq_hstore *h, int write_next, const dsq_collect_opts *o,
                      dsq_layer_stats *ls, uint8_t sha[DSQ_SHA256_LEN], dsq_diag *d)
{
    const dsq_model_config *cfg = dsq_model_get_config(m);
    collector c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.ls = ls;
    c.o = o;
    c.pool = dsq_model_pool(m);
    c.q_lora = cfg->q_lora_rank > 0;
    c.all = (o->layer_flags & DSQ_LAYER_ALL_EXPERTS) != 0;
    c.d = d;
    if (c.all && ls->n_experts > 0) {
        dsq_router_from_config(cfg, &c.rt);
        c.scratch = malloc(2 * (size_t)c.rt.n_experts * sizeof(float));
        c.idx = malloc((size_t)c.rt.top_k * sizeof(int));
        c.w = malloc((size_t)c.rt.top_k * sizeof(float));
        if (!c.scratch || !c.idx || !c.w) {
            free(c.scratch);
            free(c.idx);
            free(c.w);
            return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        }
    }
    int rc = dsq_model_layer_load(m, layer, d);
    dsq_sha256 hs;
    int hashing = write_next && sha;
    if (rc == DSQ_OK && hashing && dsq_sha256_init(&hs) < 0) {
        rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        hashing = 0;
    }
    int n = 0, T = 0;
    /* Without write_next the state must stay as it was, but a RAM store
     * hands out its own rows and the forward runs in place: work on a copy
     * (a file store's get() already reads into a scratch buffer). */
    float *copy = NULL;
    if (rc == DSQ_OK && !write_next && h->ram) {
        copy = malloc(h->sample_bytes);
        if (!copy) rc = dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    }
    /* the store knows its shape; walk samples until get() says out of range */
    for (int i = 0; rc == DSQ_OK; i++) {
        if (o->cancel && *o->cancel) {
            rc = dsq_fail(d, DSQ_ERR_INTERRUPTED, NULL, NULL, -1, "calibration interrupted in layer %d", layer);
            break;
        }
        dsq_hstore_shape(h, &n, &T);
        if (i >= n) break;
        float *buf;
        rc = dsq_hstore_get(h, i, &buf, d);
        if (rc < 0) break;
        if (copy) buf = memcpy(copy, buf, h->sample_bytes);
        ls->tokens += (uint64_t)T;
        rc = dsq_layer_forward(m, layer, buf, T, NULL, hook, &c, o->layer_flags, d);
        if (rc < 0) break;
        if (write_next) {
            rc = dsq_hstore_put(h, i, buf, d);
            if (hashing) dsq_sha256_update(&hs, buf, (size_t)T * (size_t)dsq_model_get_config(m)->hidden_size * sizeof(float));
        }
        if (o->on_sample) o->on_sample(o->ctx, layer, i);
    }
    if (hashing) {
        if (rc == DSQ_OK) dsq_sha256_final(&hs, sha);
        else dsq_sha256_release(&hs);
    }
    free(copy);
    free(c.scratch);
    free(c.idx);
    free(c.w);
    return rc;
}

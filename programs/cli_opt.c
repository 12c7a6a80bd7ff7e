/* cli_opt.c - option tables: parse, check, help (see cli_opt.h). */
#include "cli_opt.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* getopt_long values: short letters stay themselves, long-only options
 * get LONG_BASE + id (above every char value). */
#define LONG_BASE 1000

static const dsq_opt *find_id(const dsq_opt_spec *s, int id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->opts[i].type != DSQ_OPT_TEXT && s->opts[i].id == id) return &s->opts[i];
    return NULL;
}

static const dsq_opt *find_short(const dsq_opt_spec *s, int ch)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->opts[i].type != DSQ_OPT_TEXT && s->opts[i].shrt == ch) return &s->opts[i];
    return NULL;
}

const char *dsq_opt_name(const dsq_opt_spec *s, int id)
{
    static char buf[4][80];
    static int k;
    const dsq_opt *o = find_id(s, id);
    if (!o) return "?";
    char *b = buf[k++ & 3];
    if (o->id == DSQ_OPT_THREADS && o->shrt) snprintf(b, sizeof buf[0], "-%c", o->shrt);
    else if (o->name) snprintf(b, sizeof buf[0], "--%s", o->name);
    else snprintf(b, sizeof buf[0], "-%c", o->shrt);
    return b;
}

static int takes_arg(const dsq_opt *o) { return o->type != DSQ_OPT_FLAG; }

/* The value of option o from text a, checked against its bounds; on
 * failure msg says what was expected. */
static int parse_value(const dsq_opt_spec *s, const dsq_opt *o, const char *a, dsq_optval *v, char *msg, size_t n)
{
    const char *nm = dsq_opt_name(s, o->id);
    char range[96];
    if (o->range) snprintf(range, sizeof range, "%s", o->range);
    else if (o->type == DSQ_OPT_FLOAT) snprintf(range, sizeof range, "%g..%g", o->min, o->max);
    else snprintf(range, sizeof range, "%.0f..%.0f", o->min, o->max);
    switch (o->type) {
    case DSQ_OPT_INT: {
        int x;
        if (dsq_cli_parse_int(a, (long)o->min, (long)o->max, &x)) goto bad;
        v->num = x;
        break;
    }
    case DSQ_OPT_SIZE: {
        uint64_t x, hi = o->max > 0 ? (uint64_t)o->max : UINT64_MAX;
        if (o->max <= 0 && !o->range) snprintf(range, sizeof range, "%.0f or more (K/M/G suffixes)", o->min);
        if (dsq_cli_parse_u64(a, (uint64_t)o->min, hi, &x)) goto bad;
        v->u = x;
        v->num = (double)x;
        break;
    }
    case DSQ_OPT_FLOAT:
        if (dsq_cli_parse_float(a, o->min, o->max, &v->num)) goto bad;
        break;
    case DSQ_OPT_CHOICE: {
        const char *p = o->choices;
        int k = 0;
        size_t al = strlen(a);
        while (p) {
            const char *e = strchr(p, '|');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            if (l == al && !strncmp(p, a, l)) break;
            p = e ? e + 1 : NULL;
            k++;
        }
        if (!p) {
            snprintf(range, sizeof range, "%s", o->choices ? o->choices : "?");
            goto bad;
        }
        v->choice = k;
        break;
    }
    default: break;
    }
    return 0;
bad:
    snprintf(msg, n, "%s: expected %s, got '%s'", nm, range, a);
    return -1;
}

/* The rows' defaults into a->v; a default that is not a valid value is a
 * table error. Returns -1, or the exit status (message printed). */
static int fill_defaults(dsq_cli *c, const dsq_opt_spec *s, dsq_args *a)
{
    char msg[320];
    for (size_t i = 0; i < s->n; i++) {
        const dsq_opt *o = &s->opts[i];
        if (!o->def || o->type == DSQ_OPT_TEXT || find_id(s, o->id) != o) continue;
        dsq_optval *v = &a->v[o->id];
        v->str = o->def;
        if (o->type == DSQ_OPT_FLAG) snprintf(msg, sizeof msg, "%s: a flag has no default", dsq_opt_name(s, o->id));
        else if (!parse_value(s, o, o->def, v, msg, sizeof msg)) continue;
        dsq_cli_error(c, "option table: default of %s", msg);
        return DSQ_EXIT_ERROR;
    }
    return -1;
}

int dsq_opt_parse(dsq_cli *c, const dsq_opt_spec *s, int argc, char **argv, dsq_args *a)
{
    memset(a, 0, sizeof *a);
    struct option *lo = calloc(s->n + 1, sizeof *lo);
    char *sh = malloc(2 * s->n + 2);
    /* one argument can hold several options ("-qqv"): room for one per character */
    size_t cap = 1;
    for (int i = 1; i < argc; i++) cap += strlen(argv[i]);
    a->seq = calloc(cap, sizeof *a->seq);
    if (!lo || !sh || !a->seq) {
        free(lo);
        free(sh);
        return dsq_cli_fail(c, DSQ_ERR_NOMEM, NULL);
    }
    size_t nl = 0, ns = 0;
    sh[ns++] = ':';
    for (size_t i = 0; i < s->n; i++) {
        const dsq_opt *o = &s->opts[i];
        if (o->type != DSQ_OPT_TEXT && (o->id <= 0 || o->id >= DSQ_OPT_MAX_ID)) {   /* a table bug */
            free(lo);
            free(sh);
            dsq_args_release(a);
            dsq_cli_error(c, "option table: --%s has id %d outside 1..%d", o->name ? o->name : "?", o->id,
                          DSQ_OPT_MAX_ID - 1);
            return DSQ_EXIT_ERROR;
        }
        if (o->type == DSQ_OPT_TEXT || find_id(s, o->id) != o) continue; /* later rows: help only */
        if (o->name) lo[nl++] = (struct option){ o->name, takes_arg(o) ? required_argument : no_argument, NULL,
                                                 o->shrt ? o->shrt : LONG_BASE + o->id };
        if (o->shrt) {
            sh[ns++] = o->shrt;
            if (takes_arg(o)) sh[ns++] = ':';
        }
    }
    sh[ns] = 0;
    int rc = fill_defaults(c, s, a), ch, no_progress = 0;
    char msg[320];
    opterr = 0;
    optind = 0; /* glibc: start over (a test parses several command lines) */
    while (rc < 0 && (ch = getopt_long(argc, argv, sh, lo, NULL)) != -1) {
        if (ch == ':') {
            if (optopt > 0 && optopt < 256) rc = dsq_cli_usage_error(c, "option '-%c' needs a value", optopt);
            else rc = dsq_cli_usage_error(c, "option '%s' needs a value", argv[optind - 1]);
            break;
        }
        const dsq_opt *o = ch >= LONG_BASE ? find_id(s, ch - LONG_BASE) : ch != '?' ? find_short(s, ch) : NULL;
        if (!o) {
            if (optopt > 0 && optopt < 256) rc = dsq_cli_usage_error(c, "unknown option '-%c'", optopt);
            else rc = dsq_cli_usage_error(c, "unknown option '%s'", argv[optind - 1]);
            break;
        }
        if ((size_t)a->nseq + 1 >= cap) {   /* cannot happen: getopt returns at most one option per character */
            rc = dsq_cli_usage_error(c, "too many options");
            break;
        }
        dsq_optval *v = &a->v[o->id];
        v->count++;
        v->pos = ++a->nseq;
        v->str = optarg;
        a->seq[a->nseq - 1].id = o->id;
        a->seq[a->nseq - 1].arg = optarg;
        if (takes_arg(o) && parse_value(s, o, optarg, v, msg, sizeof msg)) rc = dsq_cli_usage_error(c, "%s", msg);
        if (rc >= 0) break;
        switch (o->id) {
        case DSQ_OPT_HELP: dsq_opt_help(s, stdout); rc = DSQ_EXIT_OK; break;
        case DSQ_OPT_VERSION: dsq_cli_version(c); rc = DSQ_EXIT_OK; break;
        case DSQ_OPT_QUIET: c->level--; break;
        case DSQ_OPT_VERBOSE: c->level++; break;
        case DSQ_OPT_THREADS: c->threads = (int)v->num; break;
        case DSQ_OPT_JSON: c->json = 1; break;
        case DSQ_OPT_NO_PROGRESS: no_progress = 1; break;
        default: break;
        }
    }
    free(lo);
    free(sh);
    if (rc >= 0) {
        dsq_args_release(a);
        return rc;
    }
    if (c->level < 0) c->level = 0;
    if (no_progress || c->level < 2) c->progress = 0;
    a->pos = argv + optind;
    a->npos = argc - optind;
    return -1;
}

void dsq_args_release(dsq_args *a)
{
    free(a->seq);
    a->seq = NULL;
}

int dsq_opt_check_cmd(dsq_cli *c, const dsq_opt_spec *s, const dsq_args *a, unsigned cmd_bit, const char *cmd)
{
    for (size_t i = 0; i < s->n; i++) {
        const dsq_opt *o = &s->opts[i];
        if (o->type == DSQ_OPT_TEXT || find_id(s, o->id) != o || !o->cmds) continue;
        if (a->v[o->id].count && !(o->cmds & cmd_bit))
            return dsq_cli_usage_error(c, "%s does not use %s", cmd, dsq_opt_name(s, o->id));
    }
    return -1;
}

int dsq_opt_check_needs(dsq_cli *c, const dsq_opt_spec *s, const dsq_args *a, unsigned have,
                        const dsq_opt_need *needs, size_t n_needs)
{
    for (size_t i = 0; i < s->n; i++) {
        const dsq_opt *o = &s->opts[i];
        if (o->type == DSQ_OPT_TEXT || find_id(s, o->id) != o || !a->v[o->id].count) continue;
        for (size_t k = 0; k < n_needs; k++)
            if ((o->needs & needs[k].bit) && !(have & needs[k].bit))
                return dsq_cli_usage_error(c, needs[k].msg, dsq_opt_name(s, o->id));
    }
    return -1;
}

int dsq_opt_check_lib(dsq_cli *c, const dsq_opt_spec *s, const dsq_opt_lib *lib, size_t n)
{
    char msg[320];
    for (size_t k = 0; k < n; k++) {
        const dsq_opt *o = find_id(s, lib[k].id);
        dsq_optval v = { 0 };
        if (!o || !o->def || parse_value(s, o, o->def, &v, msg, sizeof msg)) {
            dsq_cli_error(c, "option table: %s has no valid default", dsq_opt_name(s, lib[k].id));
            return DSQ_EXIT_ERROR;
        }
        double t = o->type == DSQ_OPT_CHOICE ? v.choice : v.num, l = lib[k].lib;
        /* float fields hold a default rounded to float */
        if (t != l && !(o->type == DSQ_OPT_FLOAT && fabs(t - l) <= 1e-6 * fabs(l))) {
            dsq_cli_error(c, "option table: %s defaults to %s, the library to %g", dsq_opt_name(s, o->id), o->def, l);
            return DSQ_EXIT_ERROR;
        }
    }
    return -1;
}

/* Help text s as it is, then " (default X)" after its last line, or on a
 * line of its own in the help column when the line would pass column 79. */
static void help_text(const dsq_opt_spec *s, const dsq_opt *o, size_t first_col, FILE *f)
{
    int col = s->width + 3;
    size_t last = 0, at = first_col;
    for (const char *p = o->help; *p;) {
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        fwrite(p, 1, l, f);
        last = l;
        if (!e || !e[1]) break;
        fputc('\n', f);
        p = e + 1;
        fprintf(f, "%*s", col, "");
        at = (size_t)col;
    }
    if (o->def) {
        if (at + last + strlen(" (default )") + strlen(o->def) > 79) fprintf(f, "\n%*s(default %s)", col, "", o->def);
        else fprintf(f, "%s(default %s)", last ? " " : "", o->def);
    }
    fputc('\n', f);
}

void dsq_opt_help(const dsq_opt_spec *s, FILE *f)
{
    for (size_t i = 0; i < s->n; i++) {
        const dsq_opt *o = &s->opts[i];
        if (o->type == DSQ_OPT_TEXT) {
            if (o->help) fputs(o->help, f);
            else if (s->hook) s->hook(f, o->id);
            continue;
        }
        if (!o->help) continue;
        char left[160];
        if (o->left) snprintf(left, sizeof left, "%s", o->left);
        else if (o->shrt && o->name)
            snprintf(left, sizeof left, "-%c, --%s%s%s", o->shrt, o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        else if (o->shrt)
            snprintf(left, sizeof left, "-%c%s%s", o->shrt, o->arg ? " " : "", o->arg ? o->arg : "");
        else
            snprintf(left, sizeof left, "%s--%s%s%s", s->align_long ? "    " : "", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        fprintf(f, "  %-*s ", s->width, left);
        size_t ll = strlen(left);
        help_text(s, o, 3 + (ll > (size_t)s->width ? ll : (size_t)s->width), f);
    }
}

/* cli.c - shared CLI behaviour (see cli.h). */
#include "cli.h"
#include "dsq_file.h"
#include "dsq_version.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile int dsq_cli_interrupted = 0;

/* The first signal only raises the flag: every long-running library call
 * polls it and unwinds through its own abort path, which removes its temp
 * files and keeps the resume state consistent. Unlinking temps here as well
 * raced with that path (a journal checkpoint being renamed into place lost
 * its temp file and the run reported an i/o error instead of "interrupted").
 * A second signal means the user will not wait: remove every temp, exit. */
static void on_signal(int sig)
{
    (void)sig;
    if (dsq_cli_interrupted) {
        dsq_tmpfiles_unlink_all();
        _exit(DSQ_EXIT_ERROR);
    }
    dsq_cli_interrupted = 1;
}

/* A CLI's results go to stdout; a write error there (a full disk, a closed
 * pipe reader with SIGPIPE ignored) must not end in exit 0. stdio reports
 * such errors only at flush time, so check once more at exit and turn a
 * successful status into 1. */
static const char *g_prog = "dsq";

static void check_stdout(void)
{
    errno = 0;
    int bad = fflush(stdout) != 0 || ferror(stdout);
    if (!bad) return;
    int e = errno;
    fprintf(stderr, "%s: error: cannot write standard output%s%s\n", g_prog, e ? ": " : "",
            e ? strerror(e) : "");
    _exit(DSQ_EXIT_ERROR);
}

void dsq_cli_init(dsq_cli *c, const char *prog)
{
    static int registered;
    g_prog = prog ? prog : "dsq";
    if (!registered) registered = atexit(check_stdout) == 0;
    memset(c, 0, sizeof *c);
    c->prog = prog;
    c->level = 2;
    c->progress = isatty(2);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* A closed terminal or ssh connection ends the run like SIGTERM: partial
     * output kept for --resume, temporaries removed. */
    sigaction(SIGHUP, &sa, NULL);
}

static void vmsg(const dsq_cli *c, const char *kind, const char *fmt, va_list ap)
{
    fprintf(stderr, "%s: %s", c->prog, kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void dsq_cli_error(const dsq_cli *c, const char *fmt, ...)
{
    if (c->level < 1) return;
    va_list ap;
    va_start(ap, fmt);
    vmsg(c, "error: ", fmt, ap);
    va_end(ap);
}

void dsq_cli_warn(const dsq_cli *c, const char *fmt, ...)
{
    if (c->level < 2) return;
    va_list ap;
    va_start(ap, fmt);
    vmsg(c, "warning: ", fmt, ap);
    va_end(ap);
}

void dsq_cli_info(const dsq_cli *c, int level, const char *fmt, ...)
{
    if (c->level < level) return;
    va_list ap;
    va_start(ap, fmt);
    vmsg(c, "", fmt, ap);
    va_end(ap);
}

int dsq_cli_fail(const dsq_cli *c, int status, const dsq_diag *d)
{
    char buf[2048];
    if (d && d->status < 0) dsq_diag_format(d, buf, sizeof buf);
    else snprintf(buf, sizeof buf, "%s", dsq_strerror(status));
    dsq_cli_error(c, "%s", buf);
    return DSQ_EXIT_ERROR;
}

int dsq_cli_usage_error(const dsq_cli *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg(c, "", fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try '%s --help' for more information.\n", c->prog);
    return DSQ_EXIT_USAGE;
}

void dsq_cli_version(const dsq_cli *c)
{
    printf("%s (dsq) %s\n", c->prog, DSQ_VERSION_STRING);
}

int dsq_cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!s || !*s || *s == '-') return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    uint64_t mult = 1;
    if (*end == 'K' || *end == 'k') { mult = 1ull << 10; end++; }
    else if (*end == 'M' || *end == 'm') { mult = 1ull << 20; end++; }
    else if (*end == 'G' || *end == 'g') { mult = 1ull << 30; end++; }
    if (*end) return -1;
    uint64_t r;
    if (__builtin_mul_overflow((uint64_t)v, mult, &r)) return -1;
    if (r < min || r > max) return -1;
    *out = r;
    return 0;
}

int dsq_cli_parse_int(const char *s, long min, long max, int *out)
{
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) return -1;
    *out = (int)v;
    return 0;
}

int dsq_cli_parse_float(const char *s, double min, double max, double *out)
{
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < min || v > max) return -1;
    *out = v;
    return 0;
}

void dsq_cli_json_print(json_object *o, int pretty)
{
    puts(json_object_to_json_string_ext(o, (pretty ? JSON_C_TO_STRING_PRETTY : JSON_C_TO_STRING_PLAIN) |
                                               JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

json_object *dsq_cli_json_tool(const dsq_cli *c, const char *status)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "tool", json_object_new_string(c->prog));
    json_object_object_add(o, "version", json_object_new_string(DSQ_VERSION_STRING));
    if (status) json_object_object_add(o, "status", json_object_new_string(status));
    return o;
}

json_object *dsq_cli_json_num(double v)
{
    return isfinite(v) ? json_object_new_double(v) : json_object_new_null();
}

double dsq_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t dsq_peak_rss(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    if (!fp) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, fp))
        if (!strncmp(line, "VmHWM:", 6)) { kb = strtoull(line + 6, NULL, 10); break; }
    fclose(fp);
    return kb * 1024;
}

void dsq_progress_begin(dsq_progress *p, const dsq_cli *c, const char *label,
                        const char *unit, uint64_t total)
{
    memset(p, 0, sizeof *p);
    p->cli = c;
    p->label = label;
    p->unit = unit;
    p->total = total;
    p->t0 = p->last = dsq_now();
}

static void fmt_hms(char *buf, size_t n, double s)
{
    if (!isfinite(s) || s < 0) { snprintf(buf, n, "--:--"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void dsq_progress_update(dsq_progress *p, uint64_t done)
{
    if (!p->cli || !p->cli->progress || p->cli->level < 2) return;
    double now = dsq_now();
    if (now - p->last < 0.16 && !(p->total && done >= p->total)) return;
    p->last = now;
    double el = now - p->t0, rate = el > 0 ? (double)done / el : 0;
    char eta[32];
    fmt_hms(eta, sizeof eta, (p->total && rate > 0) ? (double)(p->total - (done > p->total ? p->total : done)) / rate : -1);
    int bytes = p->unit && !strcmp(p->unit, "B");
    if (p->total) {
        double pct = 100.0 * (double)done / (double)p->total;
        if (bytes)
            fprintf(stderr, "\r%s: %5.1f%% %.2f/%.2f GB %.2f GB/s ETA %s   ", p->label, pct,
                    done / 1e9, p->total / 1e9, rate / 1e9, eta);
        else
            fprintf(stderr, "\r%s: %5.1f%% %llu/%llu %s %.1f/s ETA %s   ", p->label, pct,
                    (unsigned long long)done, (unsigned long long)p->total, p->unit ? p->unit : "",
                    rate, eta);
    } else {
        fprintf(stderr, "\r%s: %llu %s %.1f/s   ", p->label, (unsigned long long)done,
                p->unit ? p->unit : "", rate);
    }
    p->shown = 1;
}

void dsq_progress_end(dsq_progress *p)
{
    if (p->shown) fputs("\r\033[K", stderr);
    p->shown = 0;
}

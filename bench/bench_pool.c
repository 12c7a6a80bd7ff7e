/* bench_pool.c - what the pool's spin before sleeping buys and costs at
 * decode: one model, one pool, rounds that alternate the spin
 * settings so that every setting sees the same minutes of a shared machine.
 *
 *   build/bench/bench_pool [-t threads] [-n steps] [-r rounds] [-s US,US,...] MODEL
 *       defaults: -t 2 -n 8 -r 12 -s 0,50
 *
 * Each round decodes -n tokens per setting (dsq_pool_set_spin_us between
 * them; the KV cache is cut back to the prompt so every round decodes the
 * same positions). Per setting it prints the best and median wall ms per
 * token and the median process CPU ms per token (all threads): spinning
 * trades CPU time for the wake-up latency of workers that went to sleep
 * between jobs. Run it with -t above the core count to see the cost when
 * threads outnumber cores. Output: one line per setting and one stable
 *   result: spin_us=N threads=N wall_ms_best=X wall_ms_median=X cpu_ms_median=X
 * line each. Speed only: the values decoded are not checked here (tests do). */
#include "dsq_error.h"
#include "dsq_thread.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SETTINGS 8
#define MAX_ROUNDS 200

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    int threads = 2, steps = 8, rounds = 12, opt, ns = 0;
    long spin[MAX_SETTINGS];
    const char *slist = "0,50";
    while ((opt = getopt(argc, argv, "t:n:r:s:h")) != -1) {
        switch (opt) {
        case 't': threads = atoi(optarg); break;
        case 'n': steps = atoi(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        case 's': slist = optarg; break;
        default:
            fprintf(stderr, "usage: bench_pool [-t threads] [-n steps] [-r rounds] [-s US,US,...] MODEL\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    for (const char *p = slist; *p && ns < MAX_SETTINGS;) {
        char *end;
        long us = strtol(p, &end, 10);
        if (end == p || us < 0 || us > DSQ_POOL_SPIN_US_MAX) {
            fprintf(stderr, "bench_pool: -s: bad spin list '%s'\n", slist);
            return 2;
        }
        spin[ns++] = us;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            fprintf(stderr, "bench_pool: -s: bad spin list '%s'\n", slist);
            return 2;
        }
    }
    if (optind + 1 != argc || threads < 1 || steps < 1 || rounds < 1 || rounds > MAX_ROUNDS || ns < 1) {
        fprintf(stderr, "usage: bench_pool [-t threads] [-n steps] [-r rounds] [-s US,US,...] MODEL\n");
        return 2;
    }
    dsq_pool *pool = dsq_pool_create(threads);
    if (!pool) { fprintf(stderr, "bench_pool: cannot create the pool\n"); return 1; }
    dsq_model_opts o;
    dsq_model_opts_default(&o);
    o.pool = pool;
    dsq_model *m;
    dsq_diag d;
    dsq_diag_clear(&d);
    if (dsq_model_open(&m, argv[optind], &o, &d) != 0) {
        char buf[1200];
        dsq_diag_format(&d, buf, sizeof buf);
        fprintf(stderr, "bench_pool: %s: %s\n", argv[optind], buf);
        return 1;
    }
    const int V = (int)dsq_model_get_config(m)->vocab_size, P = 4;
    int32_t prompt[4] = { 13 % V, 7932 % V, 15851 % V, 23770 % V };
    float *lg = malloc((size_t)V * sizeof *lg);
    dsq_state *s = dsq_state_create(m, 1, P + steps + 8);
    static double wall[MAX_SETTINGS][MAX_ROUNDS], cpu[MAX_SETTINGS][MAX_ROUNDS];
    int rc = (!lg || !s) ? -1 : dsq_forward(m, s, 0, prompt, P, lg, DSQ_FWD_LAST_LOGITS, &d);
    for (int r = 0; r < rounds && rc == 0; r++)
        for (int k = 0; k < ns && rc == 0; k++) {
            /* the first setting of a round goes first in even rounds, last in odd */
            const int i = r % 2 ? ns - 1 - k : k;
            dsq_pool_set_spin_us(pool, spin[i]);
            dsq_state_truncate(s, 0, P);
            double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
            for (int j = 0; j < steps && rc == 0; j++) {
                int32_t tok = (int32_t)((j * 7919 + 101) % V);
                rc = dsq_forward(m, s, 0, &tok, 1, lg, 0, &d);
            }
            wall[i][r] = 1e3 * (clock_s(CLOCK_MONOTONIC) - w0) / steps;
            cpu[i][r] = 1e3 * (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / steps;
        }
    if (rc != 0) {
        fprintf(stderr, "bench_pool: forward failed: %s\n", d.msg);
        return 1;
    }
    char lbuf[64] = "?";
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (!fgets(lbuf, sizeof lbuf, la)) strcpy(lbuf, "?");
        fclose(la);
        lbuf[strcspn(lbuf, "\n")] = 0;
    }
    printf("bench_pool: %d thread(s) on %d core(s), %d rounds x %d decode steps per setting, load average at end: %s\n",
           threads, dsq_cpu_count(), rounds, steps, lbuf);
    for (int i = 0; i < ns; i++) {
        double best = wall[i][0];
        for (int r = 1; r < rounds; r++) best = wall[i][r] < best ? wall[i][r] : best;
        double wm = median(wall[i], rounds), cm = median(cpu[i], rounds);
        printf("spin %6ld us: wall ms/token best %7.3f median %7.3f; CPU ms/token median %7.3f (%.2f cores busy)\n",
               spin[i], best, wm, cm, cm / wm);
        printf("result: spin_us=%ld threads=%d wall_ms_best=%.3f wall_ms_median=%.3f cpu_ms_median=%.3f\n", spin[i],
               threads, best, wm, cm);
    }
    free(lg);
    dsq_state_free(s);
    dsq_model_free(m);
    dsq_pool_free(pool);
    return 0;
}

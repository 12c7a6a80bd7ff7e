/* cli_opt.h - one declarative option table per program.
 *
 * A program lists its options once: name, short letter, argument type and
 * bounds, which commands (or conditions) use it, and its help text. From
 * that table dsq_opt_parse() parses the command line, checks every value
 * against its bounds with one message form, refuses options the command
 * does not use (exit 2, never silently ignored), and dsq_opt_help() prints
 * -h (which docs/gen_man.sh turns into the man page). A row's default is
 * text parsed and checked like a given value (a default out of bounds is a
 * table error, exit 1), filled in before the command line and shown by -h,
 * so help and behaviour cannot drift. Adding an option is one row, plus the
 * line that reads its value.
 *
 * The options every program shares (-h, -V, -q, -v, -T, --json,
 * --no-progress) have fixed ids below and are acted on by the parser: they
 * fill the dsq_cli (level, threads, json, progress). */
#ifndef DSQ_CLI_OPT_H
#define DSQ_CLI_OPT_H

#include "cli.h"

#include <stdint.h>
#include <stdio.h>

enum dsq_opt_type {
    DSQ_OPT_TEXT = 0, /* not an option: help text printed as it is */
    DSQ_OPT_FLAG,     /* no argument */
    DSQ_OPT_STR,      /* any string */
    DSQ_OPT_INT,      /* integer in [min, max] */
    DSQ_OPT_SIZE,     /* unsigned integer with K/M/G (1024-based), in [min, max] */
    DSQ_OPT_FLOAT,    /* finite number in [min, max] */
    DSQ_OPT_CHOICE,   /* one of choices ("u16|topk"); the index is the value */
};

/* Shared options: the parser handles them. Program ids start at DSQ_OPT_FIRST. */
enum {
    DSQ_OPT_HELP = 1, DSQ_OPT_VERSION, DSQ_OPT_QUIET, DSQ_OPT_VERBOSE, DSQ_OPT_THREADS, DSQ_OPT_JSON,
    DSQ_OPT_NO_PROGRESS, DSQ_OPT_FIRST = 16, DSQ_OPT_MAX_ID = 96
};

/* -T, the same row in every program: 0 = all cores */
#define DSQ_OPT_THREADS_MAX 4096
#define DSQ_OPT_THREADS_ROW(help_) \
    { DSQ_OPT_THREADS, DSQ_OPT_INT, "threads", 'T', "N", 0, DSQ_OPT_THREADS_MAX, "0..4096 (0 = all cores)", .help = help_ }

typedef struct dsq_opt {
    int id;               /* program enum (DSQ_OPT_TEXT rows: 0, or an id passed to the help hook) */
    int type;
    const char *name;     /* long name without "--"; NULL for text rows */
    char shrt;            /* short letter, 0 for none */
    const char *arg;      /* argument name in -h ("N", "SIZE") */
    double min, max;      /* INT / SIZE / FLOAT bounds */
    const char *range;    /* bounds as messages show them (default "min..max") */
    const char *choices;  /* CHOICE: "a|b|c" */
    unsigned cmds;        /* commands that use it, one bit per command; 0: every command */
    unsigned needs;       /* conditions it needs (dsq_opt_need bits); 0: none */
    const char *left;     /* -h left column when not the default "-s, --name ARG" */
    const char *help;     /* -h text; '\n' continues in the help column; NULL: not shown.
                           * TEXT rows: printed verbatim (NULL with an id: the help hook) */
    const char *def;      /* default as on the command line ("8", "8M", "f32"), parsed and
                           * checked as a given value and shown by -h; NULL: none (0, NULL) */
} dsq_opt;

/* A numeric macro's value as a default: .def = DSQ_OPT_DEF(DSQ_GSM8K_SHOTS)
 * (one literal for the library and the table). */
#define DSQ_OPT_DEF(x)  DSQ_OPT_DEF_(x)
#define DSQ_OPT_DEF_(x) #x

/* A condition some options need, and the message when it is not met
 * ("%s" is the option's name). Checked in table order, per option. */
typedef struct dsq_opt_need {
    unsigned bit;
    const char *msg;
} dsq_opt_need;

typedef struct dsq_opt_spec {
    const dsq_opt *opts;
    size_t n;
    int width;            /* -h: left column width */
    int align_long;       /* -h: long-only options indented as if they had "-s, " */
    void (*hook)(FILE *f, int id); /* -h: TEXT rows with an id and no text */
} dsq_opt_spec;

/* An option's value: the last one given, else the row's default (count 0). */
typedef struct dsq_optval {
    int count;            /* times given */
    int pos;              /* order of the last occurrence (1, 2, ...) */
    const char *str;      /* the last argument as given, else the default text */
    double num;           /* INT / SIZE / FLOAT value */
    uint64_t u;           /* SIZE value, exact */
    int choice;           /* CHOICE index */
} dsq_optval;

typedef struct dsq_args {
    dsq_optval v[DSQ_OPT_MAX_ID];
    char **pos;           /* positional arguments */
    int npos;
    struct { int id; const char *arg; } *seq; /* every occurrence in order */
    int nseq;
} dsq_args;

/* Parse argv into a (call dsq_args_release after), the rows' defaults
 * first. Returns -1 to go on, or the exit status when the program should
 * stop: 0 after -h / -V, 2 after a usage error, 1 on a table error (a bad
 * id or default; message printed). */
int dsq_opt_parse(dsq_cli *c, const dsq_opt_spec *s, int argc, char **argv, dsq_args *a);
void dsq_args_release(dsq_args *a);

static inline int dsq_opt_given(const dsq_args *a, int id) { return a->v[id].count > 0; }
/* The value: the last one given, else the row's default, else 0 / NULL. */
static inline const char *dsq_opt_str(const dsq_args *a, int id) { return a->v[id].str; }
static inline int dsq_opt_int(const dsq_args *a, int id) { return (int)a->v[id].num; }
static inline uint64_t dsq_opt_u64(const dsq_args *a, int id) { return a->v[id].u; }
static inline double dsq_opt_float(const dsq_args *a, int id) { return a->v[id].num; }
static inline int dsq_opt_choice(const dsq_args *a, int id) { return a->v[id].choice; }

/* The name of option id as messages show it ("--ctx", "-T"). */
const char *dsq_opt_name(const dsq_opt_spec *s, int id);

/* Refuse options command cmd_bit does not use: "<cmd> does not use --x".
 * Returns -1 when all are used, else the usage exit status (printed). */
int dsq_opt_check_cmd(dsq_cli *c, const dsq_opt_spec *s, const dsq_args *a, unsigned cmd_bit, const char *cmd);

/* Refuse options whose conditions are not all in `have`: the first given
 * option (table order) with a missing condition gets the message of its
 * first missing one (needs order). -1: all met, else the usage status. */
int dsq_opt_check_needs(dsq_cli *c, const dsq_opt_spec *s, const dsq_args *a, unsigned have,
                        const dsq_opt_need *needs, size_t n_needs);

/* A program whose library has its own default for an option (a *_init()
 * or *_default() function) checks that the table's default is that value,
 * lib (a CHOICE: the index), so -h never shows one the library does not
 * use. -1: the same; else the message is printed and the status is 1. */
typedef struct dsq_opt_lib {
    int id;
    double lib;
} dsq_opt_lib;
int dsq_opt_check_lib(dsq_cli *c, const dsq_opt_spec *s, const dsq_opt_lib *lib, size_t n);

/* -h: the table's rows on f, each default as "(default X)" after its text. */
void dsq_opt_help(const dsq_opt_spec *s, FILE *f);

#endif

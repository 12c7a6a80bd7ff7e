/* server_conn.c - ds-serve's connection guard: no set of idle or trickling
 * clients can hold every connection.
 *
 * libmicrohttpd closes a connection that sends nothing for --idle-timeout
 * seconds, but a client that trickles a byte now and then never goes idle.
 * So each connection is tracked here from accept to close:
 *   reading   waiting for a request or reading one (headers, body), since
 *             the accept or the end of the previous answer
 *   working   the server is answering (generation, a stream)
 * A watcher thread shuts down every connection that has been reading for
 * longer than --read-timeout (its whole request must arrive by then), and
 * a new connection that finds --max-connections taken evicts the one that
 * has been reading longest (an idle keep-alive connection first of all,
 * as it is the oldest); only when every connection is working is the new
 * one refused. libmicrohttpd's own limit is set a little above ours so the
 * evicted connections have room to close, and its per-address limit
 * (--max-connections-per-client) keeps one client from taking them all.
 *
 * Eviction is shutdown(2) on the socket: the connection's thread wakes on
 * the end of stream and closes it through libmicrohttpd as for any client
 * that hangs up. The socket stays open until the close notification, which
 * takes the table's lock, so a shutdown never reaches a reused descriptor. */
#include "server_conn.h"

#include <stdlib.h>
#include <time.h>

enum { CONN_READING = 0, CONN_WORKING = 1 };

typedef struct srv_conn {
    struct srv_conn *prev, *next;
    dsq_server *s;
    int fd;
    int state;
    int evicted;               /* shut down, waiting for its close */
    double since;              /* monotonic seconds: the current phase began */
} srv_conn;

struct srv_conns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int started, quit;
    srv_conn *head;
    int n, n_evicted;
    int max;
    double read_timeout;
};

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void evict_locked(srv_conns *g, srv_conn *x)
{
    shutdown(x->fd, SHUT_RDWR);
    x->evicted = 1;
    g->n_evicted++;
}

static void *watch(void *arg)
{
    srv_conns *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->quit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        double now = mono();
        for (srv_conn *x = g->head; x; x = x->next)
            if (x->state == CONN_READING && !x->evicted && now - x->since > g->read_timeout) evict_locked(g, x);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int srv_conns_start(dsq_server *s, dsq_diag *d)
{
    srv_conns *g = calloc(1, sizeof *g);
    if (!g) return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->max = s->o.max_connections;
    g->read_timeout = s->o.read_timeout;
    s->conns = g;
    if (pthread_create(&g->th, NULL, watch, g) != 0)
        return dsq_fail(d, DSQ_ERR_NOMEM, NULL, NULL, -1, "cannot start the connection watcher thread");
    g->started = 1;
    return DSQ_OK;
}

/* After the daemon has stopped: every connection is closed by then. */
void srv_conns_stop(dsq_server *s)
{
    srv_conns *g = s->conns;
    if (!g) return;
    if (g->started) {
        pthread_mutex_lock(&g->mu);
        g->quit = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->th, NULL);
    }
    while (g->head) {
        srv_conn *x = g->head;
        g->head = x->next;
        free(x);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
    s->conns = NULL;
}

/* libmicrohttpd's limit: ours plus room for evicted connections to close. */
unsigned srv_conns_hard_limit(const dsq_server *s)
{
    return (unsigned)s->o.max_connections + 16u;
}

enum MHD_Result srv_conns_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    dsq_server *s = cls;
    srv_conns *g = s->conns;
    (void)addr;
    (void)addrlen;
    enum MHD_Result ok = MHD_YES;
    pthread_mutex_lock(&g->mu);
    if (g->n - g->n_evicted >= g->max) {
        srv_conn *old = NULL;
        for (srv_conn *x = g->head; x; x = x->next)
            if (x->state == CONN_READING && !x->evicted && (!old || x->since < old->since)) old = x;
        if (old) evict_locked(g, old);
        else ok = MHD_NO; /* every connection is being answered */
    }
    if ((unsigned)g->n >= srv_conns_hard_limit(s)) ok = MHD_NO;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe)
{
    dsq_server *s = cls;
    srv_conns *g = s->conns;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        srv_conn *x = calloc(1, sizeof *x);
        *socket_context = x;
        if (!x) return;
        x->s = s;
        x->fd = ci ? ci->connect_fd : -1;
        x->since = mono();
        pthread_mutex_lock(&g->mu);
        x->next = g->head;
        if (g->head) g->head->prev = x;
        g->head = x;
        g->n++;
        if (x->fd < 0) evict_locked(g, x); /* cannot be watched: never counted as live */
        pthread_mutex_unlock(&g->mu);
        return;
    }
    srv_conn *x = *socket_context;
    if (!x) return;
    pthread_mutex_lock(&g->mu);
    if (x->prev) x->prev->next = x->next;
    else g->head = x->next;
    if (x->next) x->next->prev = x->prev;
    g->n--;
    if (x->evicted) g->n_evicted--;
    pthread_mutex_unlock(&g->mu);
    free(x);
    *socket_context = NULL;
}

static srv_conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void srv_conn_set_working(struct MHD_Connection *c, int working)
{
    srv_conn *x = conn_of(c);
    if (!x) return;
    srv_conns *g = x->s->conns;
    pthread_mutex_lock(&g->mu);
    x->state = working ? CONN_WORKING : CONN_READING;
    x->since = mono();
    pthread_mutex_unlock(&g->mu);
}

dsq_server *srv_conn_server(struct MHD_Connection *c)
{
    srv_conn *x = conn_of(c);
    return x ? x->s : NULL;
}

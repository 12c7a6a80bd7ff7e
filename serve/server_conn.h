/* server_conn.h - the connection guard (server_conn.c) as server_http.c
 * wires it into libmicrohttpd. */
#ifndef DSQ_SERVER_CONN_H
#define DSQ_SERVER_CONN_H

#include "server_internal.h"

#include <microhttpd.h>
#include <sys/socket.h>

typedef struct srv_conns srv_conns;

int  srv_conns_start(dsq_server *s, dsq_diag *d);
void srv_conns_stop(dsq_server *s);               /* after the daemon stopped */
unsigned srv_conns_hard_limit(const dsq_server *s); /* MHD_OPTION_CONNECTION_LIMIT */
/* The accept policy and the connection notifier (cls: the server). */
enum MHD_Result srv_conns_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe);
/* The server answers (1) or waits for the client's next request (0). */
void srv_conn_set_working(struct MHD_Connection *c, int working);
/* The server a connection belongs to (NULL when it is not tracked). */
dsq_server *srv_conn_server(struct MHD_Connection *c);

#endif

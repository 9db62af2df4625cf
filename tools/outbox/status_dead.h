/* The status page's dead letters (metrics.c serves them under /routes/):
 *
 *   GET  /routes/ROUTE/dead[?after=ROW_ID]   a page of the route's dead events
 *   POST /routes/ROUTE/dead/replay           csrf, event_id: replay that event
 *   POST /routes/ROUTE/dead/replay-all       csrf, confirm=yes: replay them all
 *
 * ROUTE is percent-encoded; a route this relay does not serve is a 404.
 * The actions exist only when the endpoint has both TLS and a user (else
 * the pages are read-only and a POST is a 403), take a form only from the
 * endpoint's own pages (csrf.h), go to the relay's log with the user, and
 * answer with a 303 back to the page. Reads and replays go through store
 * handles of these pages' own, one per route, each under a mutex. */
#ifndef OUTBOX_CLI_STATUS_DEAD_H
#define OUTBOX_CLI_STATUS_DEAD_H

#include "metrics.h"

/* What outbox relay gives the metrics endpoint (cli_metrics_opts.pages). */
extern const cli_metrics_pages_t cli_dead_pages;

#endif

/* pg_stage: change a business row and stage the event that describes it in
 * ONE PostgreSQL transaction, on the application's own libpq connection.
 *
 *   pg_stage URI ORDER_ID [--relation NAME] [--abort]
 *
 * Marks order ORDER_ID as paid in the table `orders` (id bigint primary
 * key, status text) and stages an "order.paid" event on the route "orders",
 * both between one BEGIN and one COMMIT on the program's PGconn. Either
 * both are stored or neither: with --abort the program rolls back instead
 * of committing, and no trace of either change remains.
 *
 * URI is a libpq URI such as postgresql://app@db.example/shop; the outbox
 * table is NAME (default "outbox", found through search_path).
 *
 * Build: cc pg_stage.c $(pkg-config --cflags --libs liboutbox libpq)
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <outbox/outbox.h>

static int fail(PGconn *conn, const char *what, const char *why)
{
    fprintf(stderr, "pg_stage: %s: %s\n", what, why);
    /* Whatever happened, nothing of this transaction may survive. */
    PQclear(PQexec(conn, "ROLLBACK"));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: pg_stage URI ORDER_ID [--relation NAME] [--abort]\n");
        return 2;
    }
    const char *uri = argv[1], *order_id = argv[2], *relation = "outbox";
    int abort_at_end = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--abort") == 0)
            abort_at_end = 1;
        else if (strcmp(argv[i], "--relation") == 0 && i + 1 < argc)
            relation = argv[++i];
        else {
            fprintf(stderr, "pg_stage: unknown argument %s\n", argv[i]);
            return 2;
        }
    }

    /* The application's own connection: its transaction is the one that
     * counts. */
    PGconn *conn = PQconnectdb(uri);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "pg_stage: %s", PQerrorMessage(conn));
        PQfinish(conn);
        return 1;
    }

    /* The store handle: it finds the outbox table and its optional columns.
     * It keeps a connection of its own, but staging below runs on conn. */
    outbox_store_options_t opts = {.struct_size = sizeof opts, .relation = relation};
    outbox_store_t *store = NULL;
    outbox_diag_t diag = {0};
    if (outbox_store_open(uri, &opts, &store, &diag) != OUTBOX_OK) {
        fprintf(stderr, "pg_stage: opening the outbox: %s\n", diag.message);
        PQfinish(conn);
        return 1;
    }

    int rc = 0;
    PGresult *res = PQexec(conn, "BEGIN");
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        rc = fail(conn, "BEGIN", PQerrorMessage(conn));
    PQclear(res);

    /* 1. The business change. */
    if (rc == 0) {
        const char *params[1] = {order_id};
        res = PQexecParams(conn, "UPDATE orders SET status = 'paid' WHERE id = $1::bigint", 1, NULL,
                           params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            rc = fail(conn, "updating the order", PQerrorMessage(conn));
        else if (strcmp(PQcmdTuples(res), "1") != 0)
            rc = fail(conn, "updating the order", "no such order");
        PQclear(res);
    }

    /* 2. The event, in the same transaction: pass conn as native_tx. The
     * order id is the ordering key, so one order's events stay in order. */
    if (rc == 0) {
        char payload[128];
        snprintf(payload, sizeof payload, "{\"order_id\": %lld, \"status\": \"paid\"}",
                 atoll(order_id));
        outbox_event_t ev = {.event_type = "order.paid", .payload = payload, .ordering_key = order_id};
        size_t staged = 0;
        if (outbox_store_stage(store, conn, "orders", &ev, 1, &staged) != OUTBOX_OK)
            rc = fail(conn, "staging the event", outbox_store_message(store));
        else
            printf("staged %zu event(s) for order %s\n", staged, order_id);
    }

    /* 3. One commit makes both durable; a rollback discards both. */
    if (rc == 0) {
        res = PQexec(conn, abort_at_end ? "ROLLBACK" : "COMMIT");
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            rc = fail(conn, abort_at_end ? "ROLLBACK" : "COMMIT", PQerrorMessage(conn));
        else
            printf("%s\n", abort_at_end ? "rolled back: neither change was kept" : "committed");
        PQclear(res);
    }

    outbox_store_close(store);
    PQfinish(conn);
    return rc;
}

/* The sink handle's ABI 1.2 calls: destinations and reading back, on an
 * in-process sink that keeps what it was given, and on one built for ABI
 * 1.1 whose vtable ends before those entries. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <outbox/driver.h>
#include <outbox/outbox.h>

/* ------------------------------------------------ a sink with a memory */

#define KEPT_MAX 8

static struct {
    char destination[32];
    char payload[KEPT_MAX][64];
    size_t n;
    int created, dropped, readers_open;
} mem;

typedef struct mem_reader {
    size_t next;
    outbox_header_t h[1];
} mem_reader_t;

static const outbox_host_t *host;

static int m_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)d;
    host = h;
    return OUTBOX_OK;
}

static int m_open(const outbox_sink_open_t *p, void **h, outbox_diag_t *d)
{
    (void)p, (void)d;
    *h = &mem;
    return OUTBOX_OK;
}

static void m_close(void *h)
{
    (void)h;
}

static int m_publish(void *h, const outbox_message_t *msgs, size_t n, outbox_publish_result_t *res,
                     outbox_diag_t *d)
{
    (void)h, (void)d;
    for (size_t i = 0; i < n && mem.n < KEPT_MAX; i++) {
        snprintf(mem.payload[mem.n++], sizeof mem.payload[0], "%.*s", (int)msgs[i].payload_len,
                 msgs[i].payload);
        res[i].status = OUTBOX_PUBLISH_OK;
    }
    return OUTBOX_OK;
}

static int m_create(void *h, const char *dest, outbox_diag_t *d)
{
    (void)h;
    if (strcmp(dest, "refused") == 0)
        return host->error(d, OUTBOX_EPERMANENT, "the broker refuses %s", dest);
    if (strcmp(dest, "silent") == 0)
        return OUTBOX_EPERMANENT;
    snprintf(mem.destination, sizeof mem.destination, "%s", dest);
    mem.created++;
    return OUTBOX_OK;
}

static int m_drop(void *h, const char *dest, outbox_diag_t *d)
{
    (void)h, (void)dest, (void)d;
    mem.dropped++;
    return OUTBOX_OK;
}

static int m_reader_open(void *h, const char *dest, void **reader, outbox_diag_t *d)
{
    (void)h;
    if (strcmp(dest, mem.destination) != 0)
        return host->error(d, OUTBOX_ENOTFOUND, "no destination %s", dest);
    mem_reader_t *r = host->alloc(sizeof *r);
    if (r == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory");
    r->next = 0;
    mem.readers_open++;
    *reader = r;
    return OUTBOX_OK;
}

static int m_reader_next(void *reader, int timeout_ms, outbox_received_t *out, outbox_diag_t *d)
{
    (void)timeout_ms, (void)d;
    mem_reader_t *r = reader;
    if (r->next >= mem.n)
        return OUTBOX_ENOTFOUND;
    r->h[0] = (outbox_header_t){"id", "x"};
    out->destination = mem.destination;
    out->payload = mem.payload[r->next];
    out->payload_len = strlen(mem.payload[r->next]);
    out->headers = r->h;
    out->n_headers = 1;
    r->next++;
    return OUTBOX_OK;
}

static void m_reader_close(void *reader)
{
    mem.readers_open--;
    host->free(reader);
}

static const outbox_sink_vtable_t vt12 = {
    .struct_size = sizeof vt12, .open = m_open, .close = m_close, .publish = m_publish,
    .destination_create = m_create, .destination_drop = m_drop, .reader_open = m_reader_open,
    .reader_next = m_reader_next, .reader_close = m_reader_close};

/* ABI 1.1: the vtable stops after publish; what follows it in memory is
 * not the driver's, and must never be called. */
static int never_dest(void *h, const char *dest, outbox_diag_t *d)
{
    (void)h, (void)dest, (void)d;
    abort();
}
static int never_open(void *h, const char *dest, void **r, outbox_diag_t *d)
{
    (void)h, (void)dest, (void)r, (void)d;
    abort();
}
static const outbox_sink_vtable_t vt11 = {
    .struct_size = offsetof(outbox_sink_vtable_t, destination_create), .open = m_open,
    .close = m_close, .publish = m_publish, .destination_create = never_dest,
    .destination_drop = never_dest, .reader_open = never_open};

static const char *const schemes12[] = {"mem12", NULL};
static const char *const schemes11[] = {"mem11", NULL};
static const outbox_driver_t drv12 = {
    .struct_size = sizeof drv12, .abi_major = OUTBOX_ABI_MAJOR, .abi_minor = 2,
    .kind = OUTBOX_DRIVER_SINK, .name = "mem12", .version = "1", .schemes = schemes12,
    .init = m_init, .sink = &vt12};
static const outbox_driver_t drv11 = {
    .struct_size = sizeof drv11, .abi_major = OUTBOX_ABI_MAJOR, .abi_minor = 1,
    .kind = OUTBOX_DRIVER_SINK, .name = "mem11", .version = "1", .schemes = schemes11,
    .init = m_init, .sink = &vt11};

static outbox_sink_t *open_sink(const char *uri)
{
    static int registered;
    outbox_diag_t d = {0};
    if (!registered) {
        ck_assert_int_eq(outbox_driver_register(&drv12, &d), OUTBOX_OK);
        ck_assert_int_eq(outbox_driver_register(&drv11, &d), OUTBOX_OK);
        registered = 1;
    }
    memset(&mem, 0, sizeof mem);
    outbox_sink_t *k = NULL;
    ck_assert_msg(outbox_sink_open(uri, NULL, &k, &d) == OUTBOX_OK, "%s", d.message);
    return k;
}

static void publish(outbox_sink_t *k, const char *payload)
{
    outbox_message_t m = {.route = "r", .destination = "d", .key = "k", .event_id = "e",
                          .payload = payload, .payload_len = strlen(payload)};
    outbox_publish_result_t res;
    ck_assert_int_eq(outbox_sink_publish(k, &m, 1, &res), OUTBOX_OK);
    ck_assert_int_eq(res.status, OUTBOX_PUBLISH_OK);
}

START_TEST(driver_is_reported)
{
    outbox_sink_t *k = open_sink("mem12:");
    ck_assert_ptr_eq(outbox_sink_driver(k), &drv12);
    ck_assert_ptr_null(outbox_sink_driver(NULL));
    outbox_sink_close(k);
}
END_TEST

START_TEST(destinations_reach_the_driver)
{
    outbox_sink_t *k = open_sink("mem12:");
    ck_assert_int_eq(outbox_sink_destination_create(k, "topic.a"), OUTBOX_OK);
    ck_assert_str_eq(mem.destination, "topic.a");
    ck_assert_int_eq(outbox_sink_destination_drop(k, "topic.a"), OUTBOX_OK);
    ck_assert_int_eq(mem.created, 1);
    ck_assert_int_eq(mem.dropped, 1);
    ck_assert_int_eq(outbox_sink_destination_create(k, "refused"), OUTBOX_EPERMANENT);
    ck_assert_str_eq(outbox_sink_message(k), "the broker refuses refused");
    /* A driver that says nothing still gets a message. */
    ck_assert_int_eq(outbox_sink_destination_create(k, "silent"), OUTBOX_EPERMANENT);
    ck_assert_msg(strstr(outbox_sink_message(k), "creating silent") != NULL, "%s",
                  outbox_sink_message(k));
    ck_assert_int_eq(outbox_sink_destination_create(k, ""), OUTBOX_EINVAL);
    ck_assert_int_eq(outbox_sink_destination_drop(k, NULL), OUTBOX_EINVAL);
    ck_assert_int_eq(outbox_sink_destination_create(NULL, "x"), OUTBOX_EINVAL);
    ck_assert_int_eq(mem.created, 1);
    outbox_sink_close(k);
}
END_TEST

START_TEST(reader_reads_what_was_published)
{
    outbox_sink_t *k = open_sink("mem12:");
    ck_assert_int_eq(outbox_sink_destination_create(k, "d"), OUTBOX_OK);
    publish(k, "{\"a\":1}");
    publish(k, "[2]");
    outbox_sink_reader_t *r = NULL;
    ck_assert_int_eq(outbox_sink_reader_open(k, "d", &r), OUTBOX_OK);
    outbox_received_t m;
    memset(&m, 0xff, sizeof m); /* the call sets every member it does not fill */
    ck_assert_int_eq(outbox_sink_reader_read(r, 10000, &m), OUTBOX_OK);
    ck_assert_uint_eq(m.struct_size, sizeof m);
    ck_assert_ptr_null(m.key);
    ck_assert_ptr_null(m.dedupe_id);
    ck_assert_uint_eq(m.payload_len, 7);
    ck_assert_int_eq(memcmp(m.payload, "{\"a\":1}", 7), 0);
    ck_assert_str_eq(m.headers[0].name, "id");
    ck_assert_int_eq(outbox_sink_reader_read(r, 10000, &m), OUTBOX_OK);
    ck_assert_int_eq(memcmp(m.payload, "[2]", 3), 0);
    ck_assert_int_eq(outbox_sink_reader_read(r, 10000, &m), OUTBOX_ENOTFOUND);
    ck_assert_int_eq(outbox_sink_reader_read(r, -5000, &m), OUTBOX_ENOTFOUND);
    ck_assert_int_eq(outbox_sink_reader_read(NULL, 10000, &m), OUTBOX_EINVAL);
    ck_assert_int_eq(outbox_sink_reader_read(r, 10000, NULL), OUTBOX_EINVAL);
    outbox_sink_reader_close(r);
    ck_assert_int_eq(mem.readers_open, 0);
    outbox_sink_reader_close(NULL);

    ck_assert_int_eq(outbox_sink_reader_open(k, "elsewhere", &r), OUTBOX_ENOTFOUND);
    ck_assert_ptr_null(r);
    ck_assert_str_eq(outbox_sink_message(k), "no destination elsewhere");
    ck_assert_int_eq(outbox_sink_reader_open(k, "", &r), OUTBOX_EINVAL);
    ck_assert_int_eq(outbox_sink_reader_open(k, "d", NULL), OUTBOX_EINVAL);
    outbox_sink_close(k);
}
END_TEST

START_TEST(abi_1_1_sink_has_none_of_it)
{
    outbox_sink_t *k = open_sink("mem11:");
    ck_assert_int_eq(outbox_sink_destination_create(k, "d"), OUTBOX_ENOTSUP);
    ck_assert_str_eq(outbox_sink_message(k), "sink mem11 has no destination_create");
    ck_assert_int_eq(outbox_sink_destination_drop(k, "d"), OUTBOX_ENOTSUP);
    outbox_sink_reader_t *r = NULL;
    ck_assert_int_eq(outbox_sink_reader_open(k, "d", &r), OUTBOX_ENOTSUP);
    ck_assert_str_eq(outbox_sink_message(k), "sink mem11 has no reader");
    ck_assert_ptr_null(r);
    publish(k, "1");
    outbox_sink_close(k);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sink_api");
    TCase *tc = tcase_create("sink_api");
    tcase_add_test(tc, driver_is_reported);
    tcase_add_test(tc, destinations_reach_the_driver);
    tcase_add_test(tc, reader_reads_what_was_published);
    tcase_add_test(tc, abi_1_1_sink_has_none_of_it);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

/* The driver kit (outbox/kit.h): buffers, identifiers, UTF-8, JSON
 * strings and URI parameters, as the drivers use them. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/kit.h"
#include "outbox_int.h"

/* A host whose allocator fails after a given number of calls. */
static int allocs_left = -1;
static void *counting_realloc(void *p, size_t n)
{
    if (allocs_left == 0)
        return NULL;
    if (allocs_left > 0)
        allocs_left--;
    return realloc(p, n);
}
static outbox_host_t failing_host;

static const outbox_host_t *host(void)
{
    return outbox_host_table();
}

START_TEST(buf_appends_and_terminates)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, host());
    outbox_kit_buf_puts(&b, "SELECT ");
    outbox_kit_buf_printf(&b, "%d, '%s'", 42, "x");
    outbox_kit_buf_putc(&b, ';');
    ck_assert(!b.failed);
    ck_assert_str_eq(b.data, "SELECT 42, 'x';");
    ck_assert_uint_eq(b.len, strlen("SELECT 42, 'x';"));
    /* A long formatted piece takes the second vsnprintf path. */
    char big[1000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    outbox_kit_buf_reset(&b);
    outbox_kit_buf_printf(&b, "<%s>", big);
    ck_assert_uint_eq(b.len, sizeof big + 1);
    ck_assert_int_eq(b.data[0], '<');
    ck_assert_int_eq(b.data[b.len - 1], '>');
    ck_assert_int_eq(b.data[b.len], '\0');
    char *s = outbox_kit_buf_steal(&b);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(strlen(s), sizeof big + 1);
    host()->free(s);
    outbox_kit_buf_free(&b);
}
END_TEST

START_TEST(buf_steal_empty_is_empty_string)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, host());
    char *s = outbox_kit_buf_steal(&b);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s, "");
    host()->free(s);
}
END_TEST

START_TEST(buf_failure_sticks)
{
    failing_host = *host();
    failing_host.realloc = counting_realloc;
    allocs_left = 1;
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, &failing_host);
    outbox_kit_buf_puts(&b, "ok");
    ck_assert(!b.failed);
    char big[600];
    memset(big, 'b', sizeof big);
    outbox_kit_buf_put(&b, big, sizeof big); /* needs a second allocation: fails */
    ck_assert(b.failed);
    outbox_kit_buf_puts(&b, "more");
    outbox_kit_buf_printf(&b, "%s", "still nothing");
    ck_assert(b.failed);
    ck_assert_ptr_null(outbox_kit_buf_steal(&b));
    ck_assert_ptr_null(b.data);
    allocs_left = -1;
}
END_TEST

START_TEST(ident_rules)
{
    ck_assert(outbox_kit_ident_valid("outbox", 6));
    ck_assert(outbox_kit_ident_valid("_a1", 3));
    ck_assert(!outbox_kit_ident_valid("1a", 2));
    ck_assert(!outbox_kit_ident_valid("a-b", 3));
    ck_assert(!outbox_kit_ident_valid("", 0));
    char long_name[65];
    memset(long_name, 'x', 64);
    long_name[64] = '\0';
    ck_assert(outbox_kit_ident_valid(long_name, 63));
    ck_assert(!outbox_kit_ident_valid(long_name, 64));

    outbox_kit_relname_t r;
    ck_assert_int_eq(outbox_kit_relname_parse("app.outbox", &r), 0);
    ck_assert_str_eq(r.schema, "app");
    ck_assert_str_eq(r.table, "outbox");
    ck_assert_int_eq(outbox_kit_relname_parse("outbox", &r), 0);
    ck_assert_str_eq(r.schema, "");
    ck_assert_int_eq(outbox_kit_relname_parse("a.b.c", &r), -1);
    ck_assert_int_eq(outbox_kit_relname_parse(".b", &r), -1);
    ck_assert_int_eq(outbox_kit_relname_parse("a.", &r), -1);
    ck_assert_int_eq(outbox_kit_relname_parse("x\"; DROP", &r), -1);
    ck_assert_int_eq(outbox_kit_relname_parse(NULL, &r), -1);
    ck_assert_str_eq(r.table, "");

    outbox_kit_relname_t base, ck;
    ck_assert_int_eq(outbox_kit_relname_parse("app.outbox", &base), 0);
    outbox_kit_relname_beside(&base, "hlc_checkpoint", &ck);
    char shown[140];
    outbox_kit_relname_show(&ck, shown, sizeof shown);
    ck_assert_str_eq(shown, "app.hlc_checkpoint");

    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, host());
    outbox_kit_buf_relname(&b, &base, '"');
    outbox_kit_buf_putc(&b, ' ');
    outbox_kit_buf_ident(&b, "we\"ird", '"');
    outbox_kit_buf_putc(&b, ' ');
    outbox_kit_buf_literal(&b, "it's");
    ck_assert_str_eq(b.data, "\"app\".\"outbox\" \"we\"\"ird\" 'it''s'");
    outbox_kit_buf_free(&b);
}
END_TEST

START_TEST(utf8_sequences)
{
    const unsigned char ok2[] = {0xc3, 0xa9}, ok4[] = {0xf0, 0x9f, 0x98, 0x80};
    const unsigned char overlong[] = {0xc0, 0xaf}, surrogate[] = {0xed, 0xa0, 0x80};
    const unsigned char too_big[] = {0xf4, 0x90, 0x80, 0x80}, cut[] = {0xe2, 0x82};
    ck_assert_uint_eq(outbox_kit_utf8_seq(ok2, 2), 2);
    ck_assert_uint_eq(outbox_kit_utf8_seq(ok4, 4), 4);
    ck_assert_uint_eq(outbox_kit_utf8_seq(overlong, 2), 0);
    ck_assert_uint_eq(outbox_kit_utf8_seq(surrogate, 3), 0);
    ck_assert_uint_eq(outbox_kit_utf8_seq(too_big, 4), 0);
    ck_assert_uint_eq(outbox_kit_utf8_seq(cut, 2), 0);
    ck_assert_uint_eq(outbox_kit_utf8_seq((const unsigned char *)"\x80", 1), 0);
    ck_assert(outbox_kit_utf8_valid("h\xc3\xa9llo", 6));
    ck_assert(!outbox_kit_utf8_valid("a\0b", 3));
    ck_assert(!outbox_kit_utf8_valid("\xff", 1));
}
END_TEST

START_TEST(text_line_is_one_clean_line)
{
    char out[32];
    outbox_kit_text_line("first\nsecond\r\n\tthird", out, sizeof out);
    ck_assert_str_eq(out, "first second third");
    outbox_kit_text_line("bell\x07 bad\xff end", out, sizeof out);
    ck_assert_str_eq(out, "bell? bad? end");
    /* Cut at a character boundary: "é" does not fit in the last byte. */
    char small[5];
    outbox_kit_text_line("abc\xc3\xa9", small, sizeof small);
    ck_assert_str_eq(small, "abc");
    outbox_kit_text_line(NULL, small, sizeof small);
    ck_assert_str_eq(small, "");
    char one[1];
    outbox_kit_text_line("abc", one, sizeof one);
    ck_assert_str_eq(one, "");
}
END_TEST

START_TEST(json_string_escapes)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, host());
    const char in[] = "q\" b\\ n\n t\t c\x01 e\xc3\xa9 bad\xff";
    outbox_kit_buf_json_string(&b, in, sizeof in - 1);
    ck_assert_str_eq(b.data, "\"q\\\" b\\\\ n\\n t\\t c\\u0001 e\xc3\xa9 bad\\ufffd\"");
    ck_assert(outbox_json_valid(b.data, b.len));
    outbox_kit_buf_reset(&b);
    outbox_kit_buf_json_string(&b, "a\0b", 3);
    ck_assert_str_eq(b.data, "\"a\\u0000b\"");
    outbox_kit_buf_free(&b);
}
END_TEST

START_TEST(uri_parameters)
{
    outbox_uri_param_t params[] = {{"busy_timeout", "5s"}, {"mode", "ro"}, {"mode", "rw"}};
    outbox_uri_t u = {.raw = "x", .scheme = "x", .params = params, .n_params = 3};
    ck_assert_str_eq(outbox_kit_uri_get(&u, "mode"), "ro");
    ck_assert_ptr_null(outbox_kit_uri_get(&u, "missing"));
    ck_assert_ptr_null(outbox_kit_uri_get(NULL, "mode"));
    static const char *const known[] = {"busy_timeout", "mode", NULL};
    ck_assert_ptr_null(outbox_kit_uri_unknown(&u, known));
    static const char *const fewer[] = {"mode", NULL};
    ck_assert_str_eq(outbox_kit_uri_unknown(&u, fewer), "busy_timeout");
}
END_TEST

START_TEST(uri_show_and_redact_hide_passwords)
{
    outbox_uri_owned_t u;
    outbox_diag_t d = {0};
    char out[OUTBOX_MESSAGE_MAX];
    ck_assert_int_eq(outbox_uri_parse("postgresql://app:s3cr%23t@db:5433/app?sslmode=require&"
                                      "password=hunter22",
                                      &u, &d),
                     OUTBOX_OK);
    outbox_kit_uri_show_builtin(&u.uri, out, sizeof out);
    ck_assert_str_eq(out, "postgresql://app:***@db:5433/app?sslmode=require&password=***");
    outbox_kit_uri_redact_builtin(&u.uri, "bad: postgresql://app:s3cr%23t@db and s3cr#t and hunter22", out,
                      sizeof out);
    ck_assert_str_eq(out, "bad: postgresql://app:***@db and *** and ***");
    outbox_uri_free(&u);

    ck_assert_int_eq(outbox_uri_parse("sqlite:rel.db", &u, &d), OUTBOX_OK);
    outbox_kit_uri_show_builtin(&u.uri, out, sizeof out);
    ck_assert_str_eq(out, "sqlite:rel.db");
    outbox_uri_free(&u);

    /* A short password is hidden where it stands as a word, not inside one. */
    ck_assert_int_eq(outbox_uri_parse("postgresql://u:ab@[::1]:7/x", &u, &d), OUTBOX_OK);
    outbox_kit_uri_show_builtin(&u.uri, out, sizeof out);
    ck_assert_str_eq(out, "postgresql://u:***@[::1]:7/x");
    outbox_kit_uri_redact_builtin(&u.uri, "cannot reach abacus as ab, \"ab\"", out, sizeof out);
    ck_assert_str_eq(out, "cannot reach abacus as ***, \"***\"");
    outbox_kit_uri_redact_builtin(&u.uri, "refused", out, sizeof out);
    ck_assert_str_eq(out, "refused");
    outbox_uri_free(&u);

    /* The one rule of which parameters are secrets, shared with the core. */
    ck_assert_int_eq(outbox_uri_parse("kafka://b/t?sasl_password=a1&client_secret=a2&api_token=a3&"
                                      "pwd=a4&pass=a5&passwd=a6&passfile=f&acks=all",
                                      &u, &d),
                     OUTBOX_OK);
    outbox_kit_uri_show_builtin(&u.uri, out, sizeof out);
    ck_assert_str_eq(out, "kafka://b/t?sasl_password=***&client_secret=***&api_token=***&pwd=***&"
                          "pass=***&passwd=***&passfile=f&acks=all");
    outbox_uri_free(&u);
    ck_assert(outbox_kit_secret_name("TOKEN", 5) && !outbox_kit_secret_name("passes", 6) &&
              !outbox_kit_secret_key(NULL) && outbox_kit_secret_key("SslPassword"));
}
END_TEST

START_TEST(host_table_1_1_entries)
{
    const outbox_host_t *h = host();
    ck_assert(OUTBOX_STRUCT_HAS(outbox_host_t, h, monotonic_us));
    ck_assert(OUTBOX_STRUCT_HAS(outbox_host_t, h, verror));
    int64_t a = h->monotonic_us(), b = h->monotonic_us();
    ck_assert(a > 0 && b >= a);
    outbox_diag_t d = {0};
    ck_assert_int_eq(h->error(&d, OUTBOX_EINVAL, "x=%d", 7), OUTBOX_EINVAL);
    ck_assert_str_eq(d.message, "x=7");
}
END_TEST

/* verror through a driver-style wrapper. */
static int wrapper(outbox_diag_t *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = host()->verror(d, OUTBOX_ETRANSIENT, fmt, ap);
    va_end(ap);
    return rc;
}

START_TEST(host_verror)
{
    outbox_diag_t d = {0};
    ck_assert_int_eq(wrapper(&d, "%s lost after %d tries", "connection", 3), OUTBOX_ETRANSIENT);
    ck_assert_int_eq(d.code, OUTBOX_ETRANSIENT);
    ck_assert_str_eq(d.message, "connection lost after 3 tries");
}
END_TEST


START_TEST(template_without_a_message)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, host());
    outbox_kit_template(&b, "events.{route}.{destination}", "orders", "eu");
    ck_assert_str_eq(b.data, "events.orders.eu");
    outbox_kit_buf_reset(&b);
    outbox_kit_template(&b, "", "orders", "eu");
    ck_assert_str_eq(b.data, "eu");
    outbox_kit_buf_reset(&b);
    outbox_message_t m = {.route = "r", .destination = "d"};
    outbox_kit_destination(&b, "{route}-{destination}-x", &m);
    ck_assert_str_eq(b.data, "r-d-x");
    outbox_kit_buf_free(&b);
}
END_TEST

START_TEST(result_is_one_line)
{
    outbox_publish_result_t r;
    outbox_kit_result(&r, OUTBOX_PUBLISH_REJECT, "event %s:\n%s", "e1", "two\tlines\xff");
    ck_assert_int_eq(r.status, OUTBOX_PUBLISH_REJECT);
    ck_assert_str_eq(r.message, "event e1: two lines?");
}
END_TEST

START_TEST(received_holder_copies_attributes)
{
    outbox_kit_received_t h;
    outbox_kit_received_init(&h, host());
    char name[8] = "id", value[16] = "e-1";
    ck_assert_int_eq(outbox_kit_received_add(&h, name, 2, value, 3), 0);
    ck_assert_int_eq(outbox_kit_received_add(&h, "type", 4, "t.created", 9), 0);
    strcpy(value, "gone"); /* the holder keeps its own copies */
    outbox_received_t out = {.struct_size = sizeof out};
    outbox_kit_received_fill(&h, &out);
    ck_assert_uint_eq(out.n_headers, 2);
    ck_assert_str_eq(out.headers[0].name, "id");
    ck_assert_str_eq(out.headers[0].value, "e-1");
    ck_assert_str_eq(out.headers[1].value, "t.created");
    outbox_kit_received_reset(&h);
    for (int i = 0; i < OUTBOX_KIT_RECEIVED_MAX; i++)
        ck_assert_int_eq(outbox_kit_received_add(&h, "x", 1, "y", 1), 0);
    ck_assert_int_eq(outbox_kit_received_add(&h, "x", 1, "y", 1), -1);
    outbox_kit_received_fill(&h, &out);
    ck_assert_uint_eq(out.n_headers, OUTBOX_KIT_RECEIVED_MAX);
    outbox_kit_received_free(&h);
}
END_TEST
START_TEST(received_holder_keeps_wire_names)
{
    outbox_kit_received_t h;
    outbox_kit_received_init(&h, host());
    ck_assert_int_eq(outbox_kit_received_wire(&h, "ce-id", 5, "e-1", 3), 0);
    ck_assert_int_eq(outbox_kit_received_add(&h, "id", 2, "e-1", 3), 0);
    ck_assert_int_eq(outbox_kit_received_wire(&h, "Nats-Msg-Id", 11, "e-1", 3), 0);
    outbox_received_t out = {.struct_size = sizeof out};
    outbox_kit_received_fill(&h, &out);
    ck_assert_uint_eq(out.n_headers, 1);
    ck_assert_str_eq(out.headers[0].name, "id");
    ck_assert_uint_eq(out.n_wire_headers, 2);
    ck_assert_str_eq(out.wire_headers[0].name, "ce-id");
    ck_assert_str_eq(out.wire_headers[1].name, "Nats-Msg-Id");
    ck_assert_str_eq(out.wire_headers[1].value, "e-1");
    /* A host built before ABI 1.6: its struct ends before wire_headers,
     * and fill writes nothing there. */
    outbox_received_t old;
    memset(&old, 0x5a, sizeof old);
    old.struct_size = (uint32_t)offsetof(outbox_received_t, wire_headers);
    outbox_kit_received_fill(&h, &old);
    ck_assert_uint_eq(old.n_headers, 1);
    unsigned char *tail = (unsigned char *)&old.wire_headers;
    for (size_t i = 0; i < sizeof old - offsetof(outbox_received_t, wire_headers); i++)
        ck_assert_uint_eq(tail[i], 0x5a);
    outbox_kit_received_reset(&h);
    for (int i = 0; i < OUTBOX_KIT_RECEIVED_MAX; i++)
        ck_assert_int_eq(outbox_kit_received_wire(&h, "x", 1, "y", 1), 0);
    ck_assert_int_eq(outbox_kit_received_wire(&h, "x", 1, "y", 1), -1);
    outbox_kit_received_fill(&h, &out);
    ck_assert_uint_eq(out.n_wire_headers, OUTBOX_KIT_RECEIVED_MAX);
    ck_assert_uint_eq(out.n_headers, 0);
    outbox_kit_received_free(&h);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("kit");
    TCase *tc = tcase_create("kit");
    tcase_add_test(tc, buf_appends_and_terminates);
    tcase_add_test(tc, buf_steal_empty_is_empty_string);
    tcase_add_test(tc, buf_failure_sticks);
    tcase_add_test(tc, ident_rules);
    tcase_add_test(tc, utf8_sequences);
    tcase_add_test(tc, text_line_is_one_clean_line);
    tcase_add_test(tc, json_string_escapes);
    tcase_add_test(tc, uri_parameters);
    tcase_add_test(tc, uri_show_and_redact_hide_passwords);
    tcase_add_test(tc, host_table_1_1_entries);
    tcase_add_test(tc, host_verror);
    tcase_add_test(tc, template_without_a_message);
    tcase_add_test(tc, result_is_one_line);
    tcase_add_test(tc, received_holder_copies_attributes);
    tcase_add_test(tc, received_holder_keeps_wire_names);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

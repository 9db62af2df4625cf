/* The staging payload validator: strict RFC 8259, valid UTF-8, no lone
 * surrogates, bounded nesting. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_int.h"

static int valid(const char *s)
{
    return outbox_json_valid(s, strlen(s));
}

START_TEST(test_valid_documents)
{
    static const char *good[] = {
        "{}",
        "[]",
        "0",
        "-0",
        "1.5e10",
        "-12.25E-3",
        "1e+2",
        "123456789012345678901234567890",
        "true",
        "false",
        "null",
        "\"\"",
        "\"plain\"",
        " \t\r\n{ \"a\" : [ 1 , 2 , { \"b\" : null } ] , \"c\" : \"d\" } \n",
        "{\"order\":{\"id\":42,\"lines\":[{\"sku\":\"A-1\",\"qty\":2}],\"paid\":true}}",
        "\"escapes \\\" \\\\ \\/ \\b \\f \\n \\r \\t\"",
        "\"\\u0041\\u00e9\\uFFFF\"",
        "\"\\u0000\"",                      /* RFC-valid; see the report about jsonb */
        "\"\\ud83d\\ude00\"",               /* surrogate pair: U+1F600 */
        "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf\"", /* 2,3,4-byte, U+10FFFF */
        "{\"\":\"\"}",
        "[[],[[]],{}]",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(valid(good[i]) == 1, "refused %s", good[i]);
}
END_TEST

START_TEST(test_invalid_documents)
{
    static const char *bad[] = {
        "",
        "   ",
        "{",
        "}",
        "[1,]",
        "[,1]",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{a:1}",
        "{1:1}",
        "{\"a\":}",
        "[1 2]",
        "{} {}",
        "{}x",
        "[] ,",
        "01",
        "-",
        "+1",
        "1.",
        ".5",
        "1e",
        "1e+",
        "-01",
        "0x10",
        "NaN",
        "Infinity",
        "tru",
        "truex",
        "nul",
        "True",
        "'single'",
        "\"unterminated",
        "\"bad escape \\x\"",
        "\"bad escape \\u12\"",
        "\"bad escape \\u12g4\"",
        "\"raw\ttab\"",
        "\"raw\nnewline\"",
        "[1]]",
        "[[1]",
        "{\"a\":1}}",
        "[}",
        "{]",
        "/* comment */ 1",
        "\xef\xbb\xbf{}", /* byte-order mark */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(valid(bad[i]) == 0, "accepted %s", bad[i]);
    ck_assert_int_eq(outbox_json_valid(NULL, 0), 0);
}
END_TEST

START_TEST(test_length_is_respected)
{
    /* Only text[0..len) counts, so a valid prefix of a longer buffer is fine
     * and a cut-off document is not. */
    ck_assert_int_eq(outbox_json_valid("[1]garbage", 3), 1);
    ck_assert_int_eq(outbox_json_valid("[1]", 2), 0);
    ck_assert_int_eq(outbox_json_valid("\"ab\"", 3), 0);
    ck_assert_int_eq(outbox_json_valid("truex", 4), 1);
    ck_assert_int_eq(outbox_json_valid("\"\\u0041\"", 7), 0);
}
END_TEST

START_TEST(test_embedded_nul)
{
    ck_assert_int_eq(outbox_json_valid("\"a\0b\"", 5), 0);
    ck_assert_int_eq(outbox_json_valid("{}\0", 3), 0);
    ck_assert_int_eq(outbox_json_valid("\0", 1), 0);
    ck_assert_int_eq(outbox_json_valid("[1,\0 2]", 7), 0);
}
END_TEST

START_TEST(test_bad_utf8)
{
    static const char *bad[] = {
        "\"\x80\"",                 /* lone continuation */
        "\"\xc3\"",                 /* truncated 2-byte */
        "\"\xc3\x28\"",             /* bad continuation */
        "\"\xc0\xaf\"",             /* overlong '/' */
        "\"\xc1\xbf\"",             /* overlong */
        "\"\xe0\x80\xaf\"",         /* overlong 3-byte */
        "\"\xf0\x80\x80\xaf\"",     /* overlong 4-byte */
        "\"\xed\xa0\x80\"",         /* encoded surrogate U+D800 */
        "\"\xed\xbf\xbf\"",         /* encoded surrogate U+DFFF */
        "\"\xf4\x90\x80\x80\"",     /* U+110000 */
        "\"\xf5\x80\x80\x80\"",
        "\"\xff\"",
        "\"\xe2\x82\"",             /* truncated 3-byte */
        "\"\xf0\x9f\x98\"",         /* truncated 4-byte */
        "[\"ok\", \"\xfe\"]",
        "\xc3\xa9",                 /* non-ASCII outside a string */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(valid(bad[i]) == 0, "accepted case %zu", i);
    /* Boundaries that are valid. */
    ck_assert_int_eq(valid("\"\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xf0\x90\x80\x80\""), 1);
}
END_TEST

START_TEST(test_lone_surrogates_are_refused)
{
    /* Decision: refused, as PostgreSQL jsonb refuses them; such a payload
     * could not be stored as jsonb or re-encoded as UTF-8 by a consumer. */
    ck_assert_int_eq(valid("\"\\ud800\""), 0);
    ck_assert_int_eq(valid("\"\\udbff x\""), 0);
    ck_assert_int_eq(valid("\"\\udc00\""), 0);
    ck_assert_int_eq(valid("\"\\ude00\\ud83d\""), 0);  /* reversed pair */
    ck_assert_int_eq(valid("\"\\ud83d\\ud83d\""), 0);  /* two highs */
    ck_assert_int_eq(valid("\"\\ud83d\\n\""), 0);
    ck_assert_int_eq(valid("\"\\ud83d\\u0041\""), 0);
    ck_assert_int_eq(valid("\"\\ud83d\""), 0);
    ck_assert_int_eq(valid("\"\\ud83d\\"), 0);
    ck_assert_int_eq(valid("\"\\uDBFF\\uDFFF\""), 1);
}
END_TEST

static char *nested(size_t depth, char open, char close)
{
    char *s = malloc(2 * depth + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, open, depth);
    memset(s + depth, close, depth);
    s[2 * depth] = '\0';
    return s;
}

START_TEST(test_nesting_limit)
{
    char *s = nested(512, '[', ']');
    ck_assert_int_eq(valid(s), 1);
    free(s);
    s = nested(513, '[', ']');
    ck_assert_int_eq(valid(s), 0);
    free(s);

    /* Objects count the same; build {"a":{"a":...{}...}}. */
    size_t depth = 513;
    char *o = malloc(depth * 5 + depth + 1);
    ck_assert_ptr_nonnull(o);
    size_t n = 0;
    for (size_t i = 0; i < depth; i++) {
        if (i + 1 < depth) {
            memcpy(o + n, "{\"a\":", 5);
            n += 5;
        } else {
            o[n++] = '{';
        }
    }
    memset(o + n, '}', depth);
    o[n + depth] = '\0';
    ck_assert_int_eq(valid(o), 0);
    o[n + depth - 1] = '\0';
    ck_assert_int_eq(valid(o + 5), 1); /* one level shallower: 512 */
    free(o);

    /* Hostile depth neither crashes nor allocates per level. */
    s = nested(1000000, '[', ']');
    ck_assert_int_eq(valid(s), 0);
    s[1000000] = '\0';
    ck_assert_int_eq(valid(s), 0);
    free(s);
}
END_TEST

START_TEST(test_large_flat_document)
{
    size_t n = 200000;
    char *s = malloc(n * 2 + 3);
    ck_assert_ptr_nonnull(s);
    size_t w = 0;
    s[w++] = '[';
    for (size_t i = 0; i < n; i++) {
        s[w++] = '1';
        s[w++] = i + 1 < n ? ',' : ']';
    }
    ck_assert_int_eq(outbox_json_valid(s, w), 1);
    free(s);
}
END_TEST

static Suite *json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_valid_documents);
    tcase_add_test(tc, test_invalid_documents);
    tcase_add_test(tc, test_length_is_respected);
    tcase_add_test(tc, test_embedded_nul);
    tcase_add_test(tc, test_bad_utf8);
    tcase_add_test(tc, test_lone_surrogates_are_refused);
    tcase_add_test(tc, test_nesting_limit);
    tcase_add_test(tc, test_large_flat_document);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(json_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

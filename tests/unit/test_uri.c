/* URIs, durations and relation names: every accepted form and every
 * refusal with the message an operator would see. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "outbox_int.h"

static outbox_uri_owned_t parse_ok(const char *text)
{
    outbox_uri_owned_t u;
    outbox_diag_t d = {0};
    int rc = outbox_uri_parse(text, &u, &d);
    ck_assert_msg(rc == OUTBOX_OK, "%s: %s", text, d.message);
    ck_assert_str_eq(u.uri.raw, text);
    return u;
}

/* Refused with EINVAL and a one-line message containing want. */
static void parse_bad(const char *text, const char *want)
{
    outbox_uri_owned_t u;
    outbox_diag_t d = {0};
    int rc = outbox_uri_parse(text, &u, &d);
    ck_assert_msg(rc == OUTBOX_EINVAL, "accepted \"%s\"", text ? text : "(null)");
    ck_assert_int_eq(d.code, OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, want) != NULL, "\"%s\": message \"%s\" lacks \"%s\"",
                  text ? text : "(null)", d.message, want);
    ck_assert_ptr_null(strchr(d.message, '\n'));
    /* A refusal leaves nothing to free. */
    ck_assert_ptr_null(u.storage);
    ck_assert_ptr_null(u.params);
    outbox_uri_free(&u);
}

START_TEST(test_scheme_rest_form)
{
    outbox_uri_owned_t u = parse_ok("sqlite:relative.db");
    ck_assert_str_eq(u.uri.scheme, "sqlite");
    ck_assert_str_eq(u.uri.path, "relative.db");
    ck_assert_ptr_null(u.uri.host);
    ck_assert_ptr_null(u.uri.user);
    ck_assert_ptr_null(u.uri.password);
    ck_assert_int_eq(u.uri.port, 0);
    ck_assert_uint_eq(u.uri.n_params, 0);
    ck_assert_ptr_null(u.uri.params);
    outbox_uri_free(&u);

    u = parse_ok("stdout:");
    ck_assert_str_eq(u.uri.scheme, "stdout");
    ck_assert_ptr_null(u.uri.path);
    outbox_uri_free(&u);

    u = parse_ok("file:/var/log/events.jsonl");
    ck_assert_str_eq(u.uri.path, "/var/log/events.jsonl");
    outbox_uri_free(&u);

    u = parse_ok("X+y.Z-w:thing");
    ck_assert_str_eq(u.uri.scheme, "x+y.z-w");
    outbox_uri_free(&u);
}
END_TEST

START_TEST(test_absolute_path_form)
{
    outbox_uri_owned_t u = parse_ok("SQLite:///var/lib/app/outbox.db");
    ck_assert_str_eq(u.uri.scheme, "sqlite");
    ck_assert_str_eq(u.uri.path, "/var/lib/app/outbox.db");
    ck_assert_ptr_null(u.uri.host);
    ck_assert_int_eq(u.uri.port, 0);
    outbox_uri_free(&u);

    u = parse_ok("sqlite:///tmp/a%20b.db?mode=ro&cache");
    ck_assert_str_eq(u.uri.path, "/tmp/a b.db");
    ck_assert_uint_eq(u.uri.n_params, 2);
    ck_assert_str_eq(u.uri.params[0].key, "mode");
    ck_assert_str_eq(u.uri.params[0].value, "ro");
    ck_assert_str_eq(u.uri.params[1].key, "cache");
    ck_assert_str_eq(u.uri.params[1].value, "");
    outbox_uri_free(&u);
}
END_TEST

START_TEST(test_authority_form)
{
    outbox_uri_owned_t u = parse_ok(
        "postgresql://relay:s3cret@db.example.com:5433/app?sslmode=require&application_name=relay%201");
    ck_assert_str_eq(u.uri.scheme, "postgresql");
    ck_assert_str_eq(u.uri.user, "relay");
    ck_assert_str_eq(u.uri.password, "s3cret");
    ck_assert_str_eq(u.uri.host, "db.example.com");
    ck_assert_int_eq(u.uri.port, 5433);
    ck_assert_str_eq(u.uri.path, "/app");
    ck_assert_uint_eq(u.uri.n_params, 2);
    ck_assert_str_eq(u.uri.params[0].key, "sslmode");
    ck_assert_str_eq(u.uri.params[0].value, "require");
    ck_assert_str_eq(u.uri.params[1].key, "application_name");
    ck_assert_str_eq(u.uri.params[1].value, "relay 1");
    outbox_uri_free(&u);

    u = parse_ok("kafka://broker");
    ck_assert_str_eq(u.uri.host, "broker");
    ck_assert_int_eq(u.uri.port, 0);
    ck_assert_ptr_null(u.uri.path);
    ck_assert_ptr_null(u.uri.user);
    outbox_uri_free(&u);

    u = parse_ok("amqp://guest@rabbit:5672");
    ck_assert_str_eq(u.uri.user, "guest");
    ck_assert_ptr_null(u.uri.password);
    ck_assert_str_eq(u.uri.host, "rabbit");
    ck_assert_int_eq(u.uri.port, 5672);
    ck_assert_ptr_null(u.uri.path);
    outbox_uri_free(&u);

    u = parse_ok("redis://:pw@localhost");
    ck_assert_ptr_null(u.uri.user);
    ck_assert_str_eq(u.uri.password, "pw");
    ck_assert_str_eq(u.uri.host, "localhost");
    outbox_uri_free(&u);

    u = parse_ok("http://h:65535/");
    ck_assert_int_eq(u.uri.port, 65535);
    ck_assert_str_eq(u.uri.path, "/");
    outbox_uri_free(&u);

    /* Host-less authority, as libpq allows (socket directory as a param). */
    u = parse_ok("postgresql:///app?host=%2Fvar%2Frun%2Fpostgresql");
    ck_assert_ptr_null(u.uri.host);
    ck_assert_str_eq(u.uri.path, "/app");
    ck_assert_str_eq(u.uri.params[0].value, "/var/run/postgresql");
    outbox_uri_free(&u);

    u = parse_ok("stdout://");
    ck_assert_ptr_null(u.uri.host);
    ck_assert_ptr_null(u.uri.path);
    outbox_uri_free(&u);
}
END_TEST

START_TEST(test_userinfo_decoding)
{
    outbox_uri_owned_t u = parse_ok("postgresql://us%65r:p%40ss%3Aw0rd@h/db");
    ck_assert_str_eq(u.uri.user, "user");
    ck_assert_str_eq(u.uri.password, "p@ss:w0rd");
    ck_assert_str_eq(u.uri.host, "h");
    outbox_uri_free(&u);

    /* An unescaped '@' in the password: the last '@' ends the user info. */
    u = parse_ok("postgresql://u:p@ss@h/db");
    ck_assert_str_eq(u.uri.password, "p@ss");
    ck_assert_str_eq(u.uri.host, "h");
    outbox_uri_free(&u);

    u = parse_ok("postgresql://u:@h/db");
    ck_assert_str_eq(u.uri.user, "u");
    ck_assert_str_eq(u.uri.password, "");
    outbox_uri_free(&u);
}
END_TEST

START_TEST(test_ipv6_host)
{
    outbox_uri_owned_t u = parse_ok("nats://[::1]:4222");
    ck_assert_str_eq(u.uri.host, "::1");
    ck_assert_int_eq(u.uri.port, 4222);
    outbox_uri_free(&u);

    u = parse_ok("http://user@[2001:db8::8a2e:370:7334]/hook?x=1");
    ck_assert_str_eq(u.uri.user, "user");
    ck_assert_str_eq(u.uri.host, "2001:db8::8a2e:370:7334");
    ck_assert_int_eq(u.uri.port, 0);
    ck_assert_str_eq(u.uri.path, "/hook");
    ck_assert_uint_eq(u.uri.n_params, 1);
    outbox_uri_free(&u);

    u = parse_ok("http://[fe80::1%25eth0]:8080/");
    ck_assert_str_eq(u.uri.host, "fe80::1%eth0");
    ck_assert_int_eq(u.uri.port, 8080);
    outbox_uri_free(&u);

    u = parse_ok("redis://[::ffff:192.0.2.1]");
    ck_assert_str_eq(u.uri.host, "::ffff:192.0.2.1");
    outbox_uri_free(&u);
}
END_TEST

START_TEST(test_params)
{
    outbox_uri_owned_t u = parse_ok("file:out.jsonl?a=1&&b=x%3Dy%26z&c=&d=a=b&a=2&");
    ck_assert_str_eq(u.uri.path, "out.jsonl");
    ck_assert_uint_eq(u.uri.n_params, 5);
    ck_assert_str_eq(u.uri.params[0].key, "a");
    ck_assert_str_eq(u.uri.params[0].value, "1");
    ck_assert_str_eq(u.uri.params[1].key, "b");
    ck_assert_str_eq(u.uri.params[1].value, "x=y&z");
    ck_assert_str_eq(u.uri.params[2].key, "c");
    ck_assert_str_eq(u.uri.params[2].value, "");
    ck_assert_str_eq(u.uri.params[3].key, "d");
    ck_assert_str_eq(u.uri.params[3].value, "a=b");
    ck_assert_str_eq(u.uri.params[4].key, "a"); /* repeats kept, in order */
    ck_assert_str_eq(u.uri.params[4].value, "2");
    outbox_uri_free(&u);

    u = parse_ok("sqlite:x.db?");
    ck_assert_uint_eq(u.uri.n_params, 0);
    ck_assert_str_eq(u.uri.path, "x.db");
    outbox_uri_free(&u);

    /* '+' is literal (RFC 3986), not form-encoded space. */
    u = parse_ok("stdout:?source=%2Fa+b&k%20ey=v%C3%A9");
    ck_assert_ptr_null(u.uri.path);
    ck_assert_str_eq(u.uri.params[0].value, "/a+b");
    ck_assert_str_eq(u.uri.params[1].key, "k ey");
    ck_assert_str_eq(u.uri.params[1].value, "v\xc3\xa9");
    outbox_uri_free(&u);
}
END_TEST

START_TEST(test_empty_and_missing_scheme)
{
    parse_bad("", "empty URI");
    parse_bad(NULL, "empty URI");
    parse_bad("/tmp/outbox.db", "missing scheme in URI \"/tmp/outbox.db\": expected e.g. "
                                "sqlite:///path/outbox.db");
    parse_bad("outbox.db", "missing scheme in URI \"outbox.db\"");
    parse_bad(":foo", "missing scheme");
    parse_bad("//host/db", "missing scheme");
    parse_bad("1abc:foo", "invalid scheme \"1abc\"");
    parse_bad("my_db:x", "invalid scheme \"my_db\"");
    /* A key=value string with a ':' in it: the secret before the ':' is
     * not quoted as a scheme. */
    parse_bad("host=db password=Secret01 hostaddr=::1",
              "invalid scheme in URI \"host=db password=*** hostaddr=::1\"");
}
END_TEST

START_TEST(test_host_list)
{
    /* Several brokers of one cluster: each checked, the list kept as written. */
    outbox_uri_owned_t u = parse_ok("kafka://k1:9092,k2:9093/orders?acks=all");
    ck_assert_str_eq(u.uri.host, "k1:9092,k2:9093");
    ck_assert_int_eq(u.uri.port, 0);
    ck_assert_str_eq(u.uri.path, "/orders");
    ck_assert_uint_eq(u.uri.n_params, 1);
    outbox_uri_free(&u);

    u = parse_ok("nats://relay:s3cret@n1,[::1]:4222,n3:4223");
    ck_assert_str_eq(u.uri.user, "relay");
    ck_assert_str_eq(u.uri.password, "s3cret");
    ck_assert_str_eq(u.uri.host, "n1,[::1]:4222,n3:4223");
    ck_assert_int_eq(u.uri.port, 0);
    ck_assert_ptr_null(u.uri.path);
    outbox_uri_free(&u);

    /* One host keeps its own port, as before. */
    u = parse_ok("kafka://k1:9092/orders");
    ck_assert_str_eq(u.uri.host, "k1");
    ck_assert_int_eq(u.uri.port, 9092);
    outbox_uri_free(&u);

    parse_bad("kafka://k1:9092,,k2:9092/t", "an empty host in the list of hosts");
    parse_bad("kafka://k1:9092,/t", "an empty host in the list of hosts");
    parse_bad("kafka://,k1/t", "an empty host in the list of hosts");
    parse_bad("kafka://k1:9092,k2:x/t", "invalid port \"x\"");
    parse_bad("kafka://k1,[::g]:1/t", "invalid IPv6 address");
    parse_bad("kafka://k1,k[2]/t", "unexpected '[' or ']' in the host");
}
END_TEST

START_TEST(test_bad_ports)
{
    parse_bad("postgresql://h:abc/db", "invalid port \"abc\"");
    parse_bad("postgresql://h:65536/db", "invalid port \"65536\"");
    parse_bad("postgresql://h:123456/db", "invalid port \"123456\"");
    parse_bad("postgresql://h:0/db", "invalid port \"0\"");
    parse_bad("postgresql://h:-1/db", "invalid port \"-1\"");
    parse_bad("postgresql://h:/db", "invalid port \"\"");
    parse_bad("postgresql://h:54 32/db", "invalid port");
    parse_bad("nats://[::1]:x", "invalid port \"x\"");
    parse_bad("nats://::1:4222", "invalid port"); /* IPv6 needs brackets */
    parse_bad("postgresql://h:99999999999999999999999/db", "...\"");
}
END_TEST

START_TEST(test_bad_escapes)
{
    parse_bad("sqlite:///a%zz.db", "bad percent escape \"%zz\" in the path");
    parse_bad("sqlite:///a%2", "bad percent escape \"%2\" in the path");
    parse_bad("sqlite:///a%", "bad percent escape \"%\" in the path");
    parse_bad("sqlite:x?k=%g1", "bad percent escape \"%g1\" in the query");
    parse_bad("kafka://bro%kr", "bad percent escape \"%kr\" in the host");
    parse_bad("kafka://u%x@h", "bad percent escape \"%x\" in the user name");
    parse_bad("sqlite:///a%00b", "%00 (a NUL byte) in the path");
    parse_bad("sqlite:x?k=a%00", "%00 (a NUL byte) in the query");
    parse_bad("sqlite:x?%00=v", "%00 (a NUL byte) in the query");
}
END_TEST

START_TEST(test_passwords_never_in_messages)
{
    outbox_uri_owned_t u;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_uri_parse("postgresql://u:s3cret@h:bad/db", &u, &d), OUTBOX_EINVAL);
    ck_assert_ptr_null(strstr(d.message, "s3cret"));
    ck_assert_ptr_nonnull(strstr(d.message, "postgresql://u:***@h:bad/db"));

    ck_assert_int_eq(outbox_uri_parse("postgresql://u:se%zzcret@h/db", &u, &d), OUTBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(d.message, "bad percent escape in the password"));
    ck_assert_ptr_null(strstr(d.message, "cret"));
    ck_assert_ptr_null(strstr(d.message, "%zz"));

    /* A password can also be a parameter (libpq takes ?password=, and
     * key=value strings password=), and other secrets are named alike. */
    static const struct {
        const char *uri, *shown;
    } params[] = {
        {"postgresql://h/db?password=s3cret&x=%zz", "postgresql://h/db?password=***&x=%zz"},
        {"postgresql://h/db?x=%zz&PassWord=s3cret", "postgresql://h/db?x=%zz&PassWord=***"},
        {"kafka://b?sasl_password=s3cret&x=%zz", "kafka://b?sasl_password=***&x=%zz"},
        {"http://h/p?token=s3cret&x=%zz", "http://h/p?token=***&x=%zz"},
        {"redis://h?auth_secret=s3cret&x=%zz", "redis://h?auth_secret=***&x=%zz"},
        {"postgres:host=h password=s3cret x=%zz", "postgres:host=h password=*** x=%zz"},
        {"postgres:host=h password = s3cret x=%zz", "postgres:host=h password = *** x=%zz"},
        {"postgres:host=h password='s3 cr\\'et' x=%zz", "postgres:host=h password=*** x=%zz"},
        {"postgresql://u:s3cret@h/db?password=s3cret&x=%zz", "postgresql://u:***@h/db?password=***&x=%zz"},
    };
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
        ck_assert_int_eq(outbox_uri_parse(params[i].uri, &u, &d), OUTBOX_EINVAL);
        ck_assert_msg(strstr(d.message, "s3") == NULL, "%s: %s", params[i].uri, d.message);
        ck_assert_msg(strstr(d.message, params[i].shown) != NULL, "%s: %s", params[i].uri, d.message);
    }
    /* A bad escape inside a secret parameter is not echoed either. */
    ck_assert_int_eq(outbox_uri_parse("postgresql://h/db?password=se%zzcret", &u, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "cret") == NULL && strstr(d.message, "%zz") == NULL, "%s", d.message);
    ck_assert_ptr_nonnull(strstr(d.message, "bad percent escape in the password"));
    /* However many there are. */
    char many[600] = "postgresql://h/db?x=%zz";
    for (int i = 0; i < 20; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "&password=s3c%d", i);
    ck_assert_int_eq(outbox_uri_parse(many, &u, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "s3c") == NULL, "%s", d.message);
    /* Names that only look alike are shown. */
    ck_assert_int_eq(outbox_uri_parse("postgresql://h/db?passfile=/x&x=%zz", &u, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "passfile=/x") != NULL, "%s", d.message);
}
END_TEST

static void collect_secret(void *ctx, const char *secret, size_t len)
{
    char *seen = ctx;
    snprintf(seen + strlen(seen), 256 - strlen(seen), "[%.*s]", (int)len, secret);
}

/* The public mask: what applications and the battery print. */
START_TEST(test_uri_mask)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"postgresql://app:s3cr#tPass@db:99999/app", "postgresql://app:***@db:99999/app"},
        /* The password ends at the '@' that begins a token's value: the
         * token is masked to its end, not shown after the password. */
        {"sqlite://h:/x?token=@bCdEf&x=1", "sqlite://h:***&x=1"},
        {"postgresql://app:s3cret@db/app?sslmode=require&sslpassword=x1",
         "postgresql://app:***@db/app?sslmode=require&sslpassword=***"},
        {"kafka://b:9092/t?sasl.password=p1&client_secret=p2&auth_token=p3",
         "kafka://b:9092/t?sasl.password=***&client_secret=***&auth_token=***"},
        {"postgres:host=h password = 's3 cr\\'et' pwd=p4", "postgres:host=h password = *** pwd=***"},
        {"sqlite:///tmp/a.db?busy_timeout=10", "sqlite:///tmp/a.db?busy_timeout=10"},
        {"http://h/p?pass=p5&passfile=/x", "http://h/p?pass=***&passfile=/x"},
        {"line\nbreak", "line?break"},
        {"", ""},
    };
    char out[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_ptr_eq(outbox_uri_mask(cases[i].in, out, sizeof out), out);
        ck_assert_msg(strcmp(out, cases[i].out) == 0, "%s: got \"%s\", expected \"%s\"", cases[i].in,
                      out, cases[i].out);
    }
    /* Many secrets and a long text: every one hidden, the text cut to fit. */
    char many[2048] = "postgresql://h/db?x=1";
    for (int i = 0; i < 60; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "&password=s3c%d", i);
    char big[2048];
    outbox_uri_mask(many, big, sizeof big);
    ck_assert_msg(strstr(big, "s3c") == NULL, "%s", big);
    outbox_uri_mask(many, out, 40);
    ck_assert_msg(strlen(out) < 40 && strstr(out, "s3c") == NULL && strstr(out, "...") != NULL, "%s",
                  out);
    ck_assert_str_eq(outbox_uri_mask(NULL, out, sizeof out), "");
    /* The secrets themselves, as the mask finds them. */
    char seen[256] = "";
    outbox_uri_secrets("postgresql://app:s3#c@db/x?sslmode=require&sslpassword=p1 password='a b'",
                       collect_secret, seen);
    ck_assert_str_eq(seen, "[s3#c][p1]['a b']");
    ck_assert_str_eq(outbox_uri_mask("abc", out, 2), "");
}
END_TEST

/* A password may hold any character the parser takes before the last '@'
 * of the authority ('#', '@', '%23'), and one the user wrote unescaped
 * ('?', '/') that makes the parser see a different authority; whichever
 * refusal follows, no piece of it reaches the message. */
static void refused_without(const char *text, const char *const *pieces)
{
    outbox_uri_owned_t u;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_uri_parse(text, &u, &d) == OUTBOX_EINVAL, "accepted \"%s\"", text);
    for (const char *const *p = pieces; *p; p++)
        ck_assert_msg(strstr(d.message, *p) == NULL, "\"%s\": message \"%s\" shows \"%s\"", text,
                      d.message, *p);
    ck_assert_ptr_null(strchr(d.message, '\n'));
}

START_TEST(test_password_masking_hostile)
{
    static const char *const hash[] = {"s3cr", "tPass", NULL};
    refused_without("postgresql://app:s3cr#tPass@db:99999/app", hash);
    refused_without("postgresql://app:s3cr#tPass@db:0/app?sslmode=require", hash);
    refused_without("postgresql://app:s3cr#tPass@[::1/app", hash);
    refused_without("postgresql://app:s3cr%23tPass@db:99999/app", hash);
    refused_without("postgresql://app:s3cr%zztPass@db/app", hash);
    refused_without("postgresql://app:s3cr?tPass@db:99999/app", hash);
    refused_without("postgresql://app:s3cr?tPass@db/app", hash);
    refused_without("postgresql://app:s3cr/tPass@db:99999/app", hash);
    refused_without("postgresql://app:s3cr/tPass@db/app", hash);
    refused_without("postgresql://app:s3cr/t%zzPass@db/app", hash);

    static const char *const at[] = {"Xp", "ssQ", "w0rdZ", NULL};
    refused_without("postgresql://app:Xp@ssQ@w0rdZ@db:99999/app", at);
    refused_without("postgresql://us%40er:Xp@ssQ@w0rdZ@db:99999/app", at);
    refused_without("postgresql://app:Xp#ssQ?w0rdZ@db:99999/app", at);

    /* Passwords given as parameters, in the query or as key=value text. */
    static const char *const param[] = {"s3crtPass", NULL};
    refused_without("postgresql://db:99999/app?password=s3crtPass", param);
    refused_without("postgresql://db/app?sslmode=x&password=s3crtPass&%zz=1", param);
    refused_without("postgresql:host=db password=s3crtPass port=%zz", param);
    refused_without("postgresql:host=db sslpassword=s3crtPass port=%zz", param);

    /* The message still says where the problem is. */
    outbox_uri_owned_t u;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_uri_parse("postgresql://app:s3cr#tPass@db:99999/app", &u, &d),
                     OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "invalid port \"99999\"") != NULL, "%s", d.message);
    ck_assert_msg(strstr(d.message, "postgresql://app:***@db:99999/app") != NULL, "%s", d.message);
}
END_TEST

START_TEST(test_other_bad_input)
{
    parse_bad("nats://[::1", "unterminated '['");
    parse_bad("nats://[xyz]:1", "invalid IPv6 address \"[xyz]\"");
    parse_bad("nats://[]:1", "invalid IPv6 address");
    parse_bad("nats://[::1]x", "unexpected text after ']'");
    parse_bad("nats://h]", "unexpected '[' or ']'");
    parse_bad("sqlite:x?=v", "empty parameter name");
    parse_bad("sqlite:/a\nb", "control character 0x0a at offset 9");
    parse_bad("sqlite:/a\tb", "control character 0x09");

    /* A long input is cut, so the message stays one bounded line. */
    char longtext[2000];
    memset(longtext, 'a', sizeof longtext - 1);
    longtext[sizeof longtext - 1] = '\0';
    parse_bad(longtext, "...\": expected e.g. sqlite:///path/outbox.db");
}
END_TEST

START_TEST(test_free_is_safe)
{
    outbox_uri_owned_t u = {0};
    outbox_uri_free(&u);
    outbox_uri_free(&u);
    outbox_uri_free(NULL);
    u = parse_ok("sqlite:x?a=1");
    outbox_uri_free(&u);
    outbox_uri_free(&u); /* zeroed by the first free */
    ck_assert_ptr_null(u.storage);
    /* NULL diag is tolerated. */
    ck_assert_int_eq(outbox_uri_parse("nope", &u, NULL), OUTBOX_EINVAL);
    ck_assert_int_eq(outbox_uri_parse("sqlite:x", NULL, NULL), OUTBOX_EINVAL);
}
END_TEST

/* ----------------------------------------------------------- durations */

static int64_t duration_ok(const char *text)
{
    int64_t us = -1;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_parse_duration(text, &us, &d) == OUTBOX_OK, "%s: %s", text, d.message);
    return us;
}

static void duration_bad(const char *text, const char *want)
{
    int64_t us = 12345;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_parse_duration(text, &us, &d) == OUTBOX_EINVAL, "accepted \"%s\"",
                  text ? text : "(null)");
    ck_assert_int_eq(d.code, OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, want) != NULL, "message \"%s\" lacks \"%s\"", d.message, want);
    ck_assert_int_eq(us, 12345); /* untouched on failure */
    ck_assert_int_eq(outbox_parse_duration(text, &us, NULL), OUTBOX_EINVAL);
}

START_TEST(test_durations_good)
{
    ck_assert_int_eq(duration_ok("250us"), 250);
    ck_assert_int_eq(duration_ok("500ms"), 500000);
    ck_assert_int_eq(duration_ok("30s"), 30000000);
    ck_assert_int_eq(duration_ok("5m"), INT64_C(300000000));
    ck_assert_int_eq(duration_ok("2h"), INT64_C(7200000000));
    ck_assert_int_eq(duration_ok("7d"), INT64_C(604800000000));
    ck_assert_int_eq(duration_ok("0s"), 0);
    ck_assert_int_eq(duration_ok("007ms"), 7000);
    ck_assert_int_eq(outbox_parse_duration("1s", NULL, NULL), OUTBOX_OK);
}
END_TEST

/* Every parsed duration can be added to a clock reading (and a second one
 * on top) without overflowing int64: at most OUTBOX_DURATION_MAX_US, which
 * is 36500 days, in whatever unit it is written. */
START_TEST(test_durations_bounded)
{
    ck_assert_int_eq(OUTBOX_DURATION_MAX_US, INT64_C(36500) * 86400 * 1000000);
    ck_assert_int_eq(duration_ok("36500d"), OUTBOX_DURATION_MAX_US);
    ck_assert_int_eq(duration_ok("876000h"), OUTBOX_DURATION_MAX_US);
    ck_assert_int_eq(duration_ok("52560000m"), OUTBOX_DURATION_MAX_US);
    ck_assert_int_eq(duration_ok("3153600000s"), OUTBOX_DURATION_MAX_US);
    ck_assert_int_eq(duration_ok("3153600000000ms"), OUTBOX_DURATION_MAX_US);
    ck_assert_int_eq(duration_ok("3153600000000000us"), OUTBOX_DURATION_MAX_US);
    const char *const above[] = {
        "36501d", "876001h", "3153600001s", "3153600000001ms", "3153600000000001us",
        "9223372036854775807us", "106751991d", "9223372036854775807ms",
    };
    for (size_t i = 0; i < sizeof above / sizeof above[0]; i++) {
        char want[128];
        snprintf(want, sizeof want, "duration \"%s\" is too large: at most 36500d (100 years)",
                 above[i]);
        duration_bad(above[i], want);
    }
    /* Far beyond int64 still says what the limit is. */
    duration_bad("99999999999999999999999999s", "at most 36500d");
}
END_TEST

START_TEST(test_durations_bad)
{
    duration_bad("5", "duration \"5\" needs a unit: us, ms, s, m, h or d");
    duration_bad("-1s", "negative duration \"-1s\"");
    duration_bad("1x", "unknown unit in duration \"1x\"");
    duration_bad("1sec", "unknown unit in duration \"1sec\"");
    duration_bad("1S", "unknown unit");
    duration_bad("", "empty duration");
    duration_bad(NULL, "empty duration");
    duration_bad("99999999999999999d", "duration \"99999999999999999d\" is too large");
    duration_bad("106751992d", "too large");
    duration_bad("9223372036854775808us", "too large");
    duration_bad("99999999999999999999999999s", "too large");
    duration_bad("s", "invalid duration \"s\"");
    duration_bad("1.5s", "invalid duration \"1.5s\"");
    duration_bad("1 s", "invalid duration");
    duration_bad(" 1s", "invalid duration");
    duration_bad("+1s", "invalid duration");
    duration_bad("1h30m", "unknown unit");
    duration_bad("1s\n", "unknown unit in duration \"1s?\""); /* masked */
}
END_TEST

/* ------------------------------------------------------- relation names */

START_TEST(test_relations)
{
    static const char *good[] = {"outbox", "app.outbox", "_x", "A1_b2.c_3", "_._",
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk", /* 63 */
        "s.abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk"};
    static const char *bad[] = {"", "a.b.c", "1abc", "a-b", "a;drop", "a.", ".a", "a..b",
        "a b", "\"a\"", "a.1b", "caf\xc3\xa9", "a;drop table x", "outbox ",
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl", /* 64 */
        "s.abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(outbox_relation_valid(good[i]) == 1, "refused %s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(outbox_relation_valid(bad[i]) == 0, "accepted %s", bad[i]);
    ck_assert_int_eq(outbox_relation_valid(NULL), 0);
}
END_TEST

static Suite *uri_suite(void)
{
    Suite *s = suite_create("uri");
    TCase *tc = tcase_create("uri");
    tcase_add_test(tc, test_scheme_rest_form);
    tcase_add_test(tc, test_absolute_path_form);
    tcase_add_test(tc, test_authority_form);
    tcase_add_test(tc, test_userinfo_decoding);
    tcase_add_test(tc, test_ipv6_host);
    tcase_add_test(tc, test_params);
    tcase_add_test(tc, test_empty_and_missing_scheme);
    tcase_add_test(tc, test_bad_ports);
    tcase_add_test(tc, test_bad_escapes);
    tcase_add_test(tc, test_passwords_never_in_messages);
    tcase_add_test(tc, test_password_masking_hostile);
    tcase_add_test(tc, test_other_bad_input);
    tcase_add_test(tc, test_free_is_safe);
    suite_add_tcase(s, tc);

    tc = tcase_create("duration");
    tcase_add_test(tc, test_durations_good);
    tcase_add_test(tc, test_durations_bad);
    tcase_add_test(tc, test_durations_bounded);
    suite_add_tcase(s, tc);

    tc = tcase_create("relation");
    tcase_add_test(tc, test_relations);
    tcase_add_test(tc, test_uri_mask);
    tcase_add_test(tc, test_host_list);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(uri_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

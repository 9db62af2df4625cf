/* The loader refuses what is not a good driver, with the reason, before
 * any driver code runs; and finds real drivers by name, path and scheme. */
#include <check.h>
#include <ftw.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outbox_int.h"

static char path_buf[4096];

static const char *modules_dir(void)
{
    const char *dir = getenv("OUTBOX_TEST_MODULES");
    ck_assert_msg(dir != NULL, "OUTBOX_TEST_MODULES is not set");
    return dir;
}

static const char *module(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "%s/%s.so", modules_dir(), name);
    return path_buf;
}

/* Directories a test made, removed with all they hold when it ends. */
static char made[4][64];
static int n_made;

static void temp_dir(char out[64])
{
    snprintf(out, 64, "/tmp/outbox-loader-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(out));
    ck_assert_int_lt(n_made, 4);
    snprintf(made[n_made++], sizeof made[0], "%s", out);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_made(void)
{
    while (n_made > 0)
        nftw(made[--n_made], remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    ck_assert_msg(in != NULL && out != NULL, "cannot copy %s to %s", from, to);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
}

/* Lines in a file; -1 when it does not exist. */
static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* The warnings the core logged. */
static char warnings[8192];

static void keep_warnings(void *ctx, int level, const char *line)
{
    (void)ctx;
    if (level == OUTBOX_LOG_WARN) {
        size_t off = strlen(warnings);
        snprintf(warnings + off, sizeof warnings - off, "%s\n", line);
    }
}

START_TEST(refuses_plain_shared_object)
{
    const outbox_driver_t *drv = (void *)1;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("not_a_driver"), &drv, &d), OUTBOX_EABI);
    ck_assert_ptr_null(drv);
    ck_assert_msg(strstr(d.message, "not a liboutbox driver: no outbox_driver_entry symbol"), "%s",
                  d.message);
}
END_TEST

START_TEST(refuses_wrong_abi_with_expected_and_found)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("wrong_abi"), &drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "ABI mismatch: expected major 1, got 99.0"), "%s", d.message);
}
END_TEST

START_TEST(refuses_short_descriptor)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("wrong_size"), &drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "descriptor too small: expected at least"), "%s", d.message);
    ck_assert_msg(strstr(d.message, "got 8"), "%s", d.message);
}
END_TEST

START_TEST(refuses_missing_required_entry_without_running_init)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("missing_entry"), &drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "required store entry claim is missing"), "%s", d.message);
    ck_assert_msg(strstr(d.message, "init must not run") == NULL, "%s", d.message);
}
END_TEST

START_TEST(refuses_file_that_is_not_elf_with_the_loaders_reason)
{
    char tmpl[] = "/tmp/outbox-loader-XXXXXX.so";
    int fd = mkstemps(tmpl, 3);
    ck_assert_int_ge(fd, 0);
    /* Longer than an ELF header, so the reason is the header, not the size. */
    const char text[] = "This is a text file that a user named like a driver module.\n"
                        "It is long enough to hold an ELF header, but it has none.\n";
    ck_assert_int_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    int rc = outbox_driver_load(tmpl, &drv, &d);
    unlink(tmpl);
    ck_assert_int_eq(rc, OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "cannot load"), "%s", d.message);
    ck_assert_msg(strstr(d.message, "file not found") == NULL, "%s", d.message);
    ck_assert_msg(strstr(d.message, "invalid ELF header") || strstr(d.message, "Exec format error"),
                  "%s", d.message);
}
END_TEST

START_TEST(reports_an_undefined_symbol)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("undefined_symbol"), &drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "cannot load: "), "%s", d.message);
    ck_assert_msg(strstr(d.message, "outbox_test_symbol_nobody_defines"), "%s", d.message);
    ck_assert_msg(strstr(d.message, "file not found") == NULL, "%s", d.message);
}
END_TEST

START_TEST(refuses_newer_abi_minor_saying_what_it_supports)
{
    char want[160];
    snprintf(want, sizeof want,
             "ABI mismatch: this host supports %d.0 through %d.%d, the driver needs %d.%d",
             OUTBOX_ABI_MAJOR, OUTBOX_ABI_MAJOR, OUTBOX_ABI_MINOR, OUTBOX_ABI_MAJOR,
             OUTBOX_ABI_MINOR + 1);
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("minor_next"), &drv, &d), OUTBOX_EABI);
    ck_assert_ptr_null(drv);
    ck_assert_msg(strstr(d.message, want), "%s", d.message);
}
END_TEST

START_TEST(loads_the_current_and_an_older_abi_minor)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_load(module("minor_current"), &drv, &d) == OUTBOX_OK, "%s",
                  d.message);
    ck_assert_uint_eq(drv->abi_minor, OUTBOX_ABI_MINOR);
    ck_assert_msg(outbox_driver_load(module("minor_zero"), &drv, &d) == OUTBOX_OK, "%s",
                  d.message);
    ck_assert_uint_eq(drv->abi_minor, 0);
}
END_TEST

START_TEST(short_store_vtable_is_told_the_size_of_all_required_entries)
{
    /* settle is the last required store entry. */
    char want[160];
    snprintf(want, sizeof want,
             "store vtable too small: needs at least %zu bytes for its required entries, got 24",
             offsetof(outbox_store_vtable_t, settle) + sizeof(((outbox_store_vtable_t *)0)->settle));
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("short_vtable"), &drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, want), "%s", d.message);
    ck_assert_msg(strstr(d.message, "init must not run") == NULL, "%s", d.message);
}
END_TEST

/* begin without commit and rollback: the core would call a NULL commit. */
START_TEST(partial_transaction_entries_refused)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("partial_tx"), &drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "store entries begin, commit, rollback come together, but "
                                    "commit is missing"),
                  "%s", d.message);
    ck_assert_ptr_null(drv);
}
END_TEST

/* inbox_accept without inbox_purge and inbox_stats: `outbox inbox purge`
 * would call a NULL entry. */
START_TEST(partial_inbox_entries_refused)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(module("partial_inbox"), &drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "store entries inbox_accept, inbox_purge, inbox_stats come "
                                    "together, but inbox_purge is missing"),
                  "%s", d.message);
    ck_assert_ptr_null(drv);
}
END_TEST

static int k_open(const outbox_sink_open_t *p, void **h, outbox_diag_t *d)
{
    (void)p, (void)d;
    *h = NULL;
    return OUTBOX_OK;
}

static void k_close(void *h)
{
    (void)h;
}

static int k_publish(void *h, const outbox_message_t *m, size_t n, outbox_publish_result_t *r,
                     outbox_diag_t *d)
{
    (void)h, (void)m, (void)n, (void)r, (void)d;
    return OUTBOX_OK;
}

static int noop_init(const outbox_host_t *h, outbox_diag_t *d);

START_TEST(short_sink_vtable_is_told_the_size_of_all_required_entries)
{
    static const outbox_sink_vtable_t vt = {.struct_size = 16, .open = k_open};
    static const outbox_driver_t drv = {.struct_size = sizeof drv, .abi_major = OUTBOX_ABI_MAJOR,
                                        .abi_minor = OUTBOX_ABI_MINOR, .kind = OUTBOX_DRIVER_SINK,
                                        .name = "short", .init = noop_init, .sink = &vt};
    char want[160];
    snprintf(want, sizeof want,
             "sink vtable too small: needs at least %zu bytes for its required entries, got 16",
             offsetof(outbox_sink_vtable_t, publish) + sizeof(((outbox_sink_vtable_t *)0)->publish));
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_register(&drv, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, want), "%s", d.message);
}
END_TEST

START_TEST(refuses_directories_before_libltdl_sees_them)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load("/", &drv, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "driver file / is not a regular file (a directory)"), "%s",
                  d.message);
    char dir[64], sub[128];
    temp_dir(dir);
    snprintf(sub, sizeof sub, "%s/store-x.so", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    ck_assert_int_eq(outbox_driver_load(sub, &drv, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "is not a regular file (a directory)"), "%s", d.message);
}
END_TEST

typedef struct problems {
    char text[4096];
} problems_t;

static void keep_problem(void *ctx, const char *path, const char *reason)
{
    problems_t *p = ctx;
    size_t off = strlen(p->text);
    snprintf(p->text + off, sizeof p->text - off, "%s: %s\n", path, reason);
}

/* Runs under a short timeout: reading a FIFO would block forever. */
START_TEST(skips_a_fifo_without_blocking)
{
    char dir[64], fifo[128];
    temp_dir(dir);
    snprintf(fifo, sizeof fifo, "%s/store-x.so", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load(fifo, &drv, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "is not a regular file (a FIFO)"), "%s", d.message);

    setenv("OUTBOX_DRIVER_PATH", dir, 1);
    ck_assert_int_eq(outbox_driver_load("x", &drv, &d), OUTBOX_ENOTFOUND);
    ck_assert_msg(strstr(d.message, "1 module on the driver path could not be read"), "%s",
                  d.message);
    problems_t p = {{0}};
    ck_assert_int_eq(outbox_drivers_list(NULL, keep_problem, &p), OUTBOX_OK);
    ck_assert_msg(strstr(p.text, "store-x.so: skipped: not a regular file (a FIFO)"), "%s", p.text);
}
END_TEST

START_TEST(missing_file_and_unknown_name)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load("/nonexistent/x.so", &drv, &d), OUTBOX_ENOTFOUND);
    ck_assert_msg(strstr(d.message, "driver file /nonexistent/x.so does not exist"), "%s",
                  d.message);
    ck_assert_int_eq(outbox_driver_load("nosuchdriver", &drv, &d), OUTBOX_ENOTFOUND);
    ck_assert_msg(strstr(d.message, "no driver named nosuchdriver"), "%s", d.message);
}
END_TEST

START_TEST(finds_sqlite_by_name_scheme_and_path)
{
    const outbox_driver_t *a = NULL, *b = NULL, *c = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load("sqlite", &a, &d), OUTBOX_OK);
    ck_assert_str_eq(a->name, "sqlite");
    ck_assert_int_eq(a->kind, OUTBOX_DRIVER_STORE);
    ck_assert_int_eq(outbox_loader_for_scheme("sqlite", OUTBOX_DRIVER_STORE, &b, &d), OUTBOX_OK);
    ck_assert_ptr_eq(a, b);
    ck_assert_int_eq(outbox_driver_load("store-sqlite", &c, &d), OUTBOX_OK);
    ck_assert_ptr_eq(a, c);
}
END_TEST

START_TEST(wrong_kind_and_unknown_scheme)
{
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_loader_load("store-sqlite", OUTBOX_DRIVER_SINK, &drv, &d), OUTBOX_EINVAL);
    ck_assert_msg(strstr(d.message, "is a store driver, expected a sink driver"), "%s", d.message);
    ck_assert_int_eq(outbox_loader_for_scheme("gopher", OUTBOX_DRIVER_STORE, &drv, &d),
                     OUTBOX_ENOTFOUND);
    ck_assert_msg(strstr(d.message, "unknown URI scheme \"gopher\""), "%s", d.message);
}
END_TEST

START_TEST(installed_directory_is_skipped_in_tests)
{
    /* Only the build tree's drivers: mongodb has no module there in this build. */
    setenv("OUTBOX_DRIVER_PATH", "/nonexistent", 1);
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_load("sqlite", &drv, &d), OUTBOX_ENOTFOUND);
}
END_TEST

typedef struct seen {
    int good_sqlite, good_file, good_minor, bad_abi, bad_plain, bad_missing, bad_minor, bad_short;
} seen_t;

static void on_good(void *ctx, const outbox_driver_info_t *info)
{
    seen_t *s = ctx;
    if (strcmp(info->name, "sqlite") == 0 && strcmp(info->kind, "store") == 0 && info->abi_major == 1)
        s->good_sqlite++;
    if (strcmp(info->name, "file") == 0 && strcmp(info->kind, "sink") == 0)
        s->good_file++;
    if (strncmp(info->name, "minor_", 6) == 0)
        s->good_minor++;
}

static void on_bad(void *ctx, const char *path, const char *reason)
{
    seen_t *s = ctx;
    if (strstr(path, "wrong_abi") && strstr(reason, "ABI mismatch"))
        s->bad_abi++;
    if (strstr(path, "not_a_driver") && strstr(reason, "not a liboutbox driver"))
        s->bad_plain++;
    if (strstr(path, "missing_entry") && strstr(reason, "claim is missing"))
        s->bad_missing++;
    if (strstr(path, "minor_next") && strstr(reason, "refused: ABI mismatch: this host supports"))
        s->bad_minor++;
    if (strstr(path, "short_vtable") && strstr(reason, "refused: store vtable too small"))
        s->bad_short++;
}

START_TEST(list_reports_good_and_bad_modules)
{
    char path[8192];
    snprintf(path, sizeof path, "%s:%s", getenv("OUTBOX_DRIVER_PATH"), getenv("OUTBOX_TEST_MODULES"));
    setenv("OUTBOX_DRIVER_PATH", path, 1);
    seen_t s = {0};
    ck_assert_int_eq(outbox_drivers_list(on_good, on_bad, &s), OUTBOX_OK);
    ck_assert_int_eq(s.good_sqlite, 1);
    ck_assert_int_eq(s.good_file, 1);
    ck_assert_int_eq(s.bad_abi, 1);
    ck_assert_int_eq(s.bad_plain, 1);
    ck_assert_int_eq(s.bad_missing, 1);
    ck_assert_int_eq(s.good_minor, 2);
    ck_assert_int_eq(s.bad_minor, 1);
    ck_assert_int_eq(s.bad_short, 1);
}
END_TEST

static int noop_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)h, (void)d;
    return OUTBOX_OK;
}

START_TEST(register_checks_like_load)
{
    static const outbox_driver_t bad = {.struct_size = sizeof bad, .abi_major = 7,
                                        .kind = OUTBOX_DRIVER_SINK, .name = "x", .init = noop_init};
    outbox_diag_t d = {0};
    ck_assert_int_eq(outbox_driver_register(&bad, &d), OUTBOX_EABI);
    ck_assert_msg(strstr(d.message, "expected major 1, got 7.0"), "%s", d.message);
}
END_TEST

/* The marker modules' init() appends a line to this file. */
static char marker[128];

static void use_marker(void)
{
    char dir[64];
    temp_dir(dir);
    snprintf(marker, sizeof marker, "%s/init-ran", dir);
    setenv("OUTBOX_TEST_INIT_MARKER", marker, 1);
}

static void on_marker_listed(void *ctx, const outbox_driver_info_t *info)
{
    int *n = ctx;
    *n += strcmp(info->name, "marker") == 0 || strcmp(info->name, "twin") == 0;
}

START_TEST(listing_runs_no_init_and_choosing_runs_it_once)
{
    use_marker();
    setenv("OUTBOX_DRIVER_PATH", modules_dir(), 1);
    int listed = 0;
    ck_assert_int_eq(outbox_drivers_list(on_marker_listed, NULL, &listed), OUTBOX_OK);
    ck_assert_int_eq(listed, 2);
    ck_assert_msg(count_lines(marker) == -1, "listing ran a driver's init()");

    const outbox_driver_t *a = NULL, *b = NULL, *c = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_load("marker", &a, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_int_eq(count_lines(marker), 1);
    ck_assert_msg(outbox_loader_for_scheme("marker", OUTBOX_DRIVER_SINK, &b, &d) == OUTBOX_OK,
                  "%s", d.message);
    ck_assert_msg(outbox_driver_load(module("init_marker"), &c, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_ptr_eq(a, b);
    ck_assert_ptr_eq(a, c);
    ck_assert_int_eq(count_lines(marker), 1);
    /* Only the chosen one: its twin on the path was read, not initialised. */
    ck_assert_int_eq(outbox_drivers_list(NULL, NULL, NULL), OUTBOX_OK);
    ck_assert_int_eq(count_lines(marker), 1);
}
END_TEST

START_TEST(same_name_twice_on_the_path_first_wins_with_a_warning)
{
    use_marker();
    outbox_set_logger(keep_warnings, NULL);
    char first[64], second[64], p1[128], p2[128], path[160];
    temp_dir(first);
    temp_dir(second);
    snprintf(p1, sizeof p1, "%s/init_marker.so", first);
    snprintf(p2, sizeof p2, "%s/init_marker.so", second);
    copy_file(module("init_marker"), p1);
    copy_file(module("init_marker"), p2);
    snprintf(path, sizeof path, "%s:%s", first, second);
    setenv("OUTBOX_DRIVER_PATH", path, 1);

    const outbox_driver_t *chosen = NULL, *by_path = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_load("marker", &chosen, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_msg(outbox_driver_load(p1, &by_path, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_ptr_eq(chosen, by_path);
    char want[512];
    snprintf(want, sizeof want,
             "duplicate sink driver \"marker\" in %s and %s: using %s, the first on the driver path",
             p1, p2, p1);
    ck_assert_msg(strstr(warnings, want), "logged: %s", warnings);
    /* Once, however often it is chosen. */
    ck_assert_msg(outbox_driver_load("marker", &chosen, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_msg(strstr(strstr(warnings, want) + 1, want) == NULL, "logged: %s", warnings);

    problems_t p = {{0}};
    ck_assert_int_eq(outbox_drivers_list(NULL, keep_problem, &p), OUTBOX_OK);
    ck_assert_msg(strstr(p.text, p2) && strstr(p.text, want), "%s", p.text);
}
END_TEST

START_TEST(same_scheme_twice_on_the_path_first_wins_with_a_warning)
{
    use_marker();
    outbox_set_logger(keep_warnings, NULL);
    setenv("OUTBOX_DRIVER_PATH", modules_dir(), 1);
    const outbox_driver_t *drv = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_loader_for_scheme("marker", OUTBOX_DRIVER_SINK, &drv, &d) == OUTBOX_OK,
                  "%s", d.message);
    /* Alphabetical within a directory: init_marker.so before marker_twin.so. */
    ck_assert_str_eq(drv->name, "marker");
    ck_assert_msg(strstr(warnings, "duplicate sink driver for marker: URIs in ") &&
                      strstr(warnings, "/init_marker.so and ") &&
                      strstr(warnings, "/marker_twin.so: using ") &&
                      strstr(warnings, "/init_marker.so, the first on the driver path"),
                  "logged: %s", warnings);
    /* The loser keeps its own name. */
    ck_assert_msg(outbox_driver_load("twin", &drv, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_str_eq(drv->name, "twin");
}
END_TEST

START_TEST(registered_driver_wins_over_the_path)
{
    use_marker();
    setenv("OUTBOX_DRIVER_PATH", modules_dir(), 1);
    static const outbox_sink_vtable_t vt = {.struct_size = sizeof vt, .open = k_open,
                                            .close = k_close, .publish = k_publish};
    static const char *const schemes[] = {"marker", NULL};
    static const outbox_driver_t mine = {.struct_size = sizeof mine,
                                         .abi_major = OUTBOX_ABI_MAJOR,
                                         .abi_minor = OUTBOX_ABI_MINOR,
                                         .kind = OUTBOX_DRIVER_SINK, .name = "marker",
                                         .schemes = schemes, .init = noop_init, .sink = &vt};
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_register(&mine, &d) == OUTBOX_OK, "%s", d.message);
    const outbox_driver_t *a = NULL, *b = NULL;
    ck_assert_msg(outbox_driver_load("marker", &a, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_msg(outbox_loader_for_scheme("marker", OUTBOX_DRIVER_SINK, &b, &d) == OUTBOX_OK,
                  "%s", d.message);
    ck_assert_ptr_eq(a, &mine);
    ck_assert_ptr_eq(b, &mine);
    ck_assert_int_eq(count_lines(marker), -1);
}
END_TEST

START_TEST(a_scan_is_cached_and_a_miss_reads_the_path_again)
{
    use_marker();
    char early[64], late[64], p_late[128], p_early[128], p_new[128], path[160];
    temp_dir(early);
    temp_dir(late);
    snprintf(p_late, sizeof p_late, "%s/init_marker.so", late);
    copy_file(module("init_marker"), p_late);
    char twin[128];
    snprintf(twin, sizeof twin, "%s/marker_twin.so", late);
    copy_file(module("marker_twin"), twin);
    snprintf(path, sizeof path, "%s:%s", early, late);
    setenv("OUTBOX_DRIVER_PATH", path, 1);

    const outbox_driver_t *drv = NULL, *late_marker = NULL;
    outbox_diag_t d = {0};
    ck_assert_msg(outbox_driver_load("twin", &drv, &d) == OUTBOX_OK, "%s", d.message);
    /* A marker now earlier on the path is not seen: the first scan is kept. */
    snprintf(p_early, sizeof p_early, "%s/init_marker.so", early);
    copy_file(module("init_marker"), p_early);
    ck_assert_msg(outbox_driver_load("marker", &drv, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_msg(outbox_driver_load(p_late, &late_marker, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_ptr_eq(drv, late_marker);
    /* A name the cache does not know reads the path again. */
    snprintf(p_new, sizeof p_new, "%s/minor_zero.so", early);
    copy_file(module("minor_zero"), p_new);
    ck_assert_msg(outbox_driver_load("minor_zero", &drv, &d) == OUTBOX_OK, "%s", d.message);
    /* And what was chosen stays chosen. */
    ck_assert_msg(outbox_driver_load("marker", &drv, &d) == OUTBOX_OK, "%s", d.message);
    ck_assert_ptr_eq(drv, late_marker);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("loader");
    tcase_add_checked_fixture(tc, NULL, remove_made);
    tcase_add_test(tc, refuses_plain_shared_object);
    tcase_add_test(tc, refuses_wrong_abi_with_expected_and_found);
    tcase_add_test(tc, refuses_short_descriptor);
    tcase_add_test(tc, refuses_missing_required_entry_without_running_init);
    tcase_add_test(tc, refuses_file_that_is_not_elf_with_the_loaders_reason);
    tcase_add_test(tc, reports_an_undefined_symbol);
    tcase_add_test(tc, refuses_newer_abi_minor_saying_what_it_supports);
    tcase_add_test(tc, loads_the_current_and_an_older_abi_minor);
    tcase_add_test(tc, short_store_vtable_is_told_the_size_of_all_required_entries);
    tcase_add_test(tc, short_sink_vtable_is_told_the_size_of_all_required_entries);
    tcase_add_test(tc, partial_transaction_entries_refused);
    tcase_add_test(tc, partial_inbox_entries_refused);
    tcase_add_test(tc, refuses_directories_before_libltdl_sees_them);
    tcase_add_test(tc, missing_file_and_unknown_name);
    tcase_add_test(tc, finds_sqlite_by_name_scheme_and_path);
    tcase_add_test(tc, wrong_kind_and_unknown_scheme);
    tcase_add_test(tc, installed_directory_is_skipped_in_tests);
    tcase_add_test(tc, list_reports_good_and_bad_modules);
    tcase_add_test(tc, register_checks_like_load);
    tcase_add_test(tc, listing_runs_no_init_and_choosing_runs_it_once);
    tcase_add_test(tc, same_name_twice_on_the_path_first_wins_with_a_warning);
    tcase_add_test(tc, same_scheme_twice_on_the_path_first_wins_with_a_warning);
    tcase_add_test(tc, registered_driver_wins_over_the_path);
    tcase_add_test(tc, a_scan_is_cached_and_a_miss_reads_the_path_again);
    suite_add_tcase(s, tc);
    /* A FIFO that blocked the loader would hang the test: fail it quickly. */
    TCase *fifo = tcase_create("fifo");
    tcase_set_timeout(fifo, 10);
    tcase_add_checked_fixture(fifo, NULL, remove_made);
    tcase_add_test(fifo, skips_a_fifo_without_blocking);
    suite_add_tcase(s, fifo);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

/* The driver loader: the only file that includes ltdl.h. Every libltdl
 * call and the registry of loaded drivers sit under one mutex. Drivers
 * stay loaded for the life of the process (some install exit handlers).
 *
 * Order of checks for a module: the entry symbol exists, the descriptor's
 * struct_size covers ABI 1.0, the ABI major matches, the kind and name are
 * set, the vtable's struct_size covers every required entry and none of
 * them is NULL. Only then is init() - the first driver code - called. */
#include <dirent.h>
#include <ltdl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "outbox_int.h"

#ifndef OUTBOX_DRIVER_DIR
#define OUTBOX_DRIVER_DIR "/usr/local/lib/outbox/drivers"
#endif

typedef struct loaded {
    struct loaded *next;
    char *path; /* NULL for a registered (statically linked) driver */
    const outbox_driver_t *drv;
} loaded_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int lt_ready;
static loaded_t *registry;

/* Known schemes and the module that serves them. */
static const struct {
    const char *scheme;
    const char *module;
} scheme_modules[] = {
    {"sqlite", "store-sqlite"},   {"postgresql", "store-postgres"}, {"postgres", "store-postgres"},
    {"mongodb", "store-mongo"},   {"file", "sink-file"},           {"stdout", "sink-file"},
    {"kafka", "sink-kafka"},      {"nats", "sink-nats"},           {"amqp", "sink-amqp"},
    {"http", "sink-http"},        {"https", "sink-http"},          {"redis", "sink-redis"},
    {"null", "sink-null"},
};

static const char *kind_name(uint32_t kind)
{
    return kind == OUTBOX_DRIVER_STORE ? "store" : kind == OUTBOX_DRIVER_SINK ? "sink" : "driver";
}

#define REQUIRE(vt, member, label)                                                               \
    do {                                                                                         \
        if ((vt)->struct_size < offsetof(__typeof__(*(vt)), member) + sizeof((vt)->member))      \
            return outbox_diag_set(d, OUTBOX_EABI,                                               \
                                   "%s: %s vtable too small: expected at least %zu bytes, got %u", \
                                   where, label,                                                 \
                                   offsetof(__typeof__(*(vt)), member) + sizeof((vt)->member),   \
                                   (unsigned)(vt)->struct_size);                                 \
        if ((vt)->member == NULL)                                                                \
            return outbox_diag_set(d, OUTBOX_EABI, "%s: required %s entry %s is missing", where,  \
                                   label, #member);                                              \
    } while (0)

static int check_descriptor(const outbox_driver_t *drv, const char *where, outbox_diag_t *d)
{
    const size_t min_size = offsetof(outbox_driver_t, sink) + sizeof(drv->sink);
    if (drv == NULL)
        return outbox_diag_set(d, OUTBOX_EABI, "%s: entry function returned no descriptor", where);
    if (drv->struct_size < min_size)
        return outbox_diag_set(d, OUTBOX_EABI,
                               "%s: descriptor too small: expected at least %zu bytes, got %u",
                               where, min_size, (unsigned)drv->struct_size);
    if (drv->abi_major != OUTBOX_ABI_MAJOR)
        return outbox_diag_set(d, OUTBOX_EABI, "%s: ABI mismatch: expected major %d, got %u.%u",
                               where, OUTBOX_ABI_MAJOR, (unsigned)drv->abi_major,
                               (unsigned)drv->abi_minor);
    if (drv->name == NULL || drv->name[0] == '\0')
        return outbox_diag_set(d, OUTBOX_EABI, "%s: descriptor has no name", where);
    if (drv->init == NULL)
        return outbox_diag_set(d, OUTBOX_EABI, "%s: required entry init is missing", where);
    if (drv->kind == OUTBOX_DRIVER_STORE) {
        const outbox_store_vtable_t *vt = drv->store;
        if (vt == NULL)
            return outbox_diag_set(d, OUTBOX_EABI, "%s: store driver has no store vtable", where);
        REQUIRE(vt, open, "store");
        REQUIRE(vt, close, "store");
        REQUIRE(vt, capabilities, "store");
        REQUIRE(vt, schema_ddl, "store");
        REQUIRE(vt, stage, "store");
        REQUIRE(vt, claim, "store");
        REQUIRE(vt, settle, "store");
    } else if (drv->kind == OUTBOX_DRIVER_SINK) {
        const outbox_sink_vtable_t *vt = drv->sink;
        if (vt == NULL)
            return outbox_diag_set(d, OUTBOX_EABI, "%s: sink driver has no sink vtable", where);
        REQUIRE(vt, open, "sink");
        REQUIRE(vt, close, "sink");
        REQUIRE(vt, publish, "sink");
    } else {
        return outbox_diag_set(d, OUTBOX_EABI,
                               "%s: unknown driver kind: expected %d (store) or %d (sink), got %u",
                               where, OUTBOX_DRIVER_STORE, OUTBOX_DRIVER_SINK, (unsigned)drv->kind);
    }
    return OUTBOX_OK;
}

static int lt_init_locked(outbox_diag_t *d)
{
    if (!lt_ready) {
        if (lt_dlinit() != 0)
            return outbox_diag_set(d, OUTBOX_EPERMANENT, "cannot initialise libltdl: %s",
                                   lt_dlerror());
        lt_ready = 1;
    }
    return OUTBOX_OK;
}

static int registry_add(const char *path, const outbox_driver_t *drv, outbox_diag_t *d)
{
    loaded_t *l = calloc(1, sizeof *l);
    if (l == NULL || (path != NULL && (l->path = strdup(path)) == NULL)) {
        free(l);
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    }
    l->drv = drv;
    l->next = registry;
    registry = l;
    return OUTBOX_OK;
}

/* Check, init and remember a descriptor. Caller holds the lock. */
static int admit_locked(const char *path, const outbox_driver_t *drv, const char *where,
                        outbox_diag_t *d)
{
    int rc = check_descriptor(drv, where, d);
    if (rc != OUTBOX_OK)
        return rc;
    outbox_diag_t id = {0};
    rc = drv->init(outbox_host_table(), &id);
    if (rc != OUTBOX_OK)
        return outbox_diag_set(d, rc < 0 ? rc : OUTBOX_EPERMANENT, "%s: driver init failed: %s",
                               where, id.message[0] ? id.message : outbox_strerror(rc));
    return registry_add(path, drv, d);
}

static const outbox_driver_t *find_loaded_path(const char *path)
{
    for (loaded_t *l = registry; l != NULL; l = l->next)
        if (l->path != NULL && strcmp(l->path, path) == 0)
            return l->drv;
    return NULL;
}

/* dlopen one file and admit it. Caller holds the lock. */
static int load_path_locked(const char *path, const outbox_driver_t **out, outbox_diag_t *d)
{
    char real[4096];
    if (realpath(path, real) == NULL)
        return outbox_diag_set(d, OUTBOX_ENOTFOUND, "driver file %s not found", path);
    const outbox_driver_t *known = find_loaded_path(real);
    if (known != NULL) {
        *out = known;
        return OUTBOX_OK;
    }
    int rc = lt_init_locked(d);
    if (rc != OUTBOX_OK)
        return rc;
    lt_dladvise advise;
    lt_dlhandle h = NULL;
    if (lt_dladvise_init(&advise) == 0) {
        lt_dladvise_local(&advise);
        h = lt_dlopenadvise(real, advise);
        lt_dladvise_destroy(&advise);
    }
    if (h == NULL)
        return outbox_diag_set(d, OUTBOX_EABI, "%s: cannot load: %s", real, lt_dlerror());
    outbox_driver_entry_fn entry;
    void *sym = lt_dlsym(h, OUTBOX_DRIVER_ENTRY_SYMBOL);
    if (sym == NULL) {
        lt_dlclose(h);
        return outbox_diag_set(d, OUTBOX_EABI, "%s: not a liboutbox driver: no %s symbol", real,
                               OUTBOX_DRIVER_ENTRY_SYMBOL);
    }
    memcpy(&entry, &sym, sizeof entry); /* object to function pointer, as dlsym requires */
    rc = admit_locked(real, entry(), real, d);
    if (rc != OUTBOX_OK) {
        lt_dlclose(h);
        return rc;
    }
    *out = registry->drv;
    return OUTBOX_OK;
}

/* The directories to search, in order, as one malloc'd colon list. */
static char *search_path(void)
{
    const char *env = getenv("OUTBOX_DRIVER_PATH");
    const char *no_installed = getenv("OUTBOX_NO_INSTALLED_DRIVERS");
    int installed = !(no_installed != NULL && no_installed[0] != '\0' && strcmp(no_installed, "0"));
    size_t len = (env ? strlen(env) : 0) + sizeof(OUTBOX_DRIVER_DIR) + 2;
    char *p = malloc(len);
    if (p == NULL)
        return NULL;
    snprintf(p, len, "%s%s%s", env ? env : "", env && installed ? ":" : "",
             installed ? OUTBOX_DRIVER_DIR : "");
    return p;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Look for module.so in every directory of the search path. */
static int load_module_locked(const char *module, const outbox_driver_t **out, outbox_diag_t *d)
{
    char *dirs = search_path();
    if (dirs == NULL)
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    int rc = OUTBOX_ENOTFOUND;
    char *save = NULL;
    for (char *dir = strtok_r(dirs, ":", &save); dir != NULL; dir = strtok_r(NULL, ":", &save)) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s.so", dir, module) >= sizeof path)
            continue;
        if (file_exists(path)) {
            rc = load_path_locked(path, out, d);
            break;
        }
    }
    free(dirs);
    return rc;
}

static const outbox_driver_t *find_registered(const char *name, uint32_t kind)
{
    for (loaded_t *l = registry; l != NULL; l = l->next) {
        if (kind != 0 && l->drv->kind != kind)
            continue;
        char full[256];
        snprintf(full, sizeof full, "%s-%s", kind_name(l->drv->kind), l->drv->name);
        if (strcmp(l->drv->name, name) == 0 || strcmp(full, name) == 0)
            return l->drv;
    }
    return NULL;
}

static const outbox_driver_t *find_by_scheme(const char *scheme, uint32_t kind)
{
    for (loaded_t *l = registry; l != NULL; l = l->next) {
        if (kind != 0 && l->drv->kind != kind)
            continue;
        for (const char *const *s = l->drv->schemes; s != NULL && *s != NULL; s++)
            if (strcmp(*s, scheme) == 0)
                return l->drv;
    }
    return NULL;
}

static int kind_matches(const outbox_driver_t *drv, uint32_t kind, const char *what,
                        outbox_diag_t *d)
{
    if (kind != 0 && drv->kind != kind)
        return outbox_diag_set(d, OUTBOX_EINVAL, "driver %s is a %s driver, expected a %s driver",
                               what, kind_name(drv->kind), kind_name(kind));
    return OUTBOX_OK;
}

int outbox_loader_load(const char *name_or_path, uint32_t kind, const outbox_driver_t **out,
                       outbox_diag_t *d)
{
    *out = NULL;
    if (name_or_path == NULL || name_or_path[0] == '\0')
        return outbox_diag_set(d, OUTBOX_EINVAL, "empty driver name");
    pthread_mutex_lock(&lock);
    const outbox_driver_t *drv = NULL;
    int rc;
    if (strchr(name_or_path, '/') != NULL) {
        rc = load_path_locked(name_or_path, &drv, d);
    } else if ((drv = find_registered(name_or_path, kind)) != NULL) {
        rc = OUTBOX_OK;
    } else {
        char module[256];
        rc = load_module_locked(name_or_path, &drv, d);
        for (uint32_t k = OUTBOX_DRIVER_STORE; rc == OUTBOX_ENOTFOUND && k <= OUTBOX_DRIVER_SINK; k++) {
            if (kind != 0 && k != kind)
                continue;
            snprintf(module, sizeof module, "%s-%s", kind_name(k), name_or_path);
            rc = load_module_locked(module, &drv, d);
        }
        if (rc == OUTBOX_ENOTFOUND)
            outbox_diag_set(d, rc, "no %s%sdriver named %s on the driver path",
                            kind ? kind_name(kind) : "", kind ? " " : "", name_or_path);
    }
    if (rc == OUTBOX_OK)
        rc = kind_matches(drv, kind, name_or_path, d);
    pthread_mutex_unlock(&lock);
    if (rc == OUTBOX_OK)
        *out = drv;
    return rc;
}

int outbox_loader_for_scheme(const char *scheme, uint32_t kind, const outbox_driver_t **out,
                             outbox_diag_t *d)
{
    *out = NULL;
    pthread_mutex_lock(&lock);
    const outbox_driver_t *drv = find_by_scheme(scheme, kind);
    int rc = drv != NULL ? OUTBOX_OK : OUTBOX_ENOTFOUND;
    const char *module = NULL;
    for (size_t i = 0; drv == NULL && i < sizeof scheme_modules / sizeof scheme_modules[0]; i++)
        if (strcmp(scheme_modules[i].scheme, scheme) == 0)
            module = scheme_modules[i].module;
    if (drv == NULL && module != NULL) {
        rc = load_module_locked(module, &drv, d);
        if (rc == OUTBOX_ENOTFOUND)
            outbox_diag_set(d, rc, "no driver for %s: URIs (module %s.so not found on the driver path)",
                            scheme, module);
    } else if (drv == NULL) {
        char guess[256];
        snprintf(guess, sizeof guess, "%s-%s", kind_name(kind), scheme);
        rc = kind != 0 ? load_module_locked(guess, &drv, d) : OUTBOX_ENOTFOUND;
        if (rc == OUTBOX_ENOTFOUND)
            outbox_diag_set(d, rc, "unknown URI scheme \"%s\": no %s driver serves it", scheme,
                            kind_name(kind));
    }
    if (rc == OUTBOX_OK)
        rc = kind_matches(drv, kind, scheme, d);
    pthread_mutex_unlock(&lock);
    if (rc == OUTBOX_OK)
        *out = drv;
    return rc;
}

int outbox_driver_load(const char *name_or_path, const outbox_driver_t **out, outbox_diag_t *d)
{
    return outbox_loader_load(name_or_path, 0, out, d);
}

int outbox_driver_register(const outbox_driver_t *driver, outbox_diag_t *d)
{
    pthread_mutex_lock(&lock);
    int rc = OUTBOX_OK;
    int seen = 0;
    for (loaded_t *l = registry; l != NULL; l = l->next)
        seen |= l->drv == driver;
    if (!seen)
        rc = admit_locked(NULL, driver, driver && driver->name ? driver->name : "(registered)", d);
    pthread_mutex_unlock(&lock);
    return rc;
}

static int is_module_name(const char *n)
{
    size_t len = strlen(n);
    return len > 3 && strcmp(n + len - 3, ".so") == 0;
}

static void report(const outbox_driver_t *drv, const char *path,
                   void (*good)(void *, const outbox_driver_info_t *), void *ctx)
{
    char schemes[256] = "";
    size_t off = 0;
    for (const char *const *s = drv->schemes; s != NULL && *s != NULL; s++) {
        int w = snprintf(schemes + off, sizeof schemes - off, "%s%s", off ? "," : "", *s);
        if (w < 0 || (size_t)w >= sizeof schemes - off)
            break;
        off += (size_t)w;
    }
    outbox_driver_info_t info = {
        .name = drv->name,
        .kind = kind_name(drv->kind),
        .abi_major = drv->abi_major,
        .abi_minor = drv->abi_minor,
        .version = drv->version ? drv->version : "",
        .path = path,
        .schemes = schemes,
    };
    good(ctx, &info);
}

int outbox_drivers_list(void (*good)(void *ctx, const outbox_driver_info_t *info),
                        void (*bad)(void *ctx, const char *path, const char *reason), void *ctx)
{
    char *dirs = search_path();
    if (dirs == NULL)
        return OUTBOX_ENOMEM;
    char *save = NULL;
    for (char *dir = strtok_r(dirs, ":", &save); dir != NULL; dir = strtok_r(NULL, ":", &save)) {
        DIR *dh = opendir(dir);
        if (dh == NULL)
            continue;
        struct dirent **names = NULL;
        closedir(dh);
        int n = scandir(dir, &names, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            char path[4096];
            if (is_module_name(names[i]->d_name) &&
                (size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name) < sizeof path) {
                const outbox_driver_t *drv = NULL;
                outbox_diag_t d = {0};
                pthread_mutex_lock(&lock);
                int rc = load_path_locked(path, &drv, &d);
                pthread_mutex_unlock(&lock);
                char real[4096];
                if (rc == OUTBOX_OK && good != NULL)
                    report(drv, realpath(path, real) ? real : path, good, ctx);
                else if (rc != OUTBOX_OK && bad != NULL)
                    bad(ctx, path, d.message);
            }
            free(names[i]);
        }
        free(names);
    }
    free(dirs);
    return OUTBOX_OK;
}

/* The driver loader: the only file that includes ltdl.h. Every libltdl and
 * dlopen call, the registry of initialised drivers and the cache of what
 * the search path holds sit under one mutex. Drivers stay loaded for the
 * life of the process (some install exit handlers).
 *
 * A driver is found in two steps. Reading a module hands a regular file
 * (never a directory or a FIFO) to the dynamic loader, calls its entry
 * function and checks the descriptor against the ABI rules stated in
 * outbox/driver.h (versions, required entries and groups), the one place
 * they are written; the checks below apply them. Nothing of the driver but its entry
 * function has run then, which is what lets the whole search path be read
 * to learn the names and URI schemes the modules claim. Admitting a driver
 * calls its init(): once, and only for a driver that is actually chosen. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <ltdl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "outbox_int.h"

#ifndef OUTBOX_DRIVER_DIR
#define OUTBOX_DRIVER_DIR "/usr/local/lib/outbox/drivers"
#endif

/* How an admitted driver came in; it decides which wins a name or scheme. */
enum origin {
    ORIGIN_REGISTERED, /* outbox_driver_register: wins over the search path */
    ORIGIN_SEARCH,     /* chosen from the search path by name or scheme */
    ORIGIN_FILE,       /* loaded by an explicit file path */
};

/* A driver whose init() has run. */
typedef struct loaded {
    struct loaded *next;
    char *path; /* resolved file; NULL for a registered driver */
    const outbox_driver_t *drv;
    enum origin origin;
} loaded_t;

/* One *.so entry of the search path, read but not initialised. */
typedef struct module {
    struct module *next;
    char *path;                  /* as found: directory/file.so */
    char *real;                  /* resolved path; NULL when skipped */
    const outbox_driver_t *drv;  /* NULL when skipped or refused */
    char *problem;               /* why skipped or refused, or the duplicate warning */
    const struct module *winner; /* the earlier module it loses a name or scheme to */
    int warned;                  /* that warning has gone to the log */
} module_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int lt_ready;
static loaded_t *registry;
/* What the last scan of the search path found, and the path it read, so
 * that opening a store does not read every module again. */
static char *cache_dirs;
static module_t *cache;

static const char *kind_name(uint32_t kind)
{
    return kind == OUTBOX_DRIVER_STORE ? "store" : kind == OUTBOX_DRIVER_SINK ? "sink" : "driver";
}

/* malloc'd printf; NULL when out of memory. */
static char *dup_printf(const char *fmt, ...) OUTBOX_PRINTF(1, 2);
static char *dup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

/* ---------------------------------------------------------- descriptor */

/* A required vtable entry: its name, where it starts, and where it ends. */
typedef struct required {
    const char *name;
    size_t offset;
    size_t end;
} required_t;

#define REQUIRED(type, member)                                                                   \
    {#member, offsetof(type, member), offsetof(type, member) + sizeof(((type *)NULL)->member)}

static const required_t store_required[] = {
    REQUIRED(outbox_store_vtable_t, open),
    REQUIRED(outbox_store_vtable_t, close),
    REQUIRED(outbox_store_vtable_t, capabilities),
    REQUIRED(outbox_store_vtable_t, schema_ddl),
    REQUIRED(outbox_store_vtable_t, stage),
    REQUIRED(outbox_store_vtable_t, claim),
    REQUIRED(outbox_store_vtable_t, settle),
};

/* Optional store entries that only work together: the core calls commit
 * after begin, native_end after native_begin. A driver has all of a group
 * or none of it. */
static const required_t store_tx_group[] = {
    REQUIRED(outbox_store_vtable_t, begin),
    REQUIRED(outbox_store_vtable_t, commit),
    REQUIRED(outbox_store_vtable_t, rollback),
};
static const required_t store_native_group[] = {
    REQUIRED(outbox_store_vtable_t, native_begin),
    REQUIRED(outbox_store_vtable_t, native_end),
};
static const required_t store_inbox_group[] = {
    REQUIRED(outbox_store_vtable_t, inbox_accept),
    REQUIRED(outbox_store_vtable_t, inbox_purge),
    REQUIRED(outbox_store_vtable_t, inbox_stats),
};

static const required_t sink_required[] = {
    REQUIRED(outbox_sink_vtable_t, open),
    REQUIRED(outbox_sink_vtable_t, close),
    REQUIRED(outbox_sink_vtable_t, publish),
};

/* The size is checked against all required entries at once, so a short
 * vtable is told the size it really needs, not the first entry it lacks. */
static int check_vtable(const void *vt, uint32_t size, const char *label, const required_t *req,
                        size_t n, const char *where, outbox_diag_t *d)
{
    size_t need = 0;
    for (size_t i = 0; i < n; i++)
        if (req[i].end > need)
            need = req[i].end;
    if (size < need)
        return outbox_diag_set(d, OUTBOX_EABI,
                               "%s: %s vtable too small: needs at least %zu bytes for its required "
                               "entries, got %u",
                               where, label, need, (unsigned)size);
    for (size_t i = 0; i < n; i++) {
        /* Every function pointer has the same representation (dlsym relies
         * on it too), so one type reads them all. */
        void (*entry)(void);
        memcpy(&entry, (const char *)vt + req[i].offset, sizeof entry);
        if (entry == NULL)
            return outbox_diag_set(d, OUTBOX_EABI, "%s: required %s entry %s is missing", where,
                                   label, req[i].name);
    }
    return OUTBOX_OK;
}

/* The entry at req's place, or NULL when the vtable is too short for it. */
static int entry_set(const void *vt, uint32_t size, const required_t *req)
{
    if (size < req->end)
        return 0;
    void (*entry)(void);
    memcpy(&entry, (const char *)vt + req->offset, sizeof entry);
    return entry != NULL;
}

static int check_group(const void *vt, uint32_t size, const required_t *group, size_t n,
                       const char *where, outbox_diag_t *d)
{
    size_t set = 0;
    for (size_t i = 0; i < n; i++)
        set += (size_t)entry_set(vt, size, &group[i]);
    if (set == 0 || set == n)
        return OUTBOX_OK;
    char names[128] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 group[i].name);
    for (size_t i = 0; i < n; i++)
        if (!entry_set(vt, size, &group[i]))
            return outbox_diag_set(d, OUTBOX_EABI,
                                   "%s: store entries %s come together, but %s is missing", where,
                                   names, group[i].name);
    return OUTBOX_OK;
}

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
    /* An older minor only lacks what was appended since, which the core
     * reads by struct_size; a newer one may need host entries this host
     * does not have. */
    if (drv->abi_minor > OUTBOX_ABI_MINOR)
        return outbox_diag_set(d, OUTBOX_EABI,
                               "%s: ABI mismatch: this host supports %d.0 through %d.%d, the "
                               "driver needs %u.%u",
                               where, OUTBOX_ABI_MAJOR, OUTBOX_ABI_MAJOR, OUTBOX_ABI_MINOR,
                               (unsigned)drv->abi_major, (unsigned)drv->abi_minor);
    if (drv->name == NULL || drv->name[0] == '\0')
        return outbox_diag_set(d, OUTBOX_EABI, "%s: descriptor has no name", where);
    if (drv->init == NULL)
        return outbox_diag_set(d, OUTBOX_EABI, "%s: required entry init is missing", where);
    if (drv->kind == OUTBOX_DRIVER_STORE) {
        if (drv->store == NULL)
            return outbox_diag_set(d, OUTBOX_EABI, "%s: store driver has no store vtable", where);
        const outbox_store_vtable_t *vt = drv->store;
        int rc = check_vtable(vt, vt->struct_size, "store", store_required,
                              sizeof store_required / sizeof store_required[0], where, d);
        if (rc == OUTBOX_OK)
            rc = check_group(vt, vt->struct_size, store_tx_group,
                             sizeof store_tx_group / sizeof store_tx_group[0], where, d);
        if (rc == OUTBOX_OK)
            rc = check_group(vt, vt->struct_size, store_native_group,
                             sizeof store_native_group / sizeof store_native_group[0], where, d);
        if (rc == OUTBOX_OK)
            rc = check_group(vt, vt->struct_size, store_inbox_group,
                             sizeof store_inbox_group / sizeof store_inbox_group[0], where, d);
        return rc;
    }
    if (drv->kind == OUTBOX_DRIVER_SINK) {
        if (drv->sink == NULL)
            return outbox_diag_set(d, OUTBOX_EABI, "%s: sink driver has no sink vtable", where);
        return check_vtable(drv->sink, drv->sink->struct_size, "sink", sink_required,
                            sizeof sink_required / sizeof sink_required[0], where, d);
    }
    return outbox_diag_set(d, OUTBOX_EABI,
                           "%s: unknown driver kind: expected %d (store) or %d (sink), got %u", where,
                           OUTBOX_DRIVER_STORE, OUTBOX_DRIVER_SINK, (unsigned)drv->kind);
}

/* ---------------------------------------------------------------- files */

/* What a file is when it is not a regular one, or NULL. Only regular files
 * go to the dynamic loader: libltdl asserts on a directory, and reading a
 * FIFO blocks until someone writes to it. */
static const char *not_regular(mode_t mode)
{
    if (S_ISREG(mode))
        return NULL;
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "of an unknown type";
}

/* A file the caller named: it must exist and be regular; real gets its resolved path. */
static int check_file(const char *path, char real[PATH_MAX], outbox_diag_t *d)
{
    struct stat st;
    char eb[128];
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return outbox_diag_set(d, OUTBOX_ENOTFOUND, "driver file %s does not exist", path);
        return outbox_diag_set(d, OUTBOX_ENOTFOUND, "driver file %s: %s", path,
                               strerror_r(errno, eb, sizeof eb));
    }
    const char *what = not_regular(st.st_mode);
    if (what != NULL)
        return outbox_diag_set(d, OUTBOX_EINVAL, "driver file %s is not a regular file (%s)", path,
                               what);
    if (realpath(path, real) == NULL)
        return outbox_diag_set(d, OUTBOX_ENOTFOUND, "driver file %s: %s", path,
                               strerror_r(errno, eb, sizeof eb));
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

/* libltdl reports most failures as "file not found": lt_dlerror() keeps
 * the error of its last attempt, and after the real file fails it goes on
 * to other names and loaders. The dynamic loader itself says what is wrong
 * (not an ELF file, an undefined symbol, a missing library), so a failed
 * file is opened once more with dlopen, on this failure path only, to ask
 * it. Going through libltdl for that would need a loader of our own put
 * in front of its dlopen loader: the same dlopen call with more code, and
 * libltdl would still try its own loader after ours. */
static void load_error(const char *real, char *buf, size_t len)
{
    const char *why = lt_dlerror();
    (void)dlerror(); /* forget an older error */
    void *h = dlopen(real, RTLD_LAZY | RTLD_LOCAL);
    const char *dl = h == NULL ? dlerror() : NULL;
    if (h != NULL)
        dlclose(h);
    if (dl != NULL) {
        size_t n = strlen(real);
        /* glibc starts with the file name, which our message has already. */
        if (strncmp(dl, real, n) == 0 && strncmp(dl + n, ": ", 2) == 0)
            dl += n + 2;
        why = dl;
    }
    snprintf(buf, len, "%s", why != NULL ? why : "unknown error");
}

/* Read a module: dlopen the (regular) file, call its entry function, check
 * the descriptor. A refused module is closed again; a good one stays
 * loaded, since its descriptor lives in it. Caller holds the lock. */
static int read_module_locked(const char *real, const outbox_driver_t **out, outbox_diag_t *d)
{
    *out = NULL;
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
    if (h == NULL) {
        char why[OUTBOX_MESSAGE_MAX];
        load_error(real, why, sizeof why);
        return outbox_diag_set(d, OUTBOX_EABI, "%s: cannot load: %s", real, why);
    }
    void *sym = lt_dlsym(h, OUTBOX_DRIVER_ENTRY_SYMBOL);
    if (sym == NULL) {
        lt_dlclose(h);
        return outbox_diag_set(d, OUTBOX_EABI, "%s: not a liboutbox driver: no %s symbol", real,
                               OUTBOX_DRIVER_ENTRY_SYMBOL);
    }
    outbox_driver_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object to function pointer, as dlsym requires */
    const outbox_driver_t *drv = entry();
    rc = check_descriptor(drv, real, d);
    if (rc != OUTBOX_OK) {
        lt_dlclose(h);
        return rc;
    }
    *out = drv;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------- registry */

static int registry_add(const char *path, enum origin origin, const outbox_driver_t *drv,
                        outbox_diag_t *d)
{
    loaded_t *l = calloc(1, sizeof *l);
    if (l == NULL || (path != NULL && (l->path = strdup(path)) == NULL)) {
        free(l);
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    }
    l->drv = drv;
    l->origin = origin;
    l->next = registry;
    registry = l;
    return OUTBOX_OK;
}

/* Run a checked driver's init() - once per driver, however it is reached -
 * and remember it. Caller holds the lock. */
static int admit_locked(const char *path, enum origin origin, const outbox_driver_t *drv,
                        const char *where, outbox_diag_t *d)
{
    for (const loaded_t *l = registry; l != NULL; l = l->next)
        if (l->drv == drv)
            return OUTBOX_OK;
    outbox_diag_t id = {0};
    int rc = drv->init(outbox_host_table(), &id);
    if (rc != OUTBOX_OK)
        return outbox_diag_set(d, rc < 0 ? rc : OUTBOX_EPERMANENT, "%s: driver init failed: %s",
                               where, id.message[0] ? id.message : outbox_strerror(rc));
    return registry_add(path, origin, drv, d);
}

/* The descriptor already read from the file real, so no file is read twice. */
static const outbox_driver_t *known_file(const char *real)
{
    for (const loaded_t *l = registry; l != NULL; l = l->next)
        if (l->path != NULL && strcmp(l->path, real) == 0)
            return l->drv;
    for (const module_t *m = cache; m != NULL; m = m->next)
        if (m->drv != NULL && strcmp(m->real, real) == 0)
            return m->drv;
    return NULL;
}

static int kind_fits(const outbox_driver_t *drv, uint32_t kind, const char *what, outbox_diag_t *d)
{
    if (kind != 0 && drv->kind != kind)
        return outbox_diag_set(d, OUTBOX_EINVAL, "%s is a %s driver, expected a %s driver", what,
                               kind_name(drv->kind), kind_name(kind));
    return OUTBOX_OK;
}

/* A driver given by file path: no search, no scan. Caller holds the lock. */
static int load_file_locked(const char *path, uint32_t kind, const outbox_driver_t **out,
                            outbox_diag_t *d)
{
    char real[PATH_MAX];
    int rc = check_file(path, real, d);
    if (rc != OUTBOX_OK)
        return rc;
    const outbox_driver_t *drv = known_file(real);
    if (drv == NULL && (rc = read_module_locked(real, &drv, d)) != OUTBOX_OK)
        return rc;
    char what[PATH_MAX + 8];
    snprintf(what, sizeof what, "driver %s", path);
    if ((rc = kind_fits(drv, kind, what, d)) != OUTBOX_OK ||
        (rc = admit_locked(real, ORIGIN_FILE, drv, real, d)) != OUTBOX_OK)
        return rc;
    *out = drv;
    return OUTBOX_OK;
}

/* ---------------------------------------------------------- search path */

/* The directories to search, in order, as one malloc'd colon list. */
static char *search_path(void)
{
    const char *env = getenv("OUTBOX_DRIVER_PATH");
    if (env != NULL && env[0] == '\0')
        env = NULL;
    const char *no_installed = getenv("OUTBOX_NO_INSTALLED_DRIVERS");
    int installed = !(no_installed != NULL && no_installed[0] != '\0' && strcmp(no_installed, "0"));
    return dup_printf("%s%s%s", env ? env : "", env && installed ? ":" : "",
                      installed ? OUTBOX_DRIVER_DIR : "");
}

static int is_module_name(const char *n)
{
    size_t len = strlen(n);
    return len > 3 && strcmp(n + len - 3, ".so") == 0;
}

static void free_modules(module_t *m)
{
    while (m != NULL) {
        module_t *next = m->next;
        free(m->path);
        free(m->real);
        free(m->problem);
        free(m);
        m = next;
    }
}

static int has_scheme(const outbox_driver_t *drv, const char *scheme)
{
    for (const char *const *s = drv->schemes; s != NULL && *s != NULL; s++)
        if (strcmp(*s, scheme) == 0)
            return 1;
    return 0;
}

/* The first scheme two drivers both claim, or NULL. */
static const char *shared_scheme(const outbox_driver_t *a, const outbox_driver_t *b)
{
    for (const char *const *s = b->schemes; s != NULL && *s != NULL; s++)
        if (has_scheme(a, *s))
            return *s;
    return NULL;
}

/* When m claims a name or a scheme that an earlier module of its kind
 * already claims, the earlier one wins; say so, naming both. */
static void note_duplicate(module_t *m, const module_t *earlier)
{
    for (const module_t *e = earlier; e != NULL; e = e->next) {
        if (e->drv == NULL || e->drv->kind != m->drv->kind)
            continue;
        const char *kind = kind_name(m->drv->kind);
        const char *scheme = shared_scheme(e->drv, m->drv);
        if (strcmp(e->drv->name, m->drv->name) == 0)
            m->problem = dup_printf("duplicate %s driver \"%s\" in %s and %s: using %s, the "
                                    "first on the driver path",
                                    kind, m->drv->name, e->path, m->path, e->path);
        else if (scheme != NULL)
            m->problem = dup_printf("duplicate %s driver for %s: URIs in %s and %s: using %s, "
                                    "the first on the driver path",
                                    kind, scheme, e->path, m->path, e->path);
        else
            continue;
        m->winner = e;
        return;
    }
}

/* Read one directory entry of the search path. NULL when it is left out:
 * a file already read under another name (the same directory listed twice,
 * a symlink), or no memory. Caller holds the lock. */
static module_t *read_entry_locked(const char *dir, const char *name, const module_t *earlier)
{
    module_t *m = calloc(1, sizeof *m);
    if (m == NULL || (m->path = dup_printf("%s/%s", dir, name)) == NULL) {
        free(m);
        return NULL;
    }
    struct stat st;
    char real[PATH_MAX], eb[128];
    const char *odd = NULL;
    if (stat(m->path, &st) != 0 || (odd = not_regular(st.st_mode)) != NULL) {
        m->problem = odd != NULL ? dup_printf("not a regular file (%s)", odd)
                                 : dup_printf("%s", strerror_r(errno, eb, sizeof eb));
        return m;
    }
    if (realpath(m->path, real) == NULL) {
        m->problem = dup_printf("%s", strerror_r(errno, eb, sizeof eb));
        return m;
    }
    for (const module_t *e = earlier; e != NULL; e = e->next)
        if (e->real != NULL && strcmp(e->real, real) == 0) {
            free_modules(m);
            return NULL;
        }
    if ((m->real = strdup(real)) == NULL) {
        free_modules(m);
        return NULL;
    }
    outbox_diag_t d = {0};
    m->drv = known_file(real);
    if (m->drv == NULL && read_module_locked(real, &m->drv, &d) != OUTBOX_OK) {
        /* The reason without the leading path: the listing names the file. */
        size_t n = strlen(real);
        const char *why = d.message;
        if (strncmp(why, real, n) == 0 && strncmp(why + n, ": ", 2) == 0)
            why += n + 2;
        m->problem = dup_printf("%s", why);
        return m;
    }
    note_duplicate(m, earlier);
    return m;
}

/* Every *.so entry of the search path dirs, in order: directories as
 * listed, entries alphabetically within each. Never blocks: what is not a
 * regular file is noted and skipped. Caller holds the lock. */
static module_t *scan_locked(const char *dirs)
{
    module_t *head = NULL, **tail = &head;
    char *copy = strdup(dirs);
    char *save = NULL;
    for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir != NULL;
         dir = strtok_r(NULL, ":", &save)) {
        struct dirent **names = NULL;
        int n = scandir(dir, &names, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            module_t *m = is_module_name(names[i]->d_name)
                              ? read_entry_locked(dir, names[i]->d_name, head)
                              : NULL;
            if (m != NULL) {
                *tail = m;
                tail = &m->next;
            }
            free(names[i]);
        }
        free(names);
    }
    free(copy);
    return head;
}

/* What the listing and the debug log say about a module. */
static const char *verdict(const module_t *m)
{
    return m->drv != NULL ? "warning" : m->real != NULL ? "refused" : "skipped";
}

/* Make the cache describe the search path: read it again when forced (a
 * lookup missed) or when the path has changed since (tests and tools set
 * OUTBOX_DRIVER_PATH). *fresh says whether this call read it. */
static int refresh_locked(int force, int *fresh, outbox_diag_t *d)
{
    *fresh = 0;
    char *dirs = search_path();
    if (dirs == NULL)
        return outbox_diag_set(d, OUTBOX_ENOMEM, "out of memory");
    if (!force && cache_dirs != NULL && strcmp(cache_dirs, dirs) == 0) {
        free(dirs);
        return OUTBOX_OK;
    }
    module_t *found = scan_locked(dirs);
    free_modules(cache);
    free(cache_dirs);
    cache = found;
    cache_dirs = dirs;
    *fresh = 1;
    for (const module_t *m = cache; m != NULL; m = m->next)
        if (m->drv == NULL)
            outbox_log(OUTBOX_LOG_DEBUG, "driver path: %s %s: %s", verdict(m), m->path,
                       m->problem ? m->problem : "out of memory");
    return OUTBOX_OK;
}

/* ------------------------------------------------------------- choosing */

typedef int (*match_fn)(const outbox_driver_t *drv, const char *key);

/* "sqlite" or "store-sqlite". */
static int has_name(const outbox_driver_t *drv, const char *name)
{
    const char *kind = kind_name(drv->kind);
    size_t n = strlen(kind);
    return strcmp(drv->name, name) == 0 ||
           (strncmp(name, kind, n) == 0 && name[n] == '-' && strcmp(name + n + 1, drv->name) == 0);
}

static const outbox_driver_t *find_loaded(enum origin origin, match_fn match, const char *key,
                                          uint32_t kind)
{
    for (const loaded_t *l = registry; l != NULL; l = l->next)
        if (l->origin == origin && (kind == 0 || l->drv->kind == kind) && match(l->drv, key))
            return l->drv;
    return NULL;
}

/* The cache is in search-path order, so the first match is the winner. */
static const module_t *find_module(match_fn match, const char *key, uint32_t kind)
{
    for (const module_t *m = cache; m != NULL; m = m->next)
        if (m->drv != NULL && (kind == 0 || m->drv->kind == kind) && match(m->drv, key))
            return m;
    return NULL;
}

/* The driver for key (a name or a scheme, as match says), in order of
 * precedence: drivers the program registered; drivers already chosen from
 * the search path (a choice made stays made); the search path; files
 * loaded by path. When none is of the kind asked for, one of another kind
 * is returned, for the caller to say so. A miss reads the search path
 * again, once, in case a module was installed since. *from is set when the
 * driver comes from the search path and is not admitted yet. */
static int find_locked(match_fn match, const char *key, uint32_t kind,
                       const outbox_driver_t **out, const module_t **from, outbox_diag_t *d)
{
    *out = NULL;
    *from = NULL;
    int scanned = 0, fresh = 0, rc;
    for (int round = 0; round < 2; round++) {
        uint32_t k = round == 0 ? kind : 0;
        const outbox_driver_t *drv = find_loaded(ORIGIN_REGISTERED, match, key, k);
        if (drv == NULL)
            drv = find_loaded(ORIGIN_SEARCH, match, key, k);
        if (drv != NULL) {
            *out = drv;
            return OUTBOX_OK;
        }
        if (!scanned && (rc = refresh_locked(0, &fresh, d)) != OUTBOX_OK)
            return rc;
        scanned = 1;
        const module_t *m = find_module(match, key, k);
        if (m == NULL)
            drv = find_loaded(ORIGIN_FILE, match, key, k);
        if (m == NULL && drv == NULL && !fresh) {
            if ((rc = refresh_locked(1, &fresh, d)) != OUTBOX_OK)
                return rc;
            m = find_module(match, key, k);
        }
        if (m != NULL || drv != NULL) {
            *out = m != NULL ? m->drv : drv;
            *from = m;
            return OUTBOX_OK;
        }
        if (kind == 0)
            break;
    }
    return OUTBOX_ENOTFOUND;
}

/* Admit what find_locked found, of the kind asked for. The log hears of
 * the duplicates a chosen module won over, once. */
static int take_locked(const outbox_driver_t *drv, const module_t *from, uint32_t kind,
                       const char *what, outbox_diag_t *d)
{
    int rc = kind_fits(drv, kind, what, d);
    if (rc != OUTBOX_OK || from == NULL)
        return rc;
    for (module_t *m = cache; m != NULL; m = m->next)
        if (m->winner == from && !m->warned && m->problem != NULL) {
            outbox_log(OUTBOX_LOG_WARN, "%s", m->problem);
            m->warned = 1;
        }
    return admit_locked(from->real, ORIGIN_SEARCH, drv, from->real, d);
}

/* ", N modules on the driver path could not be read (...)" when some were
 * not, since one of them may be the driver that was looked for. */
static void unread_hint(char *buf, size_t len)
{
    int n = 0;
    for (const module_t *m = cache; m != NULL; m = m->next)
        n += m->drv == NULL;
    if (n > 0)
        snprintf(buf, len, "; %d module%s on the driver path could not be read (`outbox drivers` "
                 "says why)", n, n == 1 ? "" : "s");
    else
        buf[0] = '\0';
}

int outbox_loader_load(const char *name_or_path, uint32_t kind, const outbox_driver_t **out,
                       outbox_diag_t *d)
{
    *out = NULL;
    if (name_or_path == NULL || name_or_path[0] == '\0')
        return outbox_diag_set(d, OUTBOX_EINVAL, "empty driver name");
    pthread_mutex_lock(&lock);
    const outbox_driver_t *drv = NULL;
    const module_t *from = NULL;
    int rc;
    if (strchr(name_or_path, '/') != NULL) {
        rc = load_file_locked(name_or_path, kind, &drv, d);
    } else {
        char what[300];
        snprintf(what, sizeof what, "driver %s", name_or_path);
        rc = find_locked(has_name, name_or_path, kind, &drv, &from, d);
        if (rc == OUTBOX_OK) {
            rc = take_locked(drv, from, kind, what, d);
        } else if (rc == OUTBOX_ENOTFOUND) {
            char hint[160];
            unread_hint(hint, sizeof hint);
            outbox_diag_set(d, rc, "no %s%sdriver named %s on the driver path (%s)%s",
                            kind ? kind_name(kind) : "", kind ? " " : "", name_or_path,
                            cache_dirs[0] ? cache_dirs : "empty", hint);
        }
    }
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
    const outbox_driver_t *drv = NULL;
    const module_t *from = NULL;
    char what[300];
    snprintf(what, sizeof what, "the driver for %s: URIs", scheme);
    int rc = find_locked(has_scheme, scheme, kind, &drv, &from, d);
    if (rc == OUTBOX_OK) {
        rc = take_locked(drv, from, kind, what, d);
    } else if (rc == OUTBOX_ENOTFOUND) {
        char hint[160];
        unread_hint(hint, sizeof hint);
        outbox_diag_set(d, rc, "unknown URI scheme \"%s\": no %s driver on the driver path (%s) "
                        "serves it%s",
                        scheme, kind_name(kind), cache_dirs[0] ? cache_dirs : "empty", hint);
    }
    pthread_mutex_unlock(&lock);
    if (rc == OUTBOX_OK)
        *out = drv;
    return rc;
}

int outbox_loader_uri_ok(const outbox_driver_t *drv, const outbox_uri_t *uri, outbox_diag_t *d)
{
    if (drv->abi_minor >= 2 || uri->host == NULL || strchr(uri->host, ',') == NULL)
        return OUTBOX_OK;
    char shown[200];
    outbox_uri_mask(uri->raw, shown, sizeof shown);
    return outbox_diag_set(d, OUTBOX_EINVAL,
                           "%s: the %s driver (ABI %u.%u) takes one host, not the list %s: a "
                           "list of hosts needs a driver built for ABI 1.2 or later",
                           shown, drv->name, (unsigned)drv->abi_major, (unsigned)drv->abi_minor,
                           uri->host);
}

int outbox_driver_load(const char *name_or_path, const outbox_driver_t **out, outbox_diag_t *d)
{
    return outbox_loader_load(name_or_path, 0, out, d);
}

int outbox_driver_register(const outbox_driver_t *driver, outbox_diag_t *d)
{
    const char *where = driver && driver->name ? driver->name : "(registered)";
    pthread_mutex_lock(&lock);
    int rc = check_descriptor(driver, where, d);
    if (rc == OUTBOX_OK)
        rc = admit_locked(NULL, ORIGIN_REGISTERED, driver, where, d);
    pthread_mutex_unlock(&lock);
    return rc;
}

/* -------------------------------------------------------------- listing */

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

/* A fresh read of the search path of its own, so the callbacks run without
 * the lock (they may load a driver) on a list nobody else frees. Reading
 * runs no init(). */
int outbox_drivers_list(void (*good)(void *ctx, const outbox_driver_info_t *info),
                        void (*bad)(void *ctx, const char *path, const char *reason), void *ctx)
{
    char *dirs = search_path();
    if (dirs == NULL)
        return OUTBOX_ENOMEM;
    pthread_mutex_lock(&lock);
    module_t *found = scan_locked(dirs);
    pthread_mutex_unlock(&lock);
    free(dirs);
    for (const module_t *m = found; m != NULL; m = m->next) {
        if (m->drv != NULL && good != NULL)
            report(m->drv, m->real, good, ctx);
        if (m->problem != NULL && bad != NULL) {
            char reason[OUTBOX_MESSAGE_MAX + 16];
            snprintf(reason, sizeof reason, "%s: %s", verdict(m), m->problem);
            bad(ctx, m->path, reason);
        }
    }
    free_modules(found);
    return OUTBOX_OK;
}

/* The harnesses without libFuzzer: each argument, a file or a directory of
 * files, is fed to LLVMFuzzerTestOneInput once, so a plain build (gcc,
 * ASan) replays the seed corpus as a unit test. */
#include <dirent.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *grown = realloc(buf, cap *= 2);
            if (!grown)
                free(buf);
            buf = grown;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return 1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int replay(const char *path, unsigned *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        ++*count;
        return replay_file(path);
    }
    DIR *dir = opendir(path);
    if (!dir) {
        perror(path);
        return 1;
    }
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        char *sub = malloc(len);
        if (!sub) {
            bad = 1;
            break;
        }
        snprintf(sub, len, "%s/%s", path, e->d_name);
        bad |= replay(sub, count);
        free(sub);
    }
    closedir(dir);
    return bad;
}

int main(int argc, char **argv)
{
    unsigned count = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++)
        bad |= replay(argv[i], &count);
    printf("replayed %u inputs\n", count);
    return bad || count == 0;
}

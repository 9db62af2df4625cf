/* The battery as a test program: outbox_conformance_run() with the
 * runner's exit statuses (0 all ran cases passed, 1 some failed, 2 usage or
 * setup error, 77 no URI), without the CLI in between. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/conformance.h"

int main(int argc, char **argv)
{
    outbox_diag_t d = {0};
    outbox_conformance_opts_t o = {.struct_size = sizeof o, .diag = &d};
    for (int i = 1; i < argc; i++) {
        const char **slot = strcmp(argv[i], "--driver") == 0 ? &o.driver
                            : strcmp(argv[i], "--uri") == 0  ? &o.uri
                            : strcmp(argv[i], "--tap") == 0  ? &o.tap_file
                            : strcmp(argv[i], "--case") == 0 ? &o.case_filter
                            : strcmp(argv[i], "--broker-stop") == 0  ? &o.broker_stop
                            : strcmp(argv[i], "--broker-start") == 0 ? &o.broker_start
                            : strcmp(argv[i], "--broker-pause") == 0 ? &o.broker_pause
                            : strcmp(argv[i], "--broker-resume") == 0 ? &o.broker_resume
                                                             : NULL;
        if (slot == NULL || i + 1 >= argc) {
            fprintf(stderr,
                    "usage: %s --driver NAME_OR_PATH --uri URI [--tap FILE] [--case SUBSTR] "
                    "[--broker-stop CMD --broker-start CMD] "
                    "[--broker-pause CMD --broker-resume CMD]\n",
                    argv[0]);
            return 2;
        }
        *slot = argv[++i];
    }
    if (o.uri == NULL)
        o.uri = getenv("OUTBOX_CONFORMANCE_URI");
    if (o.uri == NULL || o.uri[0] == '\0') {
        fprintf(stderr, "battery: no URI (--uri or OUTBOX_CONFORMANCE_URI): skipped\n");
        return 77;
    }
    int rc = outbox_conformance_run(&o);
    if (rc < 0) {
        fprintf(stderr, "battery: %s\n", d.message);
        return 2;
    }
    return rc == 0 ? 0 : 1;
}

#include "batch_cli.h"

#include <stdio.h>

int batch_cli_main(int argc, char **argv) {
    (void)argc;
    fprintf(stderr, "retort %s: not available yet\n", argv[0]);
    return 2;
}

/* preload_kafka.c - LD_PRELOAD shim for the worker's tests
 * (tests/integration/test_resilience.py): what the process hands
 * librdkafka, seen where librdkafka takes it.
 *   PRELOAD_KAFKA_LOG=FILE  a line per consumer created (rd_kafka_new),
 *                           "consumer PID group.instance.id=VALUE" (VALUE
 *                           empty when unset), appended
 * Forked processes (--processes N) keep it: each one's consumer is seen.
 * Built by the test: cc -shared -fPIC -o X.so preload_kafka.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

rd_kafka_t *rd_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *errstr, size_t errstr_size) {
    static rd_kafka_t *(*real)(rd_kafka_type_t, rd_kafka_conf_t *, char *, size_t);
    if (!real) real = (rd_kafka_t * (*)(rd_kafka_type_t, rd_kafka_conf_t *, char *, size_t)) dlsym(RTLD_NEXT, "rd_kafka_new");
    const char *path = getenv("PRELOAD_KAFKA_LOG");
    if (path && type == RD_KAFKA_CONSUMER && conf) {
        char value[512] = "";
        size_t len = sizeof(value);
        if (rd_kafka_conf_get(conf, "group.instance.id", value, &len) != RD_KAFKA_CONF_OK) value[0] = '\0';
        FILE *f = fopen(path, "a");
        if (f) {
            fprintf(f, "consumer %d group.instance.id=%s\n", (int)getpid(), value);
            fclose(f);
        }
    }
    return real(type, conf, errstr, errstr_size);
}

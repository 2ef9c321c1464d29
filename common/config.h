/* config.h - Retort configuration: a table of known keys with defaults,
 * loaded from a properties file (key=value lines, '#' or '!' comments, as
 * Kafka clients and kcat read them), then RETORT_* environment variables,
 * then command-line flags; later sources override earlier ones.
 *
 * Every key under "kafka." is passed to librdkafka as is (without the
 * prefix); "kafka.consumer.X" and "kafka.producer.X" reach only that client.
 * Such keys are checked by librdkafka when the clients are created.  Every
 * other key must be in the table; a bad key or value is an error naming it. */
#ifndef RETORT_CONFIG_H
#define RETORT_CONFIG_H

#include <stddef.h>
#include <stdio.h>

typedef struct config config;

config *config_new(void);          /* holds every default */
void config_free(config *cfg);     /* accepts NULL */

/* key, value: borrowed, copied.  0 = ok; otherwise err names the key. */
int config_set(config *cfg, const char *key, const char *value, char *err, size_t errlen);
int config_load_file(config *cfg, const char *path, char *err, size_t errlen);
/* RETORT_LLM_BASE_URL -> llm.base_url; RETORT_KAFKA_BOOTSTRAP_SERVERS ->
 * kafka.bootstrap.servers (for kafka keys every '_' becomes '.').
 * RETORT_CONFIG is not a key (main uses it as the file name). */
int config_load_env(config *cfg, char **envp, char *err, size_t errlen);

/* Values are valid until the key is set again or cfg is freed. */
const char *config_get(const config *cfg, const char *key);
long long config_get_int(const config *cfg, const char *key);
int config_get_bool(const config *cfg, const char *key);

/* Calls fn for every key starting with prefix (prefix stripped from key). */
void config_foreach_prefix(const config *cfg, const char *prefix,
                           void (*fn)(const char *key, const char *value, void *ud), void *ud);

/* Lists every key, its default and its meaning. */
void config_print_help(FILE *out);
/* Prints the effective configuration as key=value lines, secrets masked
 * as ********: redis.password; llm.base_url's userinfo, query and
 * fragment; all of escalation.webhook_url but its scheme and host; every
 * kafka.* value but those of librdkafka properties known to hold no secret
 * (config.c kafka_clear).  Empty values show as they are. */
void config_dump(const config *cfg, FILE *out);
/* key's value as config_dump shows it, secrets masked, into buf (cut at
 * len bytes); returns buf.  For logs: llm.base_url may hold a key. */
const char *config_get_masked(const config *cfg, const char *key, char *buf, size_t len);

#endif

#include "schema_format.h"
#include <string.h>
int schema_format_id(const char *name) { (void)name; return 0; }
const char *schema_format_name(int id) { (void)id; return ""; }
int schema_format_check(int id, const char *s, size_t len) { (void)id; (void)s; (void)len; return 1; }

/* validate_cli.h - `retort validate`: checks JSON documents against a JSON
 * Schema from the command line.
 *
 *   retort validate [OPTIONS] SCHEMA [INSTANCE ...]
 *
 * Instances are files, or stdin when none is given or for "-".  Each
 * violation is printed on stdout as one JSON line:
 *   {"instance":FILE,"path":...,"keyword":...,"code":...,"message":...,
 *    "expected":...,"actual":...}
 * An instance that is not valid UTF-8 or not JSON gives one line with code
 * NOT_JSON.  Errors (bad arguments, unreadable files, a bad schema, a
 * regex/depth limit) go to stderr.
 *
 * Exit status: 0 all instances valid, 1 some invalid, 2 error.
 */
#ifndef RETORT_VALIDATE_CLI_H
#define RETORT_VALIDATE_CLI_H

/* argv[0] is "validate".  Returns the exit status. */
int validate_cli_main(int argc, char **argv);

#endif

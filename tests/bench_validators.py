#!/usr/bin/python3
"""Validation benchmark: Retort's JSON Schema validator against others.

Measures, on the same schema and instances and in the same run:
  retort          common/schema.c, through build/bench-schema
  jsonschema      Draft202012Validator (Python)
  fastjsonschema  compile() once, then the generated function (Python);
                  drafts 4/6/7 only, so it gets schema-draft7.json
  ajv             ajv/dist/2020 through tests/bench_ajv.js (node), only
                  when node and build/npm/node_modules/ajv exist (`make
                  bench-npm`); otherwise reported as skipped with the reason
The schema and instances are Retort's built-in ones, written out by
`bench-schema --dump DIR` (see tests/bench_schema.c).

Figures per validator: compile time; ns per validation and validations/s
for the valid instance, for the invalid instance stopping at the first
error, and for the invalid instance with all errors collected (Retort: a
violations list; jsonschema: list(iter_errors()); ajv: allErrors: true;
fastjsonschema stops at the first error only, so n/a), and the number of
violations each reports for the invalid instance.

`format`: Retort's default (schema_compile with NULL options) treats it as
an annotation, as 2020-12 does, so every validator runs with formats NOT
asserted: jsonschema without a FormatChecker, ajv with validateFormats:
false, and fastjsonschema (which always asserts the formats it knows and
rejects the schema over ones it does not, e.g. "uuid") on a copy of the
draft-07 schema without its `format` keywords, which means the same when
`format` is an annotation.  BENCH_FORMATS=assert asserts formats in all four
instead (Retort: format_assert = 1; jsonschema: FormatChecker(); ajv:
ajv-formats; fastjsonschema: its own checks plus a "uuid" pattern).

Each validator must answer valid.json valid and invalid.json invalid; any
other answer is printed as an ERROR, stored under "errors", and makes the
exit status 1 (after the results are written).

Prints a table (Retort's figures, and each other's time as a multiple of
Retort's) and merges the key "validation" into bench-results.json (other
keys are kept).

Retort and ajv are timed in SESSIONS sessions each (3; 1 with
BENCH_QUICK), their processes taking turns (retort, ajv, retort, ajv, ...),
each session SECS / SESSIONS per case: this machine's load comes and goes
over seconds, and one stretch per validator let a disturbance land on one
of them only.  Their figures are the median session; the session-by-session
ratios (ajv's time over Retort's in the neighbouring sessions) are printed
and stored too.

Environment: BENCH_QUICK=1 times each case for 0.2 s instead of 1 s,
BENCH_FORMATS=assert (see above), BENCH_RESULTS=PATH writes elsewhere than
bench-results.json, BENCH_SCHEMA_BIN=PATH measures another bench-schema
build, AJV_NPM_DIR=DIR finds ajv elsewhere than build/npm, NODE=PATH picks
the node binary.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, "build")
BENCH_BIN = os.path.abspath(os.environ.get("BENCH_SCHEMA_BIN") or os.path.join(BUILD, "bench-schema"))
AJV_JS = os.path.join(REPO, "tests", "bench_ajv.js")
NPM_DIR = os.path.abspath(os.environ.get("AJV_NPM_DIR") or os.path.join(BUILD, "npm"))
RESULTS = os.environ.get("BENCH_RESULTS") or os.path.join(REPO, "bench-results.json")
QUICK = os.environ.get("BENCH_QUICK") == "1"
SECS = 0.2 if QUICK else 1.0
SESSIONS = 1 if QUICK else 3
FORMATS = os.environ.get("BENCH_FORMATS", "annotation")
if FORMATS not in ("annotation", "assert"):
    sys.exit("BENCH_FORMATS must be 'annotation' or 'assert', not %r" % FORMATS)
ASSERT_FORMATS = FORMATS == "assert"

# Cases, in table order: (key prefix, heading)
CASES = [("valid", "valid"), ("invalid", "invalid, first error"),
         ("invalid_report", "invalid, all errors")]


def log(msg):
    print(msg, flush=True)


# ------------------------------------------------------------------ timing

def per_call_ns(call, want, secs):
    """ns per call(), over about `secs` seconds.  call() returns an answer
    that must equal `want` every time (a changed answer would mean the loop
    times something else).  Batches of >= ~10 ms keep the clock reads rare;
    finding the batch size doubles as a warm-up."""
    clock = time.perf_counter_ns
    n = 1
    while True:
        t0 = clock()
        for _ in range(n):
            call()
        if clock() - t0 >= 10_000_000 or n >= 1 << 20:
            break
        n *= 2
    iters = 0
    t0 = clock()
    limit = secs * 1e9
    while True:
        for _ in range(n):
            if call() != want:
                raise RuntimeError("the answer changed during the timing loop")
        iters += n
        elapsed = clock() - t0
        if elapsed >= limit:
            return elapsed / iters


def compile_us(make, secs):
    """µs per make(), over about `secs` seconds (at least 3 calls)."""
    clock = time.perf_counter_ns
    n = 0
    t0 = clock()
    while True:
        make()
        n += 1
        elapsed = clock() - t0
        if elapsed >= secs * 1e9 and n >= 3:
            return elapsed / n / 1e3


def figures(compile_time_us, ns):
    """the common result fields from compile µs and {case: ns or None}"""
    out = {"compile_us": round(compile_time_us, 1)}
    for case, _ in CASES:
        v = ns.get(case)
        out[case + "_ns"] = None if v is None else round(v)
        out[case + "_per_s"] = None if v is None else round(1e9 / v)
    return out


# ------------------------------------------------------------- validators

def run_retort(dump_info, secs=SECS):
    args = [BENCH_BIN] + (["--format-assert"] if ASSERT_FORMATS else []) + [str(secs)]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:   # it exits 1 when an answer is not the expected one
        raise RuntimeError("%s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr.strip()))
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if r.get("format_assert", 0) != int(ASSERT_FORMATS):
        raise RuntimeError("bench-schema ran with format_assert=%s" % r.get("format_assert"))
    out = figures(r["compile_us"], {c: r[c + "_ns"] for c, _ in CASES})
    out.update({"version": "", "valid_result": True, "invalid_result": False,
                "invalid_violations": r["invalid_violations"],
                "invalid_errors": dump_info.get("invalid_errors", []),
                "valid_report_ns": r.get("valid_report_ns"), "uneval_ns": r.get("uneval_ns"),
                "tcmalloc": linked_tcmalloc(BENCH_BIN),
                "how": "schema_compile(NULL, doc, %s); schema_validate(s, inst, NULL | &violations)"
                       % ("{.format_assert = 1}" if ASSERT_FORMATS else "NULL")})
    return out


def linked_tcmalloc(path):
    """whether the binary at path is linked with tcmalloc (as `make` links it
    unless MALLOC=libc)"""
    try:
        p = subprocess.run(["ldd", path], capture_output=True, text=True)
    except OSError:
        return None
    return "tcmalloc" in p.stdout


def json_path(parts):
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def run_jsonschema(schema, schema7, valid, invalid, notes):
    import jsonschema
    from importlib.metadata import version
    cls = jsonschema.Draft202012Validator
    checker = jsonschema.FormatChecker() if ASSERT_FORMATS else None
    if ASSERT_FORMATS:
        missing = sorted(f for f in formats_used(schema) if f not in checker.checkers)
        if missing:
            notes.append("jsonschema %s cannot check format %s (its optional checker package is "
                         "not installed): not asserted there" % (version("jsonschema"), ", ".join(missing)))
    v = cls(schema, format_checker=checker)
    # Sanity check of schema-draft7.json with a second implementation of
    # both drafts (bench-schema --dump checked it with Retort).
    v7 = jsonschema.Draft7Validator(schema7, format_checker=checker)
    for name, inst in (("valid", valid), ("invalid", invalid)):
        n20, n7 = len(list(v.iter_errors(inst))), len(list(v7.iter_errors(inst)))
        if n20 != n7:
            notes.append("jsonschema: schema-draft7.json gives %d errors on %s.json, schema.json %d"
                         % (n7, name, n20))
    errs = list(v.iter_errors(invalid))
    count = len(errs)
    nested = 0
    stack = list(errs)
    while stack:
        e = stack.pop()
        nested += 1
        stack.extend(e.context or [])
    # jsonschema has no compile step: the constructor only stores the
    # schema, $refs are resolved (and cached) during validation.
    c_us = compile_us(lambda: cls(schema, format_checker=checker), SECS / 2)
    ns = {"valid": per_call_ns(lambda: v.is_valid(valid), v.is_valid(valid), SECS),
          "invalid": per_call_ns(lambda: v.is_valid(invalid), v.is_valid(invalid), SECS),
          "invalid_report": per_call_ns(lambda: len(list(v.iter_errors(invalid))), count, SECS)}
    out = figures(c_us, ns)
    out.update({"version": version("jsonschema"), "valid_result": v.is_valid(valid),
                "invalid_result": v.is_valid(invalid), "invalid_violations": count,
                "invalid_violations_with_context": nested,
                "invalid_errors": sorted("%s %s" % (json_path(e.absolute_path), e.validator) for e in errs),
                "how": "Draft202012Validator(schema%s); is_valid() (stops at the first error); "
                       "list(iter_errors()) (all errors; the count is of top-level errors, "
                       "invalid_violations_with_context adds the anyOf/oneOf sub-errors)"
                       % (", format_checker=FormatChecker()" if ASSERT_FORMATS else "")})
    return out


# fastjsonschema 2.16 does not know "uuid" (it rejects the schema); this is
# the RFC 4122 textual form, which is what the other three check.
UUID_RE = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"

# keywords whose value maps names to schemas: their keys are not keywords
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# keywords whose value is data, not a schema
DATA_KEYWORDS = ("enum", "const", "default", "examples", "required")


def formats_used(s):
    found = set()

    def walk(x):
        if isinstance(x, list):
            for y in x:
                walk(y)
        elif isinstance(x, dict):
            for k, v in x.items():
                if k == "format" and isinstance(v, str):
                    found.add(v)
                elif k in SCHEMA_MAPS and isinstance(v, dict):
                    for y in v.values():
                        walk(y)
                elif k not in DATA_KEYWORDS:
                    walk(v)
    walk(s)
    return found


def without_format(s):
    """a copy of schema s without its `format` keywords"""
    if isinstance(s, list):
        return [without_format(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {}
    for k, v in s.items():
        if k == "format" and isinstance(v, str):
            continue
        if k in SCHEMA_MAPS and isinstance(v, dict):
            out[k] = {name: without_format(x) for name, x in v.items()}
        elif k in DATA_KEYWORDS:
            out[k] = v
        else:
            out[k] = without_format(v)
    return out


def run_fastjsonschema(schema7, valid, invalid, notes):
    import fastjsonschema
    if ASSERT_FORMATS:
        definition, formats = schema7, {"uuid": UUID_RE}
        how = "compile(schema-draft7.json, formats={'uuid': RFC 4122 pattern})"
    else:
        definition, formats = without_format(schema7), {}
        how = "compile(schema-draft7.json without its `format` keywords)"
    # use_default=False: never write defaults into the instances.  compile()
    # leaves the definition as it was and caches nothing, so timing
    # repeated compiles of the same dict is fair.
    make = lambda: fastjsonschema.compile(definition, formats=formats, use_default=False)
    f = make()

    def ok(inst):
        try:
            f(inst)
            return True
        except fastjsonschema.JsonSchemaValueException:
            return False
    c_us = compile_us(make, SECS / 2)
    ns = {"valid": per_call_ns(lambda: ok(valid), ok(valid), SECS),
          "invalid": per_call_ns(lambda: ok(invalid), ok(invalid), SECS),
          "invalid_report": None}
    first = None
    try:
        f(invalid)
    except fastjsonschema.JsonSchemaValueException as e:
        first = "%s %s" % (e.name, e.rule)
    out = figures(c_us, ns)
    out.update({"version": fastjsonschema.VERSION, "valid_result": ok(valid), "invalid_result": ok(invalid),
                "invalid_violations": None, "invalid_first_error": first,
                "how": how + "; f(instance) raising JsonSchemaValueException at the first error "
                             "(no all-errors mode)"})
    return out


def run_ajv(dump_dir, secs=SECS):
    """(result, None) or (None, reason it was skipped)"""
    node = os.environ.get("NODE") or shutil.which("node")
    if not node:
        return None, "node not found"
    if not os.path.isfile(os.path.join(NPM_DIR, "node_modules", "ajv", "package.json")):
        return None, "ajv not installed in %s (`make bench-npm`; see %s/install.log)" % (NPM_DIR, NPM_DIR)
    if ASSERT_FORMATS and not os.path.isfile(os.path.join(NPM_DIR, "node_modules", "ajv-formats", "package.json")):
        return None, "ajv-formats not installed in %s (needed for BENCH_FORMATS=assert)" % NPM_DIR
    args = [node, AJV_JS, dump_dir, "--npm", NPM_DIR, "--secs", str(secs)] + (["--formats"] if ASSERT_FORMATS else [])
    p = subprocess.run(args, capture_output=True, text=True)
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise RuntimeError("bench_ajv.js failed (%d): %s" % (p.returncode, (p.stderr or p.stdout).strip()[:500]))
    if not r.get("ok"):
        if str(r.get("error", "")).startswith("cannot load ajv"):
            return None, r["error"]
        raise RuntimeError("bench_ajv.js: %s" % r.get("error"))
    out = figures(r["compile_us"], {c: r[c + "_ns"] for c, _ in CASES})
    out.update({"version": r["version"], "valid_result": r["valid_result"],
                "invalid_result": r["invalid_result"], "invalid_violations": r["invalid_violations"],
                "invalid_errors": r["invalid_errors"],
                "how": "new Ajv2020({strict: false, validateFormats: %s})%s; compile() (includes ajv's "
                       "check of the schema against the 2020-12 metaschema); allErrors: false "
                       "(first error), allErrors: true (all errors)"
                       % ("true" if ASSERT_FORMATS else "false", " + ajv-formats" if ASSERT_FORMATS else "")})
    return out, None


# ------------------------------------------------------------------ output

def fmt_num(v, unit=""):
    if v is None:
        return "n/a"
    if v >= 100:
        return "{:,.0f}{}".format(v, unit)
    return "{:.1f}{}".format(v, unit)


def ratio(x, base):
    if x is None or not base:
        return None
    return round(x / base, 2)


def table(res, order):
    """lines of the result table"""
    base = res["retort"]
    head1 = "%-22s %-16s" % ("", "compile")
    head2 = "%-22s %9s %6s" % ("validator", "us", "x")
    for _, title in CASES:
        head1 += " | %-26s" % title
        head2 += " | %8s %10s %6s" % ("ns", "/s", "x")
    head1 += " | violations"
    head2 += " | reported"
    lines = [head1, head2, "-" * len(head2)]
    for name in order:
        r = res[name]
        label = (name + " " + r.get("version", "")).strip()
        if "skipped" in r:
            lines.append("%-22s skipped: %s" % (label, r["skipped"]))
            continue
        if "failed" in r:
            lines.append("%-22s FAILED: %s" % (label, r["failed"]))
            continue
        rx = (lambda k: "") if name == "retort" else (lambda k: fmt_num(ratio(r[k], base[k]), "x"))
        row = "%-22s %9s %6s" % (label, fmt_num(r["compile_us"]), rx("compile_us"))
        for case, _ in CASES:
            k = case + "_ns"
            row += " | %8s %10s %6s" % (fmt_num(r[k]), fmt_num(r[case + "_per_s"]),
                                       rx(k) if r[k] is not None else "")
        row += " | %s" % ("n/a" if r.get("invalid_violations") is None else r["invalid_violations"])
        lines.append(row)
    return lines


def timed_keys():
    return ["compile_us"] + [c + "_ns" for c, _ in CASES]


def median_session(runs):
    """one result from the results of several sessions: each timed figure
    is the median of the sessions' (the rest as the first session had it;
    the answers are checked to be the same in every session)"""
    out = dict(runs[0])
    for r in runs[1:]:
        for k in ("valid_result", "invalid_result", "invalid_violations"):
            if r.get(k) != out.get(k):
                raise RuntimeError("%s differs between sessions: %r, %r" % (k, out.get(k), r.get(k)))
    for k in timed_keys():
        xs = sorted(r[k] for r in runs if r.get(k) is not None)
        out[k] = xs[len(xs) // 2] if xs else None
        if k.endswith("_ns"):
            out[k[:-3] + "_per_s"] = None if out[k] is None else round(1e9 / out[k])
    out["sessions"] = [{k: r.get(k) for k in timed_keys()} for r in runs]
    return out


def merge_results(key, value):
    """read RESULTS (if any), set key, write it back atomically"""
    data = {}
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            data = json.load(f)   # a broken file is an error, not something to overwrite
        if not isinstance(data, dict):
            raise RuntimeError("%s does not hold a JSON object" % RESULTS)
    data[key] = value
    d = os.path.dirname(os.path.abspath(RESULTS))
    fd, tmp = tempfile.mkstemp(prefix=".bench-results.", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, RESULTS)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    t_start = time.time()
    if not os.access(BENCH_BIN, os.X_OK):
        sys.exit("%s not found: run `make %s` first" % (BENCH_BIN, os.path.relpath(BENCH_BIN, REPO)))
    errors, notes = [], []
    res = {}
    order = ["retort", "jsonschema", "fastjsonschema", "ajv"]
    with tempfile.TemporaryDirectory(prefix="retort-bench-schema.") as dump_dir:
        p = subprocess.run([BENCH_BIN, "--dump", dump_dir], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("bench-schema --dump failed (%d): %s" % (p.returncode, p.stderr.strip()))
        dump_info = json.loads(p.stdout.strip().splitlines()[-1])

        def load(name):
            with open(os.path.join(dump_dir, name)) as f:
                return json.load(f)
        schema, schema7 = load("schema.json"), load("schema-draft7.json")
        valid, invalid = load("valid.json"), load("invalid.json")
        log("== validation benchmark: %.1f s per case, format %s in every validator"
            % (SECS, "ASSERTED" if ASSERT_FORMATS else "an annotation (not asserted)"))
        # Retort's and ajv's sessions alternate (see the top of this file)
        sessions = {"retort": [], "ajv": []}
        ajv_out = None
        for k in range(SESSIONS):
            for name in ("retort", "ajv"):
                if name == "ajv" and ajv_out is not None and ajv_out[0] is None:
                    continue   # skipped: no point asking again
                log("   %s (session %d of %d) ..." % (name, k + 1, SESSIONS))
                try:
                    if name == "retort":
                        sessions[name].append(run_retort(dump_info, SECS / SESSIONS))
                    else:
                        ajv_out = run_ajv(dump_dir, SECS / SESSIONS)
                        if ajv_out[0] is not None:
                            sessions[name].append(ajv_out[0])
                except Exception as e:
                    sessions[name] = e
                    break
        runners = {"retort": lambda: sessions["retort"],
                   "jsonschema": lambda: run_jsonschema(schema, schema7, valid, invalid, notes),
                   "fastjsonschema": lambda: run_fastjsonschema(schema7, valid, invalid, notes),
                   "ajv": lambda: sessions["ajv"]}
        for name in order:
            if name not in sessions:
                log("   %s ..." % name)
            try:
                r = runners[name]()
                if isinstance(r, Exception):
                    raise r
                if name in sessions:
                    if not r:
                        res[name] = {"skipped": ajv_out[1] if ajv_out else "not run"}
                        continue
                    r = median_session(r)
            except ImportError as e:
                res[name] = {"skipped": "cannot import: %s" % e}
                continue
            except Exception as e:   # one validator failing must not hide the others' figures
                errors.append("%s: %s" % (name, e))
                res[name] = {"failed": str(e)[:500]}
                continue
            if r["valid_result"] is not True:
                errors.append("%s says valid.json is INVALID (Retort: valid)" % name)
            if r["invalid_result"] is not False:
                errors.append("%s says invalid.json is VALID (Retort: invalid)" % name)
            res[name] = r
    if "retort" not in res or "failed" in res["retort"]:
        for e in errors:
            log("ERROR: " + e)
        sys.exit("no figures for Retort: nothing to compare with")

    ratios = {}
    for name in order[1:]:
        r = res[name]
        if "skipped" in r or "failed" in r:
            continue
        ratios[name] = {k: ratio(r[k + "_ns" if k != "compile" else "compile_us"],
                                 res["retort"][k + "_ns" if k != "compile" else "compile_us"])
                        for k in ["compile"] + [c for c, _ in CASES]}
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "secs_per_case": SECS, "quick": QUICK,
        "format": "assert" if ASSERT_FORMATS else "annotation",
        "input": "bench-schema's built-in schema (schema.json, draft 2020-12; fastjsonschema: "
                 "schema-draft7.json) and instances (valid.json; invalid.json)",
        "draft7_same_for_retort": dump_info.get("draft7_same"),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "validators": res,
        "ratio_vs_retort": ratios,
        "ratio_means": "time / Retort's time for the same case (2.0 = takes twice as long)",
        "errors": errors, "notes": notes,
        "duration_s": round(time.time() - t_start, 1)}

    log("")
    log("Validation: Retort vs other JSON Schema validators, same schema and instances "
        "(format: %s; %.1f s per case; load %.1f)"
        % ("asserted" if ASSERT_FORMATS else "annotation, not asserted", SECS, result["loadavg_1m"]))
    for line in table(res, order):
        log(line)
    log("x = time / Retort's time for the same case (2.0x = twice as slow); "
        "/s = validations per second")
    log("retort and ajv: %d sessions each, their processes taking turns, each the median of 5 rounds "
        "per case with the cases taking turns; figures: the median session; jsonschema and "
        "fastjsonschema: one stretch per case" % SESSIONS)
    paired = {}
    if "sessions" in res.get("ajv", {}):
        for case, title in CASES:
            k = case + "_ns"
            xs = [ratio(a[k], r[k]) for r, a in zip(res["retort"]["sessions"], res["ajv"]["sessions"])]
            paired[case] = xs
            log("ajv / retort session by session, %s: %s"
                % (title, "  ".join(fmt_num(x, "x") for x in xs)))
    result["ratio_ajv_by_session"] = paired
    log("retort: bench-schema is linked like the retort binary (MALLOC=%s in the Makefile)"
        % ("libc" if not res["retort"].get("tcmalloc") else "tcmalloc"))
    log("compile: retort schema_compile; jsonschema: constructor only (no compile step, $refs "
        "resolved lazily); fastjsonschema: code generation + exec; ajv: compile incl. metaschema check")
    log("violations: what each reports for invalid.json with all errors collected (jsonschema: "
        "top-level errors, %s with anyOf/oneOf sub-errors); fastjsonschema reports the first only"
        % res.get("jsonschema", {}).get("invalid_violations_with_context", "?"))
    for n in notes:
        log("note: " + n)
    for e in errors:
        log("ERROR: " + e)
    merge_results("validation", result)
    log("written key \"validation\" of %s (%.0f s)" % (RESULTS, time.time() - t_start))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

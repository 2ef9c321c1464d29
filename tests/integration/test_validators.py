"""The validator chain end to end: schema, then rule validators (global and
per schema through "x-retort"), then plugin validators from shared objects."""
import json
import os
import subprocess
import uuid

from stack import BUILD, REPO, job


def uid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def codes(ev):
    return [[v["code"] for v in h["violations"]] for h in ev["history"]]


def test_rules_and_plugins(stack, tmp_path):
    src = json.load(open(os.path.join(REPO, "schemas", "output", "product.v1.json")))
    src["$id"] = "https://retort.dev/schemas/output/ruled.v1.json"
    src["x-retort"] = {"max_attempts": 2,
                       "rules": [{"type": "must_not_match", "pointer": "/name", "regex": "Shoe"}]}
    out = tmp_path / "out"
    out.mkdir()
    (out / "ruled.v1.json").write_text(json.dumps(src))
    (out / "product.v1.json").write_text(open(os.path.join(REPO, "schemas", "output", "product.v1.json")).read())
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"type": "forbid_phrases", "phrases": ["I don't know"]}]))
    so = tmp_path / "example_plugin.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-I%s/worker" % REPO, "-o", str(so),
                    os.path.join(REPO, "tests", "plugins", "example_plugin.c"), "-lcjson"], check=True)
    stack.start_worker("--set", "schemas.dir=%s" % out, "--set", "rules.file=%s" % rules,
                       "--set", "plugins.paths=%s" % so)
    a, b, c = uid("rule"), uid("plugin"), uid("clean")
    stack.produce_jobs([job(a, schema="ruled.v1"),
                        job(b, metadata={"max_price": 1}),
                        job(c)])
    stack.wait_outcomes([a, b, c])
    escs = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.escalations")}
    finals = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.final")}
    # the schema's rule fails every attempt (the mock keeps its name), 2 attempts from x-retort
    assert codes(escs[a]) == [["FORBIDDEN_PATTERN"], ["FORBIDDEN_PATTERN"]]
    assert escs[a]["history"][0]["violations"][0]["path"] == "/name"
    # the plugin saw the job's metadata and rejected the price
    assert all(cs == ["PRICE_TOO_HIGH"] for cs in codes(escs[b])) and len(codes(escs[b])) == 3
    assert finals[c]["attempts"] == 1
    # the repair prompt of a retry carries the rule's violation
    retries = [m["value"] for m in stack.consume("retort.jobs")
               if m["headers"].get("ce_type") == "retort.job.retry" and m["value"]["job_id"] == a]
    assert "FORBIDDEN_PATTERN" in retries[0]["reflection"]["prompt"]


def test_bad_rules_file_is_a_clear_error(stack, tmp_path):
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"type": "must_match", "pointer": "/a", "regex": "("}]))
    w = stack.start_worker("--set", "rules.file=%s" % rules)
    assert w.wait(20) != 0
    assert "rules[0].regex" in stack.worker_log(w.name)

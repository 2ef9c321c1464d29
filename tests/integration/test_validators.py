"""The validator chain end to end: schema, then rule validators (global and
per schema through "x-retort"), then plugin validators from shared objects."""
import http.server
import json
import os
import subprocess
import uuid

from stack import REPO, chat_completion, job, own_llm, send_json


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
    # read as strictly as a job: a second value after the first was left
    # out unseen, and a phrase was cut at \u0000 (forbidding "bad" whole)
    one = [{"type": "must_match", "pointer": "/a", "regex": "^x$"}]
    rules.write_text(json.dumps(one) + "\n" + json.dumps(one))
    w = stack.start_worker("--set", "rules.file=%s" % rules, name="two-values")
    assert w.wait(20) != 0
    assert "rules.file %s: %s is not JSON" % (rules, rules) in stack.worker_log(w.name)
    rules.write_text('[{"type": "forbid_phrases", "phrases": ["bad\\u0000word"]}]')
    w = stack.start_worker("--set", "rules.file=%s" % rules, name="nul")
    assert w.wait(20) != 0
    assert "is not JSON" in stack.worker_log(w.name)
    # and so is an output schema
    out = tmp_path / "out"
    out.mkdir()
    (out / "x.v1.json").write_text('{"type": "object"} {"type": "string"}')
    w = stack.start_worker("--set", "schemas.dir=%s" % out, name="schema")
    assert w.wait(20) != 0
    assert "x.v1.json is not JSON" in stack.worker_log(w.name)


class CapturingLLM(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that answers every call with one JSON
    text and keeps the request bodies."""
    answer = "{}"
    bodies = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        CapturingLLM.bodies.append(json.loads(body))
        send_json(self, 200, chat_completion(CapturingLLM.answer))


def test_inline_schema_settings(stack):
    """An inline schema's "x-retort" works as a named one's: its rules run,
    its max_attempts holds, and it is not sent to the model.  (Before, an
    inline schema went to the model as the job had it, x-retort included,
    and its settings were ignored.)"""
    CapturingLLM.answer = json.dumps({"city": "Paris"})
    with own_llm(CapturingLLM) as url:
        stack.start_worker("--set", "llm.base_url=%s/v1" % url)
        plain = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
        ruled = dict(plain, **{"x-retort": {"max_attempts": 2, "rules": [
            {"type": "must_not_match", "pointer": "/city", "regex": "Paris"}]}})
        # max_attempts beyond any int: retry.max_attempts_ceiling (10) holds
        huge = dict(plain, **{"x-retort": {"max_attempts": 1e300, "rules": ruled["x-retort"]["rules"]}})
        a, b, c = uid("inline-ruled"), uid("inline-plain"), uid("inline-huge")
        stack.produce_jobs([job(a, schema=ruled)])
        stack.wait_outcomes([a])
        stack.produce_jobs([job(b, schema=plain)])
        stack.wait_outcomes([b])
        stack.produce_jobs([job(c, schema=huge)])
        stack.wait_outcomes([c])
        escs = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.escalations")}
        assert codes(escs[a]) == [["FORBIDDEN_PATTERN"], ["FORBIDDEN_PATTERN"]]
        assert codes(escs[c]) == [["FORBIDDEN_PATTERN"]] * 10
        finals = [m["value"] for m in stack.consume("retort.final") if m["value"]["job_id"] == b]
        assert len(finals) == 1 and finals[0]["output"] == {"city": "Paris"}
        # 2 attempts of a, 1 of b, 10 of c: each sent the schema without x-retort
        assert len(CapturingLLM.bodies) == 13
        for body in CapturingLLM.bodies:
            assert "x-retort" not in json.dumps(body)
            assert body["response_format"]["json_schema"]["schema"] == plain


def test_a_params_response_format_puts_the_schema_in_the_prompt(stack):
    """A job's own response_format param replaces Retort's, schema and all;
    the worker still believed the API carried the schema and left it out
    of the prompt, so the model was told to follow a schema it never saw."""
    CapturingLLM.answer = json.dumps({"zz_city_field": "Paris"})
    CapturingLLM.bodies = []
    with own_llm(CapturingLLM) as url:
        stack.start_worker("--set", "llm.base_url=%s/v1" % url)
        schema = {"type": "object", "required": ["zz_city_field"],
                  "properties": {"zz_city_field": {"type": "string"}}}
        a, b = uid("own-format"), uid("retort-format")
        stack.produce_jobs([job(a, schema=schema, params={"response_format": {"type": "json_object"}})])
        stack.wait_outcomes([a])
        stack.produce_jobs([job(b, schema=schema)])
        stack.wait_outcomes([b])
        assert len(CapturingLLM.bodies) == 2
        own, retorts = CapturingLLM.bodies
        assert own["response_format"] == {"type": "json_object"}
        assert "zz_city_field" in json.dumps(own["messages"])
        # with Retort's own member the schema goes there, not in the prompt too
        assert retorts["response_format"]["json_schema"]["schema"] == schema
        assert "zz_city_field" not in json.dumps(retorts["messages"])
        finals = {m["value"]["job_id"] for m in stack.consume("retort.final")}
        assert {a, b} <= finals


def test_a_critical_code_past_the_violations_cap_still_escalates_at_once(stack, tmp_path):
    """retry.max_violations caps the list an attempt keeps; a violation of
    a code in retry.critical_codes that came past the cap was cut off
    before the decision looked, and the job went on to attempts that
    could not succeed (here all 3 were paid for)."""
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"type": "not_empty", "pointer": "/none_%d" % i, "code": "MISSING_%s" % "ABC"[i]}
                                 for i in range(3)] +
                                [{"type": "not_empty", "pointer": "/stop", "code": "STOP_NOW"}]))
    w = stack.start_worker("--set", "rules.file=%s" % rules, "--set", "retry.max_violations=2",
                           "--set", "retry.critical_codes=STOP_NOW")
    jid = uid("critical")
    stack.produce_jobs([job(jid)])
    stack.wait_outcomes([jid])
    (esc,) = [m["value"] for m in stack.consume("retort.escalations") if m["value"]["job_id"] == jid]
    assert esc["attempts"] == 1, esc["reason"]
    assert esc["reason"].startswith("critical failure"), esc["reason"]
    assert codes(esc) == [["STOP_NOW", "MISSING_A"]]
    assert stack.stop_worker(w) == 0

"""The Anthropic Messages API path through the mock LLM."""
import http.server
import json
import os
import uuid

import pytest

from stack import REPO, job, own_llm, send_json

# The mock answers 401 to a call without this key in x-api-key; the
# workers read it from the variable llm.api_key_env names.
KEY = "sk-ant-test-secret"
ANTHROPIC = ("--set", "llm.provider=anthropic", "--set", "llm.api_key_env=ANTHROPIC_KEY",
             "--set", "llm.model=claude-test")


def uid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


@pytest.mark.llm_args("--api-key", KEY)
def test_anthropic_provider(stack):
    w = stack.start_worker(*ANTHROPIC, env={"ANTHROPIC_KEY": KEY})
    ok, fixed, refused, overloaded = uid("a-ok"), uid("a-fix"), uid("a-ref"), uid("a-529")
    broke = uid("a-credit")
    stack.produce_jobs([
        job(ok, schema="ticket.v1"),
        job(fixed, schema="invoice.v1", directive="defect=invalid_value until=1"),
        job(refused, directive="defect=refusal"),
        job(overloaded, directive="http=529 times=1 retry_after=0"),
        job(broke, directive="quota=1"),
    ])
    stack.wait_outcomes([ok, fixed, refused, overloaded, broke])
    finals = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.final")}
    escs = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.escalations")}
    assert finals[ok]["attempts"] == 1 and finals[ok]["model"] == "claude-test"
    assert finals[ok]["usage"]["prompt_tokens"] > 0 and finals[ok]["usage"]["completion_tokens"] > 0
    assert finals[fixed]["attempts"] == 2
    assert escs[refused]["category"] == "refusal" and escs[refused]["attempts"] == 1
    assert finals[overloaded]["attempts"] == 1
    assert stack.llm_stats()["calls"]["%s:1" % overloaded] == 2
    # a spent credit (a 400) is no bad request: called once, escalated as quota
    assert escs[broke]["category"] == "quota" and escs[broke]["attempts"] == 1
    assert stack.llm_stats()["calls"]["%s:1" % broke] == 1
    # every call carried the key (none was refused), and it was not logged
    assert "401" not in stack.llm_stats()["by_status"]
    assert stack.stop_worker(w) == 0
    assert KEY not in stack.worker_log(w.name)


@pytest.mark.llm_args("--api-key", KEY)
def test_anthropic_structured_outputs(stack):
    """llm.response_format=on with Anthropic: the schema goes as
    output_config.format (generally available, no beta header).  Sent as
    the beta's output_format without its header, Anthropic (and the mock)
    answers 400, and every job escalated as a bad request."""
    stack.start_worker(*ANTHROPIC, "--set", "llm.response_format=on", env={"ANTHROPIC_KEY": KEY})
    ids = [uid("a-so"), uid("a-so")]
    stack.produce_jobs([job(ids[0], schema="ticket.v1"), job(ids[1], schema="invoice.v1")])
    stack.wait_outcomes(ids)
    finals = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.final")}
    assert all(finals[j]["attempts"] == 1 for j in ids), [m["value"] for m in stack.consume("retort.escalations")
                                                          if m["value"]["job_id"] in ids]


@pytest.mark.llm_args("--api-key", KEY)
def test_anthropic_requests_carry_the_version_header_and_max_tokens(stack):
    """The mock, as Anthropic, answers a Messages request without the
    anthropic-version header, model or max_tokens with 400
    invalid_request_error (test_mock_llm checks that), which the worker
    escalates as a bad request.  The worker's requests carry them: every
    job is final at its first attempt, one call each, none refused."""
    stack.start_worker(*ANTHROPIC, env={"ANTHROPIC_KEY": KEY})
    ids = [uid("a-hdr") for _ in range(3)]
    stack.llm_reset()
    stack.produce_jobs([job(j, schema=s) for j, s in zip(ids, ("product.v1", "ticket.v1", "invoice.v1"))])
    stack.wait_outcomes(ids)
    finals = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.final")}
    assert all(j in finals and finals[j]["attempts"] == 1 for j in ids), \
        [m["value"] for m in stack.consume("retort.escalations") if m["value"]["job_id"] in ids]
    stats = stack.llm_stats()
    assert stats["by_status"] == {"200": 3}, stats["by_status"]
    assert all(stats["calls"].get(j + ":1") == 1 for j in ids), stats["calls"]


# A job's own tool, forced (its params go to the API as they are): the
# model's JSON comes back as the one tool_use block's input object.  The
# tool's input_schema is the job's schema, from which the mock generates
# the input.
with open(os.path.join(REPO, "schemas", "output", "product.v1.json")) as f:
    TOOLS = [{"name": "record_product", "description": "Records the product.", "input_schema": json.load(f)}]


def mock_tool_input(stack, j, attempt=1, repair=None):
    """The input of the one tool_use block the mock LLM answers job j's
    attempt with, asked again here (its answers depend on the request
    alone); repair: (previous output, repair prompt) of a retry."""
    msgs = [{"role": "user", "content": j["prompt"]}]
    if repair:
        msgs += [{"role": "assistant", "content": repair[0]}, {"role": "user", "content": repair[1]}]
    resp = stack.llm_post("/v1/messages", dict(j["params"], model="claude-test", max_tokens=1024, messages=msgs),
                          {"x-api-key": KEY, "anthropic-version": "2023-06-01", "X-Retort-Attempt": str(attempt)})
    assert resp["stop_reason"] == "tool_use", resp
    (block,) = resp["content"]
    return block["input"]


@pytest.mark.llm_args("--api-key", KEY)
@pytest.mark.parametrize("choice", [{"type": "tool", "name": "record_product"}, {"type": "any"}])
def test_anthropic_forced_tool_use_is_the_answer(stack, envelopes, choice):
    """The tool_use block's input is the answer: final at the first
    attempt with it as output (read as text blocks, there were none: an
    empty answer at every attempt)."""
    stack.start_worker(*ANTHROPIC, env={"ANTHROPIC_KEY": KEY})
    j = job(uid("a-tool"), params={"tools": TOOLS, "tool_choice": choice})
    ev = stack.final_of(j, envelopes, ["valid"])
    assert stack.llm_stats()["calls"] == {"%s:1" % j["job_id"]: 1}
    assert ev["output"] == mock_tool_input(stack, j)
    envelopes.validate("output/product.v1.json", ev["output"])


@pytest.mark.llm_args("--api-key", KEY)
def test_anthropic_forced_tool_use_is_repaired(stack, envelopes):
    """An input that breaks the schema is repaired as a text answer is:
    the reflection quotes it and names the path, the second call's input
    is the output."""
    stack.start_worker(*ANTHROPIC, env={"ANTHROPIC_KEY": KEY})
    j = job(uid("a-tool-fix"), directive="defect=wrong_type until=1",
            params={"tools": TOOLS, "tool_choice": {"type": "tool", "name": "record_product"}})
    ev = stack.final_of(j, envelopes, ["invalid", "valid"])
    (refl,) = stack.reflections(j["job_id"])
    first = mock_tool_input(stack, j)
    assert json.loads(refl["previous_output"]) == first and first["name"] == 12345
    assert [(v["path"], v["code"]) for v in refl["violations"]] == [("/name", "WRONG_TYPE")]
    assert ev["output"] == mock_tool_input(stack, j, 2, (refl["previous_output"], refl["prompt"]))
    envelopes.validate("output/product.v1.json", ev["output"])


@pytest.mark.llm_args("--api-key", KEY)
def test_anthropic_several_tool_uses_are_an_empty_answer(stack, envelopes):
    """Two tool_use blocks name no answer: EMPTY_OUTPUT at every attempt,
    said as such in each record, and escalated."""
    stack.start_worker(*ANTHROPIC, env={"ANTHROPIC_KEY": KEY})
    jid = uid("a-tool-two")
    stack.produce_jobs([job(jid, directive="tool_calls=2",
                            params={"tools": TOOLS, "tool_choice": {"type": "tool", "name": "record_product"}})])
    stack.wait_outcomes([jid])
    (ev,) = [m["value"] for m in stack.consume("retort.escalations") if m["value"]["job_id"] == jid]
    envelopes.validate("events/escalation.schema.json", ev)
    assert ev["category"] == "empty" and ev["attempts"] == 3 and ev["reason"] == "empty failed after 3 attempts"
    assert [(h["category"], [v["code"] for v in h["violations"]], h["error"]) for h in ev["history"]] == \
        [("empty", ["EMPTY_OUTPUT"], "the answer is 2 tool calls, not one")] * 3


def test_prompt_cache_marks_the_system_prompt(stack):
    """llm.prompt_cache=true: the system prompt (the instructions and the
    schema, which a schema's jobs share) goes as a text block marked
    cache_control ephemeral, for Anthropic's prompt cache; without it, a
    plain string.  The requests are read by an LLM of the test's own.  The
    cached tokens of the answer's usage are kept apart in the record and
    the final event (retort report prices them)."""
    bodies = []

    class Capture(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            send_json(self, 200, {"id": "msg_1", "type": "message", "role": "assistant",
                                  "content": [{"type": "text", "text": "{\"a\": 1}"}], "stop_reason": "end_turn",
                                  "usage": {"input_tokens": 900, "output_tokens": 5,
                                            "cache_read_input_tokens": 1200, "cache_creation_input_tokens": 40}})

    with own_llm(Capture) as base:
        url = ("--set", "llm.base_url=%s/v1" % base)
        schema = {"type": "object", "required": ["a"]}
        for cache in ("true", "false"):
            del bodies[:]
            w = stack.start_worker(*ANTHROPIC, *url, "--set", "llm.prompt_cache=" + cache,
                                   env={"ANTHROPIC_KEY": KEY})
            jid = uid("a-cache")
            stack.produce_jobs([job(jid, schema=schema)])
            outs = [m for m in stack.wait_outcomes([jid]) if m["value"]["job_id"] == jid]
            assert outs[0]["headers"]["ce_type"] == "retort.job.final", outs
            # the prompt read from and written to the cache counts as prompt
            # tokens, and the event and the record say which, for the price
            usage = {"prompt_tokens": 2140, "completion_tokens": 5, "total_tokens": 2145,
                     "cache_read_tokens": 1200, "cache_write_tokens": 40}
            assert outs[0]["value"]["usage"] == usage, outs[0]["value"]["usage"]
            rec = json.loads(stack.redis_client().lindex("retort:job:{%s}:history" % jid, -1))
            assert rec["usage"] == usage, rec
            assert len(bodies) == 1
            system = bodies[0]["system"]
            if cache == "true":
                assert [b["type"] for b in system] == ["text"] and system[0]["cache_control"] == {"type": "ephemeral"}
                assert "JSON Schema" in system[0]["text"] and '"required":["a"]' in system[0]["text"]
            else:
                assert isinstance(system, str) and "JSON Schema" in system
            assert stack.stop_worker(w) == 0

"""End to end: jobs from Kafka through the mock LLM and the schema validator
to final, retry, escalation and dead-letter events, with state in Redis."""
import http.server
import json
import os
import signal
import time
import uuid
import zlib

import pytest

from stack import REPO, chat_completion, free_port, job, own_llm, scrape_metrics, send_json


# A wait's lower bound allows this much: stamps in whole milliseconds, and
# a backoff timer armed from the event loop's time, cached at the start of
# the loop's turn.
CLOCK_SLACK_S = 0.02


def uid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def by_job(msgs, job_id):
    return [m for m in msgs if m["value"] and m["value"].get("job_id") == job_id]


def one_key_per_partition(prefix, partitions=4):
    """Job ids, one for each partition of the jobs topic (librdkafka's
    partitioner: CRC-32 of the key, modulo the partitions)."""
    keys = {}
    for i in range(1000):
        k = "%s-%d" % (prefix, i)
        keys.setdefault(zlib.crc32(k.encode()) % partitions, k)
        if len(keys) == partitions:
            return [keys[p] for p in range(partitions)]
    raise AssertionError("no key for every partition")


def check_nothing_read_again(stack, name):
    """Starts a worker and lets it read the jobs topic past every message
    produced so far: a job on each partition, produced after those, and
    ended.  Every earlier message's offset committed, it sees none of them
    (a worker that found no committed offsets reads them first: the jobs
    final already are skipped, the messages that are not jobs dead-lettered
    again); it makes only the 4 calls."""
    before = stack.llm_stats()["requests"]
    w = stack.start_worker(name=name)
    ends = one_key_per_partition(uid("end"))
    stack.produce_jobs([job(k) for k in ends])
    stack.wait_outcomes(ends)
    assert stack.stop_worker(w) == 0
    counts = stack.worker_summary(name)
    assert counts == {"final": 4, "retries": 0, "escalated": 0, "dead letters": 0, "skipped": 0,
                      "unfinished": 0}, counts
    assert stack.llm_stats()["requests"] == before + 4


def check_headers(envelopes, msg, ce_type, job_id):
    h = msg["headers"]
    envelopes.validate("events/cloudevents-headers.schema.json", h)
    assert h["ce_type"] == ce_type
    assert h["ce_subject"] == job_id


def test_credentials_in_the_llm_url_are_not_logged(stack):
    """llm.base_url may carry credentials (a user and password, a key in
    the query): the worker's start-up line shows it masked, as
    --print-config does, and so does the name of its rate limiter's
    buckets, a Redis key.  Both had it whole."""
    url = stack.llm_url.replace("http://", "http://retort:s3cret-pw@") + "/v1"
    w = stack.start_worker("--set", "llm.base_url=" + url, "--set", "ratelimit.rpm=6000")
    jid = uid("cred")
    stack.produce_jobs([job(jid)])
    stack.wait_outcomes([jid])
    assert stack.stop_worker(w) == 0
    log = stack.worker_log(w.name)
    assert "s3cret-pw" not in log
    assert "http://********@127.0.0.1" in log
    keys = stack.redis_client().keys("retort:rate:*")
    assert keys == ["retort:rate:{%s/v1|mock-1}" % stack.llm_url.replace("http://", "http://********@")], keys


# The mock answers 401 to a call without this key (Authorization: Bearer),
# the key start_worker gives every worker (OPENAI_API_KEY).
@pytest.mark.llm_args("--api-key", "sk-test-secret")
def test_valid_first_time(stack, envelopes):
    w = stack.start_worker()
    jid = uid("ok")
    stack.produce_jobs([job(jid, metadata={"tenant": "t1"}, batch_id="b1")])
    stack.wait_outcomes([jid])
    finals = by_job(stack.consume("retort.final"), jid)
    assert len(finals) == 1 and not by_job(stack.consume("retort.escalations"), jid)
    ev = finals[0]["value"]
    envelopes.validate("events/final.schema.json", ev)
    check_headers(envelopes, finals[0], "retort.job.final", jid)
    assert finals[0]["headers"]["ce_id"] == "%s:1:final" % jid
    assert finals[0]["key"] == jid
    assert ev["attempts"] == 1 and ev["attempt"] == 1
    assert ev["metadata"] == {"tenant": "t1"} and ev["batch_id"] == "b1"
    envelopes.validate("output/product.v1.json", ev["output"])
    assert ev["usage"]["total_tokens"] == ev["usage"]["prompt_tokens"] + ev["usage"]["completion_tokens"] > 0
    # Redis holds the state and the record of the attempt
    r = stack.redis_client()
    st = r.hgetall("retort:job:{%s}" % jid)
    assert st["status"] == "final" and st["attempt"] == "1"
    hist = [json.loads(x) for x in r.lrange("retort:job:{%s}:history" % jid, 0, -1)]
    assert len(hist) == 1 and hist[0]["outcome"] == "valid"
    envelopes.validate("events/attempt.schema.json", hist[0])
    # received (taken from Kafka) <= started (claim granted) <= finished;
    # the stamps are wall-clock milliseconds, so the same string compares
    # in time order
    assert hist[0]["received_at"] <= hist[0]["started_at"] <= hist[0]["finished_at"], hist[0]
    assert r.ttl("retort:job:{%s}" % jid) > 0
    # the API key was sent (the mock refuses a call without it: the job
    # would have escalated, category auth) but never logged
    assert stack.llm_stats()["by_status"] == {"200": 1}
    assert stack.stop_worker(w) == 0
    log = stack.worker_log(w.name)
    assert "sk-test-secret" not in log
    # kafka.group.id reaches the consumer only: no warning that the
    # producer ignores it
    assert "CONFWARN" not in log, [l for l in log.splitlines() if "CONFWARN" in l]


@pytest.mark.parametrize("defect", ["missing_field", "wrong_type", "invalid_value", "not_json"])
def test_fixed_on_second_attempt(stack, envelopes, defect):
    stack.start_worker()
    jid = uid("fix")
    stack.produce_jobs([job(jid, directive="defect=%s until=1" % defect)])
    stack.wait_outcomes([jid])
    retries = [m for m in stack.consume("retort.jobs") if m["headers"].get("ce_type") == "retort.job.retry"
               and m["value"]["job_id"] == jid]
    assert len(retries) == 1
    rj = retries[0]["value"]
    envelopes.validate("job.schema.json", rj)
    check_headers(envelopes, retries[0], "retort.job.retry", jid)
    assert rj["attempt"] == 2
    refl = rj["reflection"]
    assert refl["attempt"] == 1 and refl["max_attempts"] == 3
    assert refl["violations"] and refl["previous_output"] is not None
    # the repair prompt names what was wrong (the mock only repairs then)
    for v in refl["violations"]:
        assert v["code"] in refl["prompt"]
    # nothing was cut: every violation, the whole output, and it says so
    assert refl["violations_total"] == len(refl["violations"])
    assert refl["previous_output_bytes"] == len(refl["previous_output"].encode())
    assert "cut" not in refl and "not listed" not in refl["prompt"]
    finals = by_job(stack.consume("retort.final"), jid)
    assert len(finals) == 1
    ev = finals[0]["value"]
    envelopes.validate("events/final.schema.json", ev)
    assert ev["attempts"] == 2 and ev["attempt"] == 2
    assert [s["outcome"] for s in ev["summary"]] == ["invalid", "valid"]
    assert finals[0]["headers"]["ce_id"] == "%s:2:final" % jid


@pytest.mark.parametrize("defect,says", [("nul_char", "a string in the JSON holds \\u0000"),
                                         ("nul_text", "the answer holds U+0000")])
def test_nul_in_an_answer_is_repaired_not_cut_short(stack, envelopes, defect, says):
    """U+0000 in the answer, escaped in a string of the model's JSON
    (nul_char) or in the answer's text after the JSON (nul_text): read as
    cJSON reads strings, the text would end at the NUL and the shorter
    value pass as final.  It is refused with a violation that names the
    NUL, and repaired."""
    stack.start_worker()
    jid = uid("nul")
    stack.produce_jobs([job(jid, directive="defect=%s until=1" % defect)])
    stack.wait_outcomes([jid])
    finals = by_job(stack.consume("retort.final"), jid)
    assert len(finals) == 1
    ev = finals[0]["value"]
    envelopes.validate("events/final.schema.json", ev)
    assert ev["attempts"] == 2 and [s["outcome"] for s in ev["summary"]] == ["invalid", "valid"]
    assert "\x00" not in json.dumps(ev["output"], ensure_ascii=False)
    rj = [m["value"] for m in stack.consume("retort.jobs") if m["headers"].get("ce_type") == "retort.job.retry"
          and m["value"]["job_id"] == jid]
    assert len(rj) == 1
    refl = rj[0]["reflection"]
    if defect == "nul_char":
        assert "\\u0000" in refl["previous_output"]
    (v,) = refl["violations"]
    assert v["code"] == "NOT_JSON" and v["message"].startswith(says) and "NUL" in v["message"]
    assert v["message"] in refl["prompt"]


def test_never_fixed_escalates_with_history(stack, envelopes):
    stack.start_worker()
    jid = uid("never")
    stack.produce_jobs([job(jid, directive="defect=wrong_type")])
    stack.wait_outcomes([jid])
    escs = by_job(stack.consume("retort.escalations"), jid)
    assert len(escs) == 1 and not by_job(stack.consume("retort.final"), jid)
    ev = escs[0]["value"]
    envelopes.validate("events/escalation.schema.json", ev)
    check_headers(envelopes, escs[0], "retort.job.escalated", jid)
    assert ev["reason"] == "validation failed after 3 attempts"
    assert ev["attempts"] == 3 and [h["attempt"] for h in ev["history"]] == [1, 2, 3]
    assert all(h["violations"] for h in ev["history"])
    assert [h["decision"] for h in ev["history"]] == ["retry", "retry", "escalate"]
    assert ev["usage"]["prompt_tokens"] == sum(h["usage"]["prompt_tokens"] for h in ev["history"])
    retries = [m for m in stack.consume("retort.jobs") if m["headers"].get("ce_type") == "retort.job.retry"
               and m["value"]["job_id"] == jid]
    assert sorted(m["value"]["attempt"] for m in retries) == [2, 3]
    # every attempt reached the LLM exactly once
    calls = stack.llm_stats()["calls"]
    assert [calls.get("%s:%d" % (jid, a)) for a in (1, 2, 3)] == [1, 1, 1]


def test_job_max_attempts_wins(stack):
    stack.start_worker()
    jid = uid("max")
    stack.produce_jobs([job(jid, directive="defect=missing_field", max_attempts=2)])
    stack.wait_outcomes([jid])
    ev = by_job(stack.consume("retort.escalations"), jid)[0]["value"]
    assert ev["attempts"] == 2 and ev["reason"] == "validation failed after 2 attempts"


@pytest.mark.parametrize("directive,category", [("defect=refusal", "refusal"),
                                                ("http=401", "auth"),
                                                ("quota=1", "quota"),
                                                ("http=400", "context_length")])
def test_not_fixable_escalates_at_once(stack, envelopes, directive, category):
    stack.start_worker()
    jid = uid("crit")
    stack.produce_jobs([job(jid, directive=directive)])
    stack.wait_outcomes([jid])
    ev = by_job(stack.consume("retort.escalations"), jid)[0]["value"]
    envelopes.validate("events/escalation.schema.json", ev)
    assert ev["attempts"] == 1 and ev["category"] == category
    assert not [m for m in stack.consume("retort.jobs") if m["headers"].get("ce_type") == "retort.job.retry"
                and m["value"]["job_id"] == jid]


# A job's own tool, forced (tools and tool_choice in its params, which go
# to the API as they are): the model's JSON comes back as the one call's
# arguments, content null.  The tool's parameters are the job's schema,
# from which the mock generates the arguments.
with open(os.path.join(REPO, "schemas", "output", "product.v1.json")) as f:
    PRODUCT_SCHEMA = json.load(f)
TOOLS = [{"type": "function", "function": {"name": "record_product", "description": "Records the product.",
                                            "parameters": PRODUCT_SCHEMA}}]
NAMED_TOOL = {"type": "function", "function": {"name": "record_product"}}


def mock_tool_arguments(stack, j, attempt=1, repair=None):
    """The arguments of the one call the mock LLM answers job j's attempt
    with, asked again here (its answers depend on the request alone);
    repair: (previous output, repair prompt) of a retry."""
    msgs = [{"role": "user", "content": j["prompt"]}]
    if repair:
        msgs += [{"role": "assistant", "content": repair[0]}, {"role": "user", "content": repair[1]}]
    resp = stack.llm_post("/v1/chat/completions", dict(j["params"], model="mock-1", messages=msgs),
                          {"X-Retort-Attempt": str(attempt)})
    (call,) = resp["choices"][0]["message"]["tool_calls"]
    return call["function"]["arguments"]


@pytest.mark.parametrize("choice", [NAMED_TOOL, "required"])
def test_a_forced_tool_call_is_the_answer(stack, envelopes, choice):
    """The call's arguments are the answer: final at the first attempt,
    with them as output (read as text, the null content was an empty
    answer at every attempt)."""
    stack.start_worker()
    j = job(uid("tool"), params={"tools": TOOLS, "tool_choice": choice})
    ev = stack.final_of(j, envelopes, ["valid"])
    assert stack.llm_stats()["calls"] == {"%s:1" % j["job_id"]: 1}
    args = mock_tool_arguments(stack, j)
    assert ev["output"] == json.loads(args), (ev["output"], args)
    envelopes.validate("output/product.v1.json", ev["output"])


def test_a_forced_tool_call_is_repaired(stack, envelopes):
    """Arguments that break the schema are repaired as a text answer is:
    the reflection quotes them and names the path, the second call's
    arguments are the output."""
    stack.start_worker()
    j = job(uid("tool-fix"), directive="defect=wrong_type until=1",
            params={"tools": TOOLS, "tool_choice": NAMED_TOOL})
    ev = stack.final_of(j, envelopes, ["invalid", "valid"])
    (refl,) = stack.reflections(j["job_id"])
    first = mock_tool_arguments(stack, j)
    assert refl["previous_output"] == first and json.loads(first)["name"] == 12345
    assert [(v["path"], v["code"]) for v in refl["violations"]] == [("/name", "WRONG_TYPE")]
    assert ev["output"] == json.loads(mock_tool_arguments(stack, j, 2, (first, refl["prompt"])))
    envelopes.validate("output/product.v1.json", ev["output"])


def test_several_tool_calls_are_an_empty_answer(stack, envelopes):
    """Two calls of the forced tool name no answer: EMPTY_OUTPUT at every
    attempt, said as such in each record, and escalated."""
    stack.start_worker()
    jid = uid("tool-two")
    stack.produce_jobs([job(jid, directive="tool_calls=2", params={"tools": TOOLS, "tool_choice": NAMED_TOOL})])
    stack.wait_outcomes([jid])
    escs = by_job(stack.consume("retort.escalations"), jid)
    assert len(escs) == 1 and not by_job(stack.consume("retort.final"), jid)
    ev = escs[0]["value"]
    envelopes.validate("events/escalation.schema.json", ev)
    assert ev["category"] == "empty" and ev["attempts"] == 3 and ev["reason"] == "empty failed after 3 attempts"
    assert [v["code"] for v in ev["violations"]] == ["EMPTY_OUTPUT"]
    assert [(h["category"], [v["code"] for v in h["violations"]], h["error"]) for h in ev["history"]] == \
        [("empty", ["EMPTY_OUTPUT"], "the answer is 2 tool calls, not one")] * 3
    calls = stack.llm_stats()["calls"]
    assert [calls.get("%s:%d" % (jid, a)) for a in (1, 2, 3)] == [1, 1, 1]


def test_unknown_schema_escalates_without_llm_call(stack):
    stack.start_worker()
    jid = uid("noschema")
    stack.produce_jobs([job(jid, schema="nope.v9")])
    stack.wait_outcomes([jid])
    ev = by_job(stack.consume("retort.escalations"), jid)[0]["value"]
    assert ev["category"] == "unknown_schema" and "nope.v9" in ev["reason"] + json.dumps(ev["history"])
    assert "%s:1" % jid not in stack.llm_stats()["calls"]


def test_inline_schema(stack):
    """A job may carry its schema.  The worker compiles each distinct one
    once (schemas.inline_cache): 8 jobs with one schema, and their retry
    jobs, compile it once; a second schema once more; a schema that does
    not compile escalates its job, and is not kept."""
    port = free_port()
    stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1")
    schema = {"type": "object", "required": ["city", "population"], "additionalProperties": False,
              "properties": {"city": {"type": "string", "minLength": 2},
                             "population": {"type": "integer", "minimum": 0}}}
    other = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string", "maxLength": 40}}}
    ids = [uid("inline") for _ in range(8)]
    odd, bad, badx = uid("inline-other"), uid("inline-bad"), uid("inline-badx")
    stack.produce_jobs([job(jid, schema=schema, directive="defect=missing_field field=population until=1")
                        for jid in ids] +
                       [job(odd, schema=other), job(bad, schema={"type": "objekt"}),
                        job(badx, schema={"type": "object", "x-retort": {"rules": 5}})])
    stack.wait_outcomes(ids + [odd, bad, badx])
    finals = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.final")}
    for jid in ids:
        ev = finals[jid]
        assert ev["schema"] == "inline" and ev["attempts"] == 2
        assert set(ev["output"]) == {"city", "population"}
    assert finals[odd]["attempts"] == 1 and "city" in finals[odd]["output"]
    (esc,) = [m["value"] for m in stack.consume("retort.escalations") if m["value"]["job_id"] == bad]
    assert "inline schema does not compile" in esc["reason"] + json.dumps(esc["history"])
    # broken, not unknown: the submitter's to fix, not the schema directory's
    assert esc["category"] == "invalid_schema" and esc["attempts"] == 1, esc
    assert [v["code"] for v in esc["history"][0]["violations"]] == ["INVALID_SCHEMA"]
    (escx,) = [m["value"] for m in stack.consume("retort.escalations") if m["value"]["job_id"] == badx]
    assert escx["category"] == "invalid_schema" and "x-retort" in json.dumps(escx["history"]), escx
    calls = stack.llm_stats()["calls"]
    assert "%s:1" % bad not in calls and "%s:1" % badx not in calls
    samples, _ = scrape_metrics(port)
    # 18 jobs with a schema that compiles (8 + their 8 retries + 1 + the
    # one whose x-retort is wrong): 3 compiles
    assert samples[("retort_inline_schemas_total", (("cache", "miss"),))] == 3
    assert samples[("retort_inline_schemas_total", (("cache", "hit"),))] == 15
    # the three that compiled stay kept, with what they hold
    assert samples[("retort_inline_schema_cache_entries", ())] == 3
    assert 0 < samples[("retort_inline_schema_cache_bytes", ())] < 1 << 20


def test_inline_schema_over_the_cache_memory_bound(stack):
    """schemas.inline_cache_max_bytes bounds the memory the kept compiled
    schemas hold: a schema holding more than the whole bound (any, at 1 KB)
    is compiled for each job and never kept, and its jobs still pass."""
    port = free_port()
    stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1",
                       "--set", "schemas.inline_cache_max_bytes=1024")
    schema = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
    ids = [uid("inline-mem") for _ in range(4)]
    stack.produce_jobs([job(jid, schema=schema) for jid in ids])
    stack.wait_outcomes(ids)
    finals = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.final")}
    assert all(finals[jid]["attempts"] == 1 for jid in ids), finals
    samples, _ = scrape_metrics(port)
    assert samples[("retort_inline_schemas_total", (("cache", "miss"),))] == 4
    assert samples[("retort_inline_schemas_total", (("cache", "hit"),))] == 0
    assert samples[("retort_inline_schema_cache_entries", ())] == 0
    assert samples[("retort_inline_schema_cache_bytes", ())] == 0


def test_answer_longer_than_the_receive_buffer(stack):
    """curl reads answers 4 KB at a time (CURLOPT_BUFFERSIZE): a 60 KB
    answer arrives in many pieces and is validated whole."""
    stack.start_worker()
    jid = uid("long")
    schema = {"type": "object", "required": ["text", "n"], "additionalProperties": False,
              "properties": {"text": {"type": "string", "minLength": 60000},
                             "n": {"type": "integer", "minimum": 0}}}
    stack.produce_jobs([job(jid, schema=schema)])
    stack.wait_outcomes([jid])
    finals = by_job(stack.consume("retort.final"), jid)
    assert len(finals) == 1 and not by_job(stack.consume("retort.escalations"), jid)
    ev = finals[0]["value"]
    assert ev["attempts"] == 1 and len(ev["output"]["text"]) >= 60000


def test_transient_errors_retry_in_place(stack):
    stack.start_worker()
    jid = uid("429")
    stack.produce_jobs([job(jid, directive="http=429 times=2 retry_after=0")])
    stack.wait_outcomes([jid])
    ev = by_job(stack.consume("retort.final"), jid)[0]["value"]
    # no validation attempt spent: still attempt 1, after three calls
    assert ev["attempts"] == 1
    assert stack.llm_stats()["calls"]["%s:1" % jid] == 3
    r = stack.redis_client()
    rec = json.loads(r.lindex("retort:job:{%s}:history" % jid, 0))
    assert rec["tries"] == 3


@pytest.mark.parametrize("directive,calls,topic,wait_ms", [
    ("http=500 times=1 should_retry=false", 1, "retort.escalations", None),
    ("http=400 times=1 should_retry=true", 2, "retort.final", None),
    ("http=503 times=1 retry_after=2", 2, "retort.final", 2000),
    ("http=429 times=1 retry_after=60 retry_after_ms=1500", 2, "retort.final", 1500),
])
def test_the_servers_retry_headers_are_read(stack, directive, calls, topic, wait_ms):
    """x-should-retry overrides what the status says (a 500 not retried in
    place, a 400 retried); Retry-After sets the wait before the call is
    made again, and retry-after-ms wins over it."""
    w = stack.start_worker()
    jid = uid("hdr")
    stack.produce_jobs([job(jid, directive=directive)])
    stack.wait_outcomes([jid], timeout=30)
    assert by_job(stack.consume(topic), jid)
    assert stack.llm_stats()["calls"]["%s:1" % jid] == calls
    if wait_ms:
        assert "again in %d ms" % wait_ms in stack.worker_log(w.name)
        # and waited so: the second call reached the LLM at least that
        # long after the first (which was answered at once)
        (first, _), (second, _) = stack.llm_times()["%s:1" % jid]
        assert second - first >= wait_ms / 1000.0 - CLOCK_SLACK_S, (second - first, wait_ms)


class HugeRetryAfterLLM(http.server.BaseHTTPRequestHandler):
    """429 with a Retry-After beyond any integer on each job's first call,
    then an answer."""
    header = ("Retry-After", "1e300")
    seen = set()
    arrivals = {}      # job id: when each of its calls arrived

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        jid = self.headers.get("X-Retort-Job-Id")
        HugeRetryAfterLLM.arrivals.setdefault(jid, []).append(time.time())
        if jid not in HugeRetryAfterLLM.seen:
            HugeRetryAfterLLM.seen.add(jid)
            send_json(self, 429, {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}},
                      headers=[HugeRetryAfterLLM.header])
        else:
            send_json(self, 200, chat_completion("{}"))


@pytest.mark.parametrize("header", [("Retry-After", "1e300"), ("Retry-After", "inf"), ("retry-after-ms", "1e30")])
def test_a_retry_after_beyond_any_integer_waits_the_longest_backoff(stack, header):
    """A wait too large for a long was converted all the same: undefined
    behaviour (UBSan stopped the worker; x86 made it LONG_MIN, and the
    header was ignored).  It is clamped first: llm.backoff_max_ms."""
    HugeRetryAfterLLM.header = header
    with own_llm(HugeRetryAfterLLM) as url:
        w = stack.start_worker("--set", "llm.base_url=%s/v1" % url,
                               "--set", "llm.backoff_base_ms=10", "--set", "llm.backoff_max_ms=700")
        jid = uid("huge-ra")
        stack.produce_jobs([job(jid, schema={"type": "object"})])
        stack.wait_outcomes([jid], timeout=30)
        assert by_job(stack.consume("retort.final"), jid)
        assert "again in 700 ms" in stack.worker_log(w.name)
        first, second = HugeRetryAfterLLM.arrivals[jid]
        assert second - first >= 0.7 - CLOCK_SLACK_S, second - first
        assert stack.stop_worker(w) == 0


class ForwardProxy(http.server.BaseHTTPRequestHandler):
    """An HTTP proxy that answers each request itself: it keeps the request
    line's target (a proxy is sent the absolute URL) and answers {}."""
    targets = []

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        ForwardProxy.targets.append(self.path)
        send_json(self, 200, chat_completion("{}"))


def test_the_proxy_variables_are_honoured(stack):
    """With no proxy variable set, each curl handle is told "no proxy" (curl
    looked for one at every call); with one set, curl's rules apply: the
    LLM's calls go through http_proxy, unless no_proxy names its host."""
    unreachable = "http://127.0.0.1:%d/v1" % free_port()
    ForwardProxy.targets = []
    with own_llm(ForwardProxy) as proxy:
        w = stack.start_worker("--set", "llm.base_url=%s" % unreachable, name="w-proxied",
                               env={"http_proxy": proxy, "no_proxy": "", "NO_PROXY": ""})
        jid = uid("proxied")
        stack.produce_jobs([job(jid, schema={"type": "object"})])
        stack.wait_outcomes([jid], timeout=30)
        assert by_job(stack.consume("retort.final"), jid)
        assert ForwardProxy.targets == [unreachable + "/chat/completions"], ForwardProxy.targets
        assert stack.stop_worker(w) == 0
        # no_proxy naming the LLM's host: straight to the mock LLM
        w = stack.start_worker(name="w-not-proxied",
                               env={"http_proxy": proxy, "no_proxy": "127.0.0.1", "NO_PROXY": ""})
        jid = uid("not-proxied")
        stack.produce_jobs([job(jid)])
        stack.wait_outcomes([jid], timeout=30)
        assert by_job(stack.consume("retort.final"), jid)
        assert len(ForwardProxy.targets) == 1
        assert stack.stop_worker(w) == 0


def test_fenced_and_prose_answers_are_accepted(stack):
    stack.start_worker()
    ids = [uid("fence"), uid("prose")]
    stack.produce_jobs([job(ids[0], directive="defect=fenced"), job(ids[1], directive="defect=prose")])
    stack.wait_outcomes(ids)
    for jid in ids:
        ev = by_job(stack.consume("retort.final"), jid)[0]["value"]
        assert ev["attempts"] == 1


def test_malformed_jobs_go_to_dlq_and_work_continues(stack, envelopes):
    stack.start_worker()
    good = uid("after-dlq")
    stack.produce("retort.jobs", [
        ("bad-json", b"{not json"),
        ("bad-utf8", b'{"job_id":"x\xff"}'),
        ("bad-job", {"job_id": "bad-job", "schema": "product.v1"}),  # neither prompt nor messages
        ("typo", {"job_id": "typo", "schema": "product.v1", "promt": "x"}),
        # a key that is not text: an integer serialized as 4 bytes (42)
        ("\x00\x00\x00*", b"{not json either"),
    ])
    stack.produce_jobs([job(good)])
    stack.wait_outcomes([good])
    deadline = time.time() + 20
    while time.time() < deadline:
        dlq = stack.consume("retort.dlq")
        if len(dlq) >= 5:
            break
        time.sleep(0.3)
    assert len(dlq) == 5
    for m in dlq:
        envelopes.validate("events/dead_letter.schema.json", m["value"])
        check_headers(envelopes, m, "retort.job.dead_letter", m["headers"]["ce_subject"])
        assert m["value"]["source"]["topic"] == "retort.jobs"
    reasons = {m["key"]: m["value"] for m in dlq}
    assert "not JSON" in reasons["bad-json"]["reason"] and reasons["bad-json"]["value"] == "{not json"
    assert "UTF-8" in reasons["bad-utf8"]["reason"] and "value_base64" in reasons["bad-utf8"]
    assert reasons["bad-job"]["job_id"] == "bad-job" and reasons["bad-job"]["violations"]
    assert "promt" in json.dumps(reasons["typo"])
    # the dead letter goes out under the same 4 bytes, and says them in base64
    binary = reasons["\x00\x00\x00*"]
    assert binary["key_base64"] == "AAAAKg==" and "key" not in binary and binary["value"] == "{not json either"
    assert reasons["bad-json"]["key"] == "bad-json"


def test_events_too_large_for_a_kafka_message_leave_their_largest_parts_out(stack, envelopes):
    """With the producer's message.max.bytes at 20,000: a 30 KB message
    that is not UTF-8 (its dead letter would carry 40 KB of base64) and a
    job with 25 KB of metadata (echoed in its final event).  Refused by
    Kafka on every try, such an event held its message, and every later
    offset of the partition, for good.  Now each goes out without its
    largest member, named in "omitted", and the offsets are committed.
    A message keyed with 25 KB that is not a job: its dead letter goes
    without a key (keyed so, it could never fit; the worker spun at 100%
    of a core retrying it at once) and says the key in "omitted"."""
    port = free_port()
    w = stack.start_worker("--set", "kafka.producer.message.max.bytes=20000",
                           "--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1")
    bin_id, meta_id, after = uid("big-bin"), uid("big-meta"), uid("after-big")
    big_key = "k" * 25000
    stack.produce("retort.jobs", [(bin_id, b'{"job_id":"x' + b"\xff" * 30000 + b'"}'),
                                  (big_key, b"not json")])
    stack.produce_jobs([job(meta_id, metadata={"notes": "n" * 25000}), job(after)])
    stack.wait_outcomes([meta_id, after])
    deadline = time.time() + 20
    while time.time() < deadline and len(stack.consume("retort.dlq")) < 2:
        time.sleep(0.3)
    (keyless,) = [m for m in stack.consume("retort.dlq") if m["key"] is None]
    envelopes.validate("events/dead_letter.schema.json", keyless["value"])
    assert "not JSON" in keyless["value"]["reason"] and keyless["value"]["value"] == "not json"
    assert keyless["value"]["omitted"] == {"key": 25002} and "key" not in keyless["value"]
    assert "too large to key its dead letter with" in stack.worker_log(w.name)
    (dlq,) = [m for m in stack.consume("retort.dlq") if m["key"] == bin_id]
    ev = dlq["value"]
    envelopes.validate("events/dead_letter.schema.json", ev)
    assert "UTF-8" in ev["reason"] and "value_base64" not in ev
    assert ev["omitted"]["value_base64"] > 40000 and len(dlq["payload"]) < 20000
    (fin,) = [m for m in stack.consume("retort.final") if m["key"] == meta_id]
    ev = fin["value"]
    envelopes.validate("events/final.schema.json", ev)
    assert "metadata" not in ev and ev["omitted"] == {"metadata": len('{"notes":""}') + 25000}
    envelopes.validate("output/product.v1.json", ev["output"])
    # the record in Redis and the job's input keep everything
    assert stack.redis_client().hget("retort:job:{%s}" % meta_id, "status") == "final"
    assert "larger than a Kafka message may be" in stack.worker_log(w.name)
    samples, _ = scrape_metrics(port)
    cut = {dict(labels)["outcome"]: v for (name, labels), v in samples.items() if name == "retort_messages_cut_total"}
    assert cut == {"final": 1, "retry": 0, "escalated": 0, "dead_letter": 2}
    # every message was acknowledged: a drain has nothing to wait for, and
    # a new member of the group does not see any of them again
    assert stack.stop_worker(w) == 0
    check_nothing_read_again(stack, "w-next")
    assert len(stack.consume("retort.dlq")) == 2


def test_duplicate_message_is_not_processed_twice(stack):
    """A job's message twice while the first is in flight, again once it is
    final, and a stale retry job (attempt 2 of a job final at attempt 1):
    each copy is read and skipped (counted, and logged for the ones Redis
    decides), and the job ends once, after one call."""
    port = free_port()
    w = stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1")

    def skipped(n):
        deadline = time.time() + 30
        while True:
            samples, _ = scrape_metrics(port)
            got = samples.get(("retort_jobs_total", (("outcome", "skipped"),)), 0)
            if got >= n or time.time() > deadline:
                return got
            time.sleep(0.1)

    def skip_lines():
        return [(x["attempt"], x["msg"]) for x in stack.log_lines(w.name)
                if x.get("job_id") == jid and "skipping" in x["msg"]]

    jid = uid("dup")
    j = job(jid, directive="latency_ms=300")
    stack.produce_jobs([j, j])           # twice while the first is in flight
    stack.wait_outcomes([jid])
    assert skipped(1) == 1
    stack.produce_jobs([j])              # and again once it is final
    assert skipped(2) == 2
    # a stale retry job (attempt 2 for a job that is final) is ignored too
    stack.produce_jobs([dict(j, attempt=2)])
    assert skipped(3) == 3
    # the log line is written after the count, at the end of the loop turn
    deadline = time.time() + 10
    while len(skip_lines()) < 3 and time.time() < deadline:
        time.sleep(0.05)
    assert skip_lines() == [(1, "job already final; skipping")] * 2 + [(2, "job already final; skipping")]
    assert len(by_job(stack.outcomes(), jid)) == 1
    calls = stack.llm_stats()["calls"]
    assert calls["%s:1" % jid] == 1 and "%s:2" % jid not in calls
    assert stack.stop_worker(w) == 0
    assert stack.worker_summary(w.name)["skipped"] == 3


def test_outcome_partitioning(stack):
    """Outcome events keep the job id as their key either way.  By key (the
    default) each goes where librdkafka's partitioner puts its key (CRC-32
    of the job id, modulo the partitions), as retry jobs always do, so a
    job's events stay in order on one partition.  Sticky: a worker fills one
    partition of an outcome topic for a window before it moves on, so with
    a window longer than the test every final event lands in one partition,
    where their keys spread them over all four."""
    def crc_partition(key):
        return zlib.crc32(key.encode()) % 4

    w = stack.start_worker("--set", "topics.outcome_partitioning=sticky",
                           "--set", "kafka.producer.sticky.partitioning.linger.ms=600000")
    ids = [uid("sticky") for _ in range(40)]
    stack.produce_jobs([job(j, directive="defect=wrong_type until=1" if i % 4 == 0 else None)
                        for i, j in enumerate(ids)])
    stack.wait_outcomes(ids)
    assert stack.stop_worker(w) == 0
    finals = [m for m in stack.consume("retort.final") if m["value"]["job_id"] in ids]
    assert len(finals) == 40 and all(m["key"] == m["value"]["job_id"] for m in finals)
    assert len({m["partition"] for m in finals}) == 1, sorted(m["partition"] for m in finals)
    # the keys alone would have used every partition
    assert len({crc_partition(j) for j in ids}) == 4
    retries = [m for m in stack.consume("retort.jobs") if m["headers"].get("ce_type") == "retort.job.retry"]
    assert len(retries) == 10
    assert all(m["partition"] == crc_partition(m["key"]) for m in retries), retries

    w = stack.start_worker()
    ids2 = [uid("keyed") for _ in range(40)]
    stack.produce_jobs([job(j) for j in ids2])
    stack.wait_outcomes(ids2)
    assert stack.stop_worker(w) == 0
    finals = [m for m in stack.consume("retort.final") if m["value"]["job_id"] in ids2]
    assert len(finals) == 40
    assert all(m["key"] == m["value"]["job_id"] and m["partition"] == crc_partition(m["key"])
               for m in finals), [(m["key"], m["partition"]) for m in finals]


def test_delivered_outcomes_are_marked_in_redis(stack):
    """The worker frees a job once its outcome is delivered and notes the
    delivery in Redis without waiting (the marks of a loop turn in one
    command, 64 at most): every mark lands, for the retry job of attempt 1
    and for the final event of attempt 2, none lost when the worker stops."""
    w = stack.start_worker()
    ids = [uid("mark") for _ in range(300)]
    stack.produce_jobs([job(j, directive="defect=wrong_type until=1") for j in ids])
    stack.wait_outcomes(ids, timeout=60)
    assert stack.stop_worker(w) == 0
    r = stack.redis_client()
    marks = {j: r.hget("retort:job:{%s}" % j, "published") for j in ids}
    assert all(m == "2" for m in marks.values()), [j for j, m in marks.items() if m != "2"][:10]
    log = stack.worker_log(w.name)
    assert "delivered outcome" not in log, log[-2000:]


def test_a_record_larger_than_the_socket_buffer_goes_out_whole(stack):
    """The worker writes a loop turn's Redis commands before the loop waits,
    and watches the socket for room only when a write leaves output behind.
    A record of about 8 MB (an 8,000,000-character answer's value) is sent
    while Redis is stopped, so it fills the socket: it goes out whole once
    Redis reads again, and the job ends once.  The lease is long so that no
    renewal comes to push a remainder out: one left unwatched waits for the
    5 s reply watch (checked: that control fails here)."""
    w = stack.start_worker("--set", "worker.lease_ms=60000", "--set", "llm.max_response_bytes=33554432")
    warm = [uid("warm") for _ in range(20)]
    stack.produce_jobs([job(j) for j in warm])
    stack.wait_outcomes(warm)
    schema = {"type": "object", "required": ["blob"],
              "properties": {"blob": {"type": "string", "minLength": 8000000}}}
    jid = uid("big")
    stack.produce_jobs([job(jid, schema=schema, directive="latency_ms=1500")])
    # claimed once its call reached the LLM, which answers 1.5 s later
    stack.wait_called(jid, timeout=60)
    stack.redis.send_signal(signal.SIGSTOP)
    try:
        ((arrival, _),) = stack.llm_times()[jid + ":1"]
        assert time.time() < arrival + 1.2, "Redis stopped only %.2f s after the call: the answer may be in" % (
            time.time() - arrival)
        # the answer goes whole to the worker (the mock holds none in
        # flight), whose record then goes out to a Redis that reads nothing
        deadline = time.time() + 30
        while stack.llm_stats()["in_flight"]:
            assert time.time() < deadline, "the LLM's answer never went out"
            time.sleep(0.05)
        time.sleep(1)
    finally:
        stack.redis.send_signal(signal.SIGCONT)
    outs = stack.wait_outcomes([jid], timeout=90)
    assert [m["value"]["job_id"] for m in outs if m["value"]["job_id"] == jid] == [jid]
    assert stack.stop_worker(w) == 0
    assert "no reply for" not in stack.worker_log(w.name)
    r = stack.redis_client()
    assert r.llen("retort:job:{%s}:history" % jid) == 1
    rec = json.loads(r.lindex("retort:job:{%s}:history" % jid, -1))
    assert rec["outcome"] == "valid", rec["outcome"]
    assert len(rec["value"]["blob"]) == 8000000


def test_two_processes_share_a_batch(stack, envelopes):
    sup = stack.start_worker("--processes", "2")
    ids = [uid("pool") for _ in range(200)]
    jobs = []
    for i, jid in enumerate(ids):
        d = "latency_ms=20"
        if i % 5 == 0:
            d += " defect=missing_field until=1"
        if i % 17 == 0:
            d = "defect=wrong_type"
        jobs.append(job(jid, schema=["product.v1", "ticket.v1", "invoice.v1"][i % 3], directive=d))
    stack.produce_jobs(jobs)
    outs = stack.wait_outcomes(ids, timeout=120)
    per_job = {}
    for m in outs:
        per_job.setdefault(m["value"]["job_id"], set()).add(m["headers"]["ce_id"])
    assert all(len(per_job[j]) == 1 for j in ids), "a job ended twice"
    workers = set()
    for m in outs:
        if m["value"]["job_id"] in per_job:
            for h in m["value"].get("history", []):
                workers.add(h["worker"])
    r = stack.redis_client()
    for jid in ids[:60]:
        for rec in r.lrange("retort:job:{%s}:history" % jid, 0, -1):
            workers.add(json.loads(rec)["worker"])
    assert len(workers) == 2, workers
    assert stack.stop_worker(sup) == 0


def test_sigterm_drains_in_flight_jobs(stack):
    w = stack.start_worker()
    ids = [uid("drain") for _ in range(20)]
    stack.produce_jobs([job(j, directive="latency_ms=1500") for j in ids])
    # wait until the calls are in flight, then stop
    deadline = time.time() + 30
    while time.time() < deadline and stack.llm_stats()["requests"] < 20:
        time.sleep(0.1)
    assert stack.stop_worker(w) == 0
    got = {m["value"]["job_id"] for m in stack.outcomes()}
    assert set(ids) <= got
    # offsets were committed: a new worker reading past every message
    # does not see the jobs again (it would skip them: Redis says final)
    check_nothing_read_again(stack, "w-next")


def calls_of(stack, ids):
    """The mock LLM's calls so far of each job of ids (every attempt)."""
    calls = stack.llm_stats()["calls"]
    return {j: sum(n for k, n in calls.items() if k.rsplit(":", 1)[0] == j) for j in ids}


def test_a_stop_starts_no_call(stack):
    """After a SIGTERM the worker starts no LLM call: it finishes those
    running, and the jobs waiting for theirs (here at the gate, behind 2
    calls of 2 s) go at once, uncommitted.  A call started in the drain
    could outlast it and be paid for again by the job's next owner.  The
    next worker takes those jobs over (once the stopped one's lease
    lapses), each called once in all."""
    w = stack.start_worker("--set", "llm.max_inflight=2", "--set", "worker.max_jobs=10", name="w-nocall")
    ids = [uid("nocall") for _ in range(8)]
    stack.produce_jobs([job(j, directive="latency_ms=2000") for j in ids])
    deadline = time.time() + 30
    while sum(calls_of(stack, ids).values()) < 2:
        assert time.time() < deadline, "no call started"
        time.sleep(0.05)
    assert stack.stop_worker(w) == 0
    called = {j for j, n in calls_of(stack, ids).items() if n}
    assert len(called) == 2, calls_of(stack, ids)
    finals = [m["value"]["job_id"] for m in stack.outcomes() if m["value"]["job_id"] in ids]
    assert sorted(finals) == sorted(called)
    summary = stack.worker_summary("w-nocall")
    assert (summary["final"], summary["unfinished"]) == (2, 0), summary
    stack.start_worker(name="w-nocall-next")
    stack.wait_outcomes(ids, timeout=60)
    finals = [m["value"]["job_id"] for m in stack.outcomes() if m["value"]["job_id"] in ids]
    assert sorted(finals) == sorted(ids)
    assert calls_of(stack, ids) == {j: 1 for j in ids}


def test_a_stop_ends_transient_retries(stack):
    """A job in a backoff after a 503 when the stop comes, and one whose
    call, running then, is answered 503 during the drain: neither is
    called again by the stopping worker (the backoff, 4 s here, and the
    call after it would hold the drain, and a call begun in it may outlast
    it).  Both go, uncommitted, and the next worker makes their second
    calls."""
    w = stack.start_worker("--set", "llm.backoff_base_ms=4000", name="w-backoff")
    waiting, running = uid("in-backoff"), uid("answered-503")
    stack.produce_jobs([job(waiting, directive="http=503 times=1")])
    stack.wait_log("w-backoff", "again in")
    stack.produce_jobs([job(running, directive="http=503 times=1 latency_ms=1500")])
    deadline = time.time() + 30
    while not calls_of(stack, [running])[running]:
        assert time.time() < deadline, "the second job was never called"
        time.sleep(0.05)
    assert stack.stop_worker(w) == 0
    assert calls_of(stack, [waiting, running]) == {waiting: 1, running: 1}
    assert not [m for m in stack.outcomes() if m["value"]["job_id"] in (waiting, running)]
    left = [x for x in stack.log_lines("w-backoff") if "left to the job's next owner" in x["msg"]]
    assert [x["job_id"] for x in left] == [running], left
    summary = stack.worker_summary("w-backoff")
    assert (summary["final"], summary["unfinished"]) == (0, 0), summary
    stack.start_worker(name="w-backoff-next")
    stack.wait_outcomes([waiting, running], timeout=60)
    finals = [m["value"] for m in stack.consume("retort.final") if m["value"]["job_id"] in (waiting, running)]
    assert sorted(f["job_id"] for f in finals) == sorted([waiting, running])
    assert calls_of(stack, [waiting, running]) == {waiting: 2, running: 2}


def test_the_delivered_mark_does_not_bring_back_an_expired_job(stack):
    """The mark that an outcome was delivered comes after the delivery
    report (here 3 s of linger later).  A job's state that expired (or was
    deleted) in between must stay gone: the mark made it again, holding
    only itself and without a TTL, so it stayed in Redis for ever."""
    w = stack.start_worker("--set", "kafka.producer.linger.ms=3000", name="w-expired")
    jid = uid("expired")
    key = "retort:job:{%s}" % jid
    stack.produce_jobs([job(jid)])
    r = stack.redis_client()
    deadline = time.time() + 30
    while r.hget(key, "status") != "final":
        assert time.time() < deadline, "the job never finished"
        time.sleep(0.05)
    assert r.hget(key, "published") is None, "the final event left already: the test proves nothing"
    r.delete(key)
    stack.wait_outcomes([jid], timeout=30)
    # the mark follows the delivery report; the worker's drain waits for
    # both (the job in flight until its report, then the marks' replies)
    assert stack.stop_worker(w) == 0
    assert stack.worker_summary(w.name)["unfinished"] == 0
    assert r.exists(key) == 0, (r.hgetall(key), r.pttl(key))


def test_sigterm_drains_an_attempt_started_before_its_retry_job_left(stack):
    """retry.local starts attempt 2 while attempt 1's retry job is still in
    the producer (here a linger of 3 s keeps it there).  SIGTERM then: the
    drain waits for attempt 2 and for the retry job's delivery, so both
    leave, the job's offset is committed, and the next worker redoes
    nothing."""
    w = stack.start_worker("--set", "kafka.producer.linger.ms=3000", name="w-linger")
    jid = uid("drain-shadow")
    stack.produce_jobs([job(jid, directive="defect=missing_field until=1 latency_ms=500")])
    deadline = time.time() + 30
    while time.time() < deadline and not stack.llm_stats()["calls"].get(jid + ":2"):
        time.sleep(0.05)
    assert stack.llm_stats()["calls"].get(jid + ":2") == 1
    r = stack.redis_client()
    assert r.hget("retort:job:{%s}" % jid, "published") is None, "the retry job left already: the test proves nothing"
    assert stack.stop_worker(w) == 0
    assert "; 0 jobs unfinished" in stack.worker_log("w-linger")
    finals = [m["value"] for m in stack.consume("retort.final") if m["value"]["job_id"] == jid]
    assert [f["attempts"] for f in finals] == [2]
    retries = [m["value"] for m in stack.consume("retort.jobs") if m["value"] and m["value"]["job_id"] == jid]
    assert [x.get("attempt", 1) for x in retries] == [1, 2]
    # both deliveries marked before the worker left
    assert r.hget("retort:job:{%s}" % jid, "published") == "2"
    # the job's message was committed; the retry job, which came after the
    # worker stopped consuming, is read and skipped (Redis: final)
    before = stack.llm_stats()["requests"]
    w2 = stack.start_worker(name="w-after")
    deadline = time.time() + 30
    while not [x for x in stack.log_lines("w-after")
               if "skipping" in x["msg"] and x.get("job_id") == jid and x.get("attempt") == 2]:
        assert w2.poll() is None and time.time() < deadline, "w-after never skipped the retry job"
        time.sleep(0.1)
    # the drain ends anything read before the retry job (the job's message,
    # were it read again, is in the same partition, before it)
    assert stack.stop_worker(w2) == 0
    assert stack.llm_stats()["requests"] == before
    skips = [json.loads(l) for l in stack.worker_log("w-after").splitlines() if "skipping" in l]
    assert [(x["job_id"], x["attempt"]) for x in skips] == [(jid, 2)], skips
    summary = stack.worker_summary("w-after")
    assert (summary["skipped"], summary["unfinished"], summary["final"]) == (1, 0, 0), summary


def repair_behind_a_backlog(stack, local):
    """One worker with 2 calls in flight; a job that needs one repair,
    then 40 jobs of 150 ms each behind it on its partition.  Returns the number of those
    jobs that ended between the failed attempt and the repair, the
    repaired job's final event and its attempt records, once every job has
    ended."""
    port = free_port()
    w = stack.start_worker("--set", "llm.max_inflight=2", "--set", "retry.local=%s" % ("true" if local else "false"),
                           "--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1")
    prefix = uid("backlog")
    first = prefix + "-repair"
    # all on the repair's partition (librdkafka's partitioner: CRC-32 of
    # the key, modulo the 4 partitions), in order behind it
    part = zlib.crc32(first.encode()) % 4
    rest = [k for k in ("%s-%03d" % (prefix, i) for i in range(400)) if zlib.crc32(k.encode()) % 4 == part][:40]
    assert len(rest) == 40
    stack.produce_jobs([job(first, directive="defect=missing_field until=1")] +
                       [job(jid, directive="latency_ms=150") for jid in rest])
    stack.wait_outcomes([first] + rest, timeout=90)
    r = stack.redis_client()
    hist = [json.loads(x) for x in r.lrange("retort:job:{%s}:history" % first, 0, -1)]
    assert [h["attempt"] for h in hist] == [1, 2], hist
    ended = [json.loads(r.lrange("retort:job:{%s}:history" % jid, -1, -1)[0])["finished_at"] for jid in rest]
    between = sum(1 for t in ended if hist[0]["finished_at"] < t < hist[1]["started_at"])
    finals = [m for m in stack.consume("retort.final") if m["value"]["job_id"] == first]
    assert len(finals) == 1 and finals[0]["value"]["attempts"] == 2, finals
    retries = [m for m in stack.consume("retort.jobs") if m["headers"].get("ce_type") == "retort.job.retry"
               and m["value"]["job_id"] == first]
    assert len(retries) == 1 and retries[0]["value"]["attempt"] == 2
    calls = stack.llm_stats()["calls"]
    assert calls.get(first + ":1") == 1 and calls.get(first + ":2") == 1, calls
    # the retry job comes back last: with retry.local it is skipped, done
    deadline = time.time() + 20
    while True:
        samples, _ = scrape_metrics(port)
        skipped = samples.get(("retort_jobs_total", (("outcome", "skipped"),)), 0)
        if skipped or not local or time.time() > deadline:
            break
        time.sleep(0.2)
    assert samples[("retort_local_retries_total", ())] == (1 if local else 0)
    assert skipped == (1 if local else 0)
    assert stack.stop_worker(w) == 0
    if local:
        # the retry job was skipped here without asking Redis: no log of it
        assert "skipping" not in stack.worker_log(w.name)
    return between, finals[0]["value"], hist


def test_a_repair_does_not_wait_behind_the_backlog(stack):
    """retry.local (the default): the worker that decides a retry runs the
    next attempt at once, instead of when the retry job comes back from
    Kafka at the end of its partition, behind every job produced before it.  The retry job still goes to the topic,
    and when it comes back it is skipped: one LLM call per attempt."""
    between, ev, hist = repair_behind_a_backlog(stack, True)
    assert between <= 6, "%d of 40 jobs ended between the failed attempt and the repair" % between
    assert [h["worker"] for h in hist] == ["w0", "w0"]
    # the next worker finds every offset committed, the retry job's too
    check_nothing_read_again(stack, "w-next")


def test_a_repair_waits_for_its_retry_job_without_retry_local(stack):
    """retry.local=false: the next attempt waits for the retry job to come
    back from Kafka, behind the backlog of its partition."""
    between, ev, hist = repair_behind_a_backlog(stack, False)
    assert between >= 30, "only %d of 40 jobs ended between the failed attempt and the repair" % between


def test_a_long_conversation_goes_whole(stack, envelopes):
    """A job's own conversation of 13 messages (the worker lists a
    request's messages in room for 8, and takes more for longer ones).  The
    mock reads its directive from the first user message and, on the
    repair, looks for the missing field's name in the last user message:
    the job is final at its second attempt only when the system
    instruction, all 13 and the repair went, in order."""
    stack.start_worker()
    jid = uid("conv")
    msgs = []
    for i in range(6):
        msgs.append({"role": "user", "content": "Turn %d.%s" % (i, " [[mock defect=missing_field until=1]]" if not i else "")})
        msgs.append({"role": "assistant", "content": "Noted, turn %d." % i})
    msgs.append({"role": "user", "content": "Now describe a product."})
    doc = {"job_id": jid, "schema": "product.v1", "messages": msgs}
    envelopes.validate("job.schema.json", doc)
    stack.produce_jobs([doc])
    stack.wait_outcomes([jid])
    finals = by_job(stack.consume("retort.final"), jid)
    assert len(finals) == 1, by_job(stack.consume("retort.escalations"), jid)
    ev = finals[0]["value"]
    assert ev["attempts"] == 2
    assert [s["outcome"] for s in ev["summary"]] == ["invalid", "valid"]


def test_fixed_on_third_attempt(stack):
    stack.start_worker()
    jid = uid("third")
    stack.produce_jobs([job(jid, directive="defect=missing_field until=2")])
    stack.wait_outcomes([jid])
    ev = [m["value"] for m in stack.consume("retort.final") if m["value"]["job_id"] == jid][0]
    assert ev["attempts"] == 3
    assert [s["outcome"] for s in ev["summary"]] == ["invalid", "invalid", "valid"]
    assert [s["codes"] for s in ev["summary"]][:2] == [["MISSING_FIELD"], ["MISSING_FIELD"]]


@pytest.mark.parametrize("settings", [["kafka.enable.auto.offset.store=true"],
                                      ["kafka.consumer.enable.auto.commit=false"],
                                      ["kafka.producer.enable.idempotence=false", "kafka.acks=0"],
                                      ["kafka.producer.enable.idempotence=false", "kafka.producer.acks=1"],
                                      ["kafka.request.required.acks=1"]])
def test_settings_the_guarantees_rest_on_are_refused(stack, settings):
    """Offsets stored automatically would be committed for messages still
    in flight (lost at a crash); with no commits, every message comes again
    at each start.  An outcome counts as delivered at its delivery report:
    with acks below all it comes before the brokers hold the outcome, and
    a broker lost then loses the outcome of a job committed.  Each is a
    clear error at start, not a silent loss."""
    args = []
    for s in settings:
        args += ["--set", s]
    w = stack.start_worker(*args)
    assert w.wait(20) != 0
    key = settings[-1].split("=")[0].replace("consumer.", "").replace("producer.", "")
    assert "config key '%s': must stay" % key in stack.worker_log(w.name)


def test_acks_all_is_taken_as_written(stack):
    """acks=all and its number, -1, are what the worker sets anyway."""
    w = stack.start_worker("--set", "kafka.producer.acks=-1", "--set", "kafka.request.required.acks=ALL")
    jid = uid("acks")
    stack.produce_jobs([job(jid)])
    stack.wait_outcomes([jid])
    assert stack.stop_worker(w) == 0


def test_event_ids_of_every_job_id_and_run_fit_their_schema(stack, envelopes):
    """ce_id is <job_id>:<attempt>:<kind>, and :r<run> for a later run of
    the job (retort resubmit).  The headers' schema refused both an id
    with a colon (the job schema allows one) and the run's suffix; and a
    job id of 200 characters (its schema's limit) in a script of 3 bytes a
    character was cut in ce_subject and ce_id."""
    w = stack.start_worker()
    colon, long_id = uid("order:42"), "\u62b1" * 191 + uuid.uuid4().hex[:9]
    stack.produce_jobs([job(colon, run=2), job(long_id)])
    stack.wait_outcomes([colon, long_id])
    finals = stack.consume("retort.final")
    for jid, ce_id in ((colon, colon + ":1:final:r2"), (long_id, long_id + ":1:final")):
        (m,) = by_job(finals, jid)
        check_headers(envelopes, m, "retort.job.final", jid)
        assert m["headers"]["ce_id"] == ce_id
    assert stack.stop_worker(w) == 0


def test_a_stop_with_a_webhook_post_in_flight_frees_it(stack):
    """The drain waits for the escalation webhook, up to
    worker.drain_timeout_ms; a POST still in flight then was never
    cancelled, so its call (handle, body, buffers) leaked at exit.  Under
    the ASan build (make integration-asan) the worker runs with leak
    detection here: a leak fails its exit code."""
    got = []

    class Hang(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            got.append(1)
            time.sleep(20)

    with own_llm(Hang) as url:
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1")
        w = stack.start_worker("--set", "escalation.webhook_url=%s/hook" % url,
                               "--set", "worker.drain_timeout_ms=1000", env=env)
        jid = uid("hook-stop")
        stack.produce_jobs([job(jid, directive="defect=refusal")])
        stack.wait_outcomes([jid])
        deadline = time.time() + 10
        while not got and time.time() < deadline:
            time.sleep(0.1)
        assert got, "the webhook was never called"
        assert stack.stop_worker(w) == 0
        assert "drain timeout" in stack.worker_log(w.name)


def test_an_inline_schema_over_the_size_limit_is_refused(stack):
    """Inline schemas come from whoever writes to the jobs topic, and a
    compiled schema can take a few hundred times its text: one longer than
    schemas.inline_max_bytes is refused (invalid_schema, no LLM call), not
    compiled.  One below the limit runs."""
    w = stack.start_worker("--set", "schemas.inline_max_bytes=2048")
    big = {"type": "object", "properties": {"p%d" % i: {"type": "string"} for i in range(100)}}
    small = {"type": "object", "properties": {"p%d" % i: {"type": "string"} for i in range(10)}}
    assert len(json.dumps(big, separators=(",", ":"))) > 2048 > len(json.dumps(small, separators=(",", ":")))
    a, b = uid("inline-big"), uid("inline-small")
    stack.produce_jobs([job(a, schema=big), job(b, schema=small)])
    stack.wait_outcomes([a, b])
    (esc,) = [m["value"] for m in stack.consume("retort.escalations") if m["value"]["job_id"] == a]
    assert esc["category"] == "invalid_schema", esc
    assert "over schemas.inline_max_bytes (2048)" in json.dumps(esc["history"]), esc
    assert "%s:1" % a not in stack.llm_stats()["calls"]
    assert [m for m in stack.consume("retort.final") if m["value"]["job_id"] == b]
    assert stack.stop_worker(w) == 0

"""Shared rate limits (token buckets in Redis, across worker processes) and
AIMD concurrency on 429."""
import datetime
import json
import uuid

from stack import job


def test_rpm_is_shared_by_all_processes(stack):
    # 120 requests a minute = 2 a second, bursts of at most 2, over two processes
    sup = stack.start_worker("--processes", "2", "--set", "ratelimit.rpm=120")
    ids = ["rl-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(12)]
    stack.produce_jobs([job(j) for j in ids])
    outs = stack.wait_outcomes(ids, timeout=60)
    assert len(outs) == 12
    # 12 calls at 2/s after a burst of 2 cannot span less than 5 s (a lower
    # bound: a slow machine only makes it longer)
    calls = sorted(json.loads(r)["finished_at"] for j in ids
                   for r in stack.redis_client().lrange("retort:job:{%s}:history" % j, 0, -1))
    t0 = datetime.datetime.fromisoformat(calls[0].replace("Z", "+00:00")).timestamp()
    t1 = datetime.datetime.fromisoformat(calls[-1].replace("Z", "+00:00")).timestamp()
    assert t1 - t0 >= 4.5, t1 - t0
    assert stack.redis_client().exists("retort:rate:{%s/v1|mock-1}" % stack.llm_url)
    assert stack.stop_worker(sup) == 0


def test_429_lowers_concurrency_and_retry_after_pauses(stack):
    w = stack.start_worker("--set", "llm.max_inflight=16")
    ids = ["aimd-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(8)]
    stack.produce_jobs([job(j, directive="http=429 times=1 retry_after=1") for j in ids])
    stack.wait_outcomes(ids, timeout=60)
    finals = [m for m in stack.consume("retort.final") if m["value"]["job_id"] in ids]
    assert len(finals) == 8 and all(m["value"]["attempts"] == 1 for m in finals)
    log = stack.worker_log(w.name)
    assert "concurrency limit 16 -> 8" in log
    calls = stack.llm_stats()["calls"]
    assert all(calls["%s:1" % j] == 2 for j in ids)

"""Backpressure and rebalances: the in-flight bound holds whatever the
backlog, and group members joining and leaving mid-batch lose or double
nothing."""
import json
import signal
import time
import uuid

import pytest

from stack import job
from test_resilience import check_exactly_once


def peak_llm_calls(stack, requests, every=0.02, timeout=60):
    """The most calls the mock LLM held at once, sampled until it has
    received `requests` calls and answered them all."""
    peak = 0
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = stack.llm_stats()
        peak = max(peak, st["suspended"])
        if st["requests"] >= requests and st["suspended"] == 0:
            break
        time.sleep(every)
    return peak


def test_inflight_bound_holds_under_backlog(stack):
    stack.start_worker("--set", "llm.max_inflight=8")
    ids = ["bp-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(150)]
    stack.produce_jobs([job(j, directive="latency_ms=150") for j in ids])
    peak = peak_llm_calls(stack, 150)
    check_exactly_once(stack, ids)
    assert 1 <= peak <= 8, peak


def _progress(r, ids):
    """(jobs finished, the workers named in their attempt records so far)."""
    p = r.pipeline(transaction=False)
    for jid in ids:
        p.hget("retort:job:{%s}" % jid, "status")
        p.lrange("retort:job:{%s}:history" % jid, 0, -1)
    res = p.execute()
    done, workers = 0, set()
    for status, recs in zip(res[0::2], res[1::2]):
        done += status in ("final", "escalated")
        for rec in recs:
            workers.add(json.loads(rec)["worker"])
    return done, workers


def _wait_progress(r, ids, cond, what, timeout=60):
    deadline = time.time() + timeout
    while True:
        done, workers = _progress(r, ids)
        if cond(done, workers):
            return done, workers
        assert time.time() < deadline, "waited for %s: %d done, workers %s" % (what, done, workers)
        time.sleep(0.2)


@pytest.mark.slow
def test_members_join_and_leave_mid_batch(stack):
    """Membership changes are driven by the batch's progress, not by the
    clock, so a fast worker cannot finish the batch before the others
    join: b joins once a has finished some jobs, a leaves once b has
    recorded attempts, c joins after; each change must happen mid-batch."""
    prefix = "rb-%s" % uuid.uuid4().hex[:6]
    ids = ["%s-%05d" % (prefix, i) for i in range(1200)]
    jobs = [job(j, directive="latency_ms=200" + (" defect=wrong_type until=1" if i % 5 == 0 else ""))
            for i, j in enumerate(ids)]
    r = stack.redis_client()
    a = stack.start_worker("--set", "llm.max_inflight=32", name="a")
    stack.produce_jobs(jobs)
    _wait_progress(r, ids, lambda d, w: d >= 50, "a to finish 50 jobs")
    b = stack.start_worker("--set", "llm.max_inflight=32", name="b")
    done, workers = _wait_progress(r, ids, lambda d, w: "b" in w, "b to take over partitions")
    assert done < len(ids) and workers == {"a", "b"}, (done, workers)
    assert stack.stop_worker(a, signal.SIGTERM) == 0      # leaves cleanly mid-batch
    c = stack.start_worker("--set", "llm.max_inflight=32", name="c")
    check_exactly_once(stack, ids)
    done, workers = _progress(r, ids)
    assert done == len(ids) and workers == {"a", "b", "c"}, (done, workers)
    calls = stack.llm_stats()["calls"]
    # Jobs a held when it left are finished before it exits (drain); a
    # rebalance that hands an in-flight job's message to another member
    # makes that member wait for the attempt (the holder's lease is live),
    # so no call is paid twice.
    twice = {k: c for k, c in calls.items() if k.startswith(prefix) and c > 1}
    assert not twice, (len(twice), list(twice.items())[:5])
    assert stack.stop_worker(b) == 0 and stack.stop_worker(c) == 0


def test_full_for_longer_than_max_poll_interval_stays_in_group(stack):
    """Every LLM call hangs for longer than max.poll.interval.ms while the
    worker is full and holds the next message: it pauses fetching and keeps
    polling, so it stays in the group (no leave, no rebalance), and every
    job is answered once, with one LLM call each.  Then it stays idle for
    longer than the interval, still a member."""
    w = stack.start_worker("--set", "llm.max_inflight=2", "--set", "llm.timeout_ms=30000",
                           "--set", "kafka.consumer.max.poll.interval.ms=7000")
    ids = ["stall-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(5)]
    stack.produce_jobs([job(j, directive="latency_ms=10000") for j in ids])
    check_exactly_once(stack, ids)
    calls = stack.llm_stats()["calls"]
    for j in ids:
        assert calls.get("%s:1" % j) == 1, (j, calls.get("%s:1" % j))
    # Idle for longer than the interval: nothing wakes the loop, yet the
    # worker must poll.
    time.sleep(9)
    log = stack.worker_log(w.name)
    assert "pausing fetch while waiting" in log
    assert "maximum poll interval" not in log
    assert "revoked" not in log
    assert stack.stop_worker(w) == 0


def test_hundreds_of_calls_in_flight_in_one_process(stack):
    """600 slow calls at once from one worker: more than one curl lane (64
    calls each) is busy at the same time, and every job still gets exactly
    one call and one outcome."""
    stack.start_worker("--set", "llm.max_inflight=600")
    ids = ["lanes-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(600)]
    stack.produce_jobs([job(j, directive="latency_ms=2500") for j in ids])
    peak = peak_llm_calls(stack, 600, every=0.05)
    check_exactly_once(stack, ids)
    assert 400 <= peak <= 600, peak
    calls = stack.llm_stats()["calls"]
    bad = {j: calls.get(j + ":1") for j in ids if calls.get(j + ":1") != 1}
    assert not bad, (len(bad), list(bad.items())[:5], list(calls.items())[:5])

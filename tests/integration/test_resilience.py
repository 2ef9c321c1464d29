"""Crash safety and failures of the things around the worker: SIGKILLed
workers, Redis going away, broker errors; plus budgets, the escalation
webhook and `retort status`."""
import base64
import collections
import datetime
import http.server
import json
import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from stack import (BUILD, Stack, build_preload, chat_completion, failed, free_port, job, jobs_gone, own_llm,
                   proc_cpu_s, read_heap, scrape_metrics, send_json, settle_metrics, wait_metrics)


def uid(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def check_exactly_once(stack, ids):
    outs = stack.wait_outcomes(ids, timeout=240)
    per_job = {}
    for m in outs:
        per_job.setdefault(m["value"]["job_id"], set()).add(m["headers"]["ce_id"])
    twice = {j: ids for j, ids in per_job.items() if len(ids) > 1}
    assert not twice, "jobs with more than one distinct outcome: %s" % list(twice.items())[:3]
    assert set(ids) <= set(per_job)
    return outs


def ended(r, ids):
    """How many of the jobs ids have ended (final or escalated) in Redis."""
    p = r.pipeline(transaction=False)
    for jid in ids:
        p.hget("retort:job:{%s}" % jid, "status")
    return sum(st in ("final", "escalated") for st in p.execute())


def mid_batch(r, ids, done=10):
    """Waits until at least done of ids have ended (by the batch's
    progress, not the clock: the first group join alone takes 3 s);
    returns how many have."""
    deadline = time.time() + 60
    while ended(r, ids) < done:
        assert time.time() < deadline, "the worker finished no job"
        time.sleep(0.05)
    return ended(r, ids)


def mixed_jobs(prefix, n, latency=60):
    jobs = []
    for i in range(n):
        d = "latency_ms=%d" % latency
        if i % 4 == 0:
            d += " defect=wrong_type until=1"      # one retry
        elif i % 23 == 0:
            d += " defect=wrong_type"              # escalates after 3 attempts
        jobs.append(job("%s-%05d" % (prefix, i), schema=["product.v1", "ticket.v1", "invoice.v1"][i % 3],
                        directive=d))
    return jobs


@pytest.mark.slow
def test_sigkill_during_batch_loses_nothing(stack):
    inflight = 16
    sup = stack.start_worker("--processes", "2", "--set", "llm.max_inflight=%d" % inflight, name="sup")
    prefix = uid("kill")
    jobs = mixed_jobs(prefix, 2000, latency=300)
    ids = [j["job_id"] for j in jobs]
    stack.produce_jobs(jobs)
    kills = 0
    deadline = time.time() + 60
    time.sleep(4)
    while time.time() < deadline and kills < 6:
        done = {m["value"]["job_id"] for m in stack.outcomes()}
        if len(done & set(ids)) > 1800:
            break
        kids = children(sup.pid)
        if kids:
            os.kill(kids[kills % len(kids)], signal.SIGKILL)
            kills += 1
        time.sleep(3)
    assert kills >= 2
    check_exactly_once(stack, ids)
    # no (job, attempt) reached the LLM twice, except attempts in flight at a kill
    calls = stack.llm_stats()["calls"]
    repeated = sum(c - 1 for k, c in calls.items() if k.startswith(prefix) and c > 1)
    assert repeated <= kills * inflight, (repeated, kills)
    # every job's Redis state is terminal
    r = stack.redis_client()
    for jid in ids[::50]:
        assert r.hget("retort:job:{%s}" % jid, "status") in ("final", "escalated")
    assert "supervisor" in stack.worker_log("sup") and "restarting" in stack.worker_log("sup")
    assert stack.stop_worker(sup) == 0


def redeliver_decided_retry(stack, jid, records):
    """Seeds Redis as a worker killed after deciding attempt 1's retry, and
    before the retry job left, leaves it (with the given history records),
    then produces the attempt-1 message again.  Returns the worker, the
    retry jobs seen and the job's outcome event."""
    w = stack.start_worker()
    r = stack.redis_client()
    r.hset("retort:job:{%s}" % jid, mapping={"attempt": 1, "status": "retrying", "recorded": 1,
                                              "owner": "killed-worker:1", "max_attempts": 3, "published": 0})
    for rec in records:
        r.rpush("retort:job:{%s}:history" % jid, json.dumps(rec))
    stack.produce_jobs([job(jid)])
    outs = check_exactly_once(stack, [jid])
    retries = [m for m in stack.consume("retort.jobs") if m["headers"].get("ce_type") == "retort.job.retry"
               and m["value"]["job_id"] == jid]
    assert len(retries) == 1, retries
    assert retries[0]["value"]["attempt"] == 2
    final = [m for m in outs if m["value"]["job_id"] == jid][0]
    assert final["headers"]["ce_type"] == "retort.job.final" and final["value"]["attempt"] == 2
    return w, retries[0], final


def test_redelivered_message_of_a_decided_retry_republishes_it(stack):
    """A worker that decided a retry and was killed before the retry job
    left leaves the job at 'retrying' in Redis with the attempt's record.
    The redelivered message must produce the retry job from that record.
    (The begin script once dropped the record from its reply, and the
    worker then skipped the message: the job was lost, as
    test_sigkill_during_batch_loses_nothing saw about once in ten runs.)"""
    rec = {"attempt": 1, "outcome": "invalid", "category": "invalid", "decision": "retry",
           "reason": "validation failed on attempt 1 of 3", "output": "{\"name\": 5}",
           "violations": [{"path": "/name", "keyword": "/properties/name/type", "code": "WRONG_TYPE",
                           "message": "expected string, got integer", "expected": "string", "actual": 5}]}
    w, retry, final = redeliver_decided_retry(stack, uid("decided"), [rec])
    assert retry["value"]["reflection"]["violations"][0]["path"] == "/name"
    assert "retry already decided; republishing it" in stack.worker_log(w.name)
    assert final["value"]["attempts"] == 2


def test_decided_retry_with_its_record_lost_is_asked_again(stack):
    """Redis lost the attempt's record (the history list) but kept the job
    at 'retrying', undelivered: the redelivered message must not be
    skipped, which would lose the job.  The retry leaves without a
    reflection (nothing to repair from) and the job ends final."""
    w, retry, final = redeliver_decided_retry(stack, uid("lostrec"), [])
    assert "reflection" not in retry["value"]
    assert "its record is missing; republishing it without a reflection" in stack.worker_log(w.name)
    # one record in the audit trail: attempt 1's is gone
    assert final["value"]["attempts"] == 1


def test_decided_job_with_its_records_lost_is_warned_of(stack):
    """Redis kept a final job's hash, undelivered, but lost its records (an
    evicting Redis): there is nothing to make the event from, and no other
    event may stand in for one perhaps delivered.  The redelivered message
    is skipped with a warning and counted, and the LLM is not called."""
    port = free_port()
    w = stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1", name="lostall")
    wait_metrics(port, w)
    jid = uid("lostall")
    r = stack.redis_client()
    r.hset("retort:job:{%s}" % jid, mapping={"attempt": 1, "status": "final", "recorded": 1,
                                              "owner": "killed-worker:1", "max_attempts": 3, "published": 0})
    stack.produce_jobs([job(jid)])
    stack.wait_log("lostall", "job already final, but its attempt records are gone from Redis")
    samples, _ = settle_metrics(port, lambda m: m.get(("retort_records_lost_total", ())) == 1)
    assert samples[("retort_records_lost_total", ())] == 1
    assert not any(k.startswith(jid) for k in stack.llm_stats()["calls"])
    # a job delivered (published) with its records gone is no loss: skipped quietly
    jid2 = uid("lostpub")
    r.hset("retort:job:{%s}" % jid2, mapping={"attempt": 1, "status": "final", "recorded": 1,
                                               "owner": "killed-worker:1", "max_attempts": 3, "published": 1})
    stack.produce_jobs([job(jid2)])
    stack.wait_log("lostall", "job already final; skipping")
    assert [l["job_id"] for l in stack.log_lines("lostall") if l["msg"] == "job already final; skipping"] == [jid2]
    assert scrape_metrics(port)[0][("retort_records_lost_total", ())] == 1
    assert stack.stop_worker(w) == 0


def test_an_evicting_redis_is_warned_of(stack):
    """A Redis with a maxmemory and an evicting policy drops job state: the
    worker says so when it connects (and a Redis without a maxmemory, as
    the stack's, is not warned of)."""
    r = stack.redis_client()
    quiet = stack.start_worker(name="noevict")
    stack.wait_log("noevict", "assigned")
    r.config_set("maxmemory", "512mb")
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        loud = stack.start_worker(name="evict")
        stack.wait_log("evict", "evicts keys at its maxmemory (maxmemory-policy allkeys-lru)")
    finally:
        r.config_set("maxmemory", "0")
        r.config_set("maxmemory-policy", "noeviction")
    assert "evicts keys" not in stack.worker_log("noevict")
    assert stack.stop_worker(loud) == 0
    assert stack.stop_worker(quiet) == 0


def test_static_membership_gives_each_process_its_own_instance_id(stack):
    """kafka.group.instance.id with --processes 2: the processes share the
    config, and two members of one instance id fence each other (the
    fenced one's fatal error ends it, the supervisor starts it again, and
    it fences the other).  Each process joins as ID-SLOT.  The mock
    cluster (librdkafka 2.0.2) does not fence, so the test reads the id
    each process's consumer is created with (tests/preload_kafka.c)."""
    seen = os.path.join(stack.dir, "consumers.txt")
    sup = stack.start_worker("--processes", "2", "--set", "kafka.group.instance.id=static-w", name="static",
                             env={"LD_PRELOAD": build_preload("preload_kafka", stack.dir),
                                  "PRELOAD_KAFKA_LOG": seen})
    prefix = uid("static")
    ids = ["%s-%03d" % (prefix, i) for i in range(60)]
    stack.produce_jobs([job(j) for j in ids])
    check_exactly_once(stack, ids)
    with open(seen) as f:
        consumers = [line.split() for line in f]
    # one consumer per process, each with its own id
    assert sorted(c[2] for c in consumers) == ["group.instance.id=static-w-0", "group.instance.id=static-w-1"], \
        consumers
    assert len({c[1] for c in consumers}) == 2, consumers
    log = stack.worker_log("static")
    assert "static group membership as static-w-0" in log and "static group membership as static-w-1" in log
    assert "fatal" not in log and "restarting" not in log
    assert stack.stop_worker(sup) == 0


def test_an_attempt_running_elsewhere_is_paid_for_once(stack):
    """Two consumer groups read the jobs topic, so every message reaches two
    workers, as a rebalance hands an in-flight job's message to a second
    member.  The worker that finds the attempt running under the other's
    live lease waits for its outcome instead of calling the LLM: one call
    per attempt, one outcome event per job."""
    a = stack.start_worker(name="a")
    b = stack.start_worker("--set", "kafka.group.id=retort-other", name="b")
    prefix = uid("twice")
    jobs = [job("%s-%03d" % (prefix, i), directive="latency_ms=1500" + (" defect=wrong_type until=1" if i % 4 == 0
                                                                          else ""))
            for i in range(40)]
    ids = [j["job_id"] for j in jobs]
    stack.produce_jobs(jobs)
    check_exactly_once(stack, ids)
    time.sleep(3)  # the loser's last look at Redis, after the outcome's delivery mark
    calls = stack.llm_stats()["calls"]
    for i, jid in enumerate(ids):
        assert calls.get(jid + ":1") == 1, (jid, calls.get(jid + ":1"))
        assert calls.get(jid + ":2") == (1 if i % 4 == 0 else None), (jid, calls.get(jid + ":2"))
    finals = [m for m in stack.consume("retort.final") if m["value"]["job_id"] in ids]
    assert len(finals) == len(ids), len(finals)
    retries = [m for m in stack.consume("retort.jobs") if m["headers"].get("ce_type") == "retort.job.retry"
               and m["value"]["job_id"].startswith(prefix)]
    assert len(retries) == 10, len(retries)
    logs = stack.worker_log("a") + stack.worker_log("b")
    assert "holds this attempt; waiting for its outcome" in logs
    assert "taking" not in logs
    assert stack.stop_worker(a) == 0 and stack.stop_worker(b) == 0


def assert_owner_kept_its_attempt(stack, jid, a, b):
    """jid ended once, final, called once: its owner a kept its attempt,
    and b, finding a's lease gone just after Redis came back, did not take
    it over.  Stops both."""
    outs = check_exactly_once(stack, [jid])
    assert [m["headers"]["ce_type"] for m in outs if m["value"]["job_id"] == jid] == ["retort.job.final"]
    time.sleep(2)  # B's next look, after the outcome's delivery mark
    assert stack.llm_stats()["calls"].get(jid + ":1") == 1
    log_b = stack.worker_log("b")
    assert "holds no lease, just after Redis came back" in log_b and "attempt over" not in log_b, log_b[-3000:]
    assert stack.stop_worker(a) == 0 and stack.stop_worker(b) == 0


def test_a_lease_lost_with_redis_is_not_taken_for_its_owners_death(stack):
    """Redis goes away for longer than a lease (5 s) and comes back without
    the leases, as after a restart.  The owner of a running attempt is
    alive, but its connection comes back later than another worker's (here
    it is stopped until 2 s after Redis is back), and so does its renewal.
    The other worker, waiting for the attempt's outcome (a second group
    reads the topic), sent its next look while Redis was away; answered
    at the reconnect, it found the lease gone and took the attempt over:
    the LLM paid twice.  It trusts a missing lease only a lease after
    Redis answered it again."""
    # A's call (9 s) and its stop (about 9 s) within A's time limit and
    # session: A keeps the attempt and its partitions
    a = stack.start_worker("--set", "llm.timeout_ms=30000", "--set", "kafka.consumer.session.timeout.ms=30000",
                           name="a")
    jid = uid("lostlease")
    stack.produce_jobs([job(jid, directive="latency_ms=9000")])
    stack.wait_called(jid)
    b = stack.start_worker("--set", "kafka.group.id=retort-other", "--set", "llm.timeout_ms=30000", name="b")
    # B's first look (A's lease held); its next ones come 0.25, 0.75, 1.75
    # s after, while Redis is away: the one sent then is answered at the
    # reconnect
    stack.wait_log("b", "holds this attempt; waiting for its outcome", timeout=60)
    a.send_signal(signal.SIGSTOP)
    try:
        stack.stop_redis()
        time.sleep(6.5)
        stack.start_redis()
        stack._wait_redis()
        time.sleep(2)
    finally:
        a.send_signal(signal.SIGCONT)
    assert_owner_kept_its_attempt(stack, jid, a, b)


def test_a_lease_lost_with_a_redis_restarted_before_a_first_connect_is_not_taken_for_dead(stack):
    """As above, but the worker that finds the lease gone starts while
    Redis is away: its first connect is to the Redis restarted without the
    leases.  A Redis's start (its uptime) is a coming back too; before,
    only a reconnect was, and this worker took the live owner's attempt
    over at its first look."""
    a = stack.start_worker("--set", "llm.timeout_ms=30000", "--set", "kafka.consumer.session.timeout.ms=30000",
                           name="a")
    jid = uid("firstlease")
    stack.produce_jobs([job(jid, directive="latency_ms=12000")])
    stack.wait_called(jid)
    a.send_signal(signal.SIGSTOP)
    try:
        stack.stop_redis()
        # B joins its group and reads the job while Redis is away
        b = stack.start_worker("--set", "kafka.group.id=retort-other", "--set", "llm.timeout_ms=30000", name="b")
        time.sleep(6.5)
        stack.start_redis()
        stack._wait_redis()
        time.sleep(2)
    finally:
        a.send_signal(signal.SIGCONT)
    assert_owner_kept_its_attempt(stack, jid, a, b)


def test_attempt_of_a_dead_worker_is_taken_over_once_its_lease_lapses(stack):
    """An attempt left 'running' by a worker that died: taken over at once
    when its lease is gone, after it lapses when it still holds."""
    port = free_port()
    w = stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1")
    # the lease must still hold at the worker's first look: not before it
    # is in the group (the first join takes seconds)
    stack.wait_log(w.name, "assigned 4 partition(s)", timeout=60)
    r = stack.redis_client()
    gone, lapsing = uid("gone"), uid("lapsing")
    for jid, holder in ((gone, "ghost:0000dead"), (lapsing, "ghost:0000beef")):
        r.hset("retort:job:{%s}" % jid, mapping={"attempt": 1, "status": "running", "owner": holder + ":7",
                                                  "max_attempts": 3})
    r.set("retort:worker:{ghost:0000beef}", "1", px=6000)
    t0 = time.time()
    stack.produce_jobs([job(gone), job(lapsing)])
    outs = {m["value"]["job_id"]: m for m in check_exactly_once(stack, [gone, lapsing])}
    assert outs[gone]["headers"]["ce_type"] == outs[lapsing]["headers"]["ce_type"] == "retort.job.final"
    calls = stack.llm_stats()["calls"]
    assert calls.get(gone + ":1") == 1 and calls.get(lapsing + ":1") == 1
    log = stack.worker_log(w.name)
    lines = [json.loads(l) for l in log.splitlines() if l.startswith("{")]
    said = lambda jid, text: [l for l in lines if l.get("job_id") == jid and text in l["msg"]]
    assert said(gone, "ghost:0000dead:7 is gone; taking its attempt over")
    assert not said(gone, "waiting")
    assert said(lapsing, "ghost:0000beef:7 holds this attempt; waiting for its outcome")
    assert said(lapsing, "ghost:0000beef:7 is gone; taking its attempt over")
    # the lease held for 6 s from before the message was produced
    assert time.time() - t0 > 5.5
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as resp:
        text = resp.read().decode()
    assert "\nretort_owner_waits_total 1\n" in text and "\nretort_takeovers_total 2\n" in text, text
    # the new owner: this worker's incarnation (id:nonce), then its claim number
    assert re.fullmatch(re.escape(w.name) + r":[0-9a-f]{8}:[0-9]+", r.hget("retort:job:{%s}" % lapsing, "owner"))
    assert stack.stop_worker(w) == 0


def test_an_owner_that_took_over_from_the_one_waited_for_gets_its_own_grace(stack):
    """The message waits for a live owner X (worker.takeover_after_ms, 3 s
    here); meanwhile Y takes X's attempt over (here: the record is
    rewritten to Y's, with a live lease).  The next look finds Y: Y gets
    3 s of its own.  The wait used to be measured from the first owner,
    so a live Y was taken over as soon as X's time was up, and the attempt
    paid for a third time."""
    w = stack.start_worker("--set", "worker.takeover_after_ms=3000")
    r = stack.redis_client()
    jid = uid("second-owner")
    key = "retort:job:{%s}" % jid
    r.hset(key, mapping={"attempt": 1, "status": "running", "owner": "x:00000001:7", "max_attempts": 3})
    r.set("retort:worker:{x:00000001}", "1", px=60000)
    stack.produce_jobs([job(jid)])
    log = stack.wait_log(w.name, "x:00000001:7 holds this attempt", timeout=60)
    # when the worker looked (its log line), not when the test noticed it
    (seen,) = [json.loads(l) for l in log.splitlines() if "x:00000001:7 holds this attempt" in l]
    t0 = datetime.datetime.fromisoformat(seen["ts"].replace("Z", "+00:00")).timestamp()
    time.sleep(max(0.0, t0 + 1.0 - time.time()))
    r.hset(key, "owner", "y:00000002:3")
    r.set("retort:worker:{y:00000002}", "1", px=60000)
    stack.wait_called(jid)
    # when the call reached the LLM
    called = stack.llm_times()[jid + ":1"][0][0] - t0
    log = stack.worker_log(w.name)
    assert "y:00000002:3 holds this attempt; waiting for its outcome" in log
    assert "for y:00000002:3; taking the attempt over" in log
    assert "for x:00000001:7; taking" not in log
    # Y seen at the look 1.75 s in, then looks 0.25, 0.75, 1.75 and 3.75 s
    # after it: taken over 5.5 s in; measured from X, at the look 3.75 s in
    assert called > 4.75, called
    check_exactly_once(stack, [jid])
    assert stack.llm_stats()["calls"][jid + ":1"] == 1
    assert stack.stop_worker(w) == 0


def test_a_late_outcome_of_a_run_reset_by_resubmit_is_dropped(stack):
    """`retort resubmit` resets a job (only the next run's number and
    status 'resubmitted' stay) while an attempt of the earlier run still
    runs somewhere (here: the reset lands during a 3 s call).  That
    attempt's record found no owner and took the job for lost state: it
    wrote itself back as the job's outcome, and the new run's message then
    found the job done, with the old run's answer."""
    w = stack.start_worker()
    jid = uid("reset-late")
    key, hist = "retort:job:{%s}" % jid, "retort:job:{%s}:history" % jid
    stack.produce_jobs([job(jid, directive="latency_ms=3000")])
    stack.wait_called(jid)
    r = stack.redis_client()
    # what script_reset leaves (worker/batch_submit.c)
    r.delete(key, hist)
    r.hset(key, mapping={"run": 2, "status": "resubmitted", "updated": 1})
    deadline = time.time() + 20
    while "dropping our result" not in stack.worker_log(w.name):
        assert time.time() < deadline, r.hgetall(key)
        time.sleep(0.1)
    assert r.hgetall(key) == {"run": "2", "status": "resubmitted", "updated": "1"}
    assert r.llen(hist) == 0
    assert not [m for m in stack.outcomes() if m["value"]["job_id"] == jid]
    assert stack.stop_worker(w) == 0


def slow_calls(latency_ms):
    """Worker settings for LLM calls of latency_ms: a timeout well past it."""
    return ("--set", "llm.timeout_ms=%d" % (latency_ms + 10000)) if latency_ms > 2500 else ()


def repair_at_call(stack, attempt, prefix, *args, name=None, latency_ms=1500):
    """A worker (retry.local) and a job whose attempt 1 fails; returns them
    once `attempt` has called the LLM (latency_ms a call)."""
    w = stack.start_worker(*(slow_calls(latency_ms) + args), name=name)
    jid = uid(prefix)
    stack.produce_jobs([job(jid, directive="defect=missing_field until=1 latency_ms=%d" % latency_ms)])
    key = "%s:%d" % (jid, attempt)
    deadline = time.time() + 30
    while time.time() < deadline and not stack.llm_stats()["calls"].get(key):
        time.sleep(0.02)
    assert stack.llm_stats()["calls"].get(key) == 1
    return w, jid


KILL_LATENCY_MS = 5000


def local_attempt_2(stack, name, *args):
    """repair_at_call's attempt 2, on a worker with a lease of 2 s; its
    calls take 5 s, so that the test's kill lands in attempt 2's."""
    return repair_at_call(stack, 2, name + "-kill", "--set", "worker.lease_ms=2000", *args, name=name,
                          latency_ms=KILL_LATENCY_MS)


def check_attempt_2_taken_over(stack, jid, dead, name):
    """After the worker `dead` died in attempt 2 of jid, a worker `name`
    ends the job: one outcome, attempt 1 paid once, attempt 2 twice (the
    dead worker's call was lost with it).  Returns the history and that
    worker's log."""
    w2 = stack.start_worker(*slow_calls(KILL_LATENCY_MS), name=name)
    outs = check_exactly_once(stack, [jid])
    (final,) = [m["value"] for m in outs if m["value"]["job_id"] == jid]
    assert final["attempts"] == 2
    calls = stack.llm_stats()["calls"]
    assert calls.get(jid + ":1") == 1 and calls.get(jid + ":2") == 2, calls
    hist = [json.loads(x) for x in stack.redis_client().lrange("retort:job:{%s}:history" % jid, 0, -1)]
    assert [(h["attempt"], h["worker"]) for h in hist] == [(1, dead), (2, name)], hist
    log = stack.worker_log(name)
    assert "is gone; taking its attempt over" in log or "taking the attempt over" in log, log[-3000:]
    assert stack.stop_worker(w2) == 0
    return hist, log


@pytest.mark.slow
def test_a_worker_killed_in_an_attempt_it_ran_after_its_retry_job_is_taken_over(stack):
    """retry.local: the worker runs attempt 2 at once, with the job's message
    still uncommitted.  SIGKILLed during that attempt, after the retry job
    was delivered, nothing is lost: the next worker skips the job's message
    (a later attempt exists), and takes attempt 2 over from the retry job
    once the dead worker's lease lapses.  One outcome."""
    w, jid = local_attempt_2(stack, "local")
    # attempt 2 starts before the retry job's delivery report: kill once it
    # is delivered and marked (the case before, test_a_worker_killed_before_
    # its_retry_job_left_loses_nothing)
    r = stack.redis_client()
    deadline = time.time() + 10
    while time.time() < deadline and r.hget("retort:job:{%s}" % jid, "published") != "1":
        time.sleep(0.01)
    assert r.hget("retort:job:{%s}" % jid, "published") == "1"
    assert stack.llm_stats()["calls"].get(jid + ":2") == 1
    w.kill()
    w.wait(10)
    _, log = check_attempt_2_taken_over(stack, jid, "local", "next")
    assert "stale message (job is at attempt 2" in log, log[-3000:]


@pytest.mark.slow
def test_a_worker_killed_before_its_retry_job_left_loses_nothing(stack):
    """retry.local starts attempt 2 as soon as attempt 1 is recorded, before
    its retry job is delivered.  Here the retry job never leaves (a linger
    of a minute holds it in the producer) and the worker is SIGKILLed in
    attempt 2: the job's uncommitted message is all that is left.  Redis,
    seeing attempt 2 claimed but the retry not published, answers
    'retried' rather than 'stale': the next worker produces the retry job
    again from attempt 1's record, and takes attempt 2 over once the dead
    worker's lease lapses.  One outcome; attempt 1 paid once."""
    w, jid = local_attempt_2(stack, "early", "--set", "kafka.producer.linger.ms=60000")
    w.kill()
    w.wait(10)
    retries = [m for m in stack.consume("retort.jobs") if m["value"] and m["value"].get("job_id") == jid]
    assert [m["value"].get("attempt", 1) for m in retries] == [1], "the retry job left: the test proves nothing"
    st = stack.redis_client().hgetall("retort:job:{%s}" % jid)
    assert (st["attempt"], st["status"], st.get("published", "0")) == ("2", "running", "0"), st
    assert st["recorded"] == "1" and st["owner"].startswith("early:"), st
    hist, log = check_attempt_2_taken_over(stack, jid, "early", "after")
    # the retry job produced again carries attempt 1's repair
    retries = [m["value"] for m in stack.consume("retort.jobs") if m["value"] and m["value"].get("job_id") == jid]
    assert [r.get("attempt", 1) for r in retries] == [1, 2], retries
    refl = retries[1]["reflection"]
    assert refl["attempt"] == 1 and refl["violations"] and refl["previous_output"], refl
    assert [v["path"] for v in refl["violations"]] == [v["path"] for v in hist[0]["violations"]], (refl, hist[0])
    assert "retry already decided; republishing it" in log, log[-3000:]


def test_a_repair_starts_while_the_record_that_claims_it_is_unanswered(stack):
    """retry.local: attempt 2 starts as soon as attempt 1's record, which
    claims attempt 2, is sent, not one fsync'd Redis write later.  Here
    Redis stops answering (SIGSTOP) while attempt 1 calls the LLM: attempt
    2 calls the LLM all the same, and its own record waits for the answer to
    attempt 1's.  Redis back, the job ends final at attempt 2, each attempt
    paid once."""
    w, jid = repair_at_call(stack, 1, "unanswered")
    stack.redis.send_signal(signal.SIGSTOP)
    try:
        # under the 5 s after which the worker gives a silent Redis up
        deadline = time.time() + 3.5
        while time.time() < deadline and not stack.llm_stats()["calls"].get(jid + ":2"):
            time.sleep(0.02)
        called = stack.llm_stats()["calls"].get(jid + ":2")
    finally:
        t_cont = time.time()
        stack.redis.send_signal(signal.SIGCONT)
    assert called == 1, "attempt 2 waited for Redis's answer to attempt 1's record"
    outs = check_exactly_once(stack, [jid])
    (final,) = [m["value"] for m in outs if m["value"]["job_id"] == jid]
    assert final["attempts"] == 2, final
    hist = [json.loads(x) for x in stack.redis_client().lrange("retort:job:{%s}:history" % jid, 0, -1)]
    assert [(h["attempt"], h["decision"]) for h in hist] == [(1, "retry"), (2, "final")], hist
    started = datetime.datetime.fromisoformat(hist[1]["started_at"].replace("Z", "+00:00")).timestamp()
    assert started < t_cont, "attempt 2 started %.2f s after Redis answered again" % (started - t_cont)
    calls = stack.llm_stats()["calls"]
    assert calls.get(jid + ":1") == 1 and calls.get(jid + ":2") == 1, calls
    assert stack.stop_worker(w) == 0
    assert "0 jobs unfinished" in stack.worker_log(w.name)


def test_a_repair_started_before_its_attempt_was_refused_is_dropped_too(stack):
    """The claim that lets attempt 2 start early fails only when attempt 1
    was taken over meanwhile (this worker's lease lapsed): attempt 1's record
    is then refused, and so is attempt 2's, which waited for that answer.
    Nothing comes out of this worker for the job, its message is let go
    (counted skipped once), its slot and attempt 1's are free again, and the
    worker goes on.  The cost: attempt 2's call, started early, is paid."""
    port = free_port()
    # attempt 1's call (4 s) must still run when the owner is rewritten
    w, jid = repair_at_call(stack, 1, "refused", "--set", "metrics.port=%d" % port,
                            "--set", "metrics.host=127.0.0.1", latency_ms=4000)
    # another worker takes attempt 1 over (as after a lapsed lease)
    r = stack.redis_client()
    r.hset("retort:job:{%s}" % jid, "owner", "thief:0000beef:1")
    r.set("retort:worker:{thief:0000beef}", "1", px=60000)
    deadline = time.time() + 30
    refused = []
    while time.time() < deadline and len(refused) < 2:
        refused = [l for l in stack.log_lines(w.name)
                   if l.get("job_id") == jid and "taken over by another worker" in l["msg"]]
        time.sleep(0.05)
    assert [l["attempt"] for l in refused] == [1, 2], refused
    assert stack.llm_stats()["calls"].get(jid + ":2") == 1
    assert r.hgetall("retort:job:{%s}" % jid)["owner"] == "thief:0000beef:1"
    deadline = time.time() + 10
    while True:
        samples, _ = scrape_metrics(port)
        if samples[("retort_inflight_jobs", ())] == 0 and \
                samples[("retort_jobs_total", (("outcome", "skipped"),))] >= 1 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert samples[("retort_inflight_jobs", ())] == 0, samples
    assert samples[("retort_jobs_total", (("outcome", "skipped"),))] == 1, samples
    # the worker goes on
    other = uid("after")
    stack.produce_jobs([job(other)])
    check_exactly_once(stack, [other])
    assert [m for m in stack.consume("retort.final") + stack.consume("retort.escalations")
            if m["value"]["job_id"] == jid] == []
    assert stack.stop_worker(w) == 0
    assert "0 jobs unfinished" in stack.worker_log(w.name)


def test_an_attempt_taken_over_mid_chain_is_not_remembered_as_run_here(stack):
    """retry.local runs attempts 2 and 3 here, each as soon as the record
    before it is sent.  Attempt 2 taken over meanwhile (its record refused),
    attempt 3, started early, is refused too.  Attempt 2 was remembered as
    run here all the same, so the copy of its retry job that came back
    from Kafka was skipped with no word to Redis: with attempt 2's new
    owner gone, nothing was left to end the job.  That copy goes through
    Redis now: it waits out the owner's lease, takes the attempt over and
    ends the job."""
    w = stack.start_worker(*slow_calls(2000), "--set", "log.level=debug")
    jid = uid("midchain")
    stack.produce_jobs([job(jid, directive="defect=missing_field until=2 latency_ms=2000")])
    stack.wait_called(jid, 2)
    r = stack.redis_client()
    # another worker takes attempt 2 over, then dies (its lease lapses)
    r.hset("retort:job:{%s}" % jid, "owner", "thief:0000beef:1")
    r.set("retort:worker:{thief:0000beef}", "1", px=3000)
    outs = check_exactly_once(stack, [jid])
    assert outs[0]["value"]["job_id"] == jid
    skipped = [l for l in stack.log_lines(w.name)
               if l.get("job_id") == jid and "run here already; skipping" in l["msg"] and l["attempt"] == 2]
    assert not skipped, skipped
    assert stack.stop_worker(w) == 0


def test_redis_restart_mid_batch(stack):
    """Redis goes away with jobs done, jobs in flight and jobs left (decided
    by the batch's progress, not by the clock): the worker survives it,
    reconnects once Redis is back, and every job ends exactly once.  While
    Redis is away (7 s and more) the worker tries it at least once a
    second: its backoff doubles from 100 ms to 1 s (a 5 s cap kept it off
    a Redis back for seconds, every job waiting)."""
    port = free_port()
    w = stack.start_worker("--set", "llm.max_inflight=32", "--set", "metrics.port=%d" % port,
                           "--set", "metrics.host=127.0.0.1")
    prefix = uid("redis")
    jobs = mixed_jobs(prefix, 300, latency=100)
    ids = [j["job_id"] for j in jobs]
    stack.produce_jobs(jobs)
    r = stack.redis_client()
    at_stop = mid_batch(r, ids)
    stack.stop_redis()
    assert 0 < at_stop < len(ids), at_stop
    # the jobs in flight when Redis went away wait for it
    samples, _ = scrape_metrics(port)
    assert samples[("retort_inflight_jobs", ())] > 0, "no job in flight when Redis stopped"
    stopped = time.time()
    stack.wait_log(w.name, "redis unavailable", timeout=20)
    time.sleep(max(2.0, stopped + 7 - time.time()))
    assert w.poll() is None, "the worker must survive Redis going away"
    stack.start_redis()
    stack._wait_redis()
    check_exactly_once(stack, ids)
    log = stack.worker_log(w.name)
    assert len(re.findall(r'"msg":"redis [0-9.:]+ connected"', log)) == 2, log[-3000:]
    # the tries while Redis was away: a refused connect each (or a
    # connect that never came, given up)
    tries = [datetime.datetime.strptime(l["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
             for l in stack.log_lines(w.name) if l["msg"].startswith("redis ") and "retrying" in l["msg"]]
    gaps = [b - a for a, b in zip(tries, tries[1:])]
    assert len(tries) >= 8, tries
    assert max(gaps) < 2.0, gaps
    assert stack.stop_worker(w) == 0


def test_an_attempt_redis_refused_to_record_is_counted_once(stack):
    """Redis refuses writes for 4 s (its maxmemory reached: OOM) while a
    job's LLM call runs: recording the attempt fails and is sent again
    each second until Redis takes it.  The job ends once, and its attempt
    is counted once in the metrics (each try counted it again: 6 attempts
    for this one), with the record as first made.  A lease
    renewal Redis refused is logged as such (it was logged as a failed
    delivery mark, with no job id), once until it is renewed (it was
    logged at each try, twice a second)."""
    port = free_port()
    w = stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1")
    jid = uid("oom")
    stack.produce_jobs([job(jid, directive="latency_ms=1000")])
    stack.wait_called(jid)
    r = stack.redis_client()
    r.config_set("maxmemory", "1")
    try:
        stack.wait_log(w.name, "recording the attempt failed", count=3, timeout=20)
        # the lease is renewed every 1.7 s (worker.lease_ms 5000), and
        # tried again every 0.5 s while refused: said once, not each time
        stack.wait_log(w.name, "renewing the worker's lease failed", timeout=10)
        time.sleep(1.6)
    finally:
        r.config_set("maxmemory", "0")
    stack.wait_log(w.name, "the worker's lease is renewed, after", timeout=10)
    assert stack.worker_log(w.name).count("renewing the worker's lease failed") == 1
    outs = check_exactly_once(stack, [jid])
    assert outs[0]["headers"]["ce_type"] == "retort.job.final", outs[0]
    lines = stack.log_lines(w.name)
    refused = [l for l in lines if l["msg"].startswith("recording the attempt failed")]
    assert len(refused) >= 3 and all(l.get("job_id") == jid for l in refused), refused
    assert "OOM" in refused[0]["msg"]
    assert not [l for l in lines if "delivered outcome" in l["msg"] and not l.get("job_id")], lines[-5:]
    s = settle_metrics(port, lambda s: s.get(("retort_jobs_total", (("outcome", "final"),))) == 1)[0]
    assert s[("retort_attempts_total", ())] == 1
    assert s[("retort_job_latency_seconds_count", ())] == 1
    # the record as first made: its latency is the call's, not the wait for Redis's
    hist = [json.loads(x) for x in r.lrange("retort:job:{%s}:history" % jid, 0, -1)]
    assert len(hist) == 1 and hist[0]["latency_ms"] < 2500, hist
    assert stack.stop_worker(w) == 0


def test_a_duplicate_parked_behind_a_job_is_not_begun_during_the_drain(stack):
    """A message of a later run of a job in flight here waits behind it.
    SIGTERM comes; the job in flight ends and the drain waits for nothing
    more: the message behind it goes uncommitted (it comes again after a
    restart).  It was begun: its claim was granted (a later run) and it
    called the LLM in the middle of the drain."""
    w = stack.start_worker("--set", "worker.drain_timeout_ms=20000", "--set", "log.level=debug")
    jid = uid("drain-dup")
    stack.produce_jobs([job(jid, directive="latency_ms=3000")])
    stack.wait_called(jid)
    stack.produce_jobs([job(jid, directive="latency_ms=3000", run=2)])
    # fetched, and parked behind the first (its call takes 3 s)
    stack.wait_log(w.name, "waiting behind the message of this job in flight here")
    w.send_signal(signal.SIGTERM)
    assert w.wait(30) == 0, stack.worker_log(w.name)[-3000:]
    stack.workers.remove(w)
    finals = [m for m in stack.outcomes() if m["value"]["job_id"] == jid]
    assert len(finals) == 1 and finals[0]["value"].get("run", 1) == 1, finals
    assert stack.llm_stats()["calls"].get(jid + ":1") == 1
    log = stack.worker_log(w.name)
    assert "0 jobs unfinished" in log
    # the stop came while the first was in flight, the second parked
    assert log.index("waiting behind the message") < log.index("draining 2 in-flight") < log.index("final: valid")


def test_a_stop_while_redis_refuses_does_not_wait_out_the_drain(stack):
    """Messages whose first look at Redis was refused (here OOM; READONLY or
    LOADING alike) ask again each second; they hold no claim and no call.
    A stop meanwhile waited for them until the drain's timeout.  They go at
    once now, uncommitted, and the next worker ends them."""
    w = stack.start_worker("--set", "worker.drain_timeout_ms=20000")
    stack.wait_log(w.name, "assigned")
    ids = [uid("refused-stop") for _ in range(5)]
    r = stack.redis_client()
    r.config_set("maxmemory", "1")
    try:
        stack.produce_jobs([job(j) for j in ids])
        stack.wait_log(w.name, "reading job state")
        w.send_signal(signal.SIGTERM)
        assert w.wait(30) == 0
    finally:
        r.config_set("maxmemory", "0")
    stack.workers.remove(w)
    log = stack.worker_log(w.name)
    assert "drain timeout" not in log, log[-2000:]
    stack.start_worker(name="next")
    check_exactly_once(stack, ids)


def test_redis_silent_mid_batch(stack):
    """Redis stops answering (SIGSTOP: the connection stays up, replies never
    come) mid-batch: the worker gives the connection up after 5 s without a
    reply, reconnects and sends the commands again once Redis answers; every
    job ends exactly once."""
    w = stack.start_worker("--set", "llm.max_inflight=32")
    jobs = mixed_jobs(uid("silent"), 200, latency=100)
    ids = [j["job_id"] for j in jobs]
    stack.produce_jobs(jobs)
    # mid-batch by its progress, not by the clock (the first join alone
    # takes 3 s), so that commands are in flight when Redis goes silent
    r = stack.redis_client()
    at_stop = mid_batch(r, ids)
    stack.redis.send_signal(signal.SIGSTOP)
    try:
        assert at_stop < len(ids), at_stop
        # silent until the worker has given the connection up
        stack.wait_log(w.name, "no reply for", timeout=20)
    finally:
        stack.redis.send_signal(signal.SIGCONT)
    check_exactly_once(stack, ids)
    log = stack.worker_log(w.name)
    assert "no reply for" in log and "reconnecting" in log
    assert stack.stop_worker(w) == 0


class ResettingProxy:
    """TCP between the worker and Redis that can reset (RST) every
    connection it carries, as a Redis that exits with a command of the
    worker's unread does, and goes on taking new ones."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self.lock:
                self.pairs.append((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass

    def reset(self):
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for client, upstream in pairs:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            upstream.close()
        return len(pairs)

    def close(self):
        self.listener.close()
        self.reset()


def test_a_reset_redis_connection_is_noticed_at_once(stack):
    """hiredis's libuv adapter drops the poll error of a connection reset,
    and libuv stops watching the socket: the worker noticed only when its
    reply watch gave up, 5 s after its next command (a CI run saw /readyz
    say "redis ok" with Redis gone).  Now it disconnects at once, comes
    back and goes on."""
    proxy = ResettingProxy(stack.redis_port)
    try:
        w = stack.start_worker("--set", "redis.port=%d" % proxy.port)
        before = uid("before-reset")
        stack.produce_jobs([job(before)])
        stack.wait_outcomes([before])
        assert proxy.reset() == 1
        # well under the reply watch's 5 s after the next command
        deadline = time.time() + 4
        while time.time() < deadline and "disconnected" not in stack.worker_log(w.name):
            time.sleep(0.05)
        log = stack.worker_log(w.name)
        assert "disconnected: Connection reset by peer" in log, log[-2000:]
        assert "no reply for" not in log
        after = uid("after-reset")
        stack.produce_jobs([job(after)])
        stack.wait_outcomes([after])
        assert len(re.findall(r'"msg":"redis [0-9.:]+ connected"', stack.worker_log(w.name))) == 2
        assert stack.stop_worker(w) == 0
    finally:
        proxy.close()


@pytest.fixture
def control_stack(request):
    s = Stack(kafka_control=True)
    yield s
    s.close(keep=failed(request))


def test_a_fenced_static_member_exits_for_its_supervisor_to_restart(control_stack):
    """A static member fenced by another of its group.instance.id gets a
    fatal error on its consumer queue, not in the error callback: taken
    for a warning, it left a process that never fetched again, with
    /readyz still "ok".  It exits (3) now; a supervisor starts it again."""
    stack = control_stack
    w = stack.start_worker("--set", "kafka.group.instance.id=fenced-w", name="fenced")
    stack.wait_log("fenced", "assigned")
    stack.kafka_control("errors Heartbeat FENCED_INSTANCE_ID")
    assert w.wait(30) == 3
    log = stack.worker_log("fenced")
    assert "kafka fatal error" in log and "fenced by other consumer" in log, log[-2000:]


def _metric(samples, name, outcomes=None):
    """The sum of a metric's samples (of the given outcome labels)."""
    return sum(v for (n, labels), v in samples.items()
               if n == name and (outcomes is None or dict(labels).get("outcome") in outcomes))


@pytest.mark.slow
def test_broker_errors_lose_nothing(control_stack):
    """Produce errors and a broker outage while the worker is mid-batch
    (jobs done, jobs in flight, jobs left), injected after the test's own
    produce so that only the worker's producer meets them: retriable
    errors (librdkafka retries them), a permanent one (the delivery fails
    and the worker produces again), then the broker down while the worker
    goes on deciding jobs, and up again with work left.  Every job ends
    exactly once."""
    stack = control_stack
    port = free_port()
    # the producer's debug log names each error its requests met
    w = stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1",
                           "--set", "kafka.producer.debug=msg", "--set", "log.level=debug")
    wait_metrics(port, w)
    prefix = uid("broker")
    jobs = mixed_jobs(prefix, 300, latency=100)
    ids = [j["job_id"] for j in jobs]
    stack.produce_jobs(jobs)        # all of them: no produce of ours after the errors

    r = stack.redis_client()

    def progress():
        """(jobs delivered, decided (in Redis), in flight (in a slot or
        waiting for a delivery report), produce failures)"""
        m, _ = scrape_metrics(port)
        return (_metric(m, "retort_jobs_total", ("final", "escalated")), ended(r, ids),
                m[("retort_inflight_jobs", ())] + m[("retort_delivering_jobs", ())],
                _metric(m, "retort_produce_failures_total"))

    deadline = time.time() + 60
    while True:
        delivered, decided, inflight, _ = progress()
        if delivered > 0 and inflight > 0:
            break
        assert time.time() < deadline, "no progress: %d delivered, %d in flight" % (delivered, inflight)
        time.sleep(0.05)
    assert decided < len(ids), "the batch ended before the errors"
    downs = stack.worker_log(w.name).count("brokers are down")
    stack.kafka_control("errors Produce NOT_LEADER_FOR_PARTITION REQUEST_TIMED_OUT NOT_ENOUGH_REPLICAS "
                        "TOPIC_AUTHORIZATION_FAILED")
    stack.kafka_control("broker_down 1")
    _, decided, _, _ = progress()
    # down until the worker has seen it and decided more jobs without it
    deadline = time.time() + 30
    while True:
        _, during, inflight, _ = progress()
        seen = stack.worker_log(w.name).count("brokers are down") > downs
        if during > decided and seen:
            break
        assert time.time() < deadline, "broker down: seen %s, %d decided before, %d now" % (seen, decided, during)
        time.sleep(0.05)
    stack.kafka_control("broker_up 1")
    # jobs left (their outcomes are produced after the broker is back): the
    # retries go through Kafka, so none of those could end while it was down
    assert during < len(ids) and inflight > 0, (during, inflight)
    check_exactly_once(stack, ids)
    log = stack.worker_log(w.name)
    met = set(re.findall(r"encountered error: Broker: ([^(]+?) \(", log))
    assert met == {"Not leader for partition", "Request timed out", "Not enough in-sync replicas",
                   "Topic authorization failed"}, met
    assert re.search(r"delivery to retort\.[a-z]+ failed: Broker: Topic authorization failed; producing again",
                     log), log[-3000:]
    assert progress()[3] > 0
    assert stack.stop_worker(w) == 0


def test_a_delivery_that_keeps_failing_backs_off_and_is_said_less_often(control_stack):
    """The outcome's delivery fails 4 times in a row (a topic the worker
    may not write, here until it is fixed).  It is produced again after
    0.5, 1, 2 and 4 s, and said at the 1st, 2nd and 4th time: it was
    produced again every 0.5 s with a warning each time, for ever, a
    warning a job twice a second.  It is delivered once, in the end."""
    stack = control_stack
    w = stack.start_worker()
    jid = uid("authz")
    stack.produce_jobs([job(jid, directive="latency_ms=1500")])
    stack.wait_called(jid)
    stack.kafka_control("errors Produce " + " ".join(["TOPIC_AUTHORIZATION_FAILED"] * 4))
    outs = check_exactly_once(stack, [jid])
    assert outs[0]["headers"]["ce_type"] == "retort.job.final", outs[0]
    lines = [l for l in stack.log_lines(w.name) if l["msg"].startswith("delivery to ")]
    assert [l.get("job_id") for l in lines] == [jid] * 3, lines
    assert "; producing again in 500 ms" in lines[0]["msg"], lines
    assert "(2 times in a row)" in lines[1]["msg"] and "in 1000 ms" in lines[1]["msg"], lines
    assert "(4 times in a row)" in lines[2]["msg"] and "in 4000 ms" in lines[2]["msg"], lines
    ts = [datetime.datetime.strptime(l["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() for l in lines]
    assert ts[2] - ts[1] >= 2.9, ts  # the 2nd, then 1 s and 2 s later the 3rd and 4th
    assert stack.stop_worker(w) == 0


def test_readiness_comes_back_after_a_broker_outage_without_a_rebalance(control_stack):
    """The broker goes away for 7 s, more than half the session timeout
    (12 s here), and no rebalance follows, and no job comes.  /readyz says
    "kafka down" from the outage on, and 200 again once the broker is back
    (it once said "kafka down" for good: only a delivery or a rebalance
    cleared it).  The worker tries the broker again at least once a second
    (kafka.reconnect.backoff.max.ms, 1 s by default), so it is back within
    a second or so of the broker.  With librdkafka's own default (doubling
    from 100 ms up to 10 s) its try after a 7 s outage came about 13 s after
    the outage began: past the session timeout, a rebalance."""
    stack = control_stack
    port = free_port()
    w = stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1",
                           "--set", "kafka.consumer.session.timeout.ms=12000")

    def ready():
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    jid = uid("ready")
    stack.produce_jobs([job(jid)])
    check_exactly_once(stack, [jid])
    assert ready()[0] == 200
    stack.kafka_control("broker_down 1")
    down_at = time.time()
    while "kafka down" not in ready()[1]:
        assert time.time() < down_at + 15, ready()
        time.sleep(0.2)
    time.sleep(max(0.0, down_at + 7 - time.time()))
    stack.kafka_control("broker_up 1")
    deadline = time.time() + 20
    while ready()[0] != 200:
        assert time.time() < deadline, ready()
        time.sleep(0.2)
    assert "is up again" in stack.worker_log(w.name)
    # the session outlived the outage: no partition was taken from the worker
    time.sleep(2)
    assert "revoked" not in stack.worker_log(w.name)
    jid = uid("ready-after")
    stack.produce_jobs([job(jid)])
    check_exactly_once(stack, [jid])
    assert "revoked" not in stack.worker_log(w.name)
    assert stack.stop_worker(w) == 0


@pytest.mark.parametrize("refusals,kept,local", [(1, 5, False), (3, None, False), (1, 5, True)])
def test_a_retry_job_kafka_refuses_as_too_large_is_cut_until_it_goes(control_stack, envelopes, refusals, kept, local):
    """The topic may take less than the producer's message.max.bytes.  A
    retry job Kafka refused as too large was produced again, unchanged,
    every 500 ms for good, holding its partition's commits back.  Now each
    refusal cuts its reflection further: 1 KiB of output and 5 violations,
    then 1 violation and no output, then no reflection (a fresh ask).  A
    cut reflection says what it left out, the repair prompt that more
    violations were found than it lists, and the next attempt's record
    that its repair was cut.  With retry.local on, attempt 2 runs here
    from the retry job as it was before Kafka saw it: its repair is whole,
    and only the copy on the topic is cut."""
    stack = control_stack
    port = free_port()
    w = stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1",
                           "--set", "retry.local=%s" % ("true" if local else "false"))
    jid = uid("retry-big")
    # 8 violations: every required field of the wrong type, and one extra
    answer = {"name": 1, "sku": 2, "price": "a", "currency": 3, "category": 4, "in_stock": 5, "tags": 6, "z": 1}
    b64 = base64.b64encode(json.dumps(answer).encode()).decode()
    # the answer takes 1.5 s: the refusals are armed before the retry is produced
    stack.produce_jobs([job(jid, directive="answer_b64=%s latency_ms=1500" % b64, max_attempts=2)])
    stack.kafka_control("errors Produce " + " ".join(["MSG_SIZE_TOO_LARGE"] * refusals))
    stack.wait_outcomes([jid], timeout=60)
    (esc,) = [m["value"] for m in stack.consume("retort.escalations") if m["key"] == jid]
    assert esc["attempts"] == 2, esc
    retries = [m["value"] for m in stack.consume("retort.jobs") if m["key"] == jid and m["value"].get("attempt") == 2]
    assert len(retries) == 1, retries
    rec1 = json.loads(stack.redis_client().lindex("retort:job:{%s}:history" % jid, 0))
    assert len(rec1["violations"]) == 8
    envelopes.validate("job.schema.json", retries[0])
    rec2 = esc["history"][1]
    envelopes.validate("events/attempt.schema.json", rec2)
    if kept is None:
        assert "reflection" not in retries[0]
        assert "reflection_cut" not in rec2
    else:
        refl = retries[0]["reflection"]
        assert len(refl["violations"]) == kept
        assert [v["path"] for v in refl["violations"]] == [v["path"] for v in rec1["violations"][:kept]]
        assert refl["violations_total"] == 8
        assert refl["previous_output_bytes"] == len(rec1["output"].encode())
        assert refl["cut"] == "previous output cut to 1 KiB, 5 violations kept"
        assert refl["prompt"].endswith("- and 3 more problems not listed here") or \
            "- and 3 more problems not listed here\n" in refl["prompt"], refl["prompt"]
        if local:
            assert "reflection_cut" not in rec2, rec2
        else:
            assert rec2["reflection_cut"] == refl["cut"]
    log = stack.worker_log(w.name)
    assert log.count("Broker: Message size too large") == refusals, log[-3000:]
    assert "retry job cut to" in log
    # each refusal is a failed delivery and a cut, which the metrics count
    samples, _ = scrape_metrics(port)
    assert samples[("retort_produce_failures_total", (("outcome", "retry"),))] == refusals
    assert samples[("retort_messages_cut_total", (("outcome", "retry"),))] == refusals
    assert samples[("retort_messages_cut_total", (("outcome", "escalated"),))] == 0
    # the retry's message was acknowledged: a drain has nothing to wait for
    assert stack.stop_worker(w) == 0


def test_a_repair_starts_before_the_retry_jobs_delivery_report(control_stack):
    """A retry job back from Kafka proves that Kafka has it: its attempt
    starts then, not when the delivery report of the attempt before comes
    (all that report still does is let that attempt store its offset).
    Here the broker takes the retry job at once but answers its producer
    8 s late; the repair used to wait those 8 s."""
    stack = control_stack
    w = stack.start_worker()
    jid = uid("early")
    stack.produce_jobs([job(jid, directive="defect=wrong_type until=1 latency_ms=1500")])
    # the next produce request after the job's own is the worker's retry job
    stack.kafka_control("delay 1 Produce 8000")
    stack.wait_outcomes([jid], timeout=60)
    finals = [m["value"] for m in stack.consume("retort.final") if m["key"] == jid]
    assert len(finals) == 1 and finals[0]["attempts"] == 2, finals
    hist = [json.loads(x) for x in stack.redis_client().lrange("retort:job:{%s}:history" % jid, 0, -1)]
    assert [r["attempt"] for r in hist] == [1, 2], hist

    def at(text):
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    gap = at(hist[1]["started_at"]) - at(hist[0]["finished_at"])
    assert gap < 4.0, "attempt 2 began %.1f s after attempt 1 ended" % gap
    calls = stack.llm_stats()["calls"]
    assert calls.get("%s:1" % jid) == 1 and calls.get("%s:2" % jid) == 1, calls
    # the drain waits for the late report, then stores both offsets
    assert stack.stop_worker(w) == 0
    log = stack.worker_log(w.name)
    assert "delivery to" not in log, log[-2000:]


def committed_behind(stack, topic="retort.jobs", group="retort-test"):
    """{partition: (committed, end)} of the partitions whose committed
    offset is behind the end of the topic."""
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=stack.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
        ends = c.end_offsets(parts)
        return {tp.partition: (c.committed(tp), ends[tp]) for tp in parts if (c.committed(tp) or 0) < ends[tp]}
    finally:
        c.close()


def test_reports_that_come_after_the_drain_still_commit_their_offsets(control_stack):
    """Past worker.drain_timeout_ms the worker closes its Kafka clients:
    the delivery reports still to come arrive in the producer's flush.
    The consumer was closed before that flush, so the offsets those
    reports stored were never committed, and the next worker read the
    jobs again and produced their events a second time.  The producer is
    flushed first now, then the consumer's close commits."""
    stack = control_stack
    ids = [uid("lateflush") for _ in range(8)]
    stack.produce_jobs([job(j) for j in ids])
    # the jobs are on the topic: the next produce request is the worker's
    stack.kafka_control("delay 1 Produce 4000")
    w = stack.start_worker("--set", "worker.drain_timeout_ms=300")
    stack.wait_outcomes(ids, timeout=60)   # on the topic, their reports not yet back
    stack.stop_worker(w)
    assert committed_behind(stack) == {}


def delivery_gauges(port, want_final):
    """(jobs in slots, jobs waiting for their reports, final events counted)
    once every job has left and want_final final events are counted, or
    as they stand when that never comes."""
    s, _ = settle_metrics(port, lambda s: jobs_gone(s) and
                          s.get(("retort_jobs_total", (("outcome", "final"),)), 0) == want_final)
    return (s[("retort_inflight_jobs", ())], s[("retort_delivering_jobs", ())],
            s.get(("retort_jobs_total", (("outcome", "final"),)), 0))


def late_acks_worker(stack, max_delivering, *args, env=None):
    """A worker of 2 calls and 2 job slots (and max_delivering, then args),
    its first produce request answered 6 s late (the jobs are on the topic
    already: the next produce request is the worker's); (worker, metrics
    port)."""
    stack.kafka_control("delay 1 Produce 6000")
    port = free_port()
    w = stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1",
                           "--set", "llm.max_inflight=2", "--set", "worker.max_jobs=2",
                           "--set", "worker.max_delivering=%d" % max_delivering, *args, env=env)
    wait_metrics(port, w)
    return w, port


def test_outcomes_waiting_for_their_delivery_hold_no_job_slot(control_stack):
    """A job whose outcome is with the producer has nothing left but its
    delivery report: it gives its job slot back then, so that the
    producer's linger and the broker's acknowledgement do not bound the
    rate (with instant answers they were much of a job's time in its
    slot).  The jobs live are still bounded, by worker.max_jobs +
    worker.max_delivering; they are drained, and each ends once.  Here the
    broker answers the worker's first produce request 6 s late: meanwhile
    the worker calls the LLM for 2 + 5 jobs, and for no more."""
    stack = control_stack
    ids = [uid("dlv") for _ in range(16)]
    stack.produce_jobs([job(j, directive="latency_ms=100") for j in ids])
    w, port = late_acks_worker(stack, 5)
    final = ("retort_jobs_total", (("outcome", "final"),))
    seen = []  # (slots, delivering, calls) while no delivery report has come
    deadline = time.time() + 30
    while time.time() < deadline:
        # the calls first: one past the 7th needs a report, which the
        # scrape after it then shows
        calls = sum(stack.llm_stats()["calls"].values())
        s, _ = scrape_metrics(port)
        if s.get(final, 0):
            break
        seen.append((s[("retort_inflight_jobs", ())], s[("retort_delivering_jobs", ())], calls))
        time.sleep(0.05)
    assert seen and max(x[0] for x in seen) <= 2, seen
    # every job in a slot ended and waits for its report: 7 live, no slot held
    assert (0, 7, 7) in seen, seen[-5:]
    assert max(x[2] for x in seen) == 7, seen[-5:]
    check_exactly_once(stack, ids)
    assert delivery_gauges(port, len(ids)) == (0, 0, len(ids))
    assert sum(stack.llm_stats()["calls"].values()) == len(ids)
    assert stack.stop_worker(w) == 0


def test_a_delivery_mark_redis_refused_goes_again_until_it_takes(control_stack):
    """A job's outcome is delivered while Redis refuses writes (maxmemory
    reached: OOM).  The mark that records the delivery, which nobody
    waits for, was logged and dropped: a redelivery of the job's message
    then found the outcome unmarked and waited worker.takeover_after_ms
    (10 min) for its owner to deliver what it had delivered.  It goes
    again each second until Redis takes it."""
    stack = control_stack
    w = stack.start_worker()
    jid = uid("remark")
    key = "retort:job:{%s}" % jid
    stack.produce_jobs([job(jid, directive="latency_ms=1500")])
    stack.wait_called(jid)
    stack.kafka_control("delay 1 Produce 3000 1")  # the outcome's produce: its report comes 3 s later
    r = stack.redis_client()
    deadline = time.time() + 30
    while r.hget(key, "status") != "final":  # recorded; its delivery report is on its way
        assert time.time() < deadline, r.hgetall(key)
        time.sleep(0.02)
    r.config_set("maxmemory", "1")
    try:
        stack.wait_log(w.name, "recording a delivered outcome failed", timeout=20)
        time.sleep(1.5)  # refused again
    finally:
        r.config_set("maxmemory", "0")
    deadline = time.time() + 10
    while r.hget(key, "published") != "1":
        assert time.time() < deadline, r.hgetall(key)
        time.sleep(0.1)
    check_exactly_once(stack, [jid])
    log = stack.worker_log(w.name)
    # said once, and once taken
    assert log.count("recording a delivered outcome failed") == 1, log[-3000:]
    assert "again each second until Redis takes it" in log
    assert re.search(r"recorded 1 delivered outcome\(s\) Redis had refused [2-9]\d* time", log), log[-3000:]
    assert stack.stop_worker(w) == 0


def test_repairs_and_dead_letters_waiting_for_their_delivery(control_stack):
    """The same with the other ways a job ends: a repair run here
    (retry.local: its failed attempt waits for its retry job's report as a
    shadow, which gives its slot back too), an escalation and a dead
    letter, all under a 6 s late produce answer.  The counts come back to
    nothing (a job counted twice or never would leave the gauges off, or
    hang the drain), and each job ends once."""
    stack = control_stack
    ids = [uid("dlr") for _ in range(6)]
    jobs = [job(j, directive="latency_ms=100") for j in ids[:3]] + \
           [job(ids[3], directive="defect=wrong_type until=1"), job(ids[4], directive="defect=wrong_type until=1"),
            job(ids[5], directive="defect=refusal")]
    stack.produce_jobs(jobs)
    dead = uid("dead")
    stack.produce("retort.jobs", [(dead, b"{not json")])
    w, port = late_acks_worker(stack, 3)
    outs = check_exactly_once(stack, ids)
    by_id = {m["value"]["job_id"]: m["value"] for m in outs}
    assert by_id[ids[3]]["attempts"] == 2 and by_id[ids[4]]["attempts"] == 2
    escs = [m["value"] for m in stack.consume("retort.escalations") if m["value"]["job_id"] == ids[5]]
    assert len(escs) == 1 and escs[0]["category"] == "refusal", escs
    deadline = time.time() + 30
    while not [m for m in stack.consume("retort.dlq") if m["key"] == dead]:
        assert time.time() < deadline, "no dead letter"
        time.sleep(0.2)
    assert delivery_gauges(port, 5) == (0, 0, 5)
    assert stack.stop_worker(w) == 0


def test_outcomes_waiting_for_their_delivery_hold_only_their_events(control_stack):
    """A job waiting for its report needs only its event: it gives back the
    answer, its parsed value, the value printed and the attempt's record,
    several times the event's size, which a stalled broker would otherwise
    hold for up to worker.max_delivering jobs.  Here 8 answers of 9,000
    JSON nodes (70 KB) wait 6 s for the broker.  The heap the worker holds
    for them, as its allocator counts it (tests/preload_heap.c), is at
    most 4 times their final events (the worker's copy, the producer's
    and its request's; measured 3x); it was 23x, and 10.5x when only the
    attempt's record was kept."""
    stack = control_stack
    answer = json.dumps({"rows": [{"id": i, "name": "item-%d" % i, "tags": ["a", "b"]} for i in range(1500)]},
                        separators=(",", ":"))

    class Big(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            send_json(self, 200, chat_completion(answer))

    heap_file = os.path.join(stack.dir, "heap.txt")

    def heap():
        """The worker's heap in use, counted after this call began."""
        return read_heap(heap_file)

    with own_llm(Big) as url:
        ids = [uid("mem") for _ in range(8)]
        stack.produce_jobs([job(j, schema={"type": "object"}) for j in ids])
        w, port = late_acks_worker(stack, 6, "--set", "llm.base_url=%s/v1" % url,
                                   env={"LD_PRELOAD": build_preload("preload_heap", stack.dir),
                                        "PRELOAD_HEAP_FILE": heap_file})
        final = ("retort_jobs_total", (("outcome", "final"),))
        stalled = []
        deadline = time.time() + 60
        while time.time() < deadline:
            s, _ = scrape_metrics(port)
            if s.get(final, 0):
                break
            if (s[("retort_inflight_jobs", ())], s[("retort_delivering_jobs", ())]) == (0, 8):
                stalled.append(heap())
            time.sleep(0.05)
        assert stalled, "the 8 jobs never all waited for their reports together"
        outs = check_exactly_once(stack, ids)
        assert delivery_gauges(port, 8) == (0, 0, 8)
        events = sum(len(json.dumps(m["value"], separators=(",", ":")))
                     for m in {m["headers"]["ce_id"]: m for m in outs}.values())
        assert events > 8 * len(answer)
        # the least of the looks at all 8 waiting: the producer's requests,
        # built later during the stall, are librdkafka's
        held = min(stalled) - heap()
        assert 0 < held <= 4 * events, "held %d bytes for %d bytes of events (%.1fx)" % (held, events, held / events)
        assert stack.stop_worker(w) == 0


def test_token_budget_and_deadline(stack):
    stack.start_worker()
    a, b = uid("budget"), uid("deadline")
    stack.produce_jobs([
        job(a, directive="defect=wrong_type", token_budget=1),
        job(b, deadline="2001-01-01T00:00:00Z"),
    ])
    stack.wait_outcomes([a, b])
    escs = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.escalations")}
    assert escs[a]["category"] == "budget" and "token budget of 1 exceeded" in escs[a]["reason"]
    assert escs[a]["attempts"] == 1
    assert escs[b]["category"] == "budget" and "deadline passed before attempt 1" in escs[b]["reason"]
    assert "%s:1" % b not in stack.llm_stats()["calls"]


def test_no_call_is_made_past_the_deadline_after_a_wait(stack):
    """The deadline was checked when an attempt began, not after the waits
    that come before a call: a transient failure's backoff (here a 429's
    Retry-After of 6 s, past a deadline 2.5 s away) and the model's lane
    paused by it.  The call after the wait was paid for and its answer
    came out final.  A job waiting at the gate ends at its deadline, not
    when the gate lets it through."""
    w = stack.start_worker("--set", "llm.backoff_max_ms=6000")   # the stack's 2 s cap would end the waits early
    stack.wait_log(w.name, "assigned")     # the group's first join takes 3 s
    a, b = uid("late-backoff"), uid("late-gate")
    soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2.5))
    deadline = soon.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (soon.microsecond // 1000)
    # a: its one call fails (429, retry in 6 s); b: waits out the lane's
    # pause, which a's Retry-After set, sent right after it
    stack.produce_jobs([job(a, directive="http=429 times=1 retry_after=6", deadline=deadline)])
    stack.wait_called(a, 1)
    called = time.time()  # the lane's pause ends 6 s after a's call, at most this + 6
    stack.produce_jobs([job(b, deadline=deadline)])
    stack.wait_outcomes([a, b])
    escs = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.escalations")}
    assert escs[a]["category"] == "budget" and "deadline passed on attempt 1" in escs[a]["reason"], escs.get(a)
    assert escs[b]["category"] == "budget" and "deadline passed" in escs[b]["reason"], escs.get(b)
    # b ended at its deadline, while the lane was still paused, not when
    # the gate would have let it through (the pause's end, 3.5 s later)
    ended = datetime.datetime.fromisoformat(escs[b]["finished_at"].replace("Z", "+00:00")).timestamp()
    assert ended < called + 5, (ended - soon.timestamp(), called + 6 - ended)
    calls = stack.llm_stats()["calls"]
    assert calls.get("%s:1" % a) == 1 and "%s:1" % b not in calls, calls
    assert not [m for m in stack.consume("retort.final") if m["value"]["job_id"] in (a, b)]


def test_per_schema_max_attempts(stack, tmp_path):
    # a copy of product.v1 with "x-retort": {"max_attempts": 2}
    src = json.load(open(os.path.join(BUILD, "..", "schemas", "output", "product.v1.json")))
    src["x-retort"] = {"max_attempts": 2}
    src["$id"] = "https://retort.dev/schemas/output/two.v1.json"
    d = tmp_path / "out"
    d.mkdir()
    (d / "two.v1.json").write_text(json.dumps(src))
    stack.start_worker("--set", "schemas.dir=%s" % d)
    a, b = uid("two"), uid("three")
    stack.produce_jobs([job(a, schema="two.v1", directive="defect=wrong_type"),
                        job(b, schema="two.v1", directive="defect=wrong_type", max_attempts=3)])
    stack.wait_outcomes([a, b])
    escs = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.escalations")}
    assert escs[a]["attempts"] == 2      # the schema's budget
    assert escs[b]["attempts"] == 3      # the job's own wins


class Hook(http.server.BaseHTTPRequestHandler):
    received = []
    fail_first = 1

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if Hook.fail_first > 0:
            Hook.fail_first -= 1
            self.send_response(503)
            self.end_headers()
            return
        Hook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()


def test_escalation_webhook(stack):
    with own_llm(Hook) as url:
        stack.start_worker("--set", "escalation.webhook_url=%s/hook" % url)
        jid = uid("hook")
        stack.produce_jobs([job(jid, directive="defect=refusal")])
        stack.wait_outcomes([jid])
        deadline = time.time() + 10
        while time.time() < deadline and not Hook.received:
            time.sleep(0.1)
        assert [e["job_id"] for e in Hook.received] == [jid]   # retried after the 503
        assert Hook.received[0]["category"] == "refusal"


def test_webhook_calls_held_at_once_are_bounded(stack):
    """The webhook's endpoint takes the calls and never answers.  Each call
    was held, with a connection and a copy of its escalation, through all
    its retries, however many escalations came: memory and file
    descriptors without a bound.  At escalation.webhook_max_pending (2
    here) an escalation is not posted; that is said (at the 1st and 2nd in
    a row, not the 3rd) and counted.  At the stop, the calls dropped are
    said too.  Every escalation is in its topic."""
    got = []

    class Hang(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            got.append(1)
            time.sleep(30)

    port = free_port()
    with own_llm(Hang) as url:
        w = stack.start_worker("--set", "escalation.webhook_url=%s/hook" % url,
                               "--set", "escalation.webhook_max_pending=2",
                               "--set", "escalation.webhook_timeout_ms=60000",
                               "--set", "worker.drain_timeout_ms=1000",
                               "--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1")
        ids = [uid("hook-bound") for _ in range(5)]
        stack.produce_jobs([job(j, directive="defect=refusal") for j in ids])
        outs = check_exactly_once(stack, ids)
        assert {m["headers"]["ce_type"] for m in outs} == {"retort.job.escalated"}
        s = settle_metrics(port, lambda s: s.get(("retort_webhook_failures_total", (("reason", "not_held"),))) == 3)[0]
        assert s[("retort_webhook_failures_total", (("reason", "given_up"),))] == 0
        assert len(got) == 2, got
        said = [l for l in stack.log_lines(w.name) if l["msg"].startswith("escalation webhook not called")]
        assert len(said) == 2 and "(2 in a row)" in said[1]["msg"], said
        assert set(l["job_id"] for l in said) <= set(ids)
        assert stack.stop_worker(w) == 0
        log = stack.worker_log(w.name)
        assert "2 escalation webhook call(s) not made or not answered at the stop" in log, log[-3000:]
        assert "2 escalation webhook call(s) pending" in log, log[-3000:]


def escalated_with_hook(stack, url, prefix, *settings):
    """A worker whose webhook is url/hook (settings: more "key=value"), and
    one job of it escalated: (the worker, the job id)."""
    args = ["--set", "escalation.webhook_url=%s/hook" % url]
    for kv in settings:
        args += ["--set", kv]
    w = stack.start_worker(*args)
    jid = uid(prefix)
    stack.produce_jobs([job(jid, directive="defect=refusal")])
    stack.wait_outcomes([jid])
    return w, jid


def test_a_stop_does_not_wait_for_webhook_retries(stack):
    """The webhook's endpoint answers 503 to every call, and the worker
    would try each escalation again for minutes (retries 100).  At
    SIGTERM the calls waiting to be tried again are dropped, said, and the
    drain ends at once: it waited for them until its timeout (30 s), on
    every stop while the endpoint was down."""
    got = []

    class Down(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            got.append(1)  # answered: no call in flight when the test stops the worker

    with own_llm(Down) as url:
        w, _ = escalated_with_hook(stack, url, "hook-down", "escalation.webhook_retries=100")
        deadline = time.time() + 10
        while len(got) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert len(got) >= 2, got
        time.sleep(0.2)  # the worker has read the answer: the next try is 1 s away
        assert stack.stop_worker(w) == 0
        log = stack.worker_log(w.name)
        assert "1 escalation webhook call(s) waiting to be tried again dropped at the stop" in log, log[-3000:]
        assert "drain timeout" not in log, log[-3000:]


def test_status_command(stack):
    stack.start_worker()
    jid = uid("status")
    stack.produce_jobs([job(jid, directive="defect=wrong_type until=1")])
    stack.wait_outcomes([jid])
    out = subprocess.run([os.path.join(BUILD, "retort"), "status", jid, "-c", stack.config_path],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    assert st["status"] == "final" and st["attempt"] == 2 and len(st["history"]) == 2
    assert "owner" not in st
    missing = subprocess.run([os.path.join(BUILD, "retort"), "status", "no-such-job", "-c", stack.config_path],
                             capture_output=True, text=True, timeout=10)
    assert missing.returncode == 1 and "no-such-job" in missing.stderr
    # the records' numbers as written: the model's 12345678901234567890
    # and 1e400 (cJSON printed 1.2345678901234567e+19 and null)
    big = uid("status-big")
    r = stack.redis_client()
    r.hset("retort:job:{%s}" % big, mapping={"status": "final", "attempt": 1})
    r.rpush("retort:job:{%s}:history" % big, '{"attempt":1,"value":{"id":12345678901234567890,"x":1e400,"y":0.1}}')
    out = subprocess.run([os.path.join(BUILD, "retort"), "status", big, "-c", stack.config_path],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    assert '"id":\t12345678901234567890,' in out.stdout and '"x":\t1e400,' in out.stdout, out.stdout
    assert json.loads(out.stdout)["history"][0]["value"]["y"] == 0.1


def test_retry_job_is_shrunk_to_the_message_size(stack):
    w = stack.start_worker("--set", "retry.max_message_bytes=4096",
                           "--set", "retry.previous_output_max_bytes=100000")
    jid = uid("big")
    stack.produce_jobs([job(jid, prompt="Describe a product. " + "x" * 3500,
                            directive="defect=wrong_type until=1")])
    stack.wait_outcomes([jid])
    retries = [m for m in stack.consume("retort.jobs") if m["headers"].get("ce_type") == "retort.job.retry"
               and m["value"]["job_id"] == jid]
    assert len(retries) == 1
    refl = retries[0]["value"]["reflection"]
    assert len(refl["previous_output"].encode()) <= 1024 and len(refl["violations"]) <= 5
    # the job's own 3.5 KB prompt leaves room for the second cut only
    assert refl["cut"] == "without the previous output, 1 violation kept" and refl["previous_output"] == ""
    assert refl["previous_output_bytes"] > 0 and refl["violations_total"] >= len(refl["violations"]) == 1
    assert "retry job cut to" in stack.worker_log(w.name)
    assert [m["value"]["attempts"] for m in stack.consume("retort.final") if m["value"]["job_id"] == jid] == [2]


@pytest.mark.llm_args("--idle-timeout-s", "1")
def test_llm_server_closing_idle_connections(stack):
    """The LLM server closes kept-alive connections after 1 s idle (uvicorn,
    hence vLLM, does after 5 s).  The worker keeps watching an idle
    connection's socket between calls: the close must neither spin the
    loop nor cost a job anything; the next calls open new connections."""
    w = stack.start_worker("--set", "llm.max_inflight=16")
    first = [uid("idle-a") for _ in range(32)]
    stack.produce_jobs([job(j, directive="latency_ms=50") for j in first])
    check_exactly_once(stack, first)
    time.sleep(2.5)   # every connection the worker kept is closed by now
    c0 = proc_cpu_s(w.pid)
    time.sleep(3)
    idle_cpu = proc_cpu_s(w.pid) - c0
    # A loop spinning on a closed socket burns the whole 3 s.
    assert idle_cpu < 1.0, idle_cpu
    second = [uid("idle-b") for _ in range(32)]
    stack.produce_jobs([job(j, directive="latency_ms=50") for j in second])
    outs = check_exactly_once(stack, second)
    assert all(m["headers"]["ce_type"] == "retort.job.final" for m in outs if m["value"]["job_id"] in second)
    calls = stack.llm_stats()["calls"]
    assert all(calls.get(j + ":1") == 1 for j in first + second), [(j, calls.get(j + ":1")) for j in second]
    assert w.poll() is None


def test_llm_host_given_by_a_name_that_resolves(stack):
    """An LLM base URL with a host name goes through curl's threaded
    resolver (the name is this host's; "localhost" would not: curl answers
    it without a lookup).  The mock LLM listens where the name resolves
    to (127.0.0.1, or e.g. Debian's 127.0.1.1): every call works."""
    host = socket.gethostname()
    try:
        addr = socket.gethostbyname(host)
    except OSError as e:
        pytest.skip("this host's name %r does not resolve (%s)" % (host, e))
    url = stack.llm_url
    if addr != "127.0.0.1":
        llm = subprocess.Popen([os.path.join(BUILD, "mock-llm"), "--port", "0", "--host", addr],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        stack.procs.append(llm)
        line = llm.stdout.readline().decode().split()
        if not line:
            pytest.skip("this host's name %r resolves to %s, where no server can listen" % (host, addr))
        url = line[1]
    url = url.replace(addr, host)
    assert host in url, url
    w = stack.start_worker("--set", "llm.base_url=%s/v1" % url, "--set", "llm.max_inflight=24", name="byname")
    prefix = uid("byname")
    ids = ["%s-ok-%d" % (prefix, i) for i in range(48)]
    stack.produce_jobs([job(j, directive="latency_ms=200") for j in ids])
    outs = check_exactly_once(stack, ids)
    assert all(m["headers"]["ce_type"].endswith("final") for m in outs if m["value"]["job_id"] in ids)
    assert "Could not resolve host" not in stack.worker_log("byname")
    assert stack.stop_worker(w) == 0


def test_llm_host_given_by_a_name_that_cannot_resolve(stack):
    """An LLM base URL with a host name goes through curl's threaded
    resolver, whose socketpair is watched while a lookup runs and closed by
    curl without the close callback.  Its poll handle was kept (as a
    connection's is) on the fd number; after a lookup that failed (no
    connection took the number over), an HTTP client of /metrics accepted
    on that number had its events taken, and its scrape hung (the control:
    a scrape timed out); a new Redis connection on it could not have been
    watched (EEXIST, then a crash: test_state.c), nor the next lookup's
    socketpair armed.  A name that cannot resolve (a label over 63 bytes
    fails inside getaddrinfo, with no DNS query): every try fails at once,
    and /metrics and a Redis restart are fine after."""
    prefix = uid("byname")
    bad = stack.llm_url.replace("127.0.0.1", "a" * 70 + ".invalid")
    port = free_port()
    w = stack.start_worker("--set", "llm.base_url=%s/v1" % bad, "--set", "llm.max_transient_retries=3",
                           "--set", "llm.connect_timeout_ms=2000", "--set", "llm.max_inflight=4",
                           "--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1", name="noname")
    ids = ["%s-bad-%d" % (prefix, i) for i in range(6)]
    stack.produce_jobs([job(j) for j in ids])
    check_exactly_once(stack, ids)
    log = stack.worker_log("noname")
    assert "Could not resolve host" in log
    timed = [l for l in log.splitlines() if "timed out" in l.lower()]
    assert not timed, timed[:3]
    for i in range(30):
        scrape_metrics(port)   # each within its 5 s timeout
    stack.stop_redis()
    time.sleep(1)
    stack.start_redis()
    stack._wait_redis()
    deadline = time.time() + 20
    while stack.worker_log("noname").count('connected"') < 2:
        assert w.poll() is None, "the worker died (%s)" % w.returncode
        assert time.time() < deadline, "no new Redis connection"
        time.sleep(0.1)
    for i in range(30):
        scrape_metrics(port)
    assert stack.stop_worker(w) == 0


def test_close_is_bounded_when_the_broker_stops_answering(stack):
    """SIGTERM while the broker is frozen: closing the consumer (final
    commit, group leave) would wait for socket.timeout.ms (60 s) or, on a
    librdkafka hang, for ever; worker.close_timeout_ms bounds it and the
    worker says so.  The jobs were done, so nothing is lost: their offsets
    are delivered again and Redis answers them."""
    w = stack.start_worker("--set", "worker.close_timeout_ms=3000")
    ids = ["close-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(5)]
    stack.produce_jobs([job(j) for j in ids])
    stack.wait_outcomes(ids, timeout=60)
    stack.kafka.send_signal(signal.SIGSTOP)
    try:
        t0 = time.time()
        rc = stack.stop_worker(w, signal.SIGTERM, timeout=40)
        took = time.time() - t0
    finally:
        stack.kafka.send_signal(signal.SIGCONT)
    assert rc == 1, rc
    assert 2.5 <= took < 15, took
    assert "closing the Kafka clients took over 3000 ms" in stack.worker_log(w.name)


@pytest.mark.parametrize("local", [False, True])
def test_an_answer_that_is_not_utf8_is_retried_and_escalated_in_utf8(stack, envelopes, local):
    """An answer with bytes that are not UTF-8 is NOT_JSON, a fixable
    failure.  Its retry job carried those bytes as the previous output:
    refused on its way back (retry.local: refused at once) and sent to the
    dead-letter topic, so the job never got an outcome; its escalation
    (one attempt left) carried them too.  They are now replaced by U+FFFD
    wherever the answer is copied; the verdict is still NOT_JSON."""
    w = stack.start_worker("--set", "retry.local=%s" % ("true" if local else "false"))
    jid = uid("latin1")
    answer = b'\xff\xfe{"name": "caf\xe9"}'
    stack.produce_jobs([job(jid, directive="answer_b64=%s" % base64.b64encode(answer).decode(),
                            max_attempts=2)])
    stack.wait_outcomes([jid], timeout=30)
    (esc,) = [m["value"] for m in stack.consume("retort.escalations") if m["key"] == jid]
    envelopes.validate("events/escalation.schema.json", esc)
    assert esc["attempts"] == 2
    outputs = [h["output"] for h in esc["history"]]
    assert outputs == ['\ufffd\ufffd{"name": "caf\ufffd"}'] * 2, outputs
    assert all(h["violations"][0]["code"] == "NOT_JSON" for h in esc["history"])
    if not local:
        (retry,) = [m["value"] for m in stack.consume("retort.jobs") if m["key"] == jid and m["value"].get("attempt") == 2]
        assert retry["reflection"]["previous_output"] == outputs[0]
    assert not [m for m in stack.consume("retort.dlq") if m["key"] == jid]
    assert stack.stop_worker(w) == 0


def test_an_answer_over_max_response_bytes_is_repaired_as_a_cut_one(stack):
    """A 200 whose body passes llm.max_response_bytes is the model's answer,
    paid for, at length: it was a network error, called again in place
    (paid again, as long) and escalated as one, its token estimate given
    back.  It is a cut answer now: the next attempt asks for less, with a
    TRUNCATED violation that says why."""
    calls = collections.Counter()
    big = json.dumps({"rows": ["x" * 40] * 100})           # 4.5 KB
    small = json.dumps({"rows": ["x"]})

    class Long(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            jid, att = self.headers["X-Retort-Job-Id"], int(self.headers["X-Retort-Attempt"])
            calls[(jid, att)] += 1
            send_json(self, 200, chat_completion(big if "always" in jid or att == 1 else small))

    with own_llm(Long) as url:
        w = stack.start_worker("--set", "llm.base_url=%s/v1" % url,
                               "--set", "llm.max_response_bytes=2048")
        once, always = uid("long-once"), uid("long-always")
        stack.produce_jobs([job(once, schema={"type": "object"}),
                            job(always, schema={"type": "object"}, max_attempts=2)])
        outs = check_exactly_once(stack, [once, always])
        by_job = {m["value"]["job_id"]: m for m in outs}
        assert by_job[once]["headers"]["ce_type"] == "retort.job.final"
        assert by_job[once]["value"]["attempt"] == 2 and by_job[once]["value"]["output"] == json.loads(small)
        esc = by_job[always]["value"]
        assert by_job[always]["headers"]["ce_type"] == "retort.job.escalated", esc
        assert esc["category"] == "truncated" and "after 2 attempts" in esc["reason"], esc
        # one call an attempt: none again in place
        assert dict(calls) == {(once, 1): 1, (once, 2): 1, (always, 1): 1, (always, 2): 1}, dict(calls)
        retry = [m["value"] for m in stack.consume("retort.jobs")
                 if m["headers"].get("ce_type") == "retort.job.retry" and m["value"]["job_id"] == once]
        assert len(retry) == 1, retry
        v = retry[0]["reflection"]["violations"]
        assert [x["code"] for x in v] == ["TRUNCATED"] and "longer than this service accepts" in v[0]["message"], v
        assert stack.stop_worker(w) == 0


def test_a_webhook_answering_2xx_with_a_large_body_is_posted_once(stack):
    """Only a webhook's status counts.  Its body was read into a 64 KiB
    cap: a 200 with a larger one cut the transfer, which counted as a
    failure (status 0), so the escalation was POSTed again, up to
    escalation.webhook_retries times, each one answered 200."""
    posts = []

    class Big(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            body = b"x" * 200000
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with own_llm(Big) as url:
        w, jid = escalated_with_hook(stack, url, "bighook", "escalation.webhook_retries=3")
        deadline = time.time() + 10
        while time.time() < deadline and not posts:
            time.sleep(0.1)
        time.sleep(3)    # a retry would come 0.5 s, 1 s, 2 s later
        assert [e["job_id"] for e in posts] == [jid]
        assert "webhook failed" not in stack.worker_log(w.name)
        assert stack.stop_worker(w) == 0

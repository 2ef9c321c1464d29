"""Shared rate limits (token buckets in Redis, across worker processes) and
AIMD concurrency on 429."""
import datetime
import http.server
import json
import os
import signal
import statistics
import subprocess
import time
import uuid

from stack import (chat_completion, free_port, job, own_llm, scrape_metrics, send_json, settle_metrics,
                   wait_metrics)


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
    """8 jobs answered 429 with Retry-After: 8 s: the worker halves its
    concurrency limit (16 -> 8, once for a burst; again for 429s a second
    later, when the pause held some of the 8 back) and pauses the
    endpoint.  24 clean jobs that come meanwhile are not called before
    the pause ends, though nothing is in flight; then no more calls than
    the lowered limit (and its slow additive increase) run at once, where
    16 would have."""
    # (worker.max_jobs: room to hold all 32 jobs at once)
    w = stack.start_worker("--set", "llm.max_inflight=16", "--set", "worker.max_jobs=40",
                           "--set", "llm.backoff_max_ms=10000")
    ids = ["aimd-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(8)]
    # (a pause long enough for the test to see the 429s and produce the
    # clean jobs, and the worker to fetch them, within it on a slow machine)
    stack.produce_jobs([job(j, directive="http=429 times=1 retry_after=8") for j in ids])
    deadline = time.time() + 30
    while stack.llm_stats()["by_status"].get("429", 0) < 8:
        assert time.time() < deadline, stack.llm_stats()
        time.sleep(0.05)
    clean = ["aimd-clean-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(24)]
    stack.produce_jobs([job(j, directive="latency_ms=1000") for j in clean])
    stack.wait_outcomes(ids + clean, timeout=60)
    finals = [m for m in stack.consume("retort.final") if m["value"]["job_id"] in ids + clean]
    assert len(finals) == 32 and all(m["value"]["attempts"] == 1 for m in finals)
    log = stack.worker_log(w.name)
    assert "concurrency limit 16 -> 8" in log
    calls = stack.llm_stats()["calls"]
    assert all(calls["%s:1" % j] == 2 for j in ids)
    assert all(calls["%s:1" % j] == 1 for j in clean)
    times = stack.llm_times()
    last_429 = max(times["%s:1" % j][0][0] for j in ids)
    pause_end = last_429 + 8.0   # at the earliest: the pause starts when the 429 is read
    # the clean jobs were taken while the pause was on (else it proves nothing) ...
    received = [_wall(r["received_at"]) for r in _history(stack, clean)]
    assert max(received) < pause_end - 0.5, (max(received) - last_429)
    # ... and none was called before it ended
    first_clean = min(times["%s:1" % j][0][0] for j in clean)
    assert first_clean >= pause_end - 0.005, first_clean - last_429
    # then 32 calls waited, and at most 8 (and the one or two that
    # successes add) were made at once: the mock never had more in flight
    # (before the 429s, only their 8 calls were to make)
    assert stack.llm_stats()["peak_in_flight"] <= 11, sorted(n for v in times.values() for _, n in v)
    assert stack.stop_worker(w) == 0


def test_a_429_pauses_and_halves_its_own_model_only(stack):
    """Providers limit each model apart, and so does the gate: 8 jobs of
    one model answered 429 with Retry-After: 8 s pause and halve that
    model's lane only.  Jobs of another model that come during the pause
    are called at once, at the full concurrency; the first model's calls
    wait the pause out.  (One gate for the endpoint held every model's
    calls back for the whole pause.)"""
    port = free_port()
    w = stack.start_worker("--set", "llm.max_inflight=16", "--set", "worker.max_jobs=40",
                           "--set", "llm.backoff_max_ms=10000", "--set", "metrics.port=%d" % port,
                           "--set", "metrics.host=127.0.0.1")
    tag = uuid.uuid4().hex[:6]
    limited = ["lane-a-%s-%d" % (tag, i) for i in range(8)]
    stack.produce_jobs([job(j, model="model-a", directive="http=429 times=1 retry_after=8") for j in limited])
    deadline = time.time() + 60
    while stack.llm_stats()["by_status"].get("429", 0) < 8:
        assert time.time() < deadline, stack.llm_stats()
        time.sleep(0.05)
    # /metrics shows the lane paused and halved (once, or twice if the 8
    # calls came in two bursts: the second waited out the first's pause)
    m, _ = wait_metrics(port, w)
    assert m[("retort_llm_concurrency_limit", (("model", "model-a"),))] <= 8
    assert 0 < m[("retort_llm_paused_seconds", (("model", "model-a"),))] <= 8
    other = ["lane-b-%s-%d" % (tag, i) for i in range(16)]
    stack.produce_jobs([job(j, model="model-b", directive="latency_ms=3000") for j in other])
    stack.wait_outcomes(limited + other, timeout=90)
    finals = [m for m in stack.consume("retort.final") if m["value"]["job_id"] in limited + other]
    assert len(finals) == 24 and all(m["value"]["attempts"] == 1 for m in finals)
    times = stack.llm_times()
    last_429 = max(times["%s:1" % j][0][0] for j in limited)
    pause_end = last_429 + 8.0
    b_calls = [times["%s:1" % j][0] for j in other]
    # the other model's calls came during the pause ...
    assert max(at for at, _ in b_calls) < pause_end - 1.0, max(at for at, _ in b_calls) - last_429
    # ... all 16 at once (its lane was not halved): the mock had them all in flight
    assert max(n for _, n in b_calls) >= 16, sorted(n for _, n in b_calls)
    # and each limited job's second call waited out the pause its 429 began
    for j in limited:
        (first, _), (second, _) = times["%s:1" % j][:2]
        assert second >= first + 8.0 - 0.005, (j, second - first)
    m, _ = scrape_metrics(port)
    assert m[("retort_llm_concurrency_limit", (("model", "model-b"),))] == 16
    assert m[("retort_llm_paused_seconds", (("model", "model-a"),))] == 0
    log = stack.worker_log(w.name)
    assert "on model model-a: concurrency limit 16 -> 8" in log, log[-2000:]
    assert "model-b: concurrency limit" not in log
    assert stack.stop_worker(w) == 0


def test_a_spent_quota_escalates_at_once_and_is_no_rate_limit(stack):
    """OpenAI answers a spent quota with a 429 (code insufficient_quota):
    billing, not a rate.  Each job escalates at its first call, category
    quota, with the API's message; no call is made again, and the model's
    lane is neither halved nor paused, though the 429s came with
    Retry-After: 8 s.  Jobs of that model that come next are called at
    once, all 16 together."""
    port = free_port()
    w = stack.start_worker("--set", "llm.max_inflight=16", "--set", "worker.max_jobs=40",
                           "--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1")
    tag = uuid.uuid4().hex[:6]
    spent = ["quota-%s-%d" % (tag, i) for i in range(8)]
    stack.produce_jobs([job(j, model="model-q", directive="quota=1 retry_after=8") for j in spent])
    stack.wait_outcomes(spent, timeout=60)
    escs = {m["value"]["job_id"]: m["value"] for m in stack.consume("retort.escalations")
            if m["value"]["job_id"] in spent}
    assert len(escs) == 8
    for ev in escs.values():
        assert ev["category"] == "quota" and ev["attempts"] == 1, ev
        assert ev["reason"] == "quota is not retryable", ev["reason"]
        assert "insufficient_quota: You exceeded your current quota" in json.dumps(ev["history"]), ev["history"]
    calls = stack.llm_stats()["calls"]
    assert [calls.get("%s:1" % j) for j in spent] == [1] * 8
    m, _ = wait_metrics(port, w)
    assert m[("retort_llm_concurrency_limit", (("model", "model-q"),))] == 16
    assert m[("retort_llm_paused_seconds", (("model", "model-q"),))] == 0
    clean = ["quota-clean-%s-%d" % (tag, i) for i in range(16)]
    stack.produce_jobs([job(j, model="model-q", directive="latency_ms=2000") for j in clean])
    stack.wait_outcomes(clean, timeout=60)
    times = stack.llm_times()
    assert max(n for j in clean for _, n in times["%s:1" % j]) >= 16, times
    assert "concurrency limit" not in stack.worker_log(w.name)
    assert stack.stop_worker(w) == 0


def _history(stack, ids):
    r = stack.redis_client()
    return [json.loads(x) for j in ids for x in r.lrange("retort:job:{%s}:history" % j, 0, -1)]


def _wall(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_tpm_is_shared_by_all_processes(stack):
    """ratelimit.tpm over two processes: the calls' real token usage (the
    records') cannot have been spent faster than the limit, past one
    second's worth of burst.  A call is let in on its estimate and settled
    against its usage after, so a call's usage is allowed as slack."""
    tpm = 6000   # 100 tokens a second, a burst of 100
    sup = stack.start_worker("--processes", "2", "--set", "ratelimit.tpm=%d" % tpm)
    ids = ["tpm-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(16)]
    stack.produce_jobs([job(j) for j in ids])
    outs = stack.wait_outcomes(ids, timeout=90)
    assert len(outs) == 16
    recs = _history(stack, ids)
    assert len(recs) == 16
    used = [r["usage"]["total_tokens"] for r in recs]
    assert min(used) > 0
    times = sorted(_wall(r["finished_at"]) for r in recs)
    per_s = tpm / 60.0
    # all but the last call's tokens were spent within the span, less the burst
    floor = (sum(used) - max(used) - per_s - 2 * max(used)) / per_s
    assert floor > 3, (used, floor)   # the check means something
    assert times[-1] - times[0] >= floor, (times[-1] - times[0], floor, used)
    # ... and not much slower either: a call is let in on an estimate (the
    # request's size), seven times its usage here; the waiting calls waited
    # out the whole estimate, one call every 6.2 s where the limit allows
    # one every 0.8.  The estimates are scaled by the usage seen so far.
    gaps = [b - a for a, b in zip(times, times[1:])]
    ideal = statistics.median(used) / per_s
    assert statistics.median(gaps) <= 3 * ideal, (sorted(gaps), ideal)
    assert stack.redis_client().exists("retort:rate:{%s/v1|mock-1}" % stack.llm_url)
    assert stack.stop_worker(sup) == 0


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_buckets_refill_by_redis_clock(stack, tmp_path):
    """Two workers sharing rpm=240 (4 a second, a burst of 4), one of them
    with its wall clock an hour ahead (tests/fake_clock.c, preloaded).
    With the buckets refilled by the callers' clocks, the one ahead read
    the time since the other's last write as an hour, a full bucket on
    every call: it made 23 calls in 1.4 s, 31 of the 48 within two
    seconds.  By Redis's clock no two seconds hold more than 4 + 2 x 4,
    and the 48 calls take at least (48 - 4) / 4 = 11 s."""
    shim = str(tmp_path / "fake_clock.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", shim, os.path.join(REPO, "tests", "fake_clock.c"), "-ldl"],
                   check=True)
    args = ("--set", "ratelimit.rpm=240", "--set", "llm.max_inflight=64")
    now = stack.start_worker(*args, name="clock-now")
    # (an ASan build wants its runtime first: the shim goes before it)
    asan = (os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
    ahead = stack.start_worker(*args, name="clock-ahead",
                               env={"LD_PRELOAD": shim, "FAKE_CLOCK_OFFSET_S": "3600", "ASAN_OPTIONS": asan})
    deadline = time.time() + 30
    while not all("assigned 2 partition(s)" in stack.worker_log(n) for n in ("clock-now", "clock-ahead")):
        assert ahead.poll() is None, stack.worker_log("clock-ahead")[-2000:]
        assert time.time() < deadline, "the two workers did not split the partitions"
        time.sleep(0.1)
    stamp = stack.worker_log("clock-ahead").split('"ts":"', 1)[1].split('"', 1)[0]
    assert _wall(stamp) - time.time() > 3000, "the clock of clock-ahead is not ahead"
    ids = ["clock-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(48)]
    t0 = time.time()
    stack.produce_jobs([job(j) for j in ids])
    outs = stack.wait_outcomes(ids, timeout=90)
    took = time.time() - t0
    assert len(outs) == 48
    recs = _history(stack, ids)
    by = {r["worker"] for r in recs}
    assert by == {"clock-now", "clock-ahead"}, by
    # the calls' times by one clock (the answer's, in each record)
    calls = sorted(_wall(r["finished_at"]) - (3600 if r["worker"] == "clock-ahead" else 0) for r in recs)
    busiest = max(sum(1 for c in calls if t <= c < t + 2.0) for t in calls)
    assert busiest <= 4 + 2 * 4 + 1, busiest   # a burst, two seconds' refill, a stamp's jitter
    assert took >= 10.5, took
    assert stack.stop_worker(now) == 0
    assert stack.stop_worker(ahead) == 0


def _busiest(times, seconds):
    """The most of these times within any window of that many seconds."""
    return max(sum(1 for c in times if t <= c < t + seconds) for t in times)


def test_each_model_has_its_own_buckets(stack):
    """Limits are per endpoint and model: a job's own model picks its
    buckets, and ratelimit.MODEL.rpm sets one model's limit.  Every model
    120 a minute (2 a second, a burst of 2), slow-1 60 (1 a second, a burst
    of 1); 12 jobs of the default model and 8 of slow-1 at once."""
    sup = stack.start_worker("--set", "ratelimit.rpm=120", "--set", "ratelimit.slow-1.rpm=60")
    prefix = uuid.uuid4().hex[:6]
    fast = ["rlm-%s-f%d" % (prefix, i) for i in range(12)]
    slow = ["rlm-%s-s%d" % (prefix, i) for i in range(8)]
    stack.produce_jobs([job(j) for j in fast] + [job(j, model="slow-1") for j in slow])
    assert len(stack.wait_outcomes(fast + slow, timeout=90)) == 20
    r = stack.redis_client()
    for model, ids, burst, per_s in (("mock-1", fast, 2, 2), ("slow-1", slow, 1, 1)):
        recs = _history(stack, ids)
        assert {x["model"] for x in recs} == {model}
        times = sorted(_wall(x["finished_at"]) for x in recs)
        assert _busiest(times, 2.0) <= burst + 2 * per_s + 1, (model, times)
        want = (len(ids) - burst) / per_s
        assert times[-1] - times[0] >= want - 0.5, (model, times[-1] - times[0], want)
        assert r.exists("retort:rate:{%s/v1|%s}" % (stack.llm_url, model)), model
    assert stack.stop_worker(sup) == 0


def test_jobs_waiting_for_a_models_limit_hold_no_slot(stack):
    """A model with a low limit (6 a minute: a call every 10 s) and a
    backlog, beside a model without one, in a process of 4 call slots.  A
    job waiting for its model's tokens held one of the slots, so the slow
    model's backlog took all 4 and the other model's jobs ran one per slow
    call, every 10 s.  Now the tokens come first: the other model's 8 jobs
    all reach the LLM before the slow model's third call."""
    w = stack.start_worker("--set", "llm.max_inflight=4", "--set", "ratelimit.slow-2.rpm=6", name="slots")
    stack.wait_log("slots", "assigned")
    prefix = uuid.uuid4().hex[:6]
    slow = ["rls-%s-s%d" % (prefix, i) for i in range(6)]
    fast = ["rls-%s-f%d" % (prefix, i) for i in range(8)]
    stack.produce_jobs([job(j, model="slow-2") for j in slow])
    deadline = time.time() + 30
    while not any(k.startswith("rls-%s-s" % prefix) for k in stack.llm_times()):
        assert time.time() < deadline, "no call of the slow model"
        time.sleep(0.1)
    stack.produce_jobs([job(j) for j in fast])
    stack.wait_outcomes(fast, timeout=150)
    times = stack.llm_times()
    last_fast = max(times["%s:1" % j][0][0] for j in fast)
    slow_calls = sorted(v[0][0] for k, v in times.items() if k.startswith("rls-%s-s" % prefix))
    assert len([t for t in slow_calls if t < last_fast]) <= 2, (last_fast, slow_calls)
    stack.stop_worker(w, signal.SIGKILL)


def test_calls_that_never_got_through_give_their_tokens_back(stack):
    """An LLM that refuses connections, with a tokens-per-minute limit: each
    try is let in on its estimate, and one that never reached the server
    used nothing.  Its estimate must come back, or an outage's retries
    leave the bucket owing for minutes after it (here: 4 jobs x 3 tries of
    some 600 tokens against 1,000 a second)."""
    from stack import free_port
    dead = "http://127.0.0.1:%d/v1" % free_port()
    w = stack.start_worker("--set", "llm.base_url=%s" % dead, "--set", "ratelimit.tpm=60000",
                           "--set", "llm.max_transient_retries=2", "--set", "llm.backoff_base_ms=10",
                           "--set", "llm.backoff_max_ms=20")
    ids = ["rlnet-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(4)]
    stack.produce_jobs([job(j) for j in ids])
    outs = stack.wait_outcomes(ids, timeout=90)
    assert all(m["headers"]["ce_type"] == "retort.job.escalated" for m in outs if m["value"]["job_id"] in ids)
    assert stack.worker_log(w.name).count("after 3 tries") == 4
    t = float(stack.redis_client().hget("retort:rate:{%s|mock-1}" % dead, "t"))
    # the stored level, as of the last write (the last try's refund): a
    # second's worth (1,000) again.  A try is let in only when the bucket
    # holds its estimate, so without the refunds the level after the last
    # grant was at most 1,000 - 600, and each try waited for the refill.
    assert t >= 900, t
    assert stack.stop_worker(w) == 0


def test_calls_that_never_reached_the_llm_give_their_requests_back(stack):
    """1 request a second (a burst of 1), 3 tries a job.  A request the LLM
    read and answered with nothing (the connection closed) may have been
    counted by the provider: it stays taken.  A try whose connection was
    refused sent nothing, and the provider counted nothing: its request
    goes back, or an outage's retries keep the limit's next callers, in
    every process, waiting for requests nobody made.  The refused tries
    run on the handles the answered-with-nothing ones used: what curl
    says of a handle's last transfer is of that transfer only."""
    class Nothing(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.close_connection = True  # no status line: curl's "Empty reply from server"

    r = stack.redis_client()
    with own_llm(Nothing) as base:
        w = stack.start_worker("--set", "llm.base_url=%s/v1" % base, "--set", "ratelimit.rpm=60",
                               "--set", "llm.max_inflight=1", "--set", "llm.max_transient_retries=2",
                               "--set", "llm.backoff_base_ms=10", "--set", "llm.backoff_max_ms=20")
        key = "retort:rate:{%s/v1|mock-1}" % base
        a = "rlsent-%s" % uuid.uuid4().hex[:6]
        stack.produce_jobs([job(a)])
        stack.wait_outcomes([a], timeout=60)
        # as of the third try's grant: nothing written since
        assert float(r.hget(key, "r")) < 0.5, r.hgetall(key)
    b = "rlunsent-%s" % uuid.uuid4().hex[:6]  # the port is closed now
    stack.produce_jobs([job(b)])
    outs = stack.wait_outcomes([b], timeout=60)
    assert [m["headers"]["ce_type"] for m in outs if m["value"]["job_id"] in (a, b)] == \
        ["retort.job.escalated"] * 2
    assert stack.worker_log(w.name).count("after 3 tries") == 2
    # as of the last refused try: its request back, the bucket full
    assert float(r.hget(key, "r")) >= 0.99, r.hgetall(key)
    assert stack.stop_worker(w) == 0


def _script_calls(r):
    return sum(v["calls"] for k, v in r.info("commandstats").items() if k.startswith("cmdstat_eval"))


def test_jobs_waiting_for_a_limit_wait_in_line(stack):
    """500 jobs held back by a limit of 2 calls a second: only the first of
    a process's waiting jobs asks Redis, the others wait behind it.  Each
    asking on its own, they all got the same wait, woke together and asked
    again: about 1,000 scripts a second (19,000 with 2,000 jobs waiting
    for 10 a second), for a handful of calls."""
    w = stack.start_worker("--set", "llm.max_inflight=500", "--set", "ratelimit.rpm=120", name="crowd")
    ids = ["crowd-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(500)]
    stack.produce_jobs([job(j) for j in ids])
    r = stack.redis_client()
    deadline = time.time() + 30
    while len(stack.outcomes()) < 4:   # the crowd is waiting
        assert time.time() < deadline, "no job went through"
        time.sleep(0.2)
    n0, c0, t0 = len(stack.outcomes()), _script_calls(r), time.time()
    time.sleep(5)
    n1, c1, t1 = len(stack.outcomes()), _script_calls(r), time.time()
    done = n1 - n0
    assert 4 <= done <= 2 * (t1 - t0) + 3, done      # the limit holds
    # a job's own scripts (begin, finish, the published mark, its grant)
    # and one ask per wait: tens, where the crowd made thousands
    assert c1 - c0 <= 20 * (done + (t1 - t0)), (c1 - c0, done)
    stack.stop_worker(w, signal.SIGKILL)


def test_a_bucket_without_a_limit_runs_into_no_debt(stack):
    """Tokens per minute limited, requests not: the requests bucket was
    taken from all the same, one a call, with no refill (a limit of 0),
    so 400 calls left it 399 requests in debt, and a worker with a
    requests limit set later (another config, a deploy) waited that debt
    out: 4 s here at 100 calls a second, hours after a day's traffic."""
    key = "retort:rate:{%s/v1|mock-1}" % stack.llm_url
    r = stack.redis_client()
    w = stack.start_worker("--set", "ratelimit.tpm=60000000", "--set", "llm.max_inflight=200", name="tpm-only")
    ids = ["nodebt-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(400)]
    stack.produce_jobs([job(j) for j in ids])
    stack.wait_outcomes(ids, timeout=90)
    # the stored level of the bucket without a limit: full (a second's
    # worth of nothing is 1), not 1 - 400
    assert float(r.hget(key, "r")) == 1.0, r.hgetall(key)
    assert stack.stop_worker(w) == 0
    w = stack.start_worker("--set", "ratelimit.rpm=6000", "--set", "ratelimit.tpm=60000000", name="with-rpm")
    deadline = time.time() + 30
    while "assigned" not in stack.worker_log(w.name):
        assert time.time() < deadline, "the worker never joined"
        time.sleep(0.1)
    ids = ["nodebt2-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(20)]
    stack.produce_jobs([job(j) for j in ids])
    stack.wait_outcomes(ids, timeout=60)
    # 20 calls at 100 a second after a burst of 100: no wait; in debt, the
    # first waited 4 s.  The calls' own times, from their records (the
    # outcomes are read by polling, which adds its own delay), from when the
    # worker had the first job (not the produce: kcat and the fetch are slow
    # on a loaded machine).
    recs = _history(stack, ids)
    t0 = min(_wall(rec["received_at"]) for rec in recs)
    last = max(_wall(rec["finished_at"]) for rec in recs)
    assert last - t0 < 2.5, last - t0
    assert stack.stop_worker(w) == 0


def test_a_call_let_through_on_a_redis_error_takes_what_it_used(stack):
    """The limiter failing (here: the bucket's key holds a string, so the
    script errors) lets calls through without taking their estimates; at
    the end of such a call, it must take what the call used, not give the
    estimate it never took back: that refund handed other calls tokens
    that no one had returned.  The key is mended while the calls run."""
    key = "retort:rate:{%s/v1|mock-1}" % stack.llm_url
    r = stack.redis_client()
    r.set(key, "not a bucket")
    tpm = 600000                      # a second's worth: 10,000 tokens
    w = stack.start_worker("--set", "ratelimit.tpm=%d" % tpm, name="rl-broken")
    ids = ["rlerr-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(3)]
    stack.produce_jobs([job(j, directive="latency_ms=2500") for j in ids])
    deadline = time.time() + 30
    while sum(v for k, v in stack.llm_stats()["calls"].items() if k.rsplit(":", 1)[0] in ids) < 3:
        assert time.time() < deadline, "the calls were held back"
        time.sleep(0.05)
    assert r.type(key) == "string"   # every call was let through on the error
    r.delete(key)
    outs = stack.wait_outcomes(ids, timeout=60)
    used = [m["value"]["usage"]["total_tokens"] for m in outs if m["value"]["job_id"] in ids]
    assert len(used) == 3 and min(used) > 0
    # the stored level, as of the last settle: the full bucket less what
    # the last call used (the calls end together: at most a little
    # refill between them).  Refunding estimates left it full.
    t = float(r.hget(key, "t"))
    assert t <= tpm / 60 - min(used), (t, used)
    assert stack.stop_worker(w) == 0


def test_a_refused_account_holds_its_model_under_pause(stack):
    """llm.on_account_error=pause: a spent quota (OpenAI's 429
    insufficient_quota), then a refused key (401), hold the model's calls
    instead of escalating every job.  While the account is refused the
    worker tries one call a pause (here 1 s), not one a job; once one goes
    through every held job is called and ends final at attempt 1.  A held
    job whose deadline passes escalates as budget, without a call after
    it, and a stop lets the held jobs go at once, for the next worker.
    Before, the option did not exist (the worker refused to start), and
    each job escalated at its first call."""
    mode = {"v": "quota"}
    calls = []  # (time, job id, what was answered)

    class Account(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            m = mode["v"]
            calls.append((time.monotonic(), self.headers["X-Retort-Job-Id"], m))
            if m == "quota":
                send_json(self, 429, {"error": {
                    "message": "You exceeded your current quota, please check your plan and billing details.",
                    "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}},
                    headers=[("Retry-After", "20")])
            elif m == "auth":
                send_json(self, 401, {"error": {"message": "Incorrect API key provided.",
                                                "type": "invalid_request_error", "code": "invalid_api_key"}})
            else:
                send_json(self, 200, chat_completion(json.dumps({"name": "x"})))

    with own_llm(Account) as url:
        port = free_port()
        w = stack.start_worker("--set", "llm.base_url=%s/v1" % url,
                               "--set", "llm.on_account_error=pause", "--set", "llm.account_pause_ms=1000",
                               "--set", "llm.max_inflight=16", "--set", "metrics.port=%d" % port,
                               "--set", "metrics.host=127.0.0.1")
        wait_metrics(port, w)
        tag = uuid.uuid4().hex[:6]
        schema = {"type": "object", "required": ["name"]}
        ids = ["acct-%s-%d" % (tag, i) for i in range(10)]
        late = "acct-%s-deadline" % tag
        deadline = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=4)).isoformat()
        stack.produce_jobs([job(j, schema=schema) for j in ids] + [job(late, schema=schema, deadline=deadline)])

        def wait_for(cond, timeout=30):
            end = time.time() + timeout
            while not cond():
                assert time.time() < end, calls
                time.sleep(0.05)

        wait_for(lambda: {c[1] for c in calls} >= set(ids + [late]))  # every job called once
        t0 = time.monotonic()
        time.sleep(6)
        window = [c for c in calls if c[0] > t0 + 0.5]
        # one try a pause (1 s) at most, where each job's retries would be 11 calls in a burst
        assert 2 <= len(window) <= 7, [(round(c[0] - t0, 2), c[1]) for c in calls]
        samples = scrape_metrics(port)[0]
        model = next(lab for name, lab in samples if name == "retort_llm_held")
        assert samples[("retort_llm_held", model)] == 1
        assert samples[("retort_llm_account_holds_total", ())] >= 11
        # the deadline job ended as budget, held; the others wait
        escs = [m["value"] for m in stack.consume("retort.escalations") if m["value"]["job_id"] in ids + [late]]
        assert [(e["job_id"], e["category"]) for e in escs] == [(late, "budget")], escs
        assert not [c for c in calls if c[1] == late and c[0] > t0 + 4.5]
        assert not [m for m in stack.consume("retort.final") if m["value"]["job_id"] in ids]

        mode["v"] = "ok"
        stack.wait_outcomes(ids, timeout=30)
        finals = [m["value"] for m in stack.consume("retort.final") if m["value"]["job_id"] in ids]
        assert sorted(f["job_id"] for f in finals) == sorted(ids)
        assert all(f["attempts"] == 1 for f in finals), finals
        samples = settle_metrics(port, lambda m: m.get(("retort_llm_held", model)) == 0)[0]
        assert samples[("retort_llm_held", model)] == 0

        # a refused key holds the same way, and the same answer frees it
        mode["v"] = "auth"
        keyed = ["acct-key-%s-%d" % (tag, i) for i in range(3)]
        n0 = len(calls)
        stack.produce_jobs([job(j, schema=schema) for j in keyed])
        wait_for(lambda: any(c[1] in keyed for c in calls[n0:]))
        time.sleep(2.5)
        assert scrape_metrics(port)[0][("retort_llm_held", model)] == 1
        assert not [m for m in stack.consume("retort.final") + stack.consume("retort.escalations")
                    if m["value"]["job_id"] in keyed]
        mode["v"] = "ok"
        stack.wait_outcomes(keyed, timeout=30)
        finals = [m["value"] for m in stack.consume("retort.final") if m["value"]["job_id"] in keyed]
        assert sorted(f["job_id"] for f in finals) == sorted(keyed) and all(f["attempts"] == 1 for f in finals)

        # a stop while held: the held jobs go at once, uncommitted, rather
        # than hold the drain for its 30 s; the next worker ends them
        mode["v"] = "quota"
        parked = ["acct-stop-%s-%d" % (tag, i) for i in range(3)]
        n0 = len(calls)
        stack.produce_jobs([job(j, schema=schema) for j in parked])
        wait_for(lambda: {c[1] for c in calls[n0:]} >= set(parked))
        assert stack.stop_worker(w, timeout=20) == 0
        log = stack.worker_log(w.name)
        assert "drain timeout" not in log and "; 0 jobs unfinished" in log, log
        assert log.count("the account's quota or credit is spent") == 2, log
        assert log.count("the API key is refused") == 1, log
        assert log.count("answered again: its held calls go on") == 2, log
        assert "concurrency limit" not in log  # the quota's 429s are no rate limit
        mode["v"] = "ok"
        w2 = stack.start_worker("--set", "llm.base_url=%s/v1" % url,
                                "--set", "llm.on_account_error=pause")
        stack.wait_outcomes(parked, timeout=60)
        finals = [m["value"] for m in stack.consume("retort.final") if m["value"]["job_id"] in parked]
        assert sorted(f["job_id"] for f in finals) == sorted(parked) and all(f["attempts"] == 1 for f in finals)
        assert stack.stop_worker(w2) == 0


def spent_slowly(inflight):
    """An LLM whose account's quota is spent, answering after 1.5 s; the
    job ids of the calls it is answering are in inflight."""
    class Spent(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            inflight.append(self.headers["X-Retort-Job-Id"])
            time.sleep(1.5)
            send_json(self, 429, {"error": {"message": "You exceeded your current quota.",
                                            "type": "insufficient_quota", "code": "insufficient_quota"}})
            inflight.remove(self.headers["X-Retort-Job-Id"])
    return Spent


def test_a_stop_before_the_hold_lets_the_refused_jobs_go(stack):
    """A stop while the first calls are out, before any was refused: the
    jobs waiting for their calls go at the stop (no call starts after it).
    When the calls come back refused and hold the lane, their jobs go too,
    rather than one a pause (here the default, 60 s) as probes, past the
    drain's 30 s."""
    inflight = []
    with own_llm(spent_slowly(inflight)) as url:
        w = stack.start_worker("--set", "llm.base_url=%s/v1" % url, "--set", "llm.on_account_error=pause",
                               "--set", "llm.max_inflight=4", "--set", "worker.max_jobs=40")
        stack.wait_log(w.name, "assigned")
        ids = ["pre-hold-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(20)]
        stack.produce_jobs([job(j, schema={"type": "object"}) for j in ids])
        deadline = time.time() + 20
        while len(inflight) < 4:
            assert time.time() < deadline, inflight
            time.sleep(0.02)
        assert "its calls are held" not in stack.worker_log(w.name)
        assert stack.stop_worker(w, timeout=20) == 0
        log = stack.worker_log(w.name)
        assert "its calls are held" in log and "drain timeout" not in log and "; 0 jobs unfinished" in log, log
        assert not [m for m in stack.consume("retort.final") + stack.consume("retort.escalations")
                    if m["value"]["job_id"] in ids]


def test_a_held_model_with_rate_limits_ends_deadlines_and_stops_at_once(stack):
    """Under llm.on_account_error=pause with shared rate limits, most of a
    held model's jobs wait in its rate queue, which moves only as jobs
    leave the gate: a job's deadline there ends it when it comes (it
    waited behind the hold), and a stop while the one probe is out lets
    every waiting job go, the probe's too when it comes back refused,
    instead of waiting out the drain (30 s)."""
    inflight = []
    with own_llm(spent_slowly(inflight)) as url:
        w = stack.start_worker("--set", "llm.base_url=%s/v1" % url, "--set", "llm.on_account_error=pause",
                               "--set", "llm.account_pause_ms=1000", "--set", "ratelimit.rpm=6000",
                               "--set", "llm.max_inflight=4", "--set", "worker.max_jobs=40")
        stack.wait_log(w.name, "assigned")
        tag = uuid.uuid4().hex[:6]
        schema = {"type": "object"}
        ids = ["held-rl-%s-%d" % (tag, i) for i in range(20)]
        late = "held-rl-%s-deadline" % tag
        stack.produce_jobs([job(j, schema=schema) for j in ids])
        stack.wait_log(w.name, "its calls are held")
        soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=3)
        stack.produce_jobs([job(late, schema=schema, deadline=soon.isoformat())])
        outs = stack.wait_outcomes([late], timeout=30)
        ended = [m["value"] for m in outs if m["value"]["job_id"] == late][0]
        assert ended["category"] == "budget", ended
        done = datetime.datetime.fromisoformat(ended["finished_at"].replace("Z", "+00:00"))
        # behind the hold, its turn would have come a pause per job ahead of it, long after
        assert (done - soon).total_seconds() < 4, (done - soon).total_seconds()
        # a stop while the probe is out
        deadline = time.time() + 10
        while not inflight:
            assert time.time() < deadline
            time.sleep(0.02)
        assert stack.stop_worker(w, timeout=20) == 0
        log = stack.worker_log(w.name)
        assert "drain timeout" not in log and "; 0 jobs unfinished" in log, log
        assert not [m for m in stack.consume("retort.final") + stack.consume("retort.escalations")
                    if m["value"]["job_id"] in ids]


def test_a_stop_lets_the_whole_rate_queue_go(stack):
    """At the stop every job in a rate queue goes, the one that comes to its
    head while the others go too.  Here H waits at the head of the queue
    (1 request a minute, taken by X's call); X, answered 503, backs off and
    queues behind H.  Letting H go made X the head, which asked Redis,
    was told to wait for the next minute's token, and held the drain
    until its timeout (30 s), where it goes now with H."""
    w = stack.start_worker("--set", "ratelimit.rpm=1", "--set", "llm.backoff_base_ms=100",
                           "--set", "llm.backoff_max_ms=200")
    x, h = "rq-x-%s" % uuid.uuid4().hex[:6], "rq-h-%s" % uuid.uuid4().hex[:6]
    stack.produce_jobs([job(x, directive="http=503 times=1 latency_ms=1500")])
    stack.wait_called(x)
    stack.produce_jobs([job(h)])
    stack.wait_log(w.name, "again in")  # X's 503: its backoff, then the queue behind H
    time.sleep(1)
    assert stack.llm_stats()["calls"].get(h + ":1") is None
    assert stack.stop_worker(w, timeout=20) == 0
    log = stack.worker_log(w.name)
    assert "drain timeout" not in log and "; 0 jobs unfinished" in log, log
    assert stack.llm_stats()["calls"].get(x + ":1") == 1 and stack.llm_stats()["calls"].get(h + ":1") is None
    assert not [m for m in stack.outcomes() if m["value"]["job_id"] in (x, h)]


def test_a_call_let_in_and_never_made_gives_its_request_back(stack):
    """2 requests a second (a burst of 2) and 1 call at a time: A is let in
    and called, B is let in and waits at the gate.  A stop lets B go before
    its call: the request it took goes back to the shared bucket (the
    provider never saw it), where it stayed taken, and the limit's next
    caller, in any process, waited for it."""
    w = stack.start_worker("--set", "ratelimit.rpm=120", "--set", "llm.max_inflight=1")
    a, b = "unused-a-%s" % uuid.uuid4().hex[:6], "unused-b-%s" % uuid.uuid4().hex[:6]
    stack.produce_jobs([job(a, directive="latency_ms=4000")])
    stack.wait_called(a)
    stack.produce_jobs([job(b, directive="latency_ms=4000")])
    r = stack.redis_client()
    deadline = time.time() + 30
    while r.hget("retort:job:{%s}" % b, "status") != "running":  # B claimed: its ask follows at once
        assert time.time() < deadline, "B was never claimed"
        time.sleep(0.02)
    time.sleep(0.5)
    key = "retort:rate:{%s/v1|mock-1}" % stack.llm_url
    before = r.hgetall(key)  # as of B's grant, the bucket's last write (no tpm: no settling)
    assert stack.stop_worker(w) == 0
    assert stack.llm_stats()["calls"].get(b + ":1") is None
    after = r.hgetall(key)
    # B's request back (with the refill since its grant), where nothing
    # was written after the grant
    assert int(after["ts"]) > int(before["ts"]), (before, after)
    assert float(after["r"]) >= float(before["r"]) + 0.9, (before, after)

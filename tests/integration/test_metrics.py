"""/metrics (Prometheus text format, parsed), /healthz and /readyz."""
import os
import socket
import time
import urllib.error
import urllib.request
import uuid

from stack import free_port, job, jobs_gone, scrape_metrics as scrape, settle_metrics, wait_metrics


def get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_and_health(stack):
    port = free_port()
    w = stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1")
    wait_metrics(port, w)
    assert get(port, "/healthz") == (200, "ok\n")
    # HEAD: the headers alone (a body after them was read as the next answer)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while True:
            part = c.recv(4096)
            if not part:
                break
            answer += part
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"\r\nContent-Length: 3\r\n" in answer, answer
    assert answer.endswith(b"\r\n\r\n"), answer
    ids = ["m-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(12)]
    jobs = [job(j) for j in ids[:8]] + [job(j, directive="defect=wrong_type until=1") for j in ids[8:11]] + \
           [job(ids[11], directive="defect=refusal")]
    stack.produce_jobs(jobs)
    stack.wait_outcomes(ids)
    s, types = settle_metrics(port, lambda s: jobs_gone(s) and
                              s.get(("retort_jobs_total", (("outcome", "final"),))) == 11 and
                              s.get(("retort_jobs_total", (("outcome", "escalated"),))) == 1)
    assert types["retort_jobs_total"] == "counter" and types["retort_llm_latency_seconds"] == "histogram"
    assert s[("retort_jobs_total", (("outcome", "final"),))] == 11
    assert s[("retort_jobs_total", (("outcome", "retry"),))] == 3
    assert s[("retort_jobs_total", (("outcome", "escalated"),))] == 1
    assert s[("retort_attempts_total", ())] == 15
    assert s[("retort_violations_total", (("code", "WRONG_TYPE"),))] == 3
    assert s[("retort_violations_total", (("code", "REFUSAL"),))] == 1
    assert s[("retort_llm_calls_total", (("provider", "openai"), ("status_class", "2xx")))] == 15
    assert s[("retort_llm_latency_seconds_count", ())] == 15
    assert s[("retort_llm_latency_seconds_bucket", (("le", "+Inf"),))] == 15
    assert s[("retort_inflight_jobs", ())] == 0
    # every message went out whole at the first try
    for name in ("retort_produce_failures_total", "retort_messages_cut_total"):
        assert types[name] == "counter"
        for outcome in ("final", "retry", "escalated", "dead_letter"):
            assert s[(name, (("outcome", outcome),))] == 0
    assert not any("job_id" in dict(labels) for (_, labels) in s)
    status, body = get(port, "/readyz")
    assert status == 200 and "redis ok" in body
    stack.stop_redis()
    deadline = time.time() + 10
    while True:
        status, body = get(port, "/readyz")
        if status != 200 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert status == 503 and "redis down" in body
    assert get(port, "/nope")[0] == 404


def test_worker_holds_more_jobs_than_calls(stack):
    """llm.max_inflight caps the LLM calls; the worker holds a quarter more
    jobs (worker.max_jobs), so that Redis, validation and producing never
    leave a call slot idle.  Both gauges show it, and every job still ends
    once."""
    for max_jobs, want_jobs in ((None, 5), (7, 7)):
        port = free_port()
        args = ["--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1",
                "--set", "llm.max_inflight=4"]
        if max_jobs:
            args += ["--set", "worker.max_jobs=%d" % max_jobs]
        w = stack.start_worker(*args)
        ids = ["mj-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(16)]
        stack.llm_reset()
        stack.produce_jobs([job(j, directive="latency_ms=1200") for j in ids])
        calls_max = jobs_max = 0
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                s, _ = scrape(port)
            except OSError:
                time.sleep(0.05)
                continue
            calls_max = max(calls_max, s[("retort_llm_inflight_calls", ())])
            jobs_max = max(jobs_max, s[("retort_inflight_jobs", ())])
            if s.get(("retort_jobs_total", (("outcome", "final"),)), 0) >= len(ids):
                break
            time.sleep(0.05)
        stack.wait_outcomes(ids)
        # the gauges are sampled: they show the bounds were reached; the
        # mock's exact peak shows the calls never passed theirs
        llm_peak = stack.wait_llm_idle(len(ids))["peak_in_flight"]
        assert calls_max == 4 and llm_peak == 4, (calls_max, llm_peak)
        assert jobs_max == want_jobs, (jobs_max, want_jobs)
        s, _ = scrape(port)
        assert s[("retort_llm_inflight_calls", ())] == 0 and s[("retort_inflight_jobs", ())] == 0
        assert stack.stop_worker(w) == 0


def test_idle_connections_to_the_metrics_port_are_closed(stack):
    """Connections to /metrics that sent nothing stayed open for good, each
    holding a descriptor: enough of them (half-open peers over weeks, a
    scan) left none for the LLM calls.  A request must come within 5 s,
    and past 64 open the oldest is closed to make room: a scrape still
    gets through 200 idle ones."""
    port = free_port()
    w = stack.start_worker("--set", "metrics.port=%d" % port, "--set", "metrics.host=127.0.0.1")
    wait_metrics(port, w)

    def fds():
        """The worker's descriptors for sockets on the metrics port (its
        Kafka and Redis connections come and go on their own meanwhile)."""
        inodes = set()
        for fd in os.listdir("/proc/%d/fd" % w.pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (w.pid, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
        n = 0
        with open("/proc/%d/net/tcp" % w.pid) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].split(":")[1], 16) == port and fields[9] in inodes:
                    n += 1
        return n
    deadline = time.time() + 10
    while scrape(port)[0][("retort_up", (("dependency", "redis"),))] != 1:
        assert time.time() < deadline, "no Redis"
        time.sleep(0.05)
    # then the listening socket alone: the worker closes each scrape's
    # connection, though maybe a moment after the scraper saw its answer
    while True:
        base = fds()
        if base == 1:
            break
        assert time.time() < deadline, base
        time.sleep(0.05)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
    opened = time.time()
    samples, _ = scrape(port)          # served, with 200 idle ones opened before it
    assert samples[("retort_up", (("dependency", "redis"),))] == 1
    assert fds() <= base + 64 + 2, (fds(), base)
    t0 = time.time()
    last = idle[-1]
    last.settimeout(15)
    assert last.recv(1) == b""                 # closed by the worker, unasked
    # not at once (it is the newest), but 5 s after it came in
    assert time.time() - opened > 3 and time.time() - t0 < 12
    for s in idle:
        s.close()
    assert stack.stop_worker(w) == 0

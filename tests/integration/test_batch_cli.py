"""The batch commands against the real stack: retort submit, watch, results,
resubmit and report, checked against the events the workers produced, the
mock LLM's call counts and Redis."""
import base64
import collections
import errno
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

from stack import BUILD, Stack, failed

# RETORT_BIN: another build of retort (a control run against an older commit)
RETORT = os.environ.get("RETORT_BIN", os.path.join(BUILD, "retort"))

# One job of each kind every ten lines: the kinds are known from the input
# alone, so every count below has an expected value independent of Retort.
KINDS = {
    "ok": None,                                  # valid at once
    "fix": "defect=wrong_type until=1",          # invalid, fixed on attempt 2
    "never": "defect=wrong_type",                # invalid 3 times: escalated
    "refusal": "defect=refusal",                 # escalated at once
}
PATTERN = ["ok", "fix", "ok", "never", "ok", "refusal", "fix", "ok", "never", "never"]


def kinds(n=30):
    return [PATTERN[i % len(PATTERN)] for i in range(n)]


def write_jobs(stack, n=30, name="jobs.jsonl", with_ids=False, extra_lines=()):
    """A JSONL file of n jobs (some with their own job_id when with_ids);
    returns (path, kinds)."""
    ks = kinds(n)
    path = os.path.join(stack.dir, name)
    with open(path, "w") as f:
        for i, k in enumerate(ks):
            prompt = "Describe product %d." % i
            if KINDS[k]:
                prompt += " [[mock %s]]" % KINDS[k]
            j = {"schema": "product.v1", "prompt": prompt, "metadata": {"i": i}}
            if with_ids and i % 3 == 0:
                j["job_id"] = "own-%s-%d" % (os.path.basename(stack.dir), i)
            f.write(json.dumps(j) + "\n")
            if i == 4:
                f.write("\n")  # a blank line is allowed
        for line in extra_lines:
            f.write(line + "\n")
    return path, ks


def retort(stack, *args, timeout=120, **kw):
    return subprocess.run([RETORT] + list(args) + ["-c", stack.config_path], capture_output=True,
                          text=True, timeout=timeout, **kw)


def submit(stack, path, *args):
    p = retort(stack, "submit", path, *args)
    assert p.returncode == 0, p.stderr
    m = re.match(r"batch (\S+): submitted (\d+) job\(s\) to retort.jobs$", p.stdout.strip())
    assert m, p.stdout
    return m.group(1), int(m.group(2))


def batch_ids(stack, batch):
    return stack.redis_client().lrange("retort:batch:{%s}:jobs" % batch, 0, -1)


def wait_done(stack, batch, timeout=120):
    """Waits with watch itself (plain mode) and returns its output lines."""
    p = retort(stack, "watch", batch, "--interval", "0.2", timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def latest_outcomes(stack, ids):
    """job id -> its latest outcome event (final or escalation), by the
    order of production per job."""
    want = set(ids)
    out = {}
    for m in stack.consume("retort.final") + stack.consume("retort.escalations"):
        v = m["value"]
        if v and v["job_id"] in want:
            prev = out.get(v["job_id"])
            if prev is None or v["finished_at"] >= prev["finished_at"]:
                out[v["job_id"]] = dict(v, _type=m["headers"]["ce_type"])
    return out


def event_run(m):
    """The run an outcome event belongs to (its id ends ":rN" past run 1)."""
    run = re.search(r":r(\d+)$", m["headers"]["ce_id"])
    return int(run.group(1)) if run else 1


def wait_latest_outcomes(stack, ids, run=1, timeout=60):
    """latest_outcomes once every job of ids has an outcome event of its
    run (run: a number for all, or {job id: run}).  watch ends on the
    batch's counters, which the worker writes with the job's record,
    before it produces the event."""
    want = run if isinstance(run, dict) else {j: run for j in ids}
    deadline = time.time() + timeout
    while True:
        got = {(m["value"]["job_id"], event_run(m))
               for m in stack.consume("retort.final") + stack.consume("retort.escalations") if m["value"]}
        missing = [j for j in ids if (j, want[j]) not in got]
        if not missing:
            return latest_outcomes(stack, ids)
        assert time.time() < deadline, "no outcome event of the run waited for: %s" % [
            (j, want[j]) for j in missing[:5]]
        time.sleep(0.2)


def run_batch(stack, n=30, **kw):
    stack.start_worker()
    path, ks = write_jobs(stack, n, **kw)
    batch, count = submit(stack, path)
    assert count == n
    lines = wait_done(stack, batch)
    return batch, ks, lines


# ---- submit ----------------------------------------------------------------

def test_submit_produces_every_line_in_order(stack):
    path, ks = write_jobs(stack, 12, with_ids=True)
    p = retort(stack, "submit", path, "--batch", "mine-1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "batch mine-1: submitted 12 job(s) to retort.jobs"
    r = stack.redis_client()
    ids = batch_ids(stack, "mine-1")
    # generated ids carry the batch id and the line number (line 6 is blank)
    expected = []
    for i in range(12):
        line = i + 1 + (1 if i > 4 else 0)
        expected.append("own-%s-%d" % (os.path.basename(stack.dir), i) if i % 3 == 0 else "mine-1-%06d" % line)
    assert ids == expected
    msgs = [m for m in stack.consume("retort.jobs")]
    assert sorted(m["key"] for m in msgs) == sorted(ids)
    by_id = {m["key"]: m["value"] for m in msgs}
    for i, jid in enumerate(ids):
        job = by_id[jid]
        assert job["job_id"] == jid and job["batch_id"] == "mine-1" and job["metadata"] == {"i": i}
        assert json.loads(r.hget("retort:batch:{mine-1}:input", jid)) == job
    h = r.hgetall("retort:batch:{mine-1}")
    assert h["total"] == "12" and int(h["created"]) > 0
    for key in ("retort:batch:{mine-1}", "retort:batch:{mine-1}:jobs", "retort:batch:{mine-1}:input"):
        assert 0 < r.ttl(key) <= 604800
    # the same batch id twice is refused and produces nothing more
    p = retort(stack, "submit", path, "--batch", "mine-1")
    assert p.returncode == 2 and "exists already" in p.stderr
    assert len(stack.consume("retort.jobs")) == 12


def test_numbers_go_out_as_they_were_written(stack):
    """Numbers a double cannot hold (more digits than 17, 1e400) or would
    print differently (1e2, 0.10) reach every output exactly as written:
    the job's metadata in the events, the model's answer in the final
    event, the attempt record and `retort results`.  Read as cJSON reads
    numbers, 12345678901234567890 went out as 1.2345678901234567e+19
    and 1e400 as null."""
    answer = ('{"name": "Bulk order", "sku": "ABC-1234", "price": 99999.12345678901234567,\n'
              ' "currency": "USD", "category": "toys", "in_stock": true, "tags": ["bulk"],\n'
              ' "dimensions": {"width_cm": 1e2, "height_cm": 0.10, "depth_cm": 12345678901234567890}}')
    b64 = base64.b64encode(answer.encode()).decode().rstrip("=")
    out_min = re.sub(r"\s+(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$)", "", answer)  # white space outside strings
    meta = '{"order_id": 12345678901234567890, "big": 1e400, "ratio": 0.1000}'
    path = os.path.join(stack.dir, "numbers.jsonl")
    with open(path, "w") as f:
        f.write('{"job_id": "num-1", "schema": "product.v1", "prompt": "Bulk. [[mock answer_b64=%s]]", '
                '"metadata": %s}\n' % (b64, meta))
    stack.start_worker()
    batch, n = submit(stack, path, "--batch", "numbers")
    assert n == 1
    wait_done(stack, batch)
    stack.wait_outcomes(["num-1"])  # Redis says final before Kafka has the event
    (fin,) = [m for m in stack.consume("retort.final") if m["key"] == "num-1"]
    raw = fin["payload"]
    assert '"metadata":{"order_id":12345678901234567890,"big":1e400,"ratio":0.1000}' in raw, raw
    assert '"output":%s' % out_min in raw, raw
    rec = stack.redis_client().lindex("retort:job:{num-1}:history", -1)
    assert '"value":%s' % out_min in rec, rec
    out = os.path.join(stack.dir, "numbers.out.jsonl")
    p = retort(stack, "results", batch, "-o", out)
    assert p.returncode == 0, p.stderr
    assert open(out).read() == '{"job_id":"num-1","output":%s,"attempts":1}\n' % out_min


def test_submit_generates_a_batch_id(stack):
    path, _ = write_jobs(stack, 3)
    batch, n = submit(stack, path)
    assert n == 3 and re.match(r"^b\d{8}-\d{6}-[0-9a-f]{6}$", batch)
    assert batch_ids(stack, batch) == ["%s-%06d" % (batch, i) for i in (1, 2, 3)]
    # from standard input, another batch id
    with open(path) as f:
        p = retort(stack, "submit", "-", stdin=f)
    assert p.returncode == 0, p.stderr
    other = p.stdout.split()[1].rstrip(":")
    assert other != batch and len(batch_ids(stack, other)) == 3
    assert len(stack.consume("retort.jobs")) == 6


def test_malformed_line_produces_nothing(stack):
    path, _ = write_jobs(stack, 5, extra_lines=['{"schema": "product.v1", "prompt": "x"}', "[1, 2]",
                                                '{"schema": "product.v1", "prompt": ',
                                                '{"schema": "product.v1", "prompt": "ab\\u0000cd"}',
                                                '{"schema": "product.v1", "prompt": "ab\\\\u0000cd"}'])
    p = retort(stack, "submit", path, "--batch", "bad")
    assert p.returncode == 2
    # lines 1-5 are jobs, line 6 blank, 7 a job, 8 an array, 9 cut JSON,
    # 10 a prompt with a NUL (cJSON would cut it to "ab"), 11 a prompt with
    # the text \u0000 (an escaped backslash): a job
    assert "%s:8: not a JSON object" % path in p.stderr
    assert "%s:9: not a JSON object (not JSON)" % path in p.stderr
    assert "%s:10: a string holds \\u0000 (the NUL character), which is not accepted (column 39)" % path in p.stderr
    assert ":7:" not in p.stderr and ":11:" not in p.stderr
    assert "nothing submitted" in p.stderr
    assert stack.consume("retort.jobs") == []
    assert stack.redis_client().keys("retort:batch:*") == []


def test_invalid_jobs_are_refused(stack):
    path = os.path.join(stack.dir, "bad.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"job_id": "a", "schema": "product.v1", "prompt": "x"}) + "\n")
        f.write(json.dumps({"job_id": "a", "schema": "product.v1", "prompt": "y"}) + "\n")
        f.write(json.dumps({"schema": "product.v1"}) + "\n")              # neither prompt nor messages
        f.write(json.dumps({"job_id": "x y", "schema": "product.v1", "prompt": "z"}) + "\n")
        # a second batch_id took the job to another batch, which then
        # never completed; a second job_id ran the job under another id
        f.write('{"job_id": "d1", "schema": "product.v1", "prompt": "x", "batch_id": "x", "batch_id": "y"}\n')
        f.write('{"job_id": null, "schema": "product.v1", "prompt": "x", "job_id": "zz"}\n')
        # the pattern lets it by, the worker's reading does not: a dead letter
        f.write(json.dumps({"job_id": "d3", "schema": "product.v1", "prompt": "x",
                            "deadline": "2026-02-30T00:00:00Z"}) + "\n")
    p = retort(stack, "submit", path)
    assert p.returncode == 2
    assert "%s:2: job_id a repeats line 1" % path in p.stderr
    assert "%s:3: job " % path in p.stderr and "not a valid job" in p.stderr
    assert "%s:4: job_id must be" % path in p.stderr
    assert '%s:5: member "batch_id" appears more than once' % path in p.stderr
    assert '%s:6: member "job_id" appears more than once' % path in p.stderr
    assert ("%s:7: job d3 is not a valid job: /deadline: '2026-02-30T00:00:00Z' is not an RFC 3339 date-time"
            % path) in p.stderr
    assert stack.consume("retort.jobs") == []


def test_submit_refuses_job_ids_with_state(stack):
    r = stack.redis_client()
    r.hset("retort:job:{taken}", mapping={"status": "final", "attempt": 1})
    path = os.path.join(stack.dir, "taken.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"job_id": "taken", "schema": "product.v1", "prompt": "x"}) + "\n")
    p = retort(stack, "submit", path)
    assert p.returncode == 2 and "job taken (line 1) has state in Redis already (status final)" in p.stderr
    assert stack.consume("retort.jobs") == []


def test_connection_errors(stack):
    path, _ = write_jobs(stack, 2)
    # no broker: nothing produced, nothing left in Redis, exit 2 quickly
    t0 = time.time()
    p = retort(stack, "submit", path, "--batch", "nobroker", "-b", "127.0.0.1:1",
               "--set", "kafka.message.timeout.ms=3000", timeout=60)
    assert p.returncode == 2 and "kafka" in p.stderr and "nothing submitted" in p.stderr
    assert time.time() - t0 < 30
    assert stack.redis_client().keys("retort:batch:*") == []
    # no Redis
    for cmd in (["watch", "x"], ["results", "x", "-o", os.path.join(stack.dir, "o.jsonl")], ["report", "x"],
                ["resubmit", "x", "--escalated"], ["submit", path]):
        p = retort(stack, *cmd, "--set", "redis.port=1")
        assert p.returncode == 2 and "redis 127.0.0.1:1" in p.stderr, (cmd, p.stderr)


def test_usage_errors(stack):
    cases = [(["submit"], "which file"),
             (["watch"], "which batch"),
             (["results", "b"], "-o OUT.jsonl"),
             (["resubmit", "b"], "--escalated"),
             (["resubmit", "b", "--escalated", "--max-attempts", "0"], "--max-attempts"),
             (["report", "b", "--threshold", "2"], "--threshold"),
             (["watch", "b", "--interval", "x"], "--interval"),
             (["report", "b", "--bogus"], "unknown option '--bogus'"),
             (["report", "b", "--set", "nope.key=1"], "unknown config key 'nope.key'")]
    for args, msg in cases:
        p = retort(stack, *args)
        assert p.returncode == 2 and msg in p.stderr, (args, p.returncode, p.stderr)
    p = retort(stack, "report", "--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: retort report")


def test_unknown_batch(stack):
    out = os.path.join(stack.dir, "out.jsonl")
    for args in (["watch", "nope"], ["watch", "nope", "--once"], ["results", "nope", "-o", out],
                 ["report", "nope"], ["report", "nope", "--json"], ["resubmit", "nope", "--escalated"]):
        p = retort(stack, *args)
        assert p.returncode == 1 and "unknown batch nope" in p.stderr, (args, p.stderr)
    assert not os.path.exists(out)


# ---- watch -----------------------------------------------------------------

def plain_numbers(line):
    m = re.search(r"batch \S+: (\d+)/(\d+) done \(([\d.]+)%\), final (\d+), escalated (\d+), retries (\d+)", line)
    assert m, line
    return [float(x) if "." in x else int(x) for x in m.groups()]


def test_watch_plain_lines_through_a_pipe(stack):
    stack.start_worker()
    path, ks = write_jobs(stack, 30)
    batch, _ = submit(stack, path)
    lines = wait_done(stack, batch)
    assert lines and not any("\r" in l or "\033" in l for l in lines)
    nums = [plain_numbers(l) for l in lines]
    # done never goes back, each line adds up, and the last one is complete
    assert [n[0] for n in nums] == sorted(n[0] for n in nums)
    for done, total, pct, final, esc, retries in nums:
        assert total == 30 and done == final + esc
    c = collections.Counter(ks)
    assert nums[-1] == [30, 30, 100.0, c["ok"] + c["fix"], c["never"] + c["refusal"],
                        c["fix"] + 2 * c["never"]]
    assert re.search(r", complete in \d+s$", lines[-1])
    # --once on a complete batch: one line, exit 0
    p = retort(stack, "watch", batch, "--once")
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 1 and "30/30" in p.stdout


def test_watch_before_the_workers(stack):
    path, _ = write_jobs(stack, 5)
    batch, _ = submit(stack, path)
    p = retort(stack, "watch", batch, "--once")
    assert p.returncode == 1 and "0/5 done (0.0%), final 0, escalated 0, retries 0, -- jobs/s, ETA --" in p.stdout
    # it waits until interrupted, printing a line per interval
    proc = subprocess.Popen([RETORT, "watch", batch, "--interval", "0.2", "-c", stack.config_path],
                            stdout=subprocess.PIPE, text=True)
    first = []
    try:
        deadline = time.time() + 30
        while len(first) < 4 and time.time() < deadline:
            r, _, _ = select.select([proc.stdout], [], [], 1)
            if r:
                line = proc.stdout.readline()
                if not line:
                    break
                first.append(line)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGINT
    lines = first + out.splitlines(True)
    assert len(lines) >= 4 and all("0/5 done" in l for l in lines), lines


def read_pty(master, proc, timeout):
    out = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError as e:  # EIO once the child closed the terminal
                if e.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out.decode()


def watch_on_a_terminal(stack, batch, cols, *args, timeout=120):
    """Runs watch with its stdout on a pseudo-terminal of cols columns;
    returns (exit code, output with the terminal's CR LF made LF)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, cols, 0, 0))
    proc = subprocess.Popen([RETORT, "watch", batch, "-c", stack.config_path] + list(args),
                            stdin=slave, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    try:
        out = read_pty(master, proc, timeout)
        rc = proc.wait(10)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return rc, out.replace("\r\n", "\n")


def test_watch_redraws_a_bar_on_a_terminal(stack):
    stack.start_worker()
    path, ks = write_jobs(stack, 30)
    batch, _ = submit(stack, path)
    rc, out = watch_on_a_terminal(stack, batch, 120, "--interval", "0.1")
    assert rc == 0, out
    frames = out.split("\r")[1:]
    # redrawn in place: several frames, each cleared to the end of the
    # line; one line only (the newline comes once, after the last frame)
    assert len(frames) >= 4, out
    assert all(f.count("\033[K") == 1 for f in frames)
    assert out.endswith("\n") and out.count("\n") == 1
    last = frames[-1].replace("\033[K", "").strip()
    c = collections.Counter(ks)
    final, esc = c["ok"] + c["fix"], c["never"] + c["refusal"]
    assert re.match(r"^\[(#+)(x+)\] 30/30 100\.0%% \| final %d \| retries %d \| escalated %d \| [\d.]+ jobs/s \| "
                    r"complete in \d+s$" % (final, c["fix"] + 2 * c["never"], esc), last), last
    # the bar: finals as #, escalations as x, in proportion
    bar = re.match(r"^\[(#+)(x+)\]", last)
    width = len(bar.group(1) + bar.group(2))
    assert 10 <= width <= 40 and len(bar.group(1)) == width * final // 30
    # earlier frames were progress, not yet complete, with an ETA or no rate yet
    early = [f for f in frames[:-1] if "30/30" not in f]
    assert early and all(re.search(r"\| ETA (--|\d+s)", f) for f in early)
    assert all(len(f.replace("\033[K", "").rstrip("\n")) <= 119 for f in frames)

    # a narrow terminal: short labels, still one line that fits
    rc, out = watch_on_a_terminal(stack, batch, 60, "--once")
    line = out.replace("\033[K", "").strip("\r\n")
    assert rc == 0 and len(line) <= 59 and "30/30 100.0%% f%d r%d e%d" % (
        final, c["fix"] + 2 * c["never"], esc) in line, line


# ---- results ---------------------------------------------------------------

def test_results_in_input_order_split_by_outcome(stack):
    batch, ks, _ = run_batch(stack, with_ids=True)
    ids = batch_ids(stack, batch)
    events = wait_latest_outcomes(stack, ids)
    assert set(events) == set(ids)
    out = os.path.join(stack.dir, "out.jsonl")
    p = retort(stack, "results", batch, "-o", out)
    assert p.returncode == 0, p.stderr
    errs = os.path.join(stack.dir, "out.errors.jsonl")
    finals = [json.loads(l) for l in open(out)]
    escs = [json.loads(l) for l in open(errs)]
    want_final = [j for j in ids if events[j]["_type"] == "retort.job.final"]
    want_esc = [j for j in ids if events[j]["_type"] == "retort.job.escalated"]
    # input order, joined by job id, the split the events say
    assert [f["job_id"] for f in finals] == want_final
    assert [e["job_id"] for e in escs] == want_esc
    assert len(want_final) == sum(k in ("ok", "fix") for k in ks)
    for f in finals:
        ev = events[f["job_id"]]
        assert set(f) == {"job_id", "output", "attempts"}
        assert f["output"] == ev["output"] and f["attempts"] == ev["attempts"]
    for e in escs:
        ev = events[e["job_id"]]
        assert set(e) == {"job_id", "reason", "category", "attempts", "violations"}
        assert (e["reason"], e["category"], e["attempts"], e["violations"]) == \
               (ev["reason"], ev["category"], ev["attempts"], ev["violations"])
    assert p.stdout.strip() == "batch %s: %d final -> %s, %d escalated -> %s" % (
        batch, len(finals), out, len(escs), errs)
    # an explicit errors file
    errs2 = os.path.join(stack.dir, "e2.jsonl")
    p = retort(stack, "results", batch, "-o", os.path.join(stack.dir, "o2.jsonl"), "--errors", errs2)
    assert p.returncode == 0 and open(errs2).read() == open(errs).read()


def test_results_counts_unfinished_jobs(stack):
    path, _ = write_jobs(stack, 6)
    batch, _ = submit(stack, path)
    out = os.path.join(stack.dir, "early.jsonl")
    p = retort(stack, "results", batch, "-o", out)
    assert p.returncode == 1
    assert "6 of 6 job(s) not finished yet (0 running or retrying, 6 not started or expired)" in p.stderr
    assert open(out).read() == "" and open(os.path.join(stack.dir, "early.errors.jsonl")).read() == ""
    # a job in flight counts as running
    r = stack.redis_client()
    r.hset("retort:job:{%s}" % batch_ids(stack, batch)[0], mapping={"status": "running", "attempt": 1})
    p = retort(stack, "results", batch, "-o", out)
    assert p.returncode == 1 and "(1 running or retrying, 5 not started or expired)" in p.stderr


# ---- report ----------------------------------------------------------------

def expected_report(ids, events):
    """The report's numbers computed from the outcome events alone."""
    finals = [events[j] for j in ids if events[j]["_type"] == "retort.job.final"]
    escs = [events[j] for j in ids if events[j]["_type"] == "retort.job.escalated"]
    hist = collections.Counter(str(e["attempts"]) for e in finals + escs)
    codes = collections.Counter()
    for e in finals:
        for s in e["summary"]:
            codes.update(s["codes"])
    repeated = collections.Counter()
    for e in escs:
        for h in e["history"]:
            codes.update(v["code"] for v in h["violations"])
        per = collections.Counter()
        for h in e["history"]:
            per.update({(v["code"], v["path"]) for v in h["violations"]})
        repeated.update(k for k, n in per.items() if n >= 2)
    for e in finals:  # a final job has at most one invalid attempt here
        assert sum(1 for s in e["summary"] if s["codes"]) <= 1
    run = best = 0
    for j in ids:
        run = run + 1 if events[j]["_type"] == "retort.job.escalated" else 0
        best = max(best, run)
    usage = [e["usage"] for e in finals + escs]
    return {
        "final": len(finals), "escalated": len(escs),
        "success_rate": len(finals) / (len(finals) + len(escs)),
        "hist": dict(hist), "codes": dict(codes),
        "reasons": dict(collections.Counter(e["reason"] for e in escs)),
        "categories": dict(collections.Counter(e["category"] for e in escs)),
        "repeated": {"%s %s" % k: n for k, n in repeated.items()},
        "longest_run": best,
        "prompt": sum(u["prompt_tokens"] for u in usage),
        "completion": sum(u["completion_tokens"] for u in usage),
    }


def check_report(rep, exp, threshold=0.9):
    assert rep["final"] == exp["final"] and rep["escalated"] == exp["escalated"]
    assert rep["unfinished"] == 0 and rep["finished"] == rep["total"]
    assert rep["success_rate"] == pytest.approx(exp["success_rate"])
    assert rep["attempts_histogram"] == exp["hist"]
    assert {c["code"]: c["count"] for c in rep["top_violation_codes"]} == exp["codes"]
    assert {c["reason"]: c["count"] for c in rep["escalation_reasons"]} == exp["reasons"]
    assert {c["category"]: c["count"] for c in rep["escalation_categories"]} == exp["categories"]
    rv = rep["failure_patterns"]["repeated_violation"]
    assert {"%s %s" % (t["code"], t["path"]): t["jobs"] for t in rv["top"]} == exp["repeated"]
    assert rep["failure_patterns"]["longest_escalated_run"]["length"] == exp["longest_run"]
    assert rep["below_threshold"] == (exp["success_rate"] < threshold)


def test_report_matches_the_events(stack):
    batch, ks, _ = run_batch(stack)
    ids = batch_ids(stack, batch)
    events = wait_latest_outcomes(stack, ids)
    exp = expected_report(ids, events)
    c = collections.Counter(ks)
    # and what the input mix implies
    assert exp["final"] == c["ok"] + c["fix"] and exp["escalated"] == c["never"] + c["refusal"]
    assert exp["hist"] == {"1": c["ok"] + c["refusal"], "2": c["fix"], "3": c["never"]}
    assert exp["longest_run"] == 2  # "never", "never" at the end of each ten
    p = retort(stack, "report", batch, "--json", "--set", "pricing.mock-1.input=2.5",
               "--set", "pricing.mock-1.output=10")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    check_report(rep, exp)
    assert rep["attempts_histogram_by_outcome"] == {
        "final": {"1": c["ok"], "2": c["fix"]}, "escalated": {"1": c["refusal"], "3": c["never"]}}
    assert rep["tokens"]["prompt"] == exp["prompt"] and rep["tokens"]["completion"] == exp["completion"]
    assert rep["cost_usd"] == pytest.approx((exp["prompt"] * 2.5 + exp["completion"] * 10) / 1e6)
    assert rep["models"][0]["model"] == "mock-1" and rep["unpriced_models"] == []
    assert rep["warnings"] and "under the threshold of 90.0%" in rep["warnings"][0]
    run = rep["failure_patterns"]["longest_escalated_run"]
    assert ids[run["start"] - 1] == run["first_job_id"] and ids[run["end"] - 1] == run["last_job_id"]
    # the same batch counters as the workers kept
    h = stack.redis_client().hgetall("retort:batch:{%s}" % batch)
    assert int(h["prompt_tokens"]) == exp["prompt"] and int(h["attempts"]) == rep["attempts_recorded"]

    # the human form carries the same numbers
    p = retort(stack, "report", batch, "--set", "pricing.mock-1.input=2.5", "--set", "pricing.mock-1.output=10")
    assert p.returncode == 0
    text = p.stdout
    assert "success rate: %.1f%% (%d of %d finished jobs)" % (exp["success_rate"] * 100, exp["final"], 30) in text
    assert "WARNING: success rate" in text
    for code, n in exp["codes"].items():
        assert re.search(r"^\s+%d  %s$" % (n, code), text, re.M), (code, text)
    for a, n in exp["hist"].items():
        assert re.search(r"^\s+%s\s+%d\s" % (a, n), text, re.M), text
    assert "longest run of consecutive escalated jobs (input order): 2" in text
    # a lower threshold: no warning
    rep = json.loads(retort(stack, "report", batch, "--json", "--threshold", "0.5").stdout)
    assert rep["warnings"] == [] and rep["below_threshold"] is False
    assert rep["cost_usd"] is None and rep["unpriced_models"] == ["mock-1"]


# ---- resubmit --------------------------------------------------------------

def test_resubmit_again_after_a_reset_whose_run_never_began(stack):
    """A resubmit that reset a job but could not deliver it leaves the job
    'resubmitted' (run 2, nothing begun): the next resubmit produces it
    again as run 3, without counting it twice on the batch."""
    batch, ks, _ = run_batch(stack, n=10)
    ids = batch_ids(stack, batch)
    escalated = [j for j in ids if wait_latest_outcomes(stack, ids)[j]["_type"] == "retort.job.escalated"]
    lost = escalated[0]
    r = stack.redis_client()
    # as the reset script leaves it; the batch counted it as resubmitted
    r.delete("retort:job:{%s}" % lost, "retort:job:{%s}:history" % lost)
    r.hset("retort:job:{%s}" % lost, mapping={"run": 2, "status": "resubmitted"})
    r.hincrby("retort:batch:{%s}" % batch, "escalated", -1)
    r.hincrby("retort:batch:{%s}" % batch, "resubmitted", 1)
    p = retort(stack, "resubmit", batch, "--escalated", "--max-attempts", "1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "batch %s: resubmitted %d escalated job(s) with max_attempts 1" % (
        batch, len(escalated))
    wait_done(stack, batch)
    wait_latest_outcomes(stack, escalated, dict({j: 2 for j in escalated}, **{lost: 3}))
    runs = {m["value"]["job_id"]: m["value"]["run"] for m in stack.consume("retort.jobs")
            if m["value"] and "run" in m["value"]}
    assert runs == dict({j: 2 for j in escalated}, **{lost: 3}), runs
    esc = [m["headers"]["ce_id"] for m in stack.consume("retort.escalations") if m["value"]["job_id"] == lost]
    assert esc[-1] == "%s:1:escalated:r3" % lost, esc
    h = r.hgetall("retort:batch:{%s}" % batch)
    assert int(h["resubmitted"]) == len(escalated) and int(h["escalated"]) == len(escalated)


def test_resubmit_reruns_exactly_the_escalated_jobs(stack):
    batch, ks, _ = run_batch(stack)
    ids = batch_ids(stack, batch)
    before = wait_latest_outcomes(stack, ids)
    escalated = [j for j in ids if before[j]["_type"] == "retort.job.escalated"]
    assert len(escalated) == sum(k in ("never", "refusal") for k in ks)
    calls_before = stack.llm_stats()["calls"]
    h0 = stack.redis_client().hgetall("retort:batch:{%s}" % batch)

    p = retort(stack, "resubmit", batch, "--escalated", "--max-attempts", "1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "batch %s: resubmitted %d escalated job(s) with max_attempts 1" % (
        batch, len(escalated))
    lines = wait_done(stack, batch)
    assert plain_numbers(lines[-1])[:5] == [30, 30, 100.0, 30 - len(escalated), len(escalated)]

    # the LLM saw one more attempt 1 of every escalated job, nothing else
    calls = stack.llm_stats()["calls"]
    for j in ids:
        for a in (1, 2, 3):
            key = "%s:%d" % (j, a)
            extra = 1 if (j in escalated and a == 1) else 0
            assert calls.get(key, 0) == calls_before.get(key, 0) + extra, key
    # re-produced from the input with the new max_attempts
    resent = [m["value"] for m in stack.consume("retort.jobs")
              if m["value"] and m["value"].get("max_attempts") == 1]
    assert sorted(v["job_id"] for v in resent) == sorted(escalated)
    assert all("attempt" not in v and v["batch_id"] == batch and v["run"] == 2 for v in resent)
    # they escalate again, now after one attempt; the batch accounts for them
    after = wait_latest_outcomes(stack, ids, dict({j: 1 for j in ids}, **{j: 2 for j in escalated}))
    for j in escalated:
        assert after[j]["_type"] == "retort.job.escalated" and after[j]["attempts"] == 1
    r = stack.redis_client()
    h = r.hgetall("retort:batch:{%s}" % batch)
    assert int(h["final"]) + int(h["escalated"]) == 30 and int(h["escalated"]) == len(escalated)
    assert int(h["resubmitted"]) == len(escalated)
    assert int(h["attempts"]) == int(h0["attempts"]) + len(escalated)
    out = os.path.join(stack.dir, "after.jsonl")
    assert retort(stack, "results", batch, "-o", out).returncode == 0
    errs = [json.loads(l) for l in open(os.path.join(stack.dir, "after.errors.jsonl"))]
    assert [e["job_id"] for e in errs] == escalated and all(e["attempts"] == 1 for e in errs)

    # the report: the current runs, and every token ever spent
    rep = json.loads(retort(stack, "report", batch, "--json").stdout)
    check_report(rep, expected_report(ids, after))
    replaced = sum(before[j]["attempts"] for j in escalated)
    assert rep["replaced_by_resubmit"]["attempts"] == replaced
    assert rep["attempts_recorded"] + replaced == int(h["attempts"])
    assert rep["tokens"]["prompt"] == int(h["prompt_tokens"])
    assert rep["tokens"]["completion"] == int(h["completion_tokens"])
    assert rep["models"][0]["attempts"] == int(h["attempts"])

    # again, with the jobs' own max_attempts: the same jobs, never a final one
    finals_calls = {k: v for k, v in stack.llm_stats()["calls"].items() if k.rsplit(":", 1)[0] not in escalated}
    p = retort(stack, "resubmit", batch, "--escalated")
    assert p.returncode == 0
    assert p.stdout.strip() == "batch %s: resubmitted %d escalated job(s)" % (batch, len(escalated))
    wait_done(stack, batch)
    calls = stack.llm_stats()["calls"]
    assert {k: v for k, v in calls.items() if k.rsplit(":", 1)[0] not in escalated} == finals_calls
    after2 = wait_latest_outcomes(stack, ids, dict({j: 1 for j in ids}, **{j: 3 for j in escalated}))
    assert all(after2[j]["attempts"] == (3 if ks[ids.index(j)] == "never" else 1) for j in escalated)

    # every run's escalation is an event of its own (CloudEvents: source +
    # id unique), the first run's id as before
    esc = [m for m in stack.consume("retort.escalations") if m["value"]["job_id"] in escalated]
    assert len(esc) == 3 * len(escalated)
    ce_ids = [m["headers"]["ce_id"] for m in esc]
    assert len(set(ce_ids)) == len(ce_ids), ce_ids
    for j in escalated:
        mine = sorted(i for i in ce_ids if i.startswith(j + ":"))
        last = 3 if ks[ids.index(j)] == "never" else 1
        assert mine == sorted(["%s:%d:escalated" % (j, last), "%s:1:escalated:r2" % j,
                               "%s:%d:escalated:r3" % (j, last)]), mine

    # a late message of an earlier run is stale: no LLM call, no event
    j = escalated[0]
    calls_before = stack.llm_stats()["calls"]
    old = [m["value"] for m in stack.consume("retort.jobs") if m["value"] and m["value"]["job_id"] == j
           and "run" not in m["value"] and "attempt" not in m["value"]][0]
    stack.produce_jobs([old])
    deadline = time.time() + 30
    while not any("stale message" in l and j in l for l in stack.worker_log("w0").splitlines()):
        assert time.time() < deadline, "the earlier run's message was not taken for stale"
        time.sleep(0.2)
    assert stack.llm_stats()["calls"] == calls_before
    assert len([m for m in stack.consume("retort.escalations") if m["value"]["job_id"] == j]) == 3


def test_resubmit_refuses_a_job_over_the_message_size(stack):
    """Resubmit checks every job against the producer's message.max.bytes
    as submit does, before any reset, with the "run" it will carry: it
    names the job and resubmits nothing.  Before, under a smaller limit
    than the submit's, it reset both jobs, produced the small one, and the
    producer refused the other: left reset, never run."""
    w = stack.start_worker()
    path = os.path.join(stack.dir, "size.jsonl")
    with open(path, "w") as f:
        for jid, pad in (("size-0", 10), ("size-1", 3000)):
            prompt = "Describe %s %s. [[mock %s]]" % (jid, "x" * pad, KINDS["refusal"])
            f.write(json.dumps({"job_id": jid, "schema": "product.v1", "prompt": prompt}) + "\n")
    submit(stack, path, "--batch", "size")
    wait_done(stack, "size")
    stack.stop_worker(w)
    r = stack.redis_client()
    ids = ("size-0", "size-1")
    assert [r.hget("retort:job:{%s}" % j, "status") for j in ids] == ["escalated"] * 2
    # the job as submitted, with its key; produced again it gains ,"run":2 (8 bytes)
    size = len(r.hget("retort:batch:{size}:input", "size-1").encode()) + len("size-1")
    h0 = r.hgetall("retort:batch:{size}")
    n0 = len(stack.consume("retort.jobs"))

    def refused(limit):
        p = retort(stack, "resubmit", "size", "--escalated", "--set", "kafka.message.max.bytes=%d" % limit)
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert ("job size-1, as run 2, would be %d bytes with its key, over the %d a message may hold "
                "(kafka.message.max.bytes less 64)" % (size + 8, limit - 64)) in p.stderr, p.stderr
        assert "size-0" not in p.stderr and "1 job(s) too large for a message: nothing resubmitted" in p.stderr
        assert len(stack.consume("retort.jobs")) == n0
        assert [r.hget("retort:job:{%s}" % j, "status") for j in ids] == ["escalated"] * 2
        assert r.hgetall("retort:batch:{size}") == h0

    refused(2000)
    refused(size + 64 + 7)    # it fits as it was, not with its run
    # a byte more and both go, as run 2
    p = retort(stack, "resubmit", "size", "--escalated", "--set", "kafka.message.max.bytes=%d" % (size + 64 + 8))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "batch size: resubmitted 2 escalated job(s)"
    runs = sorted((m["key"], m["value"]["run"]) for m in stack.consume("retort.jobs") if "run" in m["value"])
    assert runs == [("size-0", 2), ("size-1", 2)], runs

# ---- status ------------------------------------------------------------------

def test_status_prints_text_fields_as_text(stack):
    """Only the hash's counters and times are numbers: a batch id 0x1F or
    007 stays the text it is (strtod made them 31 and 7)."""
    r = stack.redis_client()
    for batch in ("0x1F", "007", "1e3"):
        key = "retort:job:{st-%s}" % batch
        r.hset(key, mapping={"status": "final", "attempt": 2, "max_attempts": 3, "run": 2, "batch_id": batch,
                             "prompt_tokens": 10, "completion_tokens": 5, "created": 1700000000000,
                             "updated": 1700000000500, "recorded": 2, "published": 2})
        p = retort(stack, "status", "st-%s" % batch)
        assert p.returncode == 0, p.stderr
        st = json.loads(p.stdout)
        assert st["batch_id"] == batch and st["status"] == "final", st
        assert (st["attempt"], st["max_attempts"], st["run"], st["prompt_tokens"], st["completion_tokens"],
                st["created"], st["updated"], st["recorded"], st["published"]) == \
            (2, 3, 2, 10, 5, 1700000000000, 1700000000500, 2, 2), st


def test_status_reports_auth_and_select_errors(stack):
    """A SELECT or AUTH that fails is an error: the job was looked up in db
    0 instead, and found there."""
    stack.redis_client().hset("retort:job:{st-db}", mapping={"status": "final", "attempt": 1})
    p = retort(stack, "status", "st-db")
    assert p.returncode == 0, p.stderr
    p = retort(stack, "status", "st-db", "--set", "redis.db=20")
    assert p.returncode == 2 and "redis SELECT" in p.stderr and p.stdout == "", (p.stdout, p.stderr)
    p = retort(stack, "status", "st-db", "--set", "redis.password=wrong")
    assert p.returncode == 2 and "redis AUTH" in p.stderr and p.stdout == "", (p.stdout, p.stderr)


def test_submit_without_the_envelope_produces_nothing(stack):
    """The envelope schemas cannot be read (schemas.envelopes defaults to
    a relative 'schemas'): an error, not a batch of unchecked jobs."""
    path, _ = write_jobs(stack, 3)
    p = retort(stack, "submit", path, "--batch", "noenv", "--set", "schemas.envelopes=%s/none" % stack.dir)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "schemas.envelopes" in p.stderr and "nothing submitted" in p.stderr, p.stderr
    assert stack.consume("retort.jobs") == []
    assert stack.redis_client().keys("retort:batch:*") == []


def test_submit_refuses_a_line_over_the_message_size(stack):
    """A job the producer would refuse (key + job over message.max.bytes)
    is a bad line: nothing is produced.  Before, the jobs ahead of it went
    out and the batch could never complete."""
    path = os.path.join(stack.dir, "big.jsonl")
    with open(path, "w") as f:
        for i in range(5):
            prompt = "x" * (3000 if i == 2 else 10)
            f.write(json.dumps({"job_id": "big-%d" % i, "schema": "product.v1", "prompt": prompt}) + "\n")
    p = retort(stack, "submit", path, "--batch", "big", "--set", "kafka.message.max.bytes=2000")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "%s:3: job big-2 is " % path in p.stderr and "kafka.message.max.bytes" in p.stderr, p.stderr
    assert ":1:" not in p.stderr and ":4:" not in p.stderr
    assert "nothing submitted" in p.stderr
    assert stack.consume("retort.jobs") == []
    assert stack.redis_client().keys("retort:batch:*") == []
    # under the limit, the same jobs go
    batch, n = submit(stack, path, "--batch", "big2", "--set", "kafka.message.max.bytes=4000")
    assert n == 5 and len(stack.consume("retort.jobs")) == 5


@pytest.fixture
def control_stack(request):
    """A stack whose broker takes commands (mock-kafka --control)."""
    s = Stack(kafka_control=True)
    yield s
    s.close(keep=failed(request))


def failed_submit(stack, ids, batch, errors):
    """Submits ids as batch, one message per produce request
    (queue.buffering.max.messages=1), the broker answering them errors
    (one per request, NO_ERROR for one it takes); returns (path, p)."""
    path = os.path.join(stack.dir, batch + ".jsonl")
    with open(path, "w") as f:
        for jid in ids:
            f.write(json.dumps({"job_id": jid, "schema": "product.v1", "prompt": "x"}) + "\n")
    stack.kafka_control("errors Produce " + errors)
    p = retort(stack, "submit", path, "--batch", batch, "--set", "kafka.queue.buffering.max.messages=1")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stdout == ""
    return path, p


def submit_lines(stack, path, start, batch):
    """Submits the lines of path from start on as a new batch."""
    rest = os.path.join(stack.dir, batch + ".jsonl")
    with open(path) as f, open(rest, "w") as g:
        g.writelines(f.readlines()[start:])
    return submit(stack, rest, "--batch", batch)


def assert_cut(stack, batch, ids, not_sent):
    """The batch counts ids only (in its total, list and inputs) and says
    how many jobs of its input were not sent."""
    r = stack.redis_client()
    key = "retort:batch:{%s}" % batch
    assert r.hmget(key, "total", "not_sent") == [str(len(ids)), str(not_sent)]
    assert batch_ids(stack, batch) == ids
    assert sorted(r.hkeys(key + ":input")) == sorted(ids)
    assert not r.exists(key + ":jobs:cut")
    assert 0 < r.ttl(key + ":jobs") <= 86400 * 7


def test_submit_names_the_jobs_a_failed_produce_left_out(control_stack):
    """A produce that fails mid-batch, for real: one message per produce
    request (queue.buffering.max.messages=1), the broker takes the first
    two and answers the third OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to the
    idempotent producer, which then refuses every job after it.  The
    output names each job not queued and the one not delivered, and only
    those; the two before them are in the topic.  The jobs not queued can
    be submitted again as a new batch."""
    stack = control_stack
    ids = ["fail-%d" % i for i in range(6)]
    path, p = failed_submit(stack, ids, "fail", "NO_ERROR NO_ERROR OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert "3 job(s) not queued" in p.stderr, p.stderr
    assert re.findall(r"job (\S+) not queued", p.stderr) == ids[3:], p.stderr
    # librdkafka cannot say the one refused was not written: it stays
    assert re.findall(r"job (\S+) not delivered \(may be in the topic\)\n", p.stderr) == ids[2:3], p.stderr
    assert "not written to the topic" not in p.stderr
    assert "4 of 6 job(s) of batch fail not delivered to retort.jobs" in p.stderr
    assert not any(j in p.stderr for j in ids[:2])
    assert sorted(m["key"] for m in stack.consume("retort.jobs")) == ids[:2]
    # the batch counts the jobs that went out or may have: a worker may
    # yet run the one not delivered
    assert "batch fail now counts the 3 job(s) delivered or possibly in the topic; the 3 not sent" in p.stderr
    assert "1 job(s) not delivered may be in the topic yet" in p.stderr, p.stderr
    assert_cut(stack, "fail", ids[:3], 3)
    # as the output says, the jobs not queued go as a new batch: their ids
    # are free again (they stayed the first batch's, refused for 7 days);
    # the one not delivered keeps its claim, as it may be in the topic
    r = stack.redis_client()
    assert [r.hget("retort:job:{%s}" % j, "batch_id") for j in ids] == ["fail"] * 3 + [None] * 3
    batch, n = submit_lines(stack, path, 3, "fail-rest")
    assert n == 3
    assert sorted(m["key"] for m in stack.consume("retort.jobs")) == ids[:2] + ids[3:]


def test_submit_lets_go_a_job_the_broker_did_not_write(control_stack):
    """A delivery that failed with an answer saying the message was not
    written (TOPIC_AUTHORIZATION_FAILED to the third request: librdkafka's
    RD_KAFKA_MSG_STATUS_NOT_PERSISTED; fatal to the idempotent producer,
    which refuses the jobs after it) is named so and lets its claim go
    with the jobs never queued: all four go as a new batch at once.
    Before, its id stayed the failed batch's for the state's TTL."""
    stack = control_stack
    ids = ["auth-%d" % i for i in range(6)]
    path, p = failed_submit(stack, ids, "auth", "NO_ERROR NO_ERROR TOPIC_AUTHORIZATION_FAILED")
    assert re.findall(r"job (\S+) not queued", p.stderr) == ids[3:], p.stderr
    assert re.findall(r"job (\S+) not delivered \(not written to the topic\)\n", p.stderr) == ids[2:3], p.stderr
    assert "may be in the topic" not in p.stderr, p.stderr
    assert "4 of 6 job(s) of batch auth not delivered to retort.jobs" in p.stderr, p.stderr
    assert sorted(m["key"] for m in stack.consume("retort.jobs")) == ids[:2]
    r = stack.redis_client()
    assert [r.hget("retort:job:{%s}" % j, "batch_id") for j in ids] == ["auth"] * 2 + [None] * 4
    assert_cut(stack, "auth", ids[:2], 4)
    batch, n = submit_lines(stack, path, 2, "auth-rest")
    assert n == 4
    assert sorted(m["key"] for m in stack.consume("retort.jobs")) == ids


def test_submit_keeps_a_batch_whose_only_job_may_be_in_the_topic(control_stack):
    """No job delivered, but the one refused (OUT_OF_ORDER_SEQUENCE_NUMBER
    to the first request: possibly persisted) may be in the topic: a
    worker may run it, so the batch stays and the job keeps its claim.
    Before, 'nothing submitted' let every claim go and deleted the batch
    that job would count for."""
    stack = control_stack
    ids = ["maybe-%d" % i for i in range(3)]
    path, p = failed_submit(stack, ids, "maybe", "OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert re.findall(r"job (\S+) not delivered \(may be in the topic\)\n", p.stderr) == ids[:1], p.stderr
    assert "nothing submitted" not in p.stderr, p.stderr
    assert "3 of 3 job(s) of batch maybe not delivered" in p.stderr, p.stderr
    r = stack.redis_client()
    assert [r.hget("retort:job:{%s}" % j, "batch_id") for j in ids] == ["maybe", None, None]
    assert_cut(stack, "maybe", ids[:1], 2)


@pytest.mark.parametrize("refused, errors, said", [
    ("rename", "NO_ERROR NO_ERROR MSG_SIZE_TOO_LARGE", "redis RENAME: NOPERM"),
    ("hdel", "NO_ERROR NO_ERROR TOPIC_AUTHORIZATION_FAILED", "redis: NOPERM")])
def test_a_batch_that_cannot_be_cut_keeps_its_jobs_and_their_ids(control_stack, refused, errors, said):
    """The cut's failure path: after a produce left jobs out (as in the
    tests around), Redis refuses a command of the cut's transaction (an
    ACL takes it from the submit's user): its RENAME, or each of its four
    HDELs.  The batch stays as it was: its total, list and inputs count
    all six jobs, it has no not_sent and no list is left beside it; the
    output says it cannot complete; and the jobs not sent keep their ids,
    since the batch still lists them (let go, another batch could take
    them).  Before, the ids were let go all the same, the output said to
    submit them as a new batch, and the list written for the cut stayed
    for the batch's TTL (with the HDELs refused, the DISCARD and the DEL
    after them read the refusals still unread)."""
    stack = control_stack
    r = stack.redis_client()
    r.execute_command("ACL", "SETUSER", "default", "-" + refused)
    ids = ["nocut-%d" % i for i in range(6)]
    path, p = failed_submit(stack, ids, "nocut", errors)
    assert re.findall(r"job (\S+) not delivered \(not written to the topic\)\n", p.stderr) == ids[2:3], p.stderr
    assert "batch nocut still counts the job(s) not sent, and cannot complete: " + said in p.stderr, p.stderr
    assert "the jobs not sent keep their job_id: the batch still counts them" in p.stderr, p.stderr
    assert "submit them as a new batch" not in p.stderr, p.stderr
    key = "retort:batch:{nocut}"
    assert r.hmget(key, "total", "not_sent") == ["6", None]
    assert batch_ids(stack, "nocut") == ids
    assert sorted(r.hkeys(key + ":input")) == sorted(ids)
    assert not r.exists(key + ":jobs:cut")
    assert [r.hget("retort:job:{%s}" % j, "batch_id") for j in ids] == ["nocut"] * 6


def test_a_batch_cut_by_a_failed_submit_completes(control_stack):
    """A job the broker did not write (MSG_SIZE_TOO_LARGE to the third
    request; the jobs after it are delivered) is cut from the batch: its
    total, list and inputs count the five delivered, and the batch
    completes when they end; watch, results and report say that one job
    of the input was not sent.  Before, the batch waited for it for ever
    (watch 5/6, results 'not finished yet', exit 1)."""
    stack = control_stack
    ids = ["cut-%d" % i for i in range(6)]
    sent = ids[:2] + ids[3:]
    path, p = failed_submit(stack, ids, "cut", "NO_ERROR NO_ERROR MSG_SIZE_TOO_LARGE")
    assert re.findall(r"job (\S+) not delivered \(not written to the topic\)\n", p.stderr) == ids[2:3], p.stderr
    assert "1 of 6 job(s) of batch cut not delivered" in p.stderr, p.stderr
    assert "batch cut now counts the 5 job(s) delivered or possibly in the topic; the 1 not sent" in p.stderr
    assert "may be in the topic" not in p.stderr, p.stderr
    assert sorted(m["key"] for m in stack.consume("retort.jobs")) == sorted(sent)
    assert_cut(stack, "cut", sent, 1)
    r = stack.redis_client()
    assert r.hget("retort:job:{cut-2}", "batch_id") is None
    # the cut sets the three keys' TTL anew together: the list it renames
    # over the batch's had its TTL from before the produce, and a worker
    # sets them anew only when the batch's hash has drifted a second
    pipe = r.pipeline(transaction=False)
    for k in ("retort:batch:{cut}", "retort:batch:{cut}:jobs", "retort:batch:{cut}:input"):
        pipe.pttl(k)
    pttl = pipe.execute()
    assert max(pttl) - min(pttl) <= 5 and min(pttl) > 0, pttl

    stack.start_worker()
    deadline = time.time() + 60
    while sum(int(v or 0) for v in r.hmget("retort:batch:{cut}", "final", "escalated")) < 5:
        assert time.time() < deadline, r.hgetall("retort:batch:{cut}")
        time.sleep(0.2)
    p = retort(stack, "watch", "cut", "--once")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert re.search(r" 5/5 done \(100\.0%\), final 5, escalated 0, retries 0, not sent 1, .*complete in", p.stdout)
    rc, out = watch_on_a_terminal(stack, "cut", 120, "--once")
    assert rc == 0 and "5/5 100.0% | final 5 | retries 0 | escalated 0 | not sent 1 | " in out, out
    res = os.path.join(stack.dir, "cut.out.jsonl")
    p = retort(stack, "results", "cut", "-o", res)
    assert p.returncode == 0, p.stderr
    assert "1 job(s) of the input not sent by retort submit" in p.stderr, p.stderr
    with open(res) as f:
        assert [json.loads(l)["job_id"] for l in f] == sent
    p = retort(stack, "report", "cut", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert (rep["total"], rep["final"], rep["unfinished"], rep["not_sent"]) == (5, 5, 0, 1), rep
    assert any("1 job(s) of the input not sent" in w for w in rep["warnings"]), rep
    p = retort(stack, "report", "cut")
    assert "batch cut: 5 job(s): 5 final" in p.stdout and "WARNING: 1 job(s) of the input not sent" in p.stdout

def test_batch_keys_live_as_long_as_the_batch_runs(stack):
    """The job list and the inputs get their TTL anew with the counters (a
    job's finish, a resubmit): they expired a TTL after the submit, under a
    batch still running, and results, report and resubmit lost it."""
    ttl = ["--set", "redis.ttl_s=60"]
    r = stack.redis_client()
    keys = ["retort:batch:{ttl}", "retort:batch:{ttl}:jobs", "retort:batch:{ttl}:input"]
    path, ks = write_jobs(stack, 4)   # ok, fix, ok, never
    submit(stack, path, "--batch", "ttl", *ttl)
    time.sleep(6)   # the submit's TTL is now under 54 s
    w = stack.start_worker(*ttl)
    wait_done(stack, "ttl")
    pttl = [r.pttl(k) for k in keys]
    assert all(t > 57000 for t in pttl), pttl
    stack.stop_worker(w)
    time.sleep(6)
    p = retort(stack, "resubmit", "ttl", "--escalated", "--max-attempts", "1", *ttl)
    assert p.returncode == 0, p.stderr
    pttl = [r.pttl(k) for k in keys]   # no worker: the resubmit's own
    assert all(t > 57000 for t in pttl), pttl


def test_a_second_batch_cannot_take_queued_job_ids(stack):
    """Job ids still queued for one batch (no status in Redis yet) are
    claimed by it: a second batch with them is refused and produces
    nothing.  Before, the second batch was submitted, never completed (its
    jobs ran as the first's) and its results were the first's."""
    r = stack.redis_client()
    path = os.path.join(stack.dir, "ids.jsonl")
    with open(path, "w") as f:
        for jid, k in (("dup-0", "ok"), ("dup-1", "refusal"), ("dup-2", "ok")):
            prompt = "Describe %s." % jid + (" [[mock %s]]" % KINDS[k] if KINDS[k] else "")
            f.write(json.dumps({"job_id": jid, "schema": "product.v1", "prompt": prompt}) + "\n")
    submit(stack, path, "--batch", "first")
    # the same ids, and one new one, while the first batch waits in the topic
    path2 = os.path.join(stack.dir, "ids2.jsonl")
    with open(path) as f, open(path2, "w") as g:
        g.write(f.read() + json.dumps({"job_id": "dup-new", "schema": "product.v1", "prompt": "x"}) + "\n")
    p = retort(stack, "submit", path2, "--batch", "second")
    assert p.returncode == 2, (p.stdout, p.stderr)
    for i in range(3):
        assert "job dup-%d (line %d) belongs to batch first" % (i, i + 1) in p.stderr, p.stderr
    assert "dup-new" not in p.stderr and "nothing submitted" in p.stderr
    assert len(stack.consume("retort.jobs")) == 3
    assert r.keys("retort:batch:{second}*") == []
    assert r.exists("retort:job:{dup-new}") == 0                 # its claim let go
    assert r.hget("retort:job:{dup-0}", "batch_id") == "first"  # the first's kept
    assert 0 < r.ttl("retort:job:{dup-0}") <= 86400 * 7

    stack.start_worker()
    wait_done(stack, "first")
    p = retort(stack, "results", "second", "-o", os.path.join(stack.dir, "second.jsonl"))
    assert p.returncode == 1 and "unknown batch second" in p.stderr
    p = retort(stack, "results", "first", "-o", os.path.join(stack.dir, "first.jsonl"))
    assert p.returncode == 0, p.stderr
    with open(os.path.join(stack.dir, "first.jsonl")) as f:
        assert [json.loads(l)["job_id"] for l in f] == ["dup-0", "dup-2"]


def test_readers_skip_another_batchs_jobs(stack):
    """A batch whose job ids hold another batch's state (reused before ids
    were claimed, or written by hand) gets none of it: results writes no
    line for them, report does not count them, resubmit leaves them."""
    r = stack.redis_client()
    w = stack.start_worker()
    path = os.path.join(stack.dir, "ids.jsonl")
    lines = []
    for jid, k in (("re-0", "ok"), ("re-1", "refusal")):
        prompt = "Describe %s." % jid + (" [[mock %s]]" % KINDS[k] if KINDS[k] else "")
        lines.append(json.dumps({"job_id": jid, "schema": "product.v1", "prompt": prompt}))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    submit(stack, path, "--batch", "owner")
    wait_done(stack, "owner")
    # a batch of the same ids, as an older submit left it
    r.hset("retort:batch:{reuse}", mapping={"total": 2, "created": 1})
    r.rpush("retort:batch:{reuse}:jobs", "re-0", "re-1")
    r.hset("retort:batch:{reuse}:input", mapping={"re-0": lines[0], "re-1": lines[1]})
    out = os.path.join(stack.dir, "reuse.jsonl")
    p = retort(stack, "results", "reuse", "-o", out)
    assert p.returncode == 1 and "2 of 2 job(s) hold another batch's state" in p.stderr, p.stderr
    with open(out) as f, open(os.path.join(stack.dir, "reuse.errors.jsonl")) as g:
        assert f.read() == "" and g.read() == ""
    p = retort(stack, "report", "reuse", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert (rep["final"], rep["escalated"], rep["unfinished"]) == (0, 0, 2), rep
    assert any("another batch" in w for w in rep["warnings"]), rep
    fields = ("status", "attempt", "run", "batch_id")
    before = r.hmget("retort:job:{re-1}", fields)
    assert before == ["escalated", "1", None, "owner"], before
    n = len(stack.consume("retort.jobs"))
    p = retort(stack, "resubmit", "reuse", "--escalated")
    assert p.returncode == 0 and "no escalated job to resubmit" in p.stdout, (p.stdout, p.stderr)
    assert "1 job(s) hold another batch's state" in p.stderr
    assert r.hmget("retort:job:{re-1}", fields) == before
    assert len(stack.consume("retort.jobs")) == n
    # the owner's own resubmit keeps its claim on the id (no worker to
    # write it again)
    stack.stop_worker(w)
    p = retort(stack, "resubmit", "owner", "--escalated")
    assert p.returncode == 0, p.stderr
    assert r.hget("retort:job:{re-1}", "batch_id") == "owner"


def test_job_ids_are_counted_in_characters(stack):
    """The envelope allows a job_id of 200 characters; submit counted bytes,
    and refused 200 of "é" (400 bytes) as too long."""
    ok, long_id = "\u00e9" * 200, "\u00e9" * 201
    path = os.path.join(stack.dir, "ids.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"job_id": long_id, "schema": "product.v1", "prompt": "x"}, ensure_ascii=False) + "\n")
    p = retort(stack, "submit", path)
    assert p.returncode == 2 and "%s:1: job_id must be a string of 1 to 200 characters" % path in p.stderr, p.stderr
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"job_id": ok, "schema": "product.v1", "prompt": "x"}, ensure_ascii=False) + "\n")
    batch, n = submit(stack, path)
    assert n == 1
    (m,) = stack.consume("retort.jobs")
    assert m["key"] == ok and m["value"]["job_id"] == ok and m["value"]["batch_id"] == batch
    # its claim is under its whole id
    assert stack.redis_client().hget("retort:job:{%s}" % ok, "batch_id") == batch



# ---- a submit interrupted, or whose Redis or produce fails, part way --------------

def write_ids(stack, name, ids):
    """A JSONL file of one small job per id; its path."""
    path = os.path.join(stack.dir, name)
    with open(path, "w") as f:
        for jid in ids:
            f.write(json.dumps({"job_id": jid, "schema": "product.v1", "prompt": "x"}) + "\n")
    return path


def start_submit(stack, path, batch, *args):
    return subprocess.Popen([RETORT, "submit", path, "--batch", batch, "-c", stack.config_path] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pause_in_claims(stack, proc, batch, ids, check_ttl=False, timeout=60):
    """Waits until the submit proc has claimed the first of ids for batch,
    then holds every write to Redis (CLIENT PAUSE WRITE: the submit's
    claims wait, the test's reads go on), so that what the test does next
    lands among the claims: checked, the last one's claim is not made yet.
    check_ttl: checks the batch's hash has its TTL already.  Returns the
    paused client's connection (CLIENT UNPAUSE with it)."""
    r = stack.redis_client()
    key = "retort:batch:{%s}" % batch
    deadline = time.time() + timeout
    while not r.exists("retort:job:{%s}" % ids[0]):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "no claim of %s after %d s" % (ids[0], timeout)
        time.sleep(0.002)
    r.execute_command("CLIENT", "PAUSE", 30000, "WRITE")
    assert not r.exists("retort:job:{%s}" % ids[-1]), "the claims were over before the pause"
    # created with its TTL: a submit that dies now leaves no batch for ever
    assert not check_ttl or 0 < r.ttl(key) <= 604800, r.ttl(key)
    return r


def assert_nothing_left(stack, batch):
    r = stack.redis_client()
    assert r.keys("retort:batch:{%s}*" % batch) == []
    left = r.keys("retort:job:*")
    assert left == [], (len(left), left[:5])


def test_submit_lets_go_of_its_claims_when_redis_drops_the_connection(stack):
    """Redis drops the submit's connection while it claims the job ids
    (CLIENT KILL, the claims held by CLIENT PAUSE WRITE so that the kill
    lands among them): nothing submitted, and the cleanup, on a new
    connection, lets the claims go and forgets the batch: the same file
    goes again at once, as the same batch.  Before, the batch's hash had
    no TTL, the cleanup ran on the broken connection and did nothing: the
    batch stayed for ever, the ids claimed stayed its for 7 days, and
    both a new batch of them and the same --batch were refused."""
    n = 20000
    ids = ["kill-%d" % i for i in range(n)]
    path = write_ids(stack, "kill.jsonl", ids)
    p = start_submit(stack, path, "kill")
    r = pause_in_claims(stack, p, "kill", ids, check_ttl=True)
    r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    r.execute_command("CLIENT", "UNPAUSE")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2, (out, err)
    assert "nothing submitted" in err and "could not let go" not in err, err
    assert_nothing_left(stack, "kill")
    batch, m = submit(stack, path, "--batch", "kill")
    assert m == n and len(stack.consume("retort.jobs")) == n


def test_submit_stopped_by_sigterm_while_claiming_lets_go_of_everything(stack):
    """SIGTERM while the submit claims the job ids: it stops at its next
    reply, lets the claims made go, forgets the batch, says so and ends by
    the signal.  Before, the signal killed it there: the batch stayed for
    ever and the ids claimed for 7 days."""
    n = 20000
    ids = ["term-%d" % i for i in range(n)]
    path = write_ids(stack, "term.jsonl", ids)
    p = start_submit(stack, path, "term")
    r = pause_in_claims(stack, p, "term", ids)
    p.send_signal(signal.SIGTERM)
    r.execute_command("CLIENT", "UNPAUSE")
    out, err = p.communicate(timeout=60)
    assert_nothing_left(stack, "term")
    assert p.returncode == -signal.SIGTERM, (p.returncode, out, err)
    assert "retort submit: interrupted (SIGTERM) while claiming the job ids: nothing submitted" in err, err
    assert out == ""
    assert stack.consume("retort.jobs") == []
    batch, m = submit(stack, path, "--batch", "term")
    assert m == n


def test_submit_interrupted_while_producing_cuts_the_batch_to_what_went_out(control_stack):
    """SIGINT while the jobs are produced (a slow broker: each produce
    request answered 500 ms late, 10 messages in the producer's queue),
    once 10 are in the topic:
    the submit queues no more, waits for those in flight, and cuts the
    batch to the jobs delivered, as a failed produce does: the others
    leave it (not_sent), let their ids go and are written to a file, which
    goes as a new batch at once; both batches complete.  It ends by the
    signal.  Before, the batch counted all 400 jobs and never completed,
    and their ids stayed its for 7 days."""
    stack = control_stack
    n = 400
    ids = ["int-%d" % i for i in range(n)]
    path = write_ids(stack, "int.jsonl", ids)
    # the messages are in the topic at once (kcat sees them), their
    # producer hears so 500 ms later
    stack.kafka_control("delay 1 Produce 500 60")
    p = start_submit(stack, path, "int", "--set", "kafka.queue.buffering.max.messages=10",
                     "--set", "kafka.batch.num.messages=10")
    deadline = time.time() + 60
    while len(stack.consume("retort.jobs")) < 10:
        assert p.poll() is None, p.communicate()
        assert time.time() < deadline, "fewer than 10 jobs in the topic after 60 s"
        time.sleep(0.02)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    in_topic = [m["key"] for m in stack.consume("retort.jobs")]
    assert len(set(in_topic)) == len(in_topic) and 10 <= len(in_topic) < n, len(in_topic)
    sent = [j for j in ids if j in set(in_topic)]
    rest = [j for j in ids if j not in set(in_topic)]
    assert_cut(stack, "int", sent, len(rest))
    assert p.returncode == -signal.SIGINT, (p.returncode, out, err)
    assert "retort submit: interrupted (SIGINT) while producing the jobs" in err, err
    r = stack.redis_client()
    assert all(r.hget("retort:job:{%s}" % j, "batch_id") == "int" for j in sent)
    assert not any(r.exists("retort:job:{%s}" % j) for j in rest)
    not_sent = os.path.join(stack.dir, "int.int.not_sent.jsonl")
    assert ("batch int now counts the %d job(s) delivered or possibly in the topic; the %d not sent are out of "
            "it (not_sent), written to %s" % (len(sent), len(rest), not_sent)) in err, err
    with open(not_sent) as f:
        assert [json.loads(l) for l in f] == [{"job_id": j, "schema": "product.v1", "prompt": "x"} for j in rest]
    batch, m = submit(stack, not_sent, "--batch", "int-rest")
    assert m == len(rest)
    assert sorted(m["key"] for m in stack.consume("retort.jobs")) == sorted(ids)
    stack.start_worker()
    assert plain_numbers(wait_done(stack, "int")[-1])[:2] == [len(sent)] * 2
    assert plain_numbers(wait_done(stack, "int-rest")[-1])[:2] == [len(rest)] * 2


def test_submit_says_how_to_clear_what_it_could_not_let_go(stack):
    """Redis goes away while the submit claims the job ids, for longer
    than the cleanup's tries on new connections: the output says what is
    left in Redis (the batch, the claims of up to how many ids), for how
    long, and writes the redis-cli commands that let it go, beside the
    input; once Redis is back, they do, and the same batch goes.  Before,
    the output said 'nothing submitted' only."""
    n = 20000
    ids = ["gone-%d" % i for i in range(n)]
    path = write_ids(stack, "gone.jsonl", ids)
    p = start_submit(stack, path, "gone")
    pause_in_claims(stack, p, "gone", ids)
    stack.stop_redis()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2, (out, err)
    assert "could not let go of what this submit claimed" in err, err
    m = re.search(r"left in Redis until their TTL \(redis\.ttl_s, 604800 s\) runs out: batch gone "
                  r"\(retort:batch:\{gone\}, with its :jobs and :input if stored\), and the claims of up to (\d+) "
                  r"job id\(s\), those of the first \1 job\(s\) of %s; until then submit refuses batch gone and "
                  r"those job ids" % re.escape(path), err)
    assert m and 0 < int(m.group(1)) < n, err
    release = os.path.join(stack.dir, "gone.gone.release.redis")
    assert ("to clear them once Redis answers: redis-cli -h 127.0.0.1 -p %d < %s\n" % (stack.redis_port, release)
            in err), err
    stack.start_redis()
    stack._wait_redis()
    r = stack.redis_client()
    assert r.exists("retort:batch:{gone}") and r.hget("retort:job:{gone-0}", "batch_id") == "gone"
    assert len(r.keys("retort:job:*")) <= int(m.group(1))
    # another batch's claim among them stays
    r.hset("retort:job:{gone-1}", mapping={"batch_id": "other"})
    with open(release) as f:
        cli = subprocess.run(["redis-cli", "-p", str(stack.redis_port)], stdin=f, capture_output=True, text=True,
                             timeout=120)
    assert cli.returncode == 0 and "ERR" not in cli.stdout + cli.stderr, (cli.stdout[-2000:], cli.stderr)
    assert r.keys("retort:batch:{gone}*") == [] and r.keys("retort:job:*") == ["retort:job:{gone-1}"]
    r.delete("retort:job:{gone-1}")
    batch, m = submit(stack, path, "--batch", "gone")
    assert m == n


def test_submit_writes_every_job_not_sent_to_a_file(control_stack):
    """30 of 60 jobs refused by the broker (MSG_SIZE_TOO_LARGE to every
    other request, one message each): the output names the first 20 and
    says how many more; all 30 are in a file beside the input, as jobs to
    submit (their job_id, no batch_id), which goes as a new batch.
    Before, 10 of them were named nowhere, while the output said to
    submit them as a new batch."""
    stack = control_stack
    ids = ["many-%d" % i for i in range(60)]
    path, p = failed_submit(stack, ids, "many", " ".join(["NO_ERROR", "MSG_SIZE_TOO_LARGE"] * 30))
    named = re.findall(r"job (\S+) not delivered \(not written to the topic\)\n", p.stderr)
    assert named == ids[1::2][:20], p.stderr
    assert "retort submit: ... 10 more not delivered\n" in p.stderr, p.stderr
    not_sent = os.path.join(stack.dir, "many.many.not_sent.jsonl")
    assert ("the 30 not sent are out of it (not_sent), written to %s: submit them as a new batch (retort submit %s)"
            % (not_sent, not_sent)) in p.stderr, p.stderr
    assert_cut(stack, "many", ids[0::2], 30)
    with open(not_sent) as f:
        assert [json.loads(l) for l in f] == [{"job_id": j, "schema": "product.v1", "prompt": "x"}
                                             for j in ids[1::2]]
    stack.kafka_control("clear_errors Produce")
    batch, n = submit(stack, not_sent, "--batch", "many-rest")
    assert n == 30
    assert sorted(m["key"] for m in stack.consume("retort.jobs")) == sorted(ids)


# ---- results and status, interrupted or with options first --------------------

def test_results_interrupted_leaves_no_temporary_files(stack):
    """SIGINT while results reads a batch of 100,000 jobs (its Redis held
    by CLIENT PAUSE, so that the signal lands among the reads): it removes
    the temporary files it was writing, writes no output, and ends by the
    signal.  Before, OUT.tmpPID and ERRORS.tmpPID stayed behind."""
    r = stack.redis_client()
    n = 100000
    r.hset("retort:batch:{res}", mapping={"total": n, "created": 1})
    for start in range(0, n, 10000):
        r.rpush("retort:batch:{res}:jobs", *["res-%d" % i for i in range(start, start + 10000)])
    out = os.path.join(stack.dir, "res.out.jsonl")
    p = subprocess.Popen([RETORT, "results", "res", "-o", out, "-c", stack.config_path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not any(f.startswith("res.out.jsonl.tmp") for f in os.listdir(stack.dir)):
        assert p.poll() is None, p.communicate()
        assert time.time() < deadline
        time.sleep(0.001)
    r.execute_command("CLIENT", "PAUSE", 1000, "ALL")
    assert p.poll() is None, "results was over before the pause"
    p.send_signal(signal.SIGINT)
    stdout, err = p.communicate(timeout=60)
    assert [f for f in os.listdir(stack.dir) if f.startswith("res.")] == []
    assert p.returncode == -signal.SIGINT, (p.returncode, stdout, err)
    assert "retort results: interrupted (SIGINT): %s not written" % out in err, err



def test_status_takes_its_options_anywhere(stack):
    """retort status, as the batch commands, takes its options before the
    job id too.  Before, 'retort status -c FILE JOB' was 'unknown option'."""
    stack.redis_client().hset("retort:job:{st-any}", mapping={"status": "final", "attempt": 1})
    cfg = stack.config_path
    for args in (["-c", cfg, "st-any"], ["st-any", "-c", cfg], ["--set", "redis.db=0", "-c", cfg, "st-any"]):
        p = subprocess.run([RETORT, "status"] + args, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, (args, p.stderr)
        assert json.loads(p.stdout)["status"] == "final", (args, p.stdout)
    for args, said in ((["-c", cfg], "which job?"), (["-c", cfg, "a", "b"], "unexpected argument 'b'"),
                       (["--bogus", "st-any"], "unknown option '--bogus'")):
        p = subprocess.run([RETORT, "status"] + args, capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and said in p.stderr, (args, p.returncode, p.stderr)


def test_results_to_standard_output(stack):
    """'-' for the output or the errors file is standard output, the
    summary then goes to stderr, and with -o - alone escalated jobs are
    counted, not written.  Before, -o - wrote a file named '-' (and
    '-.errors.jsonl') in the working directory."""
    r = stack.redis_client()
    r.hset("retort:batch:{so}", mapping={"total": 3, "created": 1})
    r.rpush("retort:batch:{so}:jobs", "so-1", "so-2", "so-3")
    for j, status, rec in (("so-1", "final", {"attempt": 1, "value": {"name": "a"}}),
                           ("so-2", "escalated", {"attempt": 3, "reason": "3 attempts", "category": "invalid",
                                                  "violations": [{"code": "TYPE"}]}),
                           ("so-3", "final", {"attempt": 2, "value": {"name": "c"}})):
        r.hset("retort:job:{%s}" % j, mapping={"status": status, "attempt": rec["attempt"], "batch_id": "so"})
        r.rpush("retort:job:{%s}:history" % j, json.dumps(rec))
    finals = [{"job_id": "so-1", "output": {"name": "a"}, "attempts": 1},
              {"job_id": "so-3", "output": {"name": "c"}, "attempts": 2}]
    escs = [{"job_id": "so-2", "reason": "3 attempts", "category": "invalid", "attempts": 3,
             "violations": [{"code": "TYPE"}]}]
    cwd = os.path.join(stack.dir, "cwd")
    os.mkdir(cwd)

    p = retort(stack, "results", "so", "-o", "-", cwd=cwd)
    assert p.returncode == 0, p.stderr
    assert [json.loads(l) for l in p.stdout.splitlines()] == finals
    assert "batch so: 2 final -> standard output, 1 escalated -> not written (give --errors FILE)" in p.stderr
    assert os.listdir(cwd) == []

    errs = os.path.join(stack.dir, "so.errors.jsonl")
    p = retort(stack, "results", "so", "-o", "-", "--errors", errs, cwd=cwd)
    assert p.returncode == 0, p.stderr
    assert [json.loads(l) for l in p.stdout.splitlines()] == finals
    assert [json.loads(l) for l in open(errs)] == escs
    assert "batch so: 2 final -> standard output, 1 escalated -> %s" % errs in p.stderr

    out = os.path.join(stack.dir, "so.jsonl")
    p = retort(stack, "results", "so", "-o", out, "--errors", "-", cwd=cwd)
    assert p.returncode == 0, p.stderr
    assert [json.loads(l) for l in p.stdout.splitlines()] == escs
    assert [json.loads(l) for l in open(out)] == finals
    assert os.listdir(cwd) == []

    p = retort(stack, "results", "so", "-o", "-", "--errors", "-", cwd=cwd)
    assert p.returncode == 2 and "the errors file must differ from the output file" in p.stderr
    assert p.stdout == ""


def test_results_errors_file_a_directory(stack):
    """An errors file that is a directory is refused before anything is
    written: the output stays as it was and nothing is left beside it.
    Before, the output was replaced, the errors' rename failed with a
    message naming the output, and the escalated jobs' lines were lost."""
    r = stack.redis_client()
    r.hset("retort:batch:{sd}", mapping={"total": 1, "created": 1})
    r.rpush("retort:batch:{sd}:jobs", "sd-1")
    r.hset("retort:job:{sd-1}", mapping={"status": "final", "attempt": 1, "batch_id": "sd"})
    r.rpush("retort:job:{sd-1}:history", json.dumps({"attempt": 1, "value": {"name": "a"}}))
    d = os.path.join(stack.dir, "sd")
    os.mkdir(d)
    out = os.path.join(d, "out.jsonl")
    with open(out, "w") as f:
        f.write("earlier\n")
    errdir = os.path.join(d, "errs")
    os.mkdir(errdir)
    for args in (["-o", out, "--errors", errdir], ["-o", errdir]):
        p = retort(stack, "results", "sd", *args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "retort results: %s is a directory" % errdir in p.stderr, (args, p.stderr)
        assert open(out).read() == "earlier\n"
        assert sorted(os.listdir(d)) == ["errs", "out.jsonl"] and os.listdir(errdir) == []


def test_report_prices_the_prompt_cache_apart(stack):
    """Prompt tokens read from or written to the provider's cache are
    priced apart: pricing.MODEL.cache_read / .cache_write, by default on
    Anthropic a tenth and 1.25 times the input price, elsewhere the input
    price (and the report says so).  Before, every prompt token went at
    the input price, and the cache's prices were no config key."""
    r = stack.redis_client()
    r.hset("retort:batch:{pc}", mapping={"total": 2, "created": 1})
    r.rpush("retort:batch:{pc}:jobs", "pc-1", "pc-2")
    recs = {"pc-1": {"prompt_tokens": 2109, "completion_tokens": 4, "total_tokens": 2113,
                     "cache_read_tokens": 2000, "cache_write_tokens": 100},
            "pc-2": {"prompt_tokens": 300, "completion_tokens": 10, "total_tokens": 310}}
    for j, usage in recs.items():
        r.hset("retort:job:{%s}" % j, mapping={"status": "final", "attempt": 1, "batch_id": "pc"})
        r.rpush("retort:job:{%s}:history" % j, json.dumps(
            {"attempt": 1, "outcome": "valid", "violations": [], "value": {}, "model": "claude-x", "usage": usage}))
    prices = ["--set", "pricing.claude-x.input=3", "--set", "pricing.claude-x.output=15"]

    def report(*args):
        p = retort(stack, "report", "pc", "--json", *(prices + list(args)))
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    plain = 2409 - 2000 - 100
    rep = report("--set", "llm.provider=anthropic")
    m = rep["models"][0]
    assert (m["prompt_tokens"], m["cache_read_tokens"], m["cache_write_tokens"]) == (2409, 2000, 100)
    assert rep["tokens"]["cache_read"] == 2000 and rep["tokens"]["cache_write"] == 100
    assert rep["cost_usd"] == pytest.approx((plain * 3 + 2000 * 0.3 + 100 * 3.75 + 14 * 15) / 1e6)
    assert rep["cache_priced_as_input"] == []
    # OpenAI's discount differs by model: the input price unless told
    rep = report()
    assert rep["cost_usd"] == pytest.approx((2409 * 3 + 14 * 15) / 1e6)
    assert rep["cache_priced_as_input"] == ["claude-x"]
    rep = report("--set", "pricing.claude-x.cache_read=1.5", "--set", "pricing.claude-x.cache_write=3")
    assert rep["cost_usd"] == pytest.approx((plain * 3 + 2000 * 1.5 + 100 * 3 + 14 * 15) / 1e6)
    assert rep["cache_priced_as_input"] == []
    # a price for what was read, none for what was written: the writes
    # go at the input price, and the report says so; with no writes, not
    rep = report("--set", "pricing.claude-x.cache_read=1.5")
    assert rep["cost_usd"] == pytest.approx((plain * 3 + 2000 * 1.5 + 100 * 3 + 14 * 15) / 1e6)
    assert rep["cache_priced_as_input"] == ["claude-x"]
    # the human form says it
    p = retort(stack, "report", "pc", *prices)
    assert p.returncode == 0, p.stderr
    assert "of the prompt tokens, 2000 read from the provider's prompt cache and 100 written to it" in p.stdout
    assert "cached tokens priced as input for: claude-x (set pricing.MODEL.cache_read" in p.stdout
    assert "%.4f" % ((2409 * 3 + 14 * 15) / 1e6) in p.stdout
    # a model with reads and a price for them, and no writes: nothing priced as input
    r.rpush("retort:job:{pc-2}:history", json.dumps(
        {"attempt": 2, "outcome": "valid", "violations": [], "value": {}, "model": "gpt-y",
         "usage": {"prompt_tokens": 1000, "completion_tokens": 0, "cache_read_tokens": 800}}))
    rep = report("--set", "pricing.claude-x.cache_read=1.5", "--set", "pricing.claude-x.cache_write=3",
                 "--set", "pricing.gpt-y.input=1", "--set", "pricing.gpt-y.output=1",
                 "--set", "pricing.gpt-y.cache_read=0.25")
    assert rep["cache_priced_as_input"] == []
    gpt = [m for m in rep["models"] if m["model"] == "gpt-y"][0]
    assert gpt["cost_usd"] == pytest.approx((200 * 1 + 800 * 0.25) / 1e6)


def test_report_keeps_the_cache_split_of_runs_replaced_by_resubmit(stack):
    """retort resubmit keeps what a replaced run cost on the batch, its
    history gone: the prompt tokens read from the provider's cache stay
    apart there too, and the report prices them as such.  Before, they
    went back as plain prompt tokens, at the full input price."""
    path, _ = write_jobs(stack, 2, name="cached.jsonl")
    batch, _ = submit(stack, path)
    ids = batch_ids(stack, batch)
    r = stack.redis_client()
    for j in ids:
        r.hset("retort:job:{%s}" % j, mapping={"status": "escalated", "attempt": 1, "batch_id": batch})
        r.rpush("retort:job:{%s}:history" % j, json.dumps(
            {"attempt": 1, "outcome": "invalid", "category": "invalid", "reason": "x", "violations": [],
             "model": "claude-x", "usage": {"prompt_tokens": 1100, "completion_tokens": 10,
                                            "cache_read_tokens": 1000, "cache_write_tokens": 50}}))
    r.hincrby("retort:batch:{%s}" % batch, "escalated", 2)
    p = retort(stack, "resubmit", batch, "--escalated")
    assert p.returncode == 0, p.stderr
    assert r.hget("retort:batch:{%s}" % batch, "replaced_cache_read_tokens.claude-x") == "2000"
    p = retort(stack, "report", batch, "--json", "--set", "llm.provider=anthropic",
               "--set", "pricing.claude-x.input=3", "--set", "pricing.claude-x.output=15")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["replaced_by_resubmit"]["prompt_tokens"] == 2200
    assert (rep["tokens"]["cache_read"], rep["tokens"]["cache_write"]) == (2000, 100)
    assert rep["cost_usd"] == pytest.approx((100 * 3 + 2000 * 0.3 + 100 * 3.75 + 20 * 15) / 1e6)

"""The local Retort stack for tests, the demo and the benchmark: real
redis-server, the mock Kafka broker process (librdkafka's mock cluster), the
mock LLM over HTTP and retort worker processes, all on loopback ports."""
import contextlib
import http.server
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REDIS_APPENDFSYNC = os.environ.get("STACK_REDIS_APPENDFSYNC", "always")
# STACK_KEEP_DIRS=1: every stack's directory (logs, the AOF) stays after
# close; without it, only a failed test's does
KEEP_DIRS = bool(os.environ.get("STACK_KEEP_DIRS"))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    """utime + stime of a process (all its threads), seconds; 0 once gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK
BUILD = os.path.join(REPO, "build")
TOPICS = ["retort.jobs", "retort.final", "retort.escalations", "retort.dlq"]


def build_preload(name, out_dir):
    """Builds the LD_PRELOAD shim tests/NAME.c into out_dir; its path."""
    so = os.path.join(out_dir, name + ".so")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", so, os.path.join(REPO, "tests", name + ".c"), "-ldl"],
                   check=True)
    return so


def read_heap(path, timeout=10.0):
    """The bytes the allocator counts in use in a process running
    tests/preload_heap.c with PRELOAD_HEAP_FILE=path, counted after this call
    began: the file's sequence number two past the one first seen (the count
    after that one may have begun before).  AssertionError if the count
    stopped."""
    def read():
        with open(path) as f:
            return [int(x) for x in f.read().split()]
    seq = read()[1]
    deadline = time.time() + timeout
    while True:
        got, now = read()
        if now >= seq + 2:
            return got
        assert time.time() < deadline, "the heap count stopped"
        time.sleep(0.005)


def _ephemeral_start():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(tries=20):
    """A loopback TCP port free now, for a process started next to bind.
    Picked below the ephemeral range (ip_local_port_range): bind(0) and
    every outgoing connection take their ports from that range, so one
    picked there could be taken before the process binds it."""
    top = _ephemeral_start()
    low = 20000 if top > 21000 else max(1024, top // 2)
    rng = random.SystemRandom()  # apart from a test's random.seed()
    for _ in range(tries):
        port = rng.randrange(low, top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in %d..%d after %d tries" % (low, top - 1, tries))


def kill_group(p):
    """SIGKILL to the process group p leads (Stack.start_worker starts each
    worker in its own session, so a supervisor's workers go too), or to p
    alone when it leads none; then waits for p."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        p.kill()
    p.wait()


METRICS_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (-?[0-9.e+Inf]+)$')


def scrape_metrics(port):
    """The worker's /metrics, parsed: ({(name, sorted labels): value}, {name: type})."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = METRICS_LINE.match(line)
        assert m, "not Prometheus text: %r" % line
        labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(3) or "")))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples, types


def wait_metrics(port, proc=None, timeout=30):
    """Waits until a worker started with metrics.port=port answers /metrics
    (it binds the port only after Redis, Kafka and the schemas are set up,
    which on a busy machine can take longer than a test's own produce), and
    returns the first scrape.  proc: the worker, which must not exit first."""
    deadline = time.time() + timeout
    while True:
        try:
            return scrape_metrics(port)
        except OSError:
            assert proc is None or proc.poll() is None, "the worker exited (%s) before its metrics came up" % proc.returncode
            assert time.time() < deadline, "no metrics on port %d after %d s" % (port, timeout)
            time.sleep(0.1)


def settle_metrics(port, settled, timeout=15):
    """Scrapes /metrics until settled(samples) holds or timeout seconds pass,
    and returns the last scrape: a job's counters and gauges are written at
    its delivery report, which may come just after its event can be read.
    The caller's asserts say what is wrong if it never settled."""
    deadline = time.time() + timeout
    while True:
        samples, types = scrape_metrics(port)
        if settled(samples) or time.time() > deadline:
            return samples, types
        time.sleep(0.1)


def jobs_gone(samples):
    """No job in a slot and none waiting for its delivery report."""
    return samples.get(("retort_inflight_jobs", ())) == 0 and samples.get(("retort_delivering_jobs", ())) == 0


def send_json(handler, status, obj, headers=()):
    """Answers an http.server request with obj as JSON (tests' own LLMs)."""
    out = json.dumps(obj).encode()
    handler.send_response(status)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(out)))
    handler.end_headers()
    handler.wfile.write(out)


def chat_completion(content, prompt_tokens=10, completion_tokens=5):
    """An OpenAI chat completion answering content."""
    return {"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


@contextlib.contextmanager
def own_llm(handler):
    """Serves a test's own LLM (or webhook) on a loopback port: handler, an
    http.server.BaseHTTPRequestHandler class, answers each request in a
    thread of its own, logging nothing.  Yields the base URL,
    http://127.0.0.1:PORT; on leaving, the server stops and its socket is
    closed, a request still being answered not waited for."""
    quiet = type(handler.__name__, (handler,), {"log_message": lambda self, *a: None})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), quiet)
    srv.block_on_close = False  # server_close would join a handler still running
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d" % srv.server_port
    finally:
        srv.shutdown()
        srv.server_close()


def _read_line(proc, prefix, timeout=20):
    """The rest of the first line proc prints on its stdout that starts
    with prefix.  Reads with select() and a byte at a time (what follows the
    line stays unread, for Stack.kafka_control), so a process alive but
    silent, or one that closed its stdout, fails here after timeout seconds
    or at once: it is then killed if still running, and RuntimeError says
    what happened."""
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    line = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            problem = "printed no %r line in %g s" % (prefix, timeout)
            break
        c = os.read(fd, 1)
        if not c:
            problem = "closed its stdout before a %r line" % prefix
            try:
                proc.wait(1)  # it may be exiting
            except subprocess.TimeoutExpired:
                pass
            break
        if c != b"\n":
            line += c
            continue
        text = line.decode(errors="replace").strip()
        if text.startswith(prefix):
            return text[len(prefix):].strip()
        line = b""
    alive = proc.poll() is None
    if alive:
        proc.kill()
    rc = proc.wait()
    raise RuntimeError("%s %s (%s)" % (proc.args[0], problem, "killed" if alive else "exit status %s" % rc))


class Stack:
    def __init__(self, partitions=4, llm_args=(), workdir=None, kafka_control=False, kafka_args=()):
        self.procs = []
        self.workers = []
        self.own_dir = workdir is None  # made here: close removes it
        self.dir = workdir or tempfile.mkdtemp(prefix="retort-test-")
        try:
            self.redis_port = free_port()
            self.start_redis()
            self.kafka = subprocess.Popen(
                [os.path.join(BUILD, "mock-kafka"), "--partitions", str(partitions)] +
                (["--control"] if kafka_control else []) + list(kafka_args),
                stdin=subprocess.PIPE if kafka_control else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=open(os.path.join(self.dir, "kafka.log"), "wb"))
            self.procs.append(self.kafka)
            self.bootstrap = _read_line(self.kafka, "BOOTSTRAP")
            self.llm = subprocess.Popen(
                [os.path.join(BUILD, "mock-llm"), "--port", "0"] + list(llm_args),
                stdout=subprocess.PIPE, stderr=open(os.path.join(self.dir, "llm.log"), "wb"))
            self.procs.append(self.llm)
            self.llm_url = _read_line(self.llm, "LISTENING")
            self._wait_redis(may_move=True)
            self.config_path = os.path.join(self.dir, "retort.properties")
            with open(self.config_path, "w") as f:
                f.write(self.properties())
        except BaseException:
            # the caller gets no Stack to close: stop what did start here
            # (Stack's own close: a subclass's may need what its __init__
            # had yet to set), keeping the logs
            Stack.close(self, keep=True)
            raise

    def properties(self):
        return "\n".join([
            "kafka.bootstrap.servers=%s" % self.bootstrap,
            "kafka.group.id=retort-test",
            "kafka.consumer.session.timeout.ms=6000",
            "redis.host=127.0.0.1",
            "redis.port=%d" % self.redis_port,
            "llm.base_url=%s/v1" % self.llm_url,
            "llm.model=mock-1",
            "llm.timeout_ms=5000",
            "llm.backoff_base_ms=50",
            "llm.backoff_max_ms=2000",
            "schemas.dir=%s/schemas/output" % REPO,
            "schemas.envelopes=%s/schemas" % REPO,
            "log.format=json",
            "",
        ])

    def start_redis(self):
        """redis-server with an append-only file synced on every write, as
        the state store of a production pool would run
        (STACK_REDIS_APPENDFSYNC=everysec: synced once a second)."""
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "yes", "--appendfsync", REDIS_APPENDFSYNC, "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(self.redis)

    def stop_redis(self):
        self.redis.terminate()
        self.redis.wait(10)

    def kafka_control(self, command):
        self.kafka.stdin.write((command + "\n").encode())
        self.kafka.stdin.flush()
        answer = self.kafka.stdout.readline().decode().strip()
        if not answer.startswith("OK"):
            raise RuntimeError("mock-kafka %r: %s" % (command, answer))

    def _wait_redis(self, may_move=False):
        deadline = time.time() + 10
        retries = 3 if may_move else 0
        while time.time() < deadline:
            if self.redis.poll() is not None and retries:
                # the port picked was taken meanwhile (by another
                # program, e.g. a test run alongside): another
                retries -= 1
                self.procs.remove(self.redis)
                self.redis_port = free_port()
                self.start_redis()
                continue
            try:
                with socket.create_connection(("127.0.0.1", self.redis_port), 0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    # -- workers ---------------------------------------------------------
    def start_worker(self, *args, name=None, env=None):
        """env: variables added to the worker's environment."""
        name = name or "w%d" % len(self.workers)
        log = open(os.path.join(self.dir, name + ".log"), "ab")
        # its own session: a worker with --processes N is a supervisor, and
        # close() kills its whole process group if it does not stop
        p = subprocess.Popen(
            [os.environ.get("RETORT_BIN", os.path.join(BUILD, "retort")), "worker", "-c", self.config_path,
             "--set", "worker.id=%s" % name] + list(args),
            stdout=log, stderr=log, env=dict(os.environ, OPENAI_API_KEY="sk-test-secret", **(env or {})),
            start_new_session=True)
        p.name = name
        self.workers.append(p)
        return p

    def stop_worker(self, p, sig=signal.SIGTERM, timeout=30):
        if p.poll() is None:
            p.send_signal(sig)
        return p.wait(timeout)

    def worker_log(self, name):
        with open(os.path.join(self.dir, name + ".log"), "rb") as f:
            return f.read().decode(errors="replace")

    def log_lines(self, name):
        """The JSON lines of worker name's log, parsed (a line still being
        written, without its newline yet, left out)."""
        text = self.worker_log(name)
        return [json.loads(l) for l in text[:text.rfind("\n") + 1].splitlines() if l.startswith("{")]

    def wait_log(self, name, text, count=1, timeout=30):
        """Waits until text is in worker name's log count times (the worker
        must not exit first); returns the log."""
        proc = ([p for p in self.workers if p.name == name] or [None])[-1]
        deadline = time.time() + timeout
        while True:
            log = self.worker_log(name)
            if log.count(text) >= count:
                return log
            assert proc is None or proc.poll() is None, \
                "%s exited (%s) before %r (x%d) was in its log:\n%s" % (name, proc.returncode, text, count, log[-3000:])
            assert time.time() < deadline, "no %r (x%d) in %s's log after %d s:\n%s" % (
                text, count, name, timeout, log[-3000:])
            time.sleep(0.05)

    def worker_summary(self, name):
        """The counts of a stopped worker's "stopping:" line: {"final": n,
        "retries", "escalated", "dead letters", "skipped", "unfinished"}."""
        (line,) = [l for l in self.worker_log(name).splitlines() if '"stopping: ' in l]
        text = json.loads(line)["msg"][len("stopping: "):].replace(";", ",")
        out = {}
        for part in text.split(","):
            n, what = part.strip().split(" ", 1)
            out[what.replace("jobs unfinished", "unfinished")] = int(n)
        return out

    # -- Kafka via kcat (librdkafka: the same protocol level as the mock) --
    def produce(self, topic, messages):
        """messages: list of (key, value-bytes-or-obj[, headers dict])."""
        path = os.path.join(self.dir, "produce-%s.bin" % uuid.uuid4().hex)
        with open(path, "wb") as f:
            for m in messages:
                key, value = m[0], m[1]
                if not isinstance(value, (bytes, bytearray)):
                    value = json.dumps(value).encode()
                assert b"\x1e" not in value and b"\x1f" not in value
                f.write((key or "").encode() + b"\x1f" + value + b"\x1e")
        subprocess.run(["kcat", "-P", "-b", self.bootstrap, "-t", topic, "-K", "\\x1f",
                        "-D", "\\x1e", "-l", path], check=True, timeout=60)

    def produce_jobs(self, jobs):
        self.produce("retort.jobs", [(j.get("job_id"), j) for j in jobs])

    def consume(self, topic):
        """Every message of topic so far, as dicts with headers and payload."""
        out = subprocess.run(["kcat", "-C", "-b", self.bootstrap, "-t", topic, "-o", "beginning",
                              "-e", "-J", "-q"], capture_output=True, timeout=60, check=True)
        msgs = []
        for line in out.stdout.decode().splitlines():
            if not line.strip():
                continue
            m = json.loads(line)
            try:
                m["value"] = json.loads(m["payload"]) if m.get("payload") is not None else None
            except ValueError:
                m["value"] = None
            m["headers"] = m.get("headers") or {}
            if isinstance(m["headers"], list):
                h = m["headers"]
                m["headers"] = dict(zip(h[0::2], h[1::2]))
            msgs.append(m)
        return msgs

    def outcomes(self):
        return self.consume("retort.final") + self.consume("retort.escalations")

    def wait_outcomes(self, job_ids, timeout=60):
        """Waits until every job id has a final or escalation event."""
        want = set(job_ids)
        deadline = time.time() + timeout
        while True:
            got = self.outcomes()
            done = {m["value"]["job_id"] for m in got if m["value"]}
            if want <= done:
                return got
            if time.time() > deadline:
                raise AssertionError("no outcome for %d job(s), e.g. %s" %
                                     (len(want - done), sorted(want - done)[:5]))
            time.sleep(0.3)

    def final_of(self, j, envelopes, outcomes):
        """Produces job j and returns its final event, once there,
        checked against its schema, the outcomes of its attempts being
        `outcomes` (["invalid", "valid"]: final at attempt 2); what it
        escalated with if it did not end final."""
        jid = j["job_id"]
        self.produce_jobs([j])
        self.wait_outcomes([jid])
        finals = [m["value"] for m in self.consume("retort.final") if m["value"] and m["value"]["job_id"] == jid]
        assert len(finals) == 1, [m["value"] for m in self.consume("retort.escalations")
                                  if m["value"] and m["value"]["job_id"] == jid]
        envelopes.validate("events/final.schema.json", finals[0])
        assert finals[0]["attempts"] == len(outcomes), finals[0]
        assert [s["outcome"] for s in finals[0]["summary"]] == outcomes, finals[0]["summary"]
        return finals[0]

    def reflections(self, job_id):
        """The reflections of job_id's retry jobs, by attempt."""
        return [m["value"]["reflection"] for m in self.consume("retort.jobs")
                if m["headers"].get("ce_type") == "retort.job.retry" and m["value"]["job_id"] == job_id]

    # -- mock LLM --------------------------------------------------------
    def llm_stats(self):
        with urllib.request.urlopen(self.llm_url + "/stats", timeout=5) as r:
            return json.loads(r.read())

    def llm_reset(self):
        """POST /stats/reset: the mock's counts and calls start again, and
        its peak_in_flight from the requests in flight now."""
        req = urllib.request.Request(self.llm_url + "/stats/reset", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            assert json.loads(r.read()) == {"reset": True}

    def wait_llm_idle(self, requests, timeout=60):
        """Waits until the mock LLM has received at least `requests` LLM
        requests (since its start or llm_reset) and has none in flight;
        returns its /stats then (peak_in_flight: the most it held at once,
        counted by the mock at every request, not sampled)."""
        deadline = time.time() + timeout
        while True:
            st = self.llm_stats()
            if st["requests"] >= requests and st["in_flight"] == 0:
                return st
            assert time.time() < deadline, "the mock LLM got %d of %d requests, %d in flight, after %d s" % (
                st["requests"], requests, st["in_flight"], timeout)
            time.sleep(0.1)

    def wait_called(self, jid, attempt=1, timeout=30):
        """Waits until the job's attempt has reached the mock LLM (polled
        every 20 ms: some tests act while its answer is still pending)."""
        deadline = time.time() + timeout
        while not self.llm_stats()["calls"].get("%s:%d" % (jid, attempt)):
            assert time.time() < deadline, "attempt %d of %s never called the LLM" % (attempt, jid)
            time.sleep(0.02)

    def llm_times(self):
        """When each call reached the mock LLM, by job and attempt (the
        first 4 calls of each): {"job:attempt": [(arrival, in_flight)]},
        arrival in wall-clock seconds, in_flight the LLM requests the mock
        was answering then, this one included."""
        with urllib.request.urlopen(self.llm_url + "/stats?calls=0&times=1", timeout=5) as r:
            times = json.loads(r.read())["times"]
        return {k: [(at / 1000.0, n) for at, n in v] for k, v in times.items()}

    def llm_post(self, path, body, headers=None):
        """POSTs body to the mock LLM (path: /v1/chat/completions or
        /v1/messages) and returns its answer, parsed: what it answers a
        worker's request is what it answers the same one from here (its
        answers depend on the request alone).  Without X-Retort-Job-Id the
        call is not in /stats' `calls`; it is in `requests`."""
        req = urllib.request.Request(self.llm_url + path, data=json.dumps(body).encode(), method="POST",
                                     headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    # -- Redis (plain RESP, so tests need no client for simple reads) ------
    def redis_client(self):
        import redis
        return redis.Redis(host="127.0.0.1", port=self.redis_port, decode_responses=True)

    def close(self, keep=False):
        """Stops every process; then removes the stack's directory when
        it made it, unless keep (a failed test's logs) or STACK_KEEP_DIRS."""
        for p in self.workers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.workers:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                kill_group(p)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        if self.own_dir:
            if keep or KEEP_DIRS:
                print("stack directory kept: %s" % self.dir)
            else:
                shutil.rmtree(self.dir, ignore_errors=True)


def failed(request):
    """Whether a test's call phase failed (the report conftest's hook
    keeps on the item), for fixtures deciding to keep a stack's logs."""
    rep = getattr(request.node, "rep_call", None)
    return bool(rep and rep.failed)


def job(job_id, schema="product.v1", prompt="Describe a product.", directive=None, **extra):
    if directive:
        prompt = prompt + " [[mock %s]]" % directive
    j = {"job_id": job_id, "schema": schema, "prompt": prompt}
    j.update(extra)
    return j

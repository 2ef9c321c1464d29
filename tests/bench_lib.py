"""Helpers of `make bench` (tests/bench.py): the benchmark stack (the test
stack plus outcome tails and a paced job feeder), /proc readings, the
chat-completion bodies the worker sends, and the figures computed from the
outcome events and the Redis attempt records."""
import functools
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "integration"))
from stack import BUILD, CLK_TCK, REPO, Stack, proc_cpu_s  # noqa: E402

SCHEMAS = ["product.v1", "ticket.v1", "invoice.v1"]
FETCH_WAIT_MS = int(os.environ.get("BENCH_FETCH_WAIT_MS", "5"))   # see BenchStack.properties
OUTCOME_PARTITIONING = os.environ.get("BENCH_OUTCOME_PARTITIONING", "sticky")   # likewise
INLINE_SCHEMAS = os.environ.get("BENCH_INLINE_SCHEMAS") == "1"
PROMPTS = {
    "product.v1": "Extract the product listing from: 'Lightweight trail running shoe, breathable mesh, 89.90 EUR, in stock.'",
    "ticket.v1": "Triage this support email: 'I reset my password twice and still cannot log in. I'm on the Pro plan.'",
    "invoice.v1": "Extract the invoice fields from the attached text: 'Invoice INV-004211 from Acme Corp (DE), 2026-11-02 ...'",
}
# The worker's system message (worker/job.c job_messages, schema sent as
# response_format so not repeated in the prompt).
SYSTEM = ("Respond with only one JSON value that conforms to the JSON Schema of this task, "
          "with no text or code fence around it.")
JOB_ID_RE = re.compile(rb'"job_id":"([^"]+)"')


# -- building the C floors ----------------------------------------------------

def build_tools():
    """Builds build/bench-curl and build/bench-relay through the Makefile,
    which links them with the worker's allocator (MALLOC)."""
    subprocess.run(["make", "-s", "-C", REPO, "build/bench-curl", "build/bench-relay"], check=True)


# -- /proc ----------------------------------------------------------------------

def proc_allocator(pid):
    """The malloc a process runs with (linked or LD_PRELOADed): the bench
    compares builds, and the allocator moves the worker's CPU by ~25%."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read()
    except OSError:
        return None
    for name in ("tcmalloc", "jemalloc", "mimalloc"):
        if "lib" + name in maps:
            return name
    return "glibc"


def proc_status_kb(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def machine_cpu_s():
    """(busy, steal): CPU seconds all CPUs spent busy since boot (not idle
    nor iowait; steal included), and those the hypervisor gave to someone
    else while they had work ("steal": on a shared VM the programs here
    simply stop for that long, which no local measure shows), from one
    read of /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / CLK_TCK, (v[7] / CLK_TCK if len(v) > 7 else 0.0)


def machine_busy_s():
    return machine_cpu_s()[0]


def children_cpu_s():
    """CPU seconds of this process (the bench) and its waited-for children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def proc_threads(pid):
    return proc_status_kb(pid, "Threads")


def proc_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


# -- request bodies -------------------------------------------------------------

def _strict(s, depth=0):
    """Port of worker/llm_api.c strict_walk: may the schema be sent strict."""
    if not isinstance(s, dict) or depth > 32:
        return True if isinstance(s, bool) else depth <= 32
    props = s.get("properties")
    if props is not None:
        if s.get("additionalProperties") is not False:
            return False
        req = s.get("required") or []
        for name, sub in props.items():
            if name not in req or not _strict(sub, depth + 1):
                return False
    for i, key in enumerate(("items", "$defs", "definitions", "anyOf", "allOf", "oneOf")):
        v = s.get(key)
        if v is None:
            continue
        if isinstance(v, list) or (isinstance(v, dict) and 1 <= i <= 2):
            subs = v if isinstance(v, list) else list(v.values())
            if not all(_strict(c, depth + 1) for c in subs):
                return False
        elif not _strict(v, depth + 1):
            return False
    return True


@functools.lru_cache(maxsize=None)
def load_schema(name):
    """The schema file, read once (the feeder of BENCH_INLINE_SCHEMAS=1
    puts it in every job); the dict is shared: never change it."""
    with open(os.path.join(REPO, "schemas", "output", name + ".json")) as f:
        return json.load(f)


def chat_body(schema_name, prompt, model="mock-1"):
    """The body worker/llm_api.c build_openai sends for a prompt job."""
    schema = load_schema(schema_name)
    name = re.sub(r"[^A-Za-z0-9_-]", "_", schema_name)[:64] or "output"
    body = {"model": model,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": name, "schema": schema, "strict": _strict(schema)}}}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def bodies_file(st, name, directive=""):
    """A file of the worker's request bodies, one per schema, each prompt
    followed by a mock directive."""
    path = os.path.join(st.dir, name)
    with open(path, "w") as f:
        for s in SCHEMAS:
            f.write(chat_body(s, PROMPTS[s] + directive) + "\n")
    return path


def job_doc(job_id, i, directive=None):
    schema = SCHEMAS[i % len(SCHEMAS)]
    prompt = PROMPTS[schema]
    if directive:
        prompt += " [[mock %s]]" % directive
    if INLINE_SCHEMAS:  # the same schema, sent with the job (see bench.py)
        return {"job_id": job_id, "schema": load_schema(schema), "prompt": prompt}
    return {"job_id": job_id, "schema": schema, "prompt": prompt}


# -- statistics -----------------------------------------------------------------

def slope(points):
    """Least-squares slope of y over x, or None."""
    if len(points) < 3:
        return None
    n = float(len(points))
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if not sxx:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def percentile(values, p):
    if not values:
        return None
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


def peak_overlap(intervals):
    """Largest number of [start, end] intervals open at one time."""
    ev = []
    for a, b in intervals:
        ev.append((a, 1))
        ev.append((max(a, b), -1))
    ev.sort(key=lambda e: (e[0], e[1]))   # ends before starts at the same ms
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


def parse_rfc3339_ms(s):
    # 2026-11-21T23:30:39.719Z (util_rfc3339: always UTC, milliseconds)
    import calendar
    t = time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S")
    ms = int(s[20:23]) if len(s) > 23 and s[19] == "." else 0
    return calendar.timegm(t) * 1000 + ms


# -- the stack ------------------------------------------------------------------

class Tail:
    """A kcat consumer of one topic, from the beginning, writing
    `TIMESTAMP<TAB>PAYLOAD` lines to a file that is read incrementally."""

    def __init__(self, bootstrap, topic, path):
        self.path = path
        self.topic = topic
        self.out = open(path, "wb")
        # Fetches of 20 ms rather than librdkafka's 500: the mock broker
        # is one thread for every client, and building a tail's 500 ms of
        # outcomes in one answer held up the worker's fetches behind it
        # (bursts of 50-70 jobs 10-15 ms late, twice a second, in the
        # latency phases; a real broker serves its clients in parallel).
        self.proc = subprocess.Popen(
            ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-u", "-q",
             "-X", "fetch.wait.max.ms=20", "-f", "%T\t%s\n"], stdout=self.out, stderr=subprocess.DEVNULL)
        self.rf = open(path, "rb")
        self.buf = b""
        self.ids = {}          # job id -> number of events

    def poll(self):
        """Reads what arrived; returns the ids seen for the first time."""
        data = self.rf.read()
        if not data:
            return []
        data = self.buf + data
        lines = data.split(b"\n")
        self.buf = lines.pop()
        new = []
        for line in lines:
            m = JOB_ID_RE.search(line)
            if not m:
                continue
            jid = m.group(1).decode()
            n = self.ids.get(jid, 0)
            self.ids[jid] = n + 1
            if not n:
                new.append(jid)
        return new

    def events(self, want=None):
        """Every event so far as (timestamp_ms, value dict), optionally only
        of the job ids in want."""
        out = []
        with open(self.path, "rb") as f:
            for line in f:
                ts, _, payload = line.rstrip(b"\n").partition(b"\t")
                if not payload:
                    continue
                if want is not None:
                    m = JOB_ID_RE.search(payload)
                    if not m or m.group(1).decode() not in want:
                        continue
                try:
                    out.append((int(ts), json.loads(payload)))
                except ValueError:
                    continue
        return out

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.out.close()
        self.rf.close()


LATENCY_JOBS_TOPIC = "retort.jobs.latency"   # + the turn, 0-3 (bench.py, LATENCY_TOPIC)


class BenchStack(Stack):
    """The integration stack, plus tails of the outcome topics and a job
    feeder (build/bench-relay --produce)."""

    def __init__(self, partitions=24, llm_args=()):
        # A jobs topic for each latency turn (bench.py, LATENCY_TOPIC).
        super().__init__(partitions=partitions, llm_args=llm_args,
                         kafka_args=[a for turn in range(4)
                                     for a in ("--topic", "%s%d:%d" % (LATENCY_JOBS_TOPIC, turn, partitions))])
        self.tails = []
        self.jobs_topic = "retort.jobs"   # where feed() produces (see bench.py, latency_phase)
        self.done = set()
        self.phase_done = 0

    def properties(self):
        # librdkafka's mock broker answers a fetch only after the whole
        # fetch.wait.max.ms, even when messages arrive meanwhile (the relay
        # floor measured p50 51 / p99 101 ms at the worker's 100 ms); a real
        # broker answers as soon as there is data.  So that the latency
        # figures show the worker rather than that artefact, every consumer
        # of the bench (worker and relay floor) waits FETCH_WAIT_MS at most.
        # The worker runs as a throughput user would set it up: outcome
        # events partitioned sticky (the default is by key; see README,
        # Events), as the relay floor does too.
        return super().properties() + "kafka.consumer.fetch.wait.max.ms=%d\ntopics.outcome_partitioning=%s\n" % (
            FETCH_WAIT_MS, OUTCOME_PARTITIONING)

    def start_worker(self, *args, name=None, env=None):
        """Stack.start_worker, with BENCH_WORKER=/path/to/retort to measure
        another build of the worker (an A/B comparison), and
        BENCH_WORKER_ARGS="--set k=v ..." appended to its arguments."""
        args = list(args) + os.environ.get("BENCH_WORKER_ARGS", "").split()
        binary = os.environ.get("BENCH_WORKER")
        if not binary:
            return super().start_worker(*args, name=name, env=env)
        name = name or "w%d" % len(self.workers)
        log = open(os.path.join(self.dir, name + ".log"), "ab")
        p = subprocess.Popen(
            [binary, "worker", "-c", self.config_path, "--set", "worker.id=%s" % name] + list(args),
            stdout=log, stderr=log, env=dict(os.environ, OPENAI_API_KEY="sk-test-secret", **(env or {})),
            start_new_session=True)  # as Stack.start_worker's: close() may kill its group
        p.name = name
        self.workers.append(p)
        return p

    def start_tails(self):
        for topic in ("retort.final", "retort.escalations"):
            self.tails.append(Tail(self.bootstrap, topic, os.path.join(self.dir, topic + ".tail")))

    def poll_new(self):
        """Job ids whose first outcome event arrived since the last call."""
        new = []
        for t in self.tails:
            for jid in t.poll():
                if jid not in self.done:
                    self.done.add(jid)
                    new.append(jid)
        return new

    def duplicates(self, ids):
        """Outcome events beyond one per job id, over both topics."""
        per = {}
        for t in self.tails:
            for jid, n in t.ids.items():
                if jid in ids:
                    per[jid] = per.get(jid, 0) + n
        return sum(n - 1 for n in per.values() if n > 1)

    def write_jobs(self, path, docs):
        with open(path, "wb") as f:
            for d in docs:
                v = json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode()
                f.write(d["job_id"].encode() + b"\x1f" + v + b"\x1e")

    def feed(self, docs, rate=0):
        """Produces jobs to self.jobs_topic (paced when rate > 0); returns the
        feeder's JSON line."""
        path = os.path.join(self.dir, "feed-%d-%s.bin" % (len(docs), docs[0]["job_id"]))
        self.write_jobs(path, docs)
        out = subprocess.run([os.path.join(BUILD, "bench-relay"), "--brokers", self.bootstrap,
                              "--produce", path, "--out", self.jobs_topic, "--rate", str(rate)],
                             capture_output=True, text=True, timeout=3600)
        os.unlink(path)
        if out.returncode:
            raise RuntimeError("feeding jobs failed: %s %s" % (out.stdout, out.stderr[-500:]))
        return json.loads(out.stdout)

    def topic_timestamps(self, topic, want):
        """Earliest message timestamp per key (of the keys in want) on a
        topic: on retort.jobs the submission (retry jobs come later with
        the same key)."""
        out = subprocess.run(["kcat", "-C", "-b", self.bootstrap, "-t", topic, "-o", "beginning",
                              "-e", "-q", "-f", "%T\t%k\n"], capture_output=True, timeout=300, check=True)
        ts = {}
        for line in out.stdout.split(b"\n"):
            t, _, k = line.partition(b"\t")
            if not k:
                continue
            k = k.decode()
            if k in want:
                t = int(t)
                if k not in ts or t < ts[k]:
                    ts[k] = t
        return ts

    def llm_stats_light(self):
        with urllib.request.urlopen(self.llm_url + "/stats?calls=0", timeout=10) as r:
            return json.loads(r.read())

    def proc_cpu(self):
        """CPU seconds of the infrastructure processes, of everything this
        stack runs (workers, kcat tails and the bench itself included), of
        the whole machine, and stolen by the hypervisor: the machine minus
        ours minus steal is load from other programs here."""
        d = {"redis": proc_cpu_s(self.redis.pid), "kafka": proc_cpu_s(self.kafka.pid),
             "llm": proc_cpu_s(self.llm.pid)}
        ours = d["redis"] + d["kafka"] + d["llm"] + children_cpu_s()
        ours += sum(proc_cpu_s(w.pid) for w in self.workers)
        ours += sum(proc_cpu_s(t.proc.pid) for t in self.tails)
        d["ours"] = ours
        d["machine"], d["steal"] = machine_cpu_s()
        return d

    def history(self, ids, batch=2000):
        """Per job id: (created_ms, [attempt records]) from Redis."""
        r = self.redis_client()
        out = {}
        ids = list(ids)
        for i in range(0, len(ids), batch):
            chunk = ids[i:i + batch]
            p = r.pipeline(transaction=False)
            for jid in chunk:
                p.hget("retort:job:{%s}" % jid, "created")
                p.lrange("retort:job:{%s}:history" % jid, 0, -1)
            res = p.execute()
            for j, jid in enumerate(chunk):
                created, recs = res[2 * j], res[2 * j + 1]
                out[jid] = (int(created) if created else None, [json.loads(x) for x in recs])
        return out

    def close(self, keep=False):
        for t in self.tails:
            t.close()
        super().close(keep)


def read_gauges(url):
    """The worker's /metrics (Prometheus text) as {name: value} for
    unlabelled samples."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" in line:
            continue
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return out


class Sampler(threading.Thread):
    """Samples the worker's RSS (and the mock's held calls when asked)
    while a phase runs."""

    def __init__(self, stack, pid, llm_every=0.0, period=0.2, metrics_url=None):
        super().__init__(daemon=True)
        self.stack, self.pid, self.llm_every, self.period = stack, pid, llm_every, period
        self.metrics_url = metrics_url
        # (time, retort_inflight_jobs, retort_consumer_lag_messages,
        #  retort_delivering_jobs): jobs in a slot, and those waiting only
        #  for their outcome's delivery report
        self.gauges = []
        self.stop_ev = threading.Event()
        self.rss_max_kb = 0
        self.suspended_max = 0
        self.fds_max = 0
        self.threads_max = 0
        self.rss_by_done = []     # (jobs done so far, RSS kB)

    def run(self):
        next_llm = 0.0
        while not self.stop_ev.is_set():
            rss = proc_status_kb(self.pid, "VmRSS")
            self.rss_max_kb = max(self.rss_max_kb, rss)
            self.rss_by_done.append((self.stack.phase_done, rss))
            self.threads_max = max(self.threads_max, proc_threads(self.pid))
            now = time.time()
            if self.metrics_url:
                g = read_gauges(self.metrics_url)
                if g:
                    self.gauges.append((now, g.get("retort_inflight_jobs", 0),
                                        g.get("retort_consumer_lag_messages", 0),
                                        g.get("retort_delivering_jobs", 0)))
            if self.llm_every and now >= next_llm:
                next_llm = now + self.llm_every
                self.fds_max = max(self.fds_max, proc_fds(self.pid))
                try:
                    self.suspended_max = max(self.suspended_max, int(self.stack.llm_stats_light()["suspended"]))
                except (OSError, ValueError, KeyError):
                    pass
            self.stop_ev.wait(self.period)

    def stop(self):
        self.stop_ev.set()
        self.join(5)

#!/usr/bin/env python3
"""The worker's instructions a job, counted by callgrind: `make bench-instructions`.

make bench times the worker, and its CPU per job moves by a tenth from run to
run on these machines (a_instant's rate follows the disk's fsyncs, and a
client's CPU per request follows its rate): a change worth 2% cannot show
there.  An instruction count does not move with the machine.  This runs the
local stack, then the worker under valgrind's callgrind for N1 and for N2 jobs
(instant mock LLM, 64 calls in flight, the bench's jobs), and the bare curl
client (build/bench-curl) for N1 and N2 requests; the difference over N2 - N1
is the count a job (a request) without the start-up.  The counts are of user
space only (the kernel's share of a system call is not counted) and of every
thread of the process.  The report splits them by library, and writes them to
bench-instructions.json (BENCH_INSTR_RESULTS=PATH elsewhere).

Usage: bench_instructions.py [--worker PATH]...   (default build/retort; give
two to compare builds: each is measured in turns with the others).
Environment: BENCH_INSTR_JOBS="500 2500" sets N1 and N2.
"""
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "integration"))
os.environ.setdefault("TESTS_NO_BUILD", "1")

from bench_lib import BenchStack, bodies_file, job_doc  # noqa: E402
from stack import BUILD, REPO  # noqa: E402

N1, N2 = (int(x) for x in os.environ.get("BENCH_INSTR_JOBS", "500 2500").split())
RESULTS = os.environ.get("BENCH_INSTR_RESULTS") or os.path.join(REPO, "bench-instructions.json")
LINE = re.compile(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)\[(.*)\]\s*$")


def by_object(cg_file):
    """Instructions per shared object (the program itself under its name)."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", cg_file],
                         capture_output=True, text=True, check=True).stdout
    counts = collections.Counter()
    for line in out.split("\n"):
        m = LINE.match(line)
        if m:
            counts[os.path.basename(m.group(3))] += int(m.group(1).replace(",", ""))
    return counts


def total(cg_file):
    with open(cg_file) as f:
        for line in f:
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError("no summary in %s" % cg_file)


def worker_run(st, binary, jobs, out):
    """binary under callgrind for `jobs` jobs on st; returns its profile file."""
    wrapper = os.path.join(st.dir, "callgrind-worker.sh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s %s \"$@\"\n" % (out, binary))
    os.chmod(wrapper, 0o755)
    os.environ["BENCH_WORKER"] = wrapper
    try:
        w = st.start_worker(name="cg%d" % len(st.workers))
    finally:
        del os.environ["BENCH_WORKER"]
    tag = "%s-%d" % (os.path.basename(out), int(time.time() * 1000))
    docs = [job_doc("%s-%06d" % (tag, i), i) for i in range(jobs)]
    ids = {d["job_id"] for d in docs}
    st.feed(docs)
    deadline = time.time() + 600
    while not ids <= st.done and time.time() < deadline:
        st.poll_new()
        if w.poll() is not None:
            raise RuntimeError("the worker under callgrind exited (%s); its log:\n%s" %
                               (w.returncode, st.worker_log(w.name)[-1500:]))
        time.sleep(0.3)
    if not ids <= st.done:
        raise RuntimeError("%d of %d jobs got no outcome in 600 s" % (len(ids - st.done), jobs))
    w.send_signal(signal.SIGTERM)   # callgrind writes its file at the exit
    w.wait(120)
    st.workers.remove(w)
    return out


def curl_run(st, bodies, requests, out):
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=%s" % out,
                        os.path.join(BUILD, "bench-curl"), "--url", st.llm_url + "/v1/chat/completions",
                        "--bodies", bodies, "--requests", str(requests), "--concurrency", "64",
                        "--api-key", "sk-bench", "--id-prefix", "instr"],
                       capture_output=True, text=True, timeout=600)
    c = json.loads(r.stdout)
    if c["errors"]:
        raise RuntimeError("bench-curl: %d errors" % c["errors"])
    return out


def per_unit(small, large):
    """Instructions per job between the runs of N1 and N2, in all and by object."""
    n = float(N2 - N1)
    a, b = by_object(small), by_object(large)
    objs = {k: round((b[k] - a[k]) / n) for k in set(a) | set(b)}
    return {"total": round((total(large) - total(small)) / n),
            "by_object": {k: v for k, v in sorted(objs.items(), key=lambda kv: -kv[1]) if abs(v) >= 100}}


def main():
    workers = []
    args = sys.argv[1:]
    while args:
        if args[0] == "--worker" and len(args) > 1:
            workers.append(os.path.abspath(args[1]))
            args = args[2:]
        else:
            sys.exit(__doc__)
    workers = workers or [os.path.join(BUILD, "retort")]
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        sys.exit("valgrind not found (Debian: apt-get install valgrind)")
    st = BenchStack(llm_args=["--latency-ms", "0"])
    keep = True
    try:
        st.start_tails()
        bodies = bodies_file(st, "bodies.txt")
        files = {}
        # In turns (each N1 run beside its N2 run), so that a drift of the
        # stack between them lands on every build alike.
        for i, binary in enumerate(workers):
            for jobs in (N1, N2):
                files[(i, jobs)] = worker_run(st, binary, jobs, os.path.join(st.dir, "worker%d-%d.cg" % (i, jobs)))
        for reqs in (N1, N2):
            files[("curl", reqs)] = curl_run(st, bodies, reqs, os.path.join(st.dir, "curl-%d.cg" % reqs))
        curl = per_unit(files[("curl", N1)], files[("curl", N2)])
        results = {"jobs": [N1, N2], "curl_per_request": curl, "workers": []}
        print("instructions a job (user space, every thread), from runs of %d and %d jobs:" % (N1, N2))
        print("  bare curl client     %8d a request" % curl["total"])
        for i, binary in enumerate(workers):
            w = per_unit(files[(i, N1)], files[(i, N2)])
            w["binary"] = binary
            results["workers"].append(w)
            print("  worker %-13s %8d a job (%.2fx curl): %s" % (
                "#%d" % i if len(workers) > 1 else "", w["total"], w["total"] / float(curl["total"]),
                ", ".join("%s %d" % kv for kv in list(w["by_object"].items())[:8])))
            if len(workers) > 1:
                print("      %s" % binary)
        if len(workers) > 1:
            base = results["workers"][0]["total"]
            for i, w in enumerate(results["workers"][1:], 1):
                print("  worker #%d against #0: %+d a job (%+.1f%%)" % (i, w["total"] - base,
                                                                      100.0 * (w["total"] - base) / base))
        with open(RESULTS, "w") as f:
            json.dump(results, f, indent=1)
        print("written to %s" % RESULTS)
        keep = False
    finally:
        st.close(keep=keep)


if __name__ == "__main__":
    main()

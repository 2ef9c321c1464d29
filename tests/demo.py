#!/usr/bin/python3
"""make demo: starts the local stack (redis-server, the mock Kafka broker,
the mock LLM), runs a pool of two worker processes over a few hundred jobs
with a realistic mix, and prints what happened."""
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "integration"))
from stack import Stack, job  # noqa: E402

N = int(os.environ.get("DEMO_JOBS", "300"))
SCHEMAS = ["product.v1", "ticket.v1", "invoice.v1"]
PROMPTS = {
    "product.v1": "Extract the product listing from: 'Lightweight trail running shoe, breathable mesh, 89.90 EUR, in stock.'",
    "ticket.v1": "Triage this support email: 'I reset my password twice and still cannot log in. I'm on the Pro plan.'",
    "invoice.v1": "Extract the invoice fields from the attached text: 'Invoice INV-004211 from Acme Corp (DE), 2026-11-02 ...'",
}


def percentile(values, p):
    if not values:
        return 0.0
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100.0 * (len(values) - 1)))))
    return values[k]


def main():
    rng = random.Random(42)
    print("== starting the local stack (redis-server, mock Kafka broker, mock LLM)")
    stack = Stack(partitions=6, llm_args=["--latency-ms", "150", "--jitter-ms", "250"])
    try:
        sup = stack.start_worker("--processes", "2", "--set", "llm.max_inflight=128", name="demo")
        jobs, ids = [], []
        for i in range(N):
            schema = SCHEMAS[i % 3]
            r = rng.random()
            directive = None
            if r < 0.12:
                directive = "defect=%s until=1" % rng.choice(["missing_field", "wrong_type", "invalid_value", "not_json"])
            elif r < 0.16:
                directive = "defect=wrong_type until=2"
            elif r < 0.19:
                directive = "defect=%s" % rng.choice(["invalid_value", "missing_field"])  # never fixed
            elif r < 0.21:
                directive = "defect=refusal"
            elif r < 0.24:
                directive = "http=429 times=1 retry_after=0"
            elif r < 0.27:
                directive = "defect=fenced"
            jid = "demo-%04d" % i
            ids.append(jid)
            jobs.append(job(jid, schema=schema, prompt=PROMPTS[schema], directive=directive,
                            batch_id="demo", metadata={"row": i}))
        t0 = time.time()
        print("== submitting %d jobs to retort.jobs (%s)" % (N, stack.bootstrap))
        stack.produce_jobs(jobs)
        outs = stack.wait_outcomes(ids, timeout=300)
        elapsed = time.time() - t0
        retries = [m for m in stack.consume("retort.jobs") if m["headers"].get("ce_type") == "retort.job.retry"]
        finals = [m["value"] for m in outs if m["topic"] == "retort.final"]
        escs = [m["value"] for m in outs if m["topic"] == "retort.escalations"]
        attempts = {}
        lat, tokens = [], 0
        for ev in finals + escs:
            attempts[ev["attempts"]] = attempts.get(ev["attempts"], 0) + 1
            tokens += ev["usage"]["total_tokens"]
        r = stack.redis_client()
        for jid in ids:
            st = r.hgetall("retort:job:{%s}" % jid)
            if st.get("created") and st.get("updated"):
                lat.append(int(st["updated"]) - int(st["created"]))
        reasons = {}
        for ev in escs:
            key = ev["category"] if ev["category"] != "invalid" else ev["reason"]
            reasons[key] = reasons.get(key, 0) + 1
        print()
        print("== outcome")
        print("  jobs            %d in %.1f s (%.0f jobs/s, 2 worker processes)" % (N, elapsed, N / elapsed))
        print("  finals          %d" % len(finals))
        print("  retries         %d retry jobs republished with a reflection" % len(retries))
        print("  escalations     %d  %s" % (len(escs), json.dumps(reasons)))
        print("  attempts/job    %s" % ", ".join("%d: %d" % kv for kv in sorted(attempts.items())))
        print("  latency         p50 %.0f ms, p99 %.0f ms (first attempt to outcome, LLM included)" %
              (percentile(lat, 50), percentile(lat, 99)))
        print("  tokens          %d" % tokens)
        dups = len(outs) - len({m["value"]["job_id"] for m in outs})
        print("  duplicates      %d outcome(s) beyond one per job" % dups)
        stack.stop_worker(sup)
        print()
        print("== to use a real Kafka and a real LLM:")
        print("  retort-worker -c retort.properties   with for example")
        print("    kafka.bootstrap.servers=broker1:9092   redis.host=redis.internal")
        print("    llm.base_url=https://api.openai.com/v1   llm.api_key_env=OPENAI_API_KEY   llm.model=gpt-4o-mini")
        print("  or docker compose -f docker/docker-compose.yml up (real Kafka, Redis, two workers)")
        return 0 if dups == 0 else 1
    finally:
        stack.close(keep=sys.exc_info()[0] is not None)


if __name__ == "__main__":
    sys.exit(main())

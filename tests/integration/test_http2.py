"""HTTP/2 over TLS: when the LLM endpoint offers h2 (ALPN), the worker's
calls share connections as multiplexed streams instead of one connection
per call; `llm.ca_file` verifies a server whose CA is not the system's."""
import json
import os
import subprocess
import time
import uuid

import pytest

from stack import REPO, job

SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"const": True}}}


@pytest.fixture
def h2_server(tmp_path):
    cert, key, stats = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "stats.json"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    p = subprocess.Popen(["/usr/bin/python3", os.path.join(REPO, "tests", "h2_llm.py"), "--cert", str(cert),
                          "--key", str(key), "--stats", str(stats), "--latency-ms", "1500"],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("port "), line
    port = int(line.split()[1])
    yield {"url": "https://127.0.0.1:%d/v1" % port, "cert": str(cert),
           "stats": lambda: json.loads(stats.read_text())}
    p.terminate()
    p.wait(10)


def test_calls_are_multiplexed_over_http2(stack, h2_server):
    stack.start_worker("--set", "llm.base_url=" + h2_server["url"], "--set", "llm.ca_file=" + h2_server["cert"],
                       "--set", "llm.max_inflight=100")
    ids = ["h2-%s-%d" % (uuid.uuid4().hex[:6], i) for i in range(100)]
    stack.produce_jobs([job(j, schema=SCHEMA) for j in ids])
    stack.wait_outcomes(ids, timeout=90)
    finals = {m["value"]["job_id"] for m in stack.consume("retort.final")}
    assert set(ids) <= finals
    st = h2_server["stats"]()
    assert st["requests"] == 100
    # 100 calls in lanes of 64: two lanes, each multiplexing its calls on
    # one connection (a new one may follow a closed one, never one a call).
    assert st["connections"] <= 4, st
    assert st["max_streams"] >= 20, st


def test_an_unknown_ca_is_refused_without_ca_file(stack, h2_server):
    stack.start_worker("--set", "llm.base_url=" + h2_server["url"], "--set", "llm.max_transient_retries=0")
    jid = "h2ca-%s" % uuid.uuid4().hex[:6]
    stack.produce_jobs([job(jid, schema=SCHEMA)])
    stack.wait_outcomes([jid], timeout=60)
    esc = [m["value"] for m in stack.consume("retort.escalations") if m["value"]["job_id"] == jid]
    assert esc and esc[0]["category"] == "network", esc
    assert "certificate" in (esc[0]["history"][-1]["error"] or "").lower(), esc[0]["history"]
    assert h2_server["stats"]()["requests"] == 0


def test_the_webhook_verifies_its_endpoint_with_a_ca_file_of_its_own(stack, h2_server):
    """`escalation.webhook_ca_file` verifies a webhook endpoint whose CA is
    not the system's (the webhook's client was given no CA file: such an
    endpoint failed every call).  Without it, the call fails on the
    certificate and is given up, said with the job id."""
    bad = stack.start_worker("--set", "escalation.webhook_url=" + h2_server["url"] + "/hook",
                             "--set", "escalation.webhook_retries=0", name="nocafile")
    jid = "h2hook-%s" % uuid.uuid4().hex[:6]
    stack.produce_jobs([job(jid, directive="defect=refusal")])
    stack.wait_outcomes([jid], timeout=60)
    stack.wait_log("nocafile", "escalation webhook failed after 1 tries", timeout=30)
    line = [l for l in stack.log_lines("nocafile") if l["msg"].startswith("escalation webhook failed")][0]
    assert line["job_id"] == jid and "certificate" in line["msg"].lower(), line
    assert h2_server["stats"]()["requests"] == 0
    assert stack.stop_worker(bad) == 0

    good = stack.start_worker("--set", "escalation.webhook_url=" + h2_server["url"] + "/hook",
                              "--set", "escalation.webhook_ca_file=" + h2_server["cert"], name="cafile")
    jid = "h2hook-%s" % uuid.uuid4().hex[:6]
    stack.produce_jobs([job(jid, directive="defect=refusal")])
    stack.wait_outcomes([jid], timeout=60)
    deadline = time.time() + 20
    while h2_server["stats"]()["requests"] < 1 and time.time() < deadline:
        time.sleep(0.1)
    assert h2_server["stats"]()["requests"] == 1
    assert "escalation webhook failed" not in stack.worker_log("cafile")
    assert stack.stop_worker(good) == 0

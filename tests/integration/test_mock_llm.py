"""Integration tests of build/mock-llm over real HTTP (stdlib + pytest + jsonschema)."""
import concurrent.futures
import json
import math
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import jsonschema
import pytest

from stack import CLK_TCK, proc_cpu_s

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# MOCK_LLM may point at another build of the tool (e.g. a sanitizer build).
BINARY = os.environ.get("MOCK_LLM", os.path.join(REPO, "build", "mock-llm"))

PRODUCT = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 3},
        "price": {"type": "number", "minimum": 0},
        "color": {"type": "string", "enum": ["red", "green", "blue", "black", "white", "grey"]},
    },
    "required": ["name", "price", "color"],
    "additionalProperties": False,
}

# Uses most keywords the generator claims to handle.
COMPLEX = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string", "maxLength": 40},
                "city": {"type": "string", "minLength": 2},
                "zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"},
            },
            "required": ["street", "city", "zip"],
            "additionalProperties": False,
        },
        "node": {
            "type": "object",
            "properties": {"label": {"type": "string"},
                           "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "required": ["label"],
        },
    },
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
        "email": {"type": "string", "format": "email"},
        "created": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "site": {"type": "string", "format": "uri"},
        "host": {"type": "string", "format": "hostname"},
        "ip": {"type": "string", "format": "ipv4"},
        "kind": {"const": "product"},
        "status": {"enum": ["active", "retired", "draft"]},
        "qty": {"type": "integer", "minimum": 10, "maximum": 20, "multipleOf": 5},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "cents": {"type": "number", "multipleOf": 0.01, "minimum": 1, "maximum": 2},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 2},
                 "minItems": 3, "maxItems": 5, "uniqueItems": True},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}],
                 "items": False},
        "address": {"$ref": "#/$defs/address"},
        "tree": {"$ref": "#/$defs/node"},
        "dims": {"allOf": [
            {"type": "object", "properties": {"w": {"type": "number"}}, "required": ["w"]},
            {"type": "object", "properties": {"h": {"type": "integer", "minimum": 1}}, "required": ["h"]},
        ]},
        "either": {"anyOf": [{"type": "integer", "minimum": 5}, {"type": "string"}]},
        "one": {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
        "maybe": {"type": ["string", "null"], "maxLength": 4},
        "example": {"type": "string", "pattern": "^(?=x).*q$", "examples": ["xyzq"]},
        "note": {"type": "string", "default": "n/a"},
    },
    "required": ["id", "sku", "kind", "status", "qty", "address", "dims"],
    "additionalProperties": False,
}


def start_mock(*args):
    proc = subprocess.Popen([BINARY, "--port", "0", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith("LISTENING http://127.0.0.1:"), line
    return proc, line.split()[1]


def stop_mock(proc):
    proc.terminate()
    try:
        rc = proc.wait(timeout=10)
        assert rc == 0, "mock-llm exited with %s: %s" % (rc, proc.stderr.read()[-3000:])
    finally:
        if proc.poll() is None:
            proc.kill()


MOCK_PIDS = {}   # base's URL: the mock's process id


@pytest.fixture(scope="module")
def base():
    if "MOCK_LLM" not in os.environ:
        subprocess.run(["make", "-C", REPO, "--no-print-directory", "build/mock-llm"], check=True,
                       stdout=subprocess.DEVNULL)
    proc, url = start_mock()
    MOCK_PIDS[url] = proc.pid
    yield url
    stop_mock(proc)


def call(base_url, path, body=None, headers=None, timeout=10, method=None):
    """Returns (status, headers, parsed-or-raw body, seconds)."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(base_url + path, data=data, method=method or ("POST" if data else "GET"))
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, hdrs, raw = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, e.headers, e.read()
    elapsed = time.monotonic() - t0
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw.decode()
    return status, hdrs, parsed, elapsed


def openai(user, schema=PRODUCT, system=None, history=(), last_user=None):
    """OpenAI request; history is a list of assistant texts (one per earlier attempt)."""
    msgs = []
    if system:
        msgs.append({"role": "system", "content": system})
    msgs.append({"role": "user", "content": user})
    for i, text in enumerate(history):
        msgs.append({"role": "assistant", "content": text})
        msgs.append({"role": "user", "content": last_user if i == len(history) - 1 else "try again"})
    body = {"model": "gpt-4o-mini", "messages": msgs}
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "s", "strict": True, "schema": schema}}
    return body


def anthropic(user, system=None, schema=None, history=(), last_user=None):
    msgs = [{"role": "user", "content": [{"type": "text", "text": user}]}]
    for i, text in enumerate(history):
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
        msgs.append({"role": "user", "content": last_user if i == len(history) - 1 else "again"})
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": msgs}
    if system is not None:
        body["system"] = system
    if schema is not None:
        body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    return body


ANTHROPIC_VERSION = {"anthropic-version": "2023-06-01"}   # required, as by Anthropic


def an_call(base_url, body, headers=None, **kw):
    """call() of POST /v1/messages with the anthropic-version header."""
    return call(base_url, "/v1/messages", body, dict(ANTHROPIC_VERSION, **(headers or {})), **kw)


def content(resp):
    return resp["choices"][0]["message"]["content"]


def is_valid(instance, schema):
    return jsonschema.Draft202012Validator(schema).is_valid(instance)


# ---------------------------------------------------------------- generation

def test_valid_answer_validates_against_complex_schema(base):
    fmt = jsonschema.Draft202012Validator.FORMAT_CHECKER
    for i in range(25):
        st, _, resp, _ = call(base, "/v1/chat/completions", openai(f"record {i}", COMPLEX))
        assert st == 200
        doc = json.loads(content(resp))
        errors = [e.message for e in jsonschema.Draft202012Validator(COMPLEX, format_checker=fmt).iter_errors(doc)]
        assert errors == [], (doc, errors)
        assert set(doc) == set(COMPLEX["properties"])  # all properties, nothing else
        assert doc["example"] == "xyzq" and doc["note"] == "n/a"
        assert len(doc["tags"]) == 3 and doc["tree"]["label"]


def test_answers_are_deterministic_and_vary_between_jobs(base):
    first = [content(call(base, "/chat/completions", openai(f"job {i}"))[2]) for i in range(20)]
    again = [content(call(base, "/chat/completions", openai(f"job {i}"))[2]) for i in range(20)]
    assert first == again
    colors = {json.loads(c)["color"] for c in first}
    assert len(colors) >= 3


def test_usage_counts_bytes_over_four(base):
    body = openai("12345678", system="abcd")
    st, _, resp, _ = call(base, "/v1/chat/completions", body)
    answer = content(resp)
    assert resp["usage"]["prompt_tokens"] == math.ceil(12 / 4)
    assert resp["usage"]["completion_tokens"] == math.ceil(len(answer.encode()) / 4)
    assert resp["usage"]["total_tokens"] == resp["usage"]["prompt_tokens"] + resp["usage"]["completion_tokens"]
    assert resp["choices"][0]["finish_reason"] == "stop" and resp["object"] == "chat.completion"


def test_schema_from_system_prompt_and_default_answer(base):
    system = "You write product records.\nJSON Schema: " + json.dumps(PRODUCT) + "\nAnswer with JSON only."
    _, _, resp, _ = call(base, "/v1/chat/completions", openai("lamp", schema=None, system=system))
    assert is_valid(json.loads(content(resp)), PRODUCT)
    _, _, resp, _ = call(base, "/v1/chat/completions", openai("lamp", schema=None, system="no schema here"))
    assert json.loads(content(resp)) == {"answer": "mock answer"}


def test_anthropic_messages(base):
    system = [{"type": "text", "text": "Rules.\nJSON Schema:\n" + json.dumps(PRODUCT)}]
    st, _, resp, _ = an_call(base, anthropic("desk lamp", system=system))
    assert st == 200 and resp["type"] == "message" and resp["role"] == "assistant"
    assert resp["stop_reason"] == "end_turn" and resp["content"][0]["type"] == "text"
    assert is_valid(json.loads(resp["content"][0]["text"]), PRODUCT)
    assert resp["usage"]["output_tokens"] == math.ceil(len(resp["content"][0]["text"].encode()) / 4)
    # output_config.format wins over the system prompt
    other = {"type": "object", "properties": {"n": {"type": "integer", "const": 7}}, "required": ["n"]}
    _, _, resp, _ = an_call(base, anthropic("x", system=system, schema=other))
    assert json.loads(resp["content"][0]["text"]) == {"n": 7}
    # the beta form: with its header only, as Anthropic
    beta = anthropic("x", system=system)
    beta["output_format"] = {"type": "json_schema", "schema": other}
    st, _, resp, _ = an_call(base, beta)
    assert st == 400 and resp["error"]["type"] == "invalid_request_error", resp
    assert resp["error"]["message"].startswith("output_format: "), resp
    st, _, resp, _ = an_call(base, beta, headers={"anthropic-beta": "structured-outputs-2025-11-13"})
    assert st == 200 and json.loads(resp["content"][0]["text"]) == {"n": 7}
    st, _, resp, _ = an_call(base, anthropic("[[mock defect=refusal]]", system=system))
    assert st == 200 and resp["stop_reason"] == "refusal"
    st, _, resp, _ = an_call(base, anthropic("[[mock defect=truncated]]", system=system))
    assert resp["stop_reason"] == "max_tokens"
    with pytest.raises(ValueError):
        json.loads(resp["content"][0]["text"])
    st, _, resp, _ = an_call(base, anthropic("[[mock http=529]]", system=system))
    assert st == 529 and resp == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
                                  "request_id": "req_mock"}


def test_anthropic_requires_its_version_header_model_and_max_tokens(base):
    """As Anthropic: a Messages request without the anthropic-version
    header (or with it empty), without model or without max_tokens is
    answered 400 invalid_request_error, so a client that leaves one out
    fails against the mock as it would against the API."""
    def refused(answer, message):
        st, _, resp, _ = answer
        assert st == 400 and resp == {"type": "error", "request_id": "req_mock",
                                      "error": {"type": "invalid_request_error", "message": message}}, (st, resp)
    refused(call(base, "/v1/messages", anthropic("x")), "anthropic-version: header is required")
    refused(call(base, "/v1/messages", anthropic("x"), {"anthropic-version": ""}),
            "anthropic-version: header is required")
    for field in ("model", "max_tokens"):
        body = anthropic("x")
        del body[field]
        refused(an_call(base, body), "%s: Field required" % field)
    st, _, resp, _ = an_call(base, anthropic("x"))
    assert st == 200 and resp["type"] == "message", resp


# ------------------------------------------------------------------- defects

def test_defect_missing_field(base):
    doc = json.loads(content(call(base, "/v1/chat/completions", openai("[[mock defect=missing_field]]"))[2]))
    assert "name" not in doc and not is_valid(doc, PRODUCT)
    doc = json.loads(content(call(base, "/v1/chat/completions",
                                  openai("[[mock defect=missing_field field=color]]"))[2]))
    assert "color" not in doc and "name" in doc


def test_defect_wrong_type(base):
    doc = json.loads(content(call(base, "/v1/chat/completions", openai("[[mock defect=wrong_type]]"))[2]))
    assert doc["name"] == 12345 and not is_valid(doc, PRODUCT)
    doc = json.loads(content(call(base, "/v1/chat/completions",
                                  openai("[[mock defect=wrong_type field=price]]"))[2]))
    assert doc["price"] == "not a number"


def test_defect_invalid_value(base):
    doc = json.loads(content(call(base, "/v1/chat/completions",
                                  openai("[[mock defect=invalid_value field=color]]"))[2]))
    assert isinstance(doc["color"], str) and doc["color"] not in PRODUCT["properties"]["color"]["enum"]
    assert not is_valid(doc, PRODUCT)
    # name has minLength 3: default field (first required) is broken with a too short string
    doc = json.loads(content(call(base, "/v1/chat/completions", openai("[[mock defect=invalid_value]]"))[2]))
    assert isinstance(doc["name"], str) and len(doc["name"]) < 3
    # a field without constraints moves the defect to the first constrained property
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer", "maximum": 9}},
              "required": ["a", "b"]}
    doc = json.loads(content(call(base, "/v1/chat/completions",
                                  openai("[[mock defect=invalid_value]]", schema))[2]))
    assert doc["b"] == 10 and isinstance(doc["a"], str)


def test_defect_extra_field(base):
    doc = json.loads(content(call(base, "/v1/chat/completions", openai("[[mock defect=extra_field]]"))[2]))
    assert doc["unexpected_field"] is True and not is_valid(doc, PRODUCT)


def test_defect_text_kinds(base):
    def text(kind):
        return call(base, "/v1/chat/completions", openai(f"[[mock defect={kind}]]"))[2]

    assert content(text("not_json")) == "Sorry, I cannot produce that right now."
    fenced = content(text("fenced"))
    assert fenced.startswith("```json\n") and fenced.endswith("\n```")
    assert is_valid(json.loads(fenced[len("```json\n"):-len("\n```")]), PRODUCT)
    prose = content(text("prose"))
    head = "Here is the JSON you asked for:\n"
    assert prose.startswith(head) and is_valid(json.loads(prose[len(head):]), PRODUCT)
    assert content(text("empty")) == ""
    # nul_char: the first string value ends with U+0000, the rest as usual
    # (the same prompt on attempt 2 is the clean answer)
    prompt = "[[mock defect=nul_char until=1]]"
    nul = content(call(base, "/v1/chat/completions", openai(prompt))[2])
    clean = json.loads(content(call(base, "/v1/chat/completions", openai(prompt, history=["x"], last_user="go"))[2]))
    doc = json.loads(nul)
    first = next(k for k, v in doc.items() if isinstance(v, str))
    assert "\\u0000" in nul and doc[first] == clean[first] + "\x00"
    assert {k: v for k, v in doc.items() if k != first} == {k: v for k, v in clean.items() if k != first}
    refusal = text("refusal")["choices"][0]
    assert refusal["message"]["content"] is None and refusal["message"]["refusal"]
    assert refusal["finish_reason"] == "stop"
    # same prompt (same seed) on attempt 2 gives the full answer that was cut
    prompt = "[[mock defect=truncated until=1]]"
    trunc = call(base, "/v1/chat/completions", openai(prompt))[2]["choices"][0]
    assert trunc["finish_reason"] == "length"
    full = content(call(base, "/v1/chat/completions", openai(prompt, history=["x"], last_user="go"))[2])
    assert is_valid(json.loads(full), PRODUCT)
    assert trunc["message"]["content"] == full[: len(full) // 2]


# --------------------------------------------------------- until / repair rule

def test_until_and_repair_rule(base):
    prompt = "[[mock defect=missing_field until=1]] lamp"
    doc = json.loads(content(call(base, "/v1/chat/completions", openai(prompt))[2]))
    assert "name" not in doc
    bad = json.dumps(doc)
    # attempt 2, feedback does not name the path: same defect again
    doc = json.loads(content(call(base, "/v1/chat/completions",
                                  openai(prompt, history=[bad], last_user="Fix your answer."))[2]))
    assert "name" not in doc
    # attempt 2, feedback names /name: valid
    doc = json.loads(content(call(base, "/v1/chat/completions",
                                  openai(prompt, history=[bad], last_user="MISSING_FIELD at /name"))[2]))
    assert is_valid(doc, PRODUCT)
    # until=2: attempt 2 is still broken even with good feedback, attempt 3 is fixed
    prompt2 = "[[mock defect=wrong_type until=2 field=price]]"
    doc = json.loads(content(call(base, "/v1/chat/completions",
                                  openai(prompt2, history=["x"], last_user="/price"))[2]))
    assert doc["price"] == "not a number"
    doc = json.loads(content(call(base, "/v1/chat/completions",
                                  openai(prompt2, history=["x", "y"], last_user="/price"))[2]))
    assert is_valid(doc, PRODUCT)


def test_repair_rule_nested_and_not_json(base):
    schema = {"type": "object", "required": ["address"], "properties": {
        "address": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}
    prompt = "[[mock defect=missing_field field=address/city until=1]]"
    no = json.loads(content(call(base, "/v1/chat/completions",
                                 openai(prompt, schema, history=["{}"], last_user="missing /city"))[2]))
    assert "city" not in no["address"]
    yes = json.loads(content(call(base, "/v1/chat/completions",
                                  openai(prompt, schema, history=["{}"], last_user="missing /address/city"))[2]))
    assert is_valid(yes, schema)

    prompt = "[[mock defect=not_json until=1]]"
    st, _, r, _ = call(base, "/v1/chat/completions", openai(prompt, history=["junk"], last_user="/name"))
    assert content(r) == "Sorry, I cannot produce that right now."
    st, _, r, _ = call(base, "/v1/chat/completions",
                       openai(prompt, history=["junk"], last_user="error NOT_JSON: not JSON"))
    assert is_valid(json.loads(content(r)), PRODUCT)
    # fenced is simply valid after until, whatever the feedback says
    _, _, r, _ = call(base, "/v1/chat/completions",
                      openai("[[mock defect=fenced until=1]]", history=["x"], last_user="again"))
    assert is_valid(json.loads(content(r)), PRODUCT)
    # invalid_value moved to another property: the feedback must name that one
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer", "maximum": 9}},
              "required": ["a", "b"]}
    prompt = "[[mock defect=invalid_value until=1]]"
    r = call(base, "/v1/chat/completions", openai(prompt, schema, history=["{}"], last_user="/a"))[2]
    assert json.loads(content(r))["b"] == 10
    r = call(base, "/v1/chat/completions", openai(prompt, schema, history=["{}"], last_user="/b"))[2]
    assert is_valid(json.loads(content(r)), schema)


def test_anthropic_attempt_counts_assistant_messages(base):
    system = "JSON Schema: " + json.dumps(PRODUCT)
    prompt = "[[mock defect=extra_field until=1]]"
    r = an_call(base, anthropic(prompt, system=system, history=["{}"], last_user="nope"))[2]
    assert "unexpected_field" in json.loads(r["content"][0]["text"])
    r = an_call(base,
                anthropic(prompt, system=system, history=["{}"], last_user="/unexpected_field is not allowed"))[2]
    assert is_valid(json.loads(r["content"][0]["text"]), PRODUCT)


# -------------------------------------------------------------- forced tools

# The tool's schema differs from response_format's: a forced call's
# arguments are held to the tool's.
TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "minLength": 2},
                                                "population": {"type": "integer", "minimum": 0}},
               "required": ["city", "population"], "additionalProperties": False}


def oa_tools(user, choice=None, schema=TOOL_SCHEMA, **kw):
    """An OpenAI request (with response_format PRODUCT) that forces the tool
    `record` (choice: the tool_choice, named by default)."""
    body = openai(user, **kw)
    body["tools"] = [{"type": "function", "function": {"name": "record", "parameters": schema}}]
    body["tool_choice"] = choice or {"type": "function", "function": {"name": "record"}}
    return body


def an_tools(user, choice=None, schema=TOOL_SCHEMA, **kw):
    body = anthropic(user, system="JSON Schema: " + json.dumps(PRODUCT), **kw)
    body["tools"] = [{"name": "record", "description": "Records the answer.", "input_schema": schema}]
    body["tool_choice"] = choice or {"type": "tool", "name": "record"}
    return body


def tool_calls(resp):
    msg = resp["choices"][0]["message"]
    assert msg["content"] is None and msg["refusal"] is None, msg
    assert all(c["type"] == "function" and c["function"]["name"] == "record" and c["id"].startswith("call_")
               for c in msg["tool_calls"]), msg
    return [c["function"]["arguments"] for c in msg["tool_calls"]]


def tool_uses(resp):
    assert all(b["type"] == "tool_use" and b["name"] == "record" and b["id"].startswith("toolu_")
               for b in resp["content"]), resp
    return [b["input"] for b in resp["content"]]


def test_openai_forced_tool_is_answered_with_one_call(base):
    st, _, r, _ = call(base, "/v1/chat/completions", oa_tools("city"))
    assert st == 200 and r["choices"][0]["finish_reason"] == "stop"   # as OpenAI, for a named tool
    (args,) = tool_calls(r)
    assert is_valid(json.loads(args), TOOL_SCHEMA)
    assert r["usage"]["completion_tokens"] == math.ceil(len(args.encode()) / 4)
    # the JSON is what the content would have been, the schema the same
    plain = content(call(base, "/v1/chat/completions", openai("city", schema=TOOL_SCHEMA))[2])
    assert args == plain
    # "required" with the one tool forces it too (finish_reason as vLLM says it)
    r = call(base, "/v1/chat/completions", oa_tools("city", choice="required"))[2]
    assert tool_calls(r) == [args] and r["choices"][0]["finish_reason"] == "tool_calls"
    # a tool without parameters: the usual schema (response_format)
    r = call(base, "/v1/chat/completions", oa_tools("city", schema={}))[2]
    assert is_valid(json.loads(tool_calls(r)[0]), PRODUCT)
    # auto, none, or no tool_choice: text, as before
    for choice in ("auto", "none"):
        r = call(base, "/v1/chat/completions", oa_tools("city", choice=choice))[2]
        assert is_valid(json.loads(content(r)), PRODUCT) and "tool_calls" not in r["choices"][0]["message"]
    body = oa_tools("city")
    del body["tool_choice"]
    assert is_valid(json.loads(content(call(base, "/v1/chat/completions", body)[2])), PRODUCT)


def test_openai_forced_tool_directives(base):
    def args(prompt, **kw):
        st, _, r, _ = call(base, "/v1/chat/completions", oa_tools(prompt, **kw))
        assert st == 200, r
        return r
    doc = json.loads(tool_calls(args("[[mock defect=wrong_type]]"))[0])
    assert doc["city"] == 12345
    assert tool_calls(args("[[mock defect=not_json]]")) == ["Sorry, I cannot produce that right now."]
    assert tool_calls(args("[[mock defect=empty]]")) == [""]
    cut = args("[[mock defect=truncated until=1]]")
    full = tool_calls(args("[[mock defect=truncated until=1]]", history=["x"], last_user="go"))[0]
    assert cut["choices"][0]["finish_reason"] == "length" and tool_calls(cut) == [full[: len(full) // 2]]
    refusal = args("[[mock defect=refusal]]")["choices"][0]["message"]
    assert refusal["content"] is None and refusal["refusal"] and "tool_calls" not in refusal
    # the repair rule as for text: fixed once the feedback names the path
    prompt = "[[mock defect=missing_field until=1]]"
    again = json.loads(tool_calls(args(prompt, history=["{}"], last_user="try again"))[0])
    fixed = json.loads(tool_calls(args(prompt, history=["{}"], last_user="/city is missing"))[0])
    assert "city" not in again and is_valid(fixed, TOOL_SCHEMA)
    two = tool_calls(args("[[mock tool_calls=2]]"))
    assert len(two) == 2 and two[0] == two[1] and is_valid(json.loads(two[0]), TOOL_SCHEMA)
    assert tool_calls(args("[[mock answer_b64=eyJhIjoxfQ]]")) == ['{"a":1}']


def test_anthropic_forced_tool_is_answered_with_tool_use(base):
    st, _, r, _ = an_call(base, an_tools("city"))
    assert st == 200 and r["stop_reason"] == "tool_use"
    (inp,) = tool_uses(r)
    assert is_valid(inp, TOOL_SCHEMA)
    assert json.dumps(inp, separators=(",", ":")) == content(
        call(base, "/v1/chat/completions", openai("city", schema=TOOL_SCHEMA))[2])
    assert tool_uses(an_call(base, an_tools("city", choice={"type": "any"}))[2]) == [inp]
    r = an_call(base, an_tools("city", choice={"type": "auto"}))[2]
    assert r["stop_reason"] == "end_turn" and is_valid(json.loads(r["content"][0]["text"]), PRODUCT)
    assert tool_uses(an_call(base, an_tools("[[mock defect=wrong_type]]"))[2])[0]["city"] == 12345
    two = an_call(base, an_tools("[[mock tool_calls=2]]"))[2]
    assert two["stop_reason"] == "tool_use" and len(tool_uses(two)) == 2
    # input must be an object: an answer that is none goes out as text
    for defect, stop in (("not_json", "end_turn"), ("prose", "end_turn"), ("truncated", "max_tokens"),
                         ("refusal", "refusal")):
        r = an_call(base, an_tools("[[mock defect=%s]]" % defect))[2]
        assert r["stop_reason"] == stop and [b["type"] for b in r["content"]] == ["text"], (defect, r)
    r = an_call(base, an_tools("[[mock answer_b64=WzFd]]"))[2]   # [1]
    assert r["content"] == [{"type": "text", "text": "[1]"}]
    assert tool_uses(an_call(base, an_tools("[[mock answer_b64=eyJhIjoxfQ]]"))[2]) == [{"a": 1}]
    # nul_char: the string ends with U+0000 in the input object itself
    inp = tool_uses(an_call(base, an_tools("[[mock defect=nul_char]]"))[2])[0]
    assert inp["city"].endswith("\x00") and is_valid(dict(inp, city=inp["city"][:-1]), TOOL_SCHEMA)


def test_malformed_tools_are_refused(base):
    """As the APIs: tools or a tool_choice that cannot be right are a 400
    invalid_request_error (with OpenAI's code null, no context length), so
    a client that sends them wrong fails against the mock as there."""
    def refused(answer, says):
        st, _, r, _ = answer
        assert st == 400 and r["error"]["type"] == "invalid_request_error" and says in r["error"]["message"], r
        if "type" not in r:   # OpenAI's (Anthropic's says "type": "error")
            assert r["error"]["code"] is None, r
    chat = "/v1/chat/completions"
    refused(call(base, chat, oa_tools("x", choice={"type": "function", "function": {"name": "nope"}})), "nope")
    refused(call(base, chat, oa_tools("x", choice="always")), "always")
    body = oa_tools("x")
    body["tools"] = [{"type": "function", "function": {"parameters": TOOL_SCHEMA}}]
    refused(call(base, chat, body), "tools[0].function.name")
    body = oa_tools("x")
    del body["tools"]
    refused(call(base, chat, body), "only allowed when 'tools' are specified")
    refused(call(base, chat, openai("x [[mock tool_calls=2]]")), "tool_calls=2")
    refused(call(base, chat, oa_tools("x [[mock tool_calls=0]]")), "tool_calls=0")
    refused(an_call(base, an_tools("x", choice={"type": "tool", "name": "nope"})), "nope")
    refused(an_call(base, an_tools("x", choice={"type": "tool"})), "tool_choice.tool.name")
    body = an_tools("x")
    body["tools"] = [{"name": "record"}]
    refused(an_call(base, body), "tools.0.custom.input_schema: Field required")
    body = an_tools("x")
    body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    refused(an_call(base, body), "Thinking may not be enabled")
    refused(an_call(base, anthropic("x [[mock tool_calls=2]]")), "tool_calls=2")


# ------------------------------------------------------ latency, http, hang

def test_latency(base):
    st, _, _, dt = call(base, "/v1/chat/completions", openai("[[mock latency_ms=300]]"))
    assert st == 200 and dt >= 0.3


def test_http_error_times_then_success(base):
    hdrs = {"X-Retort-Job-Id": "job-429", "X-Retort-Attempt": "1"}
    body = openai("[[mock http=429 times=1 retry_after=2 retry_after_ms=150]]")
    st, h, r, _ = call(base, "/v1/chat/completions", body, hdrs)
    assert st == 429
    assert r["error"]["code"] == "rate_limit_exceeded" and r["error"]["message"]
    assert h["Retry-After"] == "2" and h["retry-after-ms"] == "150"
    st, h, r, _ = call(base, "/v1/chat/completions", body, hdrs)
    assert st == 200 and is_valid(json.loads(content(r)), PRODUCT) and h.get("Retry-After") is None
    # a new attempt number starts a new count
    st, _, _, _ = call(base, "/v1/chat/completions", body, {**hdrs, "X-Retort-Attempt": "2"})
    assert st == 429
    # without the headers the prompt + attempt is the key
    body = openai("[[mock http=503 times=2]] headerless")
    assert [call(base, "/v1/chat/completions", body)[0] for _ in range(3)] == [503, 503, 200]
    st, _, r, _ = call(base, "/v1/chat/completions", openai("[[mock http=400]]"))
    assert st == 400 and r["error"]["code"] == "context_length_exceeded"
    st, _, r, _ = an_call(base, anthropic("[[mock http=429]]"))
    assert st == 429 and r["error"]["type"] == "rate_limit_error"


def test_spent_quota_as_each_provider_says_it(base):
    hdrs = {"X-Retort-Job-Id": "job-quota", "X-Retort-Attempt": "1"}
    body = openai("[[mock quota=1 times=1 retry_after=8]]")
    st, h, r, _ = call(base, "/v1/chat/completions", body, hdrs)
    assert st == 429 and h["Retry-After"] == "8"
    assert r["error"]["code"] == r["error"]["type"] == "insufficient_quota"
    assert r["error"]["message"].startswith("You exceeded your current quota")
    assert call(base, "/v1/chat/completions", body, hdrs)[0] == 200
    st, _, r, _ = an_call(base, anthropic("[[mock quota=1]]"))
    assert st == 400 and r["type"] == "error" and r["error"]["type"] == "invalid_request_error"
    assert r["error"]["message"].startswith("Your credit balance is too low")


def test_hang_times_out_client(base):
    t0 = time.monotonic()
    with pytest.raises((socket.timeout, TimeoutError, urllib.error.URLError)):
        call(base, "/v1/chat/completions", openai("[[mock hang=1]]"), timeout=1)
    assert time.monotonic() - t0 >= 1
    assert call(base, "/healthz")[2] == "ok"


def test_stats_count_by_job_and_attempt(base):
    assert call(base, "/stats/reset", b"", method="POST")[0] == 200
    for job, attempt in [("j1", "1"), ("j1", "1"), ("j1", "2"), ("j2", "1")]:
        call(base, "/v1/chat/completions", openai("s"), {"X-Retort-Job-Id": job, "X-Retort-Attempt": attempt})
    call(base, "/v1/chat/completions", openai("[[mock http=500]]"))  # no headers: not in calls
    st, _, s, _ = call(base, "/stats")
    assert st == 200
    assert s["calls"] == {"j1:1": 2, "j1:2": 1, "j2:1": 1}
    assert s["requests"] == 5 and s["by_status"] == {"200": 4, "500": 1}
    st, _, light, _ = call(base, "/stats?calls=0")  # what the bench's sampler polls
    assert st == 200 and "calls" not in light
    assert light["requests"] == 5 and light["by_status"] == {"200": 4, "500": 1}
    assert call(base, "/stats?calls=1")[2]["calls"] == s["calls"]
    # the CPU the mock has used (the bench divides it by its requests): a
    # busy burst raises it, and it is the process's own, as the kernel
    # counts it (/proc, in clock ticks: the two fields cut down to a tick)
    cpu = lambda st: st["cpu_user_s"] + st["cpu_sys_s"]
    kernel_before = proc_cpu_s(MOCK_PIDS[base])
    before = cpu(call(base, "/stats?calls=0")[2])
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
        burst = list(ex.map(lambda i: call(base, "/v1/chat/completions", openai("burst %d" % i, schema=COMPLEX)),
                            range(200)))
    assert all(r[0] == 200 for r in burst)
    after = cpu(call(base, "/stats?calls=0")[2])
    kernel_after = proc_cpu_s(MOCK_PIDS[base])
    assert after > before, (before, after)
    assert kernel_before <= before and after <= kernel_after + 2.0 / CLK_TCK, \
        (kernel_before, before, after, kernel_after)
    call(base, "/stats/reset", b"", method="POST")
    s = call(base, "/stats")[2]
    assert s["requests"] == 0 and s["calls"] == {} and s["by_status"] == {}


def test_bad_requests(base):
    assert call(base, "/v1/nothing", openai("x"))[0] == 404
    st, _, r, _ = call(base, "/v1/chat/completions", b"{not json")
    assert st == 400 and r["error"]["type"] == "invalid_request_error"
    st, _, r, _ = call(base, "/v1/chat/completions", openai("[[mock defect=bogus]]"))
    assert st == 400 and "defect" in r["error"]["message"]
    big = b'{"messages": [], "pad": "' + b"x" * (9 << 20) + b'"}'
    assert call(base, "/v1/chat/completions", big, timeout=30)[0] == 413


def test_concurrent_requests_with_latency(base):
    def one(i):
        return call(base, "/v1/chat/completions", openai(f"[[mock latency_ms=500]] c{i}"), timeout=20)

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=100) as ex:
        results = list(ex.map(one, range(100)))
    total = time.monotonic() - t0
    assert all(r[0] == 200 for r in results)
    assert all(r[3] >= 0.5 for r in results)
    assert all(is_valid(json.loads(content(r[2])), PRODUCT) for r in results)
    assert total < 10  # 100 x 0.5 s one after the other would take 50 s


def read_response(sock):
    """One HTTP/1.1 response (with Content-Length) from sock: its status."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the response"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    length = int(next(v for k, v in (h.split(":", 1) for h in lines[1:]) if k.lower() == "content-length"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed in the body"
        body += chunk
    assert len(body) == length, "more than one response"
    return int(lines[0].split()[1])


def wait_stopped(pid):
    """Waits until every thread of pid is stopped (a signal's delivery is
    not its effect: a running thread could still take a request)."""
    deadline = time.time() + 10
    while True:
        states = []
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        if all(st == "T" for st in states):
            return
        assert time.time() < deadline, "not stopped: %s" % states
        time.sleep(0.01)


def test_answers_128_requests_that_arrive_together():
    """MHD 0.9.75 takes epoll events 128 at a time and, given exactly 128,
    waits again before handling any: 128 requests that arrived while its
    thread slept were never read (a worker with llm.max_inflight=128 had
    all its calls time out).  The mock's 5 ms wake-up ends that wait.
    Here the mock is frozen (SIGSTOP) while 128 keep-alive clients send,
    so that all 128 requests are waiting when it wakes."""
    proc, url = start_mock()
    host, port = url[len("http://"):].split(":")
    body = json.dumps(openai("together")).encode()
    req = ("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
           "Content-Length: %d\r\n\r\n" % (host, len(body))).encode() + body
    socks = []
    try:
        for _ in range(128):
            s = socket.create_connection((host, int(port)), timeout=10)
            socks.append(s)
            s.sendall(req)
            assert read_response(s) == 200
        for _ in range(3):
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                wait_stopped(proc.pid)
                for s in socks:
                    s.sendall(req)
                time.sleep(0.2)
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            for s in socks:
                s.settimeout(5)
                assert read_response(s) == 200
    finally:
        for s in socks:
            s.close()
        stop_mock(proc)


def test_api_key_checked():
    proc, url = start_mock("--api-key", "sekret")
    try:
        assert call(url, "/v1/chat/completions", openai("x"))[0] == 401
        st, _, r, _ = call(url, "/v1/chat/completions", openai("x"), {"Authorization": "Bearer wrong"})
        assert st == 401 and r["error"]["code"] == "invalid_api_key"
        assert call(url, "/v1/chat/completions", openai("x"), {"Authorization": "Bearer sekret"})[0] == 200
        st, _, r, _ = an_call(url, anthropic("x"), {"x-api-key": "nope"})
        assert st == 401 and r["error"]["type"] == "authentication_error"
        assert an_call(url, anthropic("x"), {"x-api-key": "sekret"})[0] == 200
    finally:
        stop_mock(proc)


def test_clean_exit_with_pending_requests():
    """SIGTERM with requests held: the mock exits 0 at once; the answers
    held for their latency go out then, early and whole (200), and a
    hanging request's connection is closed without an answer."""
    proc, url = start_mock("--latency-ms", "5000")
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=5) as ex:
            futs = [ex.submit(call, url, "/v1/chat/completions", openai(f"p{i}"), None, 20) for i in range(4)]
            hang = ex.submit(call, url, "/v1/chat/completions", openai("[[mock hang=1]]"), None, 20)
            deadline = time.monotonic() + 10
            while call(url, "/stats?calls=0")[2]["in_flight"] < 5:   # all five arrived and held
                assert time.monotonic() < deadline, call(url, "/stats?calls=0")[2]
                time.sleep(0.01)
            t0 = time.monotonic()
            stop_mock(proc)
            assert time.monotonic() - t0 < 5
            for f in futs:
                st, _, r, elapsed = f.result()
                assert st == 200 and is_valid(json.loads(content(r)), PRODUCT), (st, r)
                assert elapsed < 5, elapsed   # before its latency: sent at the stop
            with pytest.raises(ConnectionError):   # closed, not timed out (TimeoutError)
                hang.result()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

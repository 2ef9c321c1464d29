#!/usr/bin/python3
"""Writes the training corpus of the validator's profile-guided build.

usage: /usr/bin/python3 tests/pgo/gen_corpus.py   (rewrites tests/pgo/*.jsonl)

One JSONL file per schema: a valid instance, then mutations of it such as
a model gets wrong (wrong types, missing and extra members, bad enum
values, short and long strings, out-of-range numbers), one to five per
instance, as in repair attempts.  The schemas: two output schemas of
schemas/output/ (ticket.v1, product.v1), the job envelope every message
is checked against (schemas/job.schema.json; a retry job carries
violations) and tests/pgo/keywords.schema.json, the keywords the others
do not use (so that no part of the validator is laid out as never run),
with FIXED mistakes besides the random ones.
invoice.v1 is left out on purpose: the bench's schema is shaped like it,
and `make bench-schema` should measure a build that never saw it.
The seed is fixed, so the corpus (and the build) is reproducible.
"""
import copy
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

BASE = {
    "ticket.v1": {
        "summary": "Customer cannot log in after the password reset.",
        "priority": "p2", "team": "auth", "sentiment": -0.4,
        "customer": {"email": "jane.doe@example.com", "plan": "pro"},
        "actions": [{"kind": "reply", "detail": "Send a new reset link"},
                    {"kind": "escalate", "detail": "Check the SSO configuration"}],
    },
    "product.v1": {
        "name": "Trail Running Shoe", "sku": "TRS-1042", "price": 89.9,
        "currency": "EUR", "category": "footwear", "in_stock": True,
        "tags": ["outdoor", "running", "mesh"],
        "dimensions": {"width_cm": 10, "height_cm": 12, "depth_cm": 30},
    },
    "job": {
        "job_id": "b7-000123", "schema": "ticket.v1", "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "Answer in JSON."},
                     {"role": "user", "content": "Triage this support email."}],
        "params": {"temperature": 0.2}, "max_attempts": 3, "attempt": 2,
        "deadline": "2026-11-23T10:00:00Z", "batch_id": "b7",
        "metadata": {"tenant": "acme"},
        "reflection": {
            "attempt": 1, "max_attempts": 3, "reason": "schema_violation",
            "violations": [{"path": "/priority", "keyword": "/properties/priority/enum",
                            "code": "ENUM_MISMATCH", "message": "value must be one of",
                            "expected": ["p1", "p2"], "actual": "high"}],
            "previous_output": "{\"priority\": \"high\"}",
            "prompt": "Fix the priority."},
    },
    "keywords": {
        "kind": "circle", "radius": 2.5,
        "tree": {"name": "root", "kids": [{"name": "a"}, {"name": "b", "kids": [{"name": "c"}]}]},
        "tuple": ["t", 1.5, True, False], "seq": [1, "ab", "cd"],
        "labels": {"x-one": "1", "two": 2},
        "code": "123e4567-e89b-12d3-a456-426614174000", "note": "n",
        "when": "2024-05-01T10:20:30Z", "day": "2024-05-01",
        "contact": "ada@example.com", "host": "api.example.com", "ip": "10.0.0.1",
        "ip6": "::1", "link": "https://example.com/a?b=c", "span": "P1DT2H",
        "payment": {"method": "sepa", "iban": "DE89370400440532013000"},
        "list": [1, 2], "many": [1, 2, 3], "blob": "eyJhIjoxfQ==", "ptr": "/a/b~1c",
        "rptr": "1/a", "tmpl": "https://example.com/{id}", "idn": "b\u00fccher.example",
        "ref": "../a#b", "re": "^[a-z]+$", "at": "10:20:30Z",
        "uid": "123e4567-e89b-12d3-a456-426614174000",
    },
}

# Mistakes random mutation rarely makes, appended to a corpus as they are
# (member: value, on a copy of the valid instance): the closest oneOf
# branch (a matching discriminator with a bad member, and none matching),
# a list over the report's cap of 32 violations, bad formats and content.
FIXED = {
    "keywords": [
        {"payment": {"method": "sepa", "iban": "not an iban"}},
        {"payment": {"method": "cash"}},
        {"payment": {"method": "card", "last4": 12}},
        {"many": ["x"] * 40},
        {"list": []},
        {"list": [1, 2, 3, 4, 5, "6"]},
        {"blob": "not base64!", "ptr": "a/b", "rptr": "x", "tmpl": "{", "idn": "-bad-",
         "ref": "\\", "re": "(", "at": "25:00:00Z", "uid": "nope", "when": "yesterday"},
    ],
}


def paths(x, p=()):
    yield p
    if isinstance(x, dict):
        for k, v in x.items():
            yield from paths(v, p + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from paths(v, p + (i,))


def mutate(rng, x):
    y = copy.deepcopy(x)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 5])):
        ps = [p for p in paths(y) if p]
        p = rng.choice(ps)
        parent = y
        for k in p[:-1]:
            parent = parent[k]
        op = rng.choice(["type", "del", "extra", "str", "num"])
        if op == "type":
            parent[p[-1]] = rng.choice([1, "x", None, True, [], {}])
        elif op == "del" and isinstance(parent, dict):
            del parent[p[-1]]
        elif op == "extra" and isinstance(parent, dict):
            parent["extra_%d" % rng.randint(0, 9)] = 1
        elif op == "str":
            parent[p[-1]] = rng.choice(["", "ab", "UPPER case", "a" * 300])
        else:
            parent[p[-1]] = rng.choice([-5, 0, 1e9, 2.5])
    return y


def main():
    rng = random.Random(7)
    for name, base in BASE.items():
        with open(os.path.join(HERE, name + ".jsonl"), "w") as f:
            f.write(json.dumps(base) + "\n")
            for _ in range(40):
                f.write(json.dumps(mutate(rng, base)) + "\n")
            for change in FIXED.get(name, []):
                inst = copy.deepcopy(base)
                inst.update(change)
                f.write(json.dumps(inst) + "\n")


if __name__ == "__main__":
    main()

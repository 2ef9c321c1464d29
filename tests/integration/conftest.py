import glob
import json
import os
import subprocess

import pytest

from stack import REPO, Stack, failed

BASE = "https://retort.dev/schemas/"


@pytest.fixture(scope="session", autouse=True)
def built():
    if not os.environ.get("TESTS_NO_BUILD"):   # set when the binaries are built already
        subprocess.run(["make", "-s", "-C", REPO, "all"], check=True)


@pytest.fixture
def stack(request):
    marker = request.node.get_closest_marker("llm_args")
    s = Stack(llm_args=marker.args if marker else ())
    yield s
    bad = failed(request)
    s.close(keep=bad)
    if bad:
        for w in s.workers:
            print("---- %s log (tail) ----" % w.name)
            print(s.worker_log(w.name)[-4000:])


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _unique(path, pairs):
    """A JSON object's members, refusing a name twice: readers disagree on
    which copy counts (Retort's validator the first, Python's the last),
    so a schema with one says two things."""
    names = [k for k, _ in pairs]
    twice = sorted({k for k in names if names.count(k) > 1})
    if twice:
        raise ValueError("%s: member %s appears more than once" % (path, ", ".join(map(repr, twice))))
    return dict(pairs)


class Envelopes:
    """Validates events against the JSON Schemas in schemas/ with an
    independent implementation (python3-jsonschema)."""

    def __init__(self):
        import jsonschema
        self.jsonschema = jsonschema
        self.store = {}
        for path in glob.glob(os.path.join(REPO, "schemas", "**", "*.json"), recursive=True):
            with open(path) as f:
                doc = json.load(f, object_pairs_hook=lambda pairs: _unique(path, pairs))
            self.store[doc.get("$id", BASE + os.path.relpath(path, os.path.join(REPO, "schemas")))] = doc

    def validate(self, name, instance):
        uri = BASE + name
        schema = self.store[uri]
        resolver = self.jsonschema.RefResolver(uri, schema, store=self.store)
        cls = self.jsonschema.validators.validator_for(schema)
        cls(schema, resolver=resolver, format_checker=cls.FORMAT_CHECKER).validate(instance)


@pytest.fixture(scope="session")
def envelopes():
    return Envelopes()

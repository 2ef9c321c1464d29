"""retort worker --processes N: the supervisor's stop and its restarts, with
an LD_PRELOAD shim (tests/preload_supervisor.c) that puts a SIGTERM just
before the supervisor's wait, or makes fork() fail."""
import os
import re
import signal
import subprocess
import time

import pytest

from stack import BUILD, build_preload

RETORT = os.environ.get("RETORT_BIN", os.path.join(BUILD, "retort"))


@pytest.fixture
def shim(stack):
    return build_preload("preload_supervisor", stack.dir)


class Supervisor:
    def __init__(self, stack, shim, n=2, **env):
        self.log_path = os.path.join(stack.dir, "sup.log")
        self.p = subprocess.Popen(
            [RETORT, "worker", "-c", stack.config_path, "--processes", str(n), "--set", "worker.id=sup"],
            stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, OPENAI_API_KEY="sk-test", LD_PRELOAD=shim, **env))

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def children(self):
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open("/proc/%s/stat" % d) as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == self.p.pid:
                            out.append(int(d))
                except (OSError, IndexError, ValueError):
                    pass
        return out

    def wait_log(self, text, count=1, timeout=60):
        deadline = time.time() + timeout
        while self.log().count(text) < count:
            assert time.time() < deadline, "no %r in the log:\n%s" % (text, self.log()[-3000:])
            assert self.p.poll() is None, "the supervisor ended (%s):\n%s" % (self.p.returncode, self.log()[-3000:])
            time.sleep(0.1)

    def kill_all(self):
        # its own session: the workers too, whatever the supervisor did
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait(10)


def test_stop_just_before_the_wait_is_not_lost(stack, shim, tmp_path):
    """A SIGTERM between the supervisor's look at its stop flag and its
    waitpid was lost until a worker died on its own: the supervisor and its
    workers ran on.  The shim raises SIGTERM inside the first waitpid once
    the trigger file exists; a worker killed makes that call."""
    trigger = str(tmp_path / "term")
    sup = Supervisor(stack, shim, PRELOAD_TERM_IN_WAITPID=trigger)
    try:
        sup.wait_log("consuming retort.jobs", 2)
        kids = sup.children()
        assert len(kids) == 2, kids
        open(trigger, "w").close()
        os.kill(kids[0], signal.SIGKILL)
        try:
            rc = sup.p.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail("the supervisor did not stop:\n" + sup.log()[-3000:])
        # the worker still running drained and exited 0; none was started after the stop
        assert rc == 0, sup.log()[-3000:]
        assert "stopping workers" in sup.log()
        assert sup.log().count("consuming retort.jobs") == 2
        assert "supervisor: 2 worker process(es) started" in sup.log()
    finally:
        sup.kill_all()


def test_failed_forks_are_retried_then_given_up(stack, shim, tmp_path):
    """fork() returning -1 was taken for a live worker: with every fork
    failing, the supervisor found no child and exited 0 at once, having
    started nothing.  Now each failure is logged and retried with the
    backoff; slot 0's sixth gives up (exit 1), before slot 1's sixth."""
    forks = str(tmp_path / "forks")
    sup = Supervisor(stack, shim, PRELOAD_FAIL_FORKS="1000", PRELOAD_FORK_LOG=forks)
    try:
        rc = sup.p.wait(120)
        log = sup.log()
        assert rc == 1, log[-3000:]
        # none started, and the log says so (it said "2 worker process(es) started")
        assert ("supervisor: 0 of 2 worker process(es) started; 2 could not be forked "
                "(Resource temporarily unavailable), retrying") in log, log[-3000:]
        assert "supervisor: 2 worker process(es) started" not in log
        assert "after a failed fork" not in log
        assert log.count("cannot start worker 0: fork") == 6, log[-3000:]
        assert log.count("cannot start worker 1: fork") == 5, log[-3000:]
        assert "worker 0 cannot be started; giving up" in log
        with open(forks) as f:
            assert len(f.readlines()) == 11
    finally:
        sup.kill_all()


def test_a_failed_fork_is_retried(stack, shim, tmp_path):
    """The first two forks fail (one per slot), the retries start both
    workers, which then stop on SIGTERM: exit 0."""
    forks = str(tmp_path / "forks")
    sup = Supervisor(stack, shim, PRELOAD_FAIL_FORKS="2", PRELOAD_FORK_LOG=forks)
    try:
        sup.wait_log("consuming retort.jobs", 2)
        log = sup.log()
        assert log.count("cannot start worker 0: fork") == 1 and log.count("cannot start worker 1: fork") == 1
        assert "supervisor: 0 of 2 worker process(es) started; 2 could not be forked" in log, log[-3000:]
        assert "supervisor: 2 worker process(es) started" not in log
        assert len(re.findall(r"supervisor: worker [01] started \(pid \d+\) after a failed fork", log)) == 2, log
        sup.p.send_signal(signal.SIGTERM)
        assert sup.p.wait(60) == 0, sup.log()[-3000:]
    finally:
        sup.kill_all()


def test_the_start_is_logged_as_it_went(stack, shim, tmp_path):
    """One fork of two fails: the log said "2 worker process(es) started"
    with one running.  It now counts the workers running and says why the
    others are not."""
    sup = Supervisor(stack, shim, PRELOAD_FAIL_FORKS="1")
    try:
        sup.wait_log("consuming retort.jobs", 2)
        log = sup.log()
        assert ("supervisor: 1 of 2 worker process(es) started; 1 could not be forked "
                "(Resource temporarily unavailable), retrying") in log, log[-3000:]
        assert "supervisor: 2 worker process(es) started" not in log
        assert "cannot start worker 0: fork: Resource temporarily unavailable" in log
        assert "supervisor: worker 0 started" in log and "worker 1 started" not in log
        assert len(sup.children()) == 2
        sup.p.send_signal(signal.SIGTERM)
        assert sup.p.wait(60) == 0, sup.log()[-3000:]
    finally:
        sup.kill_all()


def test_no_restart_after_a_stop_during_the_backoff(stack, shim, tmp_path):
    """A SIGTERM during the wait before a restart ends the supervisor
    without starting anything more (it slept the backoff out, then forked
    a worker after the stop)."""
    forks = str(tmp_path / "forks")
    sup = Supervisor(stack, shim, PRELOAD_FAIL_FORKS="1000", PRELOAD_FORK_LOG=forks)
    try:
        # after each slot's 4th failure the next try is 3.2 s away
        sup.wait_log("cannot start worker 1: fork", 4)
        sup.p.send_signal(signal.SIGTERM)
        assert sup.p.wait(60) == 0, sup.log()[-3000:]
        with open(forks) as f:
            assert len(f.readlines()) == 8, sup.log()[-3000:]
        assert "giving up" not in sup.log()
    finally:
        sup.kill_all()


def test_a_stop_while_the_workers_start_drains_them(stack, shim, tmp_path):
    """A SIGTERM forwarded to workers still setting up (the shim holds each
    for 1.5 s as it starts) killed them with no drain, and the supervisor's
    orderly stop exited 1.  They now start with the stop blocked and take
    it once their handlers are in: each stops as after any SIGTERM, and
    the supervisor exits 0."""
    forks = str(tmp_path / "forks")
    sup = Supervisor(stack, shim, PRELOAD_CHILD_PAUSE_MS="1500", PRELOAD_FORK_LOG=forks)
    try:
        deadline = time.time() + 30
        while not os.path.exists(forks) or open(forks).read().count("child") < 2:
            assert time.time() < deadline, sup.log()[-3000:]
            time.sleep(0.01)
        sup.p.send_signal(signal.SIGTERM)
        assert sup.p.wait(60) == 0, sup.log()[-3000:]
        log = sup.log()
        assert "killed by signal" not in log
        assert log.count("consuming retort.jobs") == 2, log[-3000:]
        assert log.count("signal 15: draining") == 2 and log.count("stopping: ") == 2, log[-3000:]
    finally:
        sup.kill_all()


def test_worker_usage_errors(stack):
    """A -c with no file ran on the defaults, silently; worker N of
    --processes serves metrics on metrics.port + N, which past 65535
    wrapped to a port at random.  Both are usage errors now."""
    cases = [(["-c"], "-c needs a file"),
             (["-c", stack.config_path, "--processes", "2", "--set", "metrics.port=65535"],
              "metrics.port 65535 with 2 processes (port + N for worker N) goes past 65535")]
    for args, msg in cases:
        p = subprocess.run([RETORT, "worker"] + args, capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and msg in p.stderr, (args, p.returncode, p.stderr)


def test_a_static_instance_id_too_long_to_slot_is_refused(stack):
    """Each process of a supervisor joins as kafka.group.instance.id + "-N";
    an id longer than the worker's buffer was cut to 255 characters first,
    so two hosts' ids that differ past it were one, and fenced each other.
    Kafka takes 249 at most: the worker says so and does not start."""
    sup = stack.start_worker("--processes", "2", "--set", "kafka.group.instance.id=" + "x" * 300, name="longid")
    stack.wait_log("longid", "config key 'kafka.group.instance.id': longer than 249 characters")
    assert "static group membership" not in stack.worker_log("longid")
    stack.stop_worker(sup)
    # 249 is taken
    sup = stack.start_worker("--processes", "2", "--set", "kafka.group.instance.id=" + "y" * 249, name="okid")
    stack.wait_log("okid", "static group membership as " + "y" * 249 + "-1")
    assert stack.stop_worker(sup) == 0

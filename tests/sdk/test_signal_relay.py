"""A signal the main thread did not take in time is sent to it again (signal_relay.py), in a real
interpreter: once, only to openruns' own handler, and never into a wakeup fd that is not ours."""

from __future__ import annotations

import signal
import socket

import openruns
from openruns.settings import DEFAULT_DIR

from .. import patience
from .helpers import only_run_dir, python, run_json, spawn

OPEN = """
import openruns
run = openruns.init(kind="train", model="m", mode="offline")
run.log_metrics({"x": 1}, step=0)
"""

# The C handler of Python takes the signal on another thread once the main thread sleeps, as the
# kernel does when it hands a process's signal to another thread; a signal that came just before
# the main thread's system call (benchmarks/sigint_loss.py) is left in the same state: marked
# pending, the call not interrupted. The main thread's state is read from /proc, and said, so
# the test cannot pass with a main thread that was not asleep yet.
TAKEN_ON_ANOTHER_THREAD = """
import signal, threading, time

def main_is_asleep():
    task = f"/proc/self/task/{threading.main_thread().native_id}"
    with open(f"{task}/wchan") as wchan, open(f"{task}/stat") as stat:
        return "nanosleep" in wchan.read() and stat.read().rsplit(")", 1)[1].split()[0] == "S"

def take_the_signal(signum=signal.SIGINT):
    deadline = time.monotonic() + 60
    while not main_is_asleep() and time.monotonic() < deadline:
        time.sleep(0.01)
    print("main asleep:", main_is_asleep(), flush=True)
    signal.pthread_kill(threading.get_ident(), signum)
"""
TAKE_SIGINT = TAKEN_ON_ANOTHER_THREAD + "threading.Thread(target=take_the_signal).start()\n"


def _status(tmp_path):
    doc = run_json(only_run_dir(tmp_path / DEFAULT_DIR))
    return doc["status"], doc["error"]


def test_a_ctrl_c_the_sleeping_main_thread_did_not_take_still_interrupts_it(tmp_path):
    # Without the relay the main thread sleeps its hour, and the test ends at its bound.
    code = OPEN + TAKE_SIGINT + "import time\ntime.sleep(3600)\n"
    proc = spawn(code, tmp_path)
    out, err = proc.communicate(timeout=patience.EXIT)
    assert "main asleep: True" in out, (out, err)
    sleep_line = code.splitlines().index("time.sleep(3600)") + 1
    assert f"line {sleep_line}, in <module>\nKeyboardInterrupt" in err, err  # from the sleep
    assert _status(tmp_path) == ("cancelled", "interrupted (KeyboardInterrupt)")


def test_a_sigterm_the_sleeping_main_thread_did_not_take_still_closes_the_run(tmp_path):
    # A scheduler's stop: without the relay the run stays open until its SIGKILL.
    code = (
        OPEN
        + TAKEN_ON_ANOTHER_THREAD
        + "threading.Thread(target=take_the_signal, args=(signal.SIGTERM,)).start()\n"
        + "time.sleep(3600)\n"
    )
    proc = spawn(code, tmp_path)
    out, err = proc.communicate(timeout=patience.EXIT)
    assert "main asleep: True" in out, (out, err)
    assert proc.returncode == -signal.SIGTERM, err  # closed, then the default disposition
    assert _status(tmp_path) == ("crashed", "terminated by SIGTERM")


def test_a_handled_ctrl_c_is_not_sent_again(tmp_path):
    code = (
        OPEN
        + """
import time
caught = 0
deadline = time.monotonic() + 5  # long past every time the relay would send it again
ready = False
while True:
    try:  # the Ctrl-C may come while "ready" is still being printed
        if not ready:
            ready = True
            print("ready", flush=True)
        while time.monotonic() < deadline:
            time.sleep(0.05)
        break
    except KeyboardInterrupt:
        caught += 1
print("caught", caught, flush=True)
"""
    )
    proc = spawn(code, tmp_path)
    assert "ready" in proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=patience.EXIT)
    assert "caught 1\n" in out, (out, err)


def test_an_applications_own_handler_is_not_run_twice(tmp_path):
    # Its handler does not tell the relay it ran: sent again, it would run once per relay.
    code = (
        OPEN
        + """
import signal
calls = 0
def mine(signum, frame):
    global calls
    calls += 1
signal.signal(signal.SIGINT, mine)
"""
        + TAKE_SIGINT
        + """
import time
time.sleep(3)  # the pending signal waits for it (the relay leaves it alone)
time.sleep(0.1)
print("calls", calls, flush=True)
"""
    )
    proc = python(code, tmp_path)
    assert "main asleep: True" in proc.stdout, proc.stderr
    assert "calls 1\n" in proc.stdout, proc.stderr


def test_a_wakeup_fd_someone_else_holds_is_left_to_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    theirs, _peer = socket.socketpair()
    theirs.setblocking(False)
    signal.set_wakeup_fd(theirs.fileno())
    try:
        run = openruns.init(kind="eval", model="m", mode="offline")
        assert signal.set_wakeup_fd(theirs.fileno()) == theirs.fileno()
        run.finish()
        assert signal.set_wakeup_fd(theirs.fileno()) == theirs.fileno()
    finally:
        signal.set_wakeup_fd(-1)
        theirs.close()
        _peer.close()


def test_the_relay_is_installed_while_a_run_is_open_and_not_after(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = openruns.init(kind="eval", model="m", mode="offline")
    ours = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(ours)
    assert ours != -1
    run.finish()
    assert signal.set_wakeup_fd(-1) == -1


def test_a_forked_child_does_not_write_into_the_parents_relay(tmp_path):
    code = (
        OPEN
        + """
import os, signal
pid = os.fork()
if pid == 0:
    print("child's wakeup fd", signal.set_wakeup_fd(-1), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent's is set", signal.set_wakeup_fd(-1) != -1, flush=True)
"""
    )
    proc = python(code, tmp_path)
    assert "child's wakeup fd -1\n" in proc.stdout, proc.stderr
    assert "parent's is set True\n" in proc.stdout, proc.stderr


def test_a_forked_child_keeps_a_wakeup_fd_someone_took_over(tmp_path):
    code = (
        OPEN
        + """
import os, signal, socket
theirs, _ = socket.socketpair()
theirs.setblocking(False)
signal.set_wakeup_fd(theirs.fileno())  # an event loop's, after the run opened
pid = os.fork()
if pid == 0:
    print("child's is theirs", signal.set_wakeup_fd(-1) == theirs.fileno(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""
    )
    proc = python(code, tmp_path)
    assert "child's is theirs True\n" in proc.stdout, proc.stderr

"""System metrics with threads: one thread that waits on an event and stops, fork, and a real
run. One sample's rows (host, process, GPUs through a fake NVML) are in
tests/unit/test_system_rows.py."""

from __future__ import annotations

import os
import threading
import time

import pytest

import openruns
from openruns.system import SystemSampler

from .. import patience
from .helpers import only_run_dir, records


def test_one_thread_samples_each_interval_and_stops_at_once():
    logged: list[dict] = []
    sampler = SystemSampler(logged.append, 0.2, host=False)
    sampler.start()
    sampler.start()  # a second start starts nothing
    threads = [t for t in threading.enumerate() if t.name == "openruns-system"]
    assert len(threads) == 1
    deadline = time.monotonic() + patience.SETTLE
    while len(logged) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(logged) >= 3
    sampler.stop()
    assert not threads[0].is_alive()
    count = len(logged)
    time.sleep(0.5)
    assert len(logged) == count


def test_a_long_interval_waits_on_the_event_and_stop_interrupts_it():
    logged: list[dict] = []
    sampler = SystemSampler(logged.append, 3600, host=False)
    sampler.start()
    time.sleep(0.3)
    sampler.stop(timeout=10)
    assert not sampler._thread.is_alive()  # woken by stop, not by a timeout
    assert logged == []  # the first sample is due after min(interval, 2 s): never reached


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_never_samples():
    logged: list[dict] = []
    sampler = SystemSampler(logged.append, 0.05, host=False)
    sampler.start()
    pid = os.fork()
    if pid == 0:  # the child: the sampler is stopped and has no thread
        code = 0 if sampler._stop.is_set() and sampler._thread is None else 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    sampler.stop()
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_run_logs_system_rows_without_a_step(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path, system_metrics_interval=0.2)
    deadline = time.monotonic() + patience.SETTLE
    while run._system.samples < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    run.finish()
    rows = records(only_run_dir(tmp_path), "metrics")
    system = [r for r in rows if any(k.startswith("system/") for k in r["values"])]
    assert len(system) >= 2
    assert all(r["step"] is None and r["ts"] > 0 for r in system)
    assert "system/memory/used_percent" in system[0]["values"]  # the owner samples its host
    assert not run._system._thread.is_alive()  # stopped at finish

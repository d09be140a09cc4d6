"""
System metrics: CPU, memory, disk and network of this process and of its host, and the GPUs
where NVML is present, sampled every `system_metrics_interval` seconds (a Settings field;
0 = off) on one thread, logged as rows without a step under `system/` through the run's own
`log_metrics(values)`: the dashboard draws them by wall time in its "system" section.

    sampler = SystemSampler(run.log_metrics, interval=10.0, host=True)
    sampler.start()          # a first sample after min(interval, 2 s), then one per interval
    sampler.stop()           # at finish(); a forked child never samples (fork.register)

Only the process that owns the run samples the host (`system/cpu/...`, `system/memory/...`,
`system/disk/...`, `system/network/...`, `system/gpu/<i>/...`); every process samples itself
(`system/process/...`, or `system/process/<component>/...` in an attached process, so that the
components of one run never share a series).

The thread waits on an Event with the interval as its timeout: it wakes once per sample and
at stop, never in between. psutil reads the counters (a core dependency: /proc is Linux only);
NVML comes from `nvidia-ml-py` (`pip install openruns[gpu]`), imported on first use, and a
host without it or without a driver simply has no GPU rows.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from . import fork

__all__ = ["GpuSampler", "SystemSampler", "process_prefix", "start_sampler"]

logger = logging.getLogger("openruns")

MiB = 1024**2
GiB = 1024**3
FIRST_SAMPLE_SECONDS = 2.0


def start_sampler(
    log: Callable[[Mapping[str, float]], None], interval: float, *, owner: bool, disk_path: str
) -> SystemSampler | None:
    """A started sampler for a run (see the module), or None when `interval` is 0 or psutil
    cannot be loaded (said once in a warning: the run goes on without system metrics)."""
    if interval <= 0:
        return None
    from .identity import component_name, nonzero_rank

    try:
        prefix = process_prefix(owner, component_name(), nonzero_rank())
        sampler = SystemSampler(log, interval, host=owner, prefix=prefix, disk_path=disk_path)
    except Exception as exc:  # psutil missing or refusing on this platform
        logger.warning("openruns: no system metrics: %s: %s", type(exc).__name__, exc)
        return None
    sampler.start()
    return sampler


def process_prefix(owner: bool, component: str, rank: str | None) -> str:
    """The key prefix of this process's own rows: `system/process` for the run's owner, else
    `system/process/<component>` (with `.rank<N>` for a non-zero rank)."""
    if owner:
        return "system/process"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", component).strip("_") or "process"
    suffix = f".rank{rank.split('=')[-1]}" if rank else ""
    return f"system/process/{name}{suffix}"


class GpuSampler:
    """
    Per GPU: utilisation (%), memory used (GiB and %), power (W), temperature (C), through NVML.
    `load_nvml` returns the `pynvml` module (tests pass a fake); any failure to load or to
    initialise it means no GPUs, said once at debug level. A value NVML cannot give for a
    device (power on some boards) is left out of that sample.
    """

    def __init__(self, load_nvml: Callable[[], ModuleType] | None = None):
        self._load = load_nvml or _import_pynvml
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._tried = False

    def _start(self) -> None:
        self._tried = True
        try:
            nvml = self._load()
            nvml.nvmlInit()
            self._handles = [
                nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
            ]
            self._nvml = nvml
        except Exception as exc:  # not installed, no driver, no device: no GPU rows
            logger.debug("openruns: no GPU metrics (%s: %s)", type(exc).__name__, exc)
            self._handles = []

    def sample(self) -> dict[str, float]:
        if not self._tried:
            self._start()
        nvml = self._nvml
        out: dict[str, float] = {}
        for i, handle in enumerate(self._handles):
            _sample_gpu(out, f"system/gpu/{i}", nvml, handle)
        return out

    def close(self) -> None:
        if self._nvml is not None:
            _call(self._nvml.nvmlShutdown)
            self._nvml = None
            self._handles = []


def _sample_gpu(out: dict[str, float], prefix: str, nvml: Any, handle: Any) -> None:
    _read(out, f"{prefix}/util_percent", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    memory = _call(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    if memory is not None and memory.total:
        out[f"{prefix}/memory_used_gib"] = memory.used / GiB
        out[f"{prefix}/memory_percent"] = 100.0 * memory.used / memory.total
    _read(out, f"{prefix}/power_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
    _read(
        out,
        f"{prefix}/temperature_c",
        lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
    )


def _import_pynvml() -> ModuleType:
    # By name: nvidia-ml-py ships no type information, and the module is only handed on.
    return importlib.import_module("pynvml")


def _call(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:
        return None


def _read(out: dict[str, float], key: str, read: Callable[[], Any]) -> None:
    value = _call(read)
    if isinstance(value, (int, float)):
        out[key] = float(value)


class SystemSampler:
    """One thread sampling every `interval` seconds into `log(values)` (see the module)."""

    def __init__(
        self,
        log: Callable[[Mapping[str, float]], None],
        interval: float,
        *,
        host: bool,
        prefix: str = "system/process",
        disk_path: str = ".",
        gpus: GpuSampler | None = None,
    ):
        import psutil

        self._psutil = psutil
        self._log = log
        self.interval = interval
        self.host = host
        self.prefix = prefix
        self._disk_path = disk_path
        self._gpus = (gpus or GpuSampler()) if host else None
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._last: tuple[float, Any, Any] | None = None  # (monotonic, disk io, net io)
        self.samples = 0
        fork.register(self)

    def start(self) -> None:
        if self.interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="openruns-system", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sampling (idempotent); the thread is joined for at most `timeout` seconds."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if self._gpus is not None:
            self._gpus.close()

    def _loop(self) -> None:
        # CPU percentages are measured between two calls: prime them, and take the first
        # sample soon (a short run still gets rows), then one per interval.
        self._process.cpu_percent(None)
        self._psutil.cpu_percent(None)
        delay = min(self.interval, FIRST_SAMPLE_SECONDS)
        while not self._stop.wait(delay):
            delay = self.interval
            try:
                values = self.sample()
                if values:
                    self._log(values)
                    self.samples += 1
            except Exception as exc:  # never the caller's problem
                logger.debug("openruns: a system metrics sample failed: %r", exc)

    def sample(self) -> dict[str, float]:
        """One sample: this process's rows, and the host's when `host`."""
        psutil = self._psutil
        out: dict[str, float] = {}
        process = self._process
        with process.oneshot():
            out[f"{self.prefix}/cpu_percent"] = process.cpu_percent(None)
            out[f"{self.prefix}/rss_mib"] = process.memory_info().rss / MiB
            out[f"{self.prefix}/threads"] = float(process.num_threads())
        if not self.host:
            return out
        out["system/cpu/percent"] = psutil.cpu_percent(None)
        memory = psutil.virtual_memory()
        out["system/memory/used_percent"] = memory.percent
        out["system/memory/available_gib"] = memory.available / GiB
        try:
            out["system/disk/used_percent"] = psutil.disk_usage(self._disk_path).percent
        except OSError:
            pass
        now = time.monotonic()
        disk = _call(psutil.disk_io_counters)
        net = _call(psutil.net_io_counters)
        if self._last is not None:
            then, disk0, net0 = self._last
            elapsed = max(now - then, 1e-6)
            if disk is not None and disk0 is not None:
                out["system/disk/read_mib_s"] = (disk.read_bytes - disk0.read_bytes) / MiB / elapsed
                out["system/disk/write_mib_s"] = (
                    (disk.write_bytes - disk0.write_bytes) / MiB / elapsed
                )
            if net is not None and net0 is not None:
                out["system/network/sent_mib_s"] = (
                    (net.bytes_sent - net0.bytes_sent) / MiB / elapsed
                )
                out["system/network/recv_mib_s"] = (
                    (net.bytes_recv - net0.bytes_recv) / MiB / elapsed
                )
        self._last = (now, disk, net)
        if self._gpus is not None:
            out.update(self._gpus.sample())
        return out

    def _after_fork_in_child(self) -> None:
        # The child is another process: its owner's sampler is not its own (the run's fork
        # hook decides what the child logs); this one never runs there.
        self._stop = threading.Event()
        self._stop.set()
        self._thread = None
        self._gpus = None

"""System metrics' pure parts: one sample's rows (host, process, GPUs from a fake pynvml), no
GPU, the default loader, an interval of 0, a bad interval refused. The sampling thread, fork
and a run's rows are in tests/sdk/test_system.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import openruns
from openruns.system import GpuSampler, SystemSampler, process_prefix

GiB = 1024**3


class FakeNvmlError(Exception):
    pass


def fake_nvml(devices: int = 2, power: bool = True) -> SimpleNamespace:
    """The few pynvml calls the sampler makes, answering fixed values per device."""
    calls: list[str] = []

    def power_usage(handle: int) -> int:
        if not power or handle == 1:
            raise FakeNvmlError("Not Supported")  # as NVML says for some boards
        return 250_000 + handle  # milliwatts

    return SimpleNamespace(
        calls=calls,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: devices,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=50 + h, memory=10),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=8 * GiB, total=80 * GiB),
        nvmlDeviceGetPowerUsage=power_usage,
        nvmlDeviceGetTemperature=lambda h, sensor: 60 + h,
    )


def test_gpu_rows_from_nvml_values_and_a_value_nvml_cannot_give_is_left_out():
    nvml = fake_nvml()
    gpus = GpuSampler(load_nvml=lambda: nvml)
    assert gpus.sample() == {
        "system/gpu/0/util_percent": 50.0,
        "system/gpu/0/memory_used_gib": 8.0,
        "system/gpu/0/memory_percent": 10.0,
        "system/gpu/0/power_w": 250.0,
        "system/gpu/0/temperature_c": 60.0,
        "system/gpu/1/util_percent": 51.0,
        "system/gpu/1/memory_used_gib": 8.0,
        "system/gpu/1/memory_percent": 10.0,
        "system/gpu/1/temperature_c": 61.0,
    }
    gpus.sample()
    assert nvml.calls == ["init"]  # initialised once
    gpus.close()
    assert nvml.calls == ["init", "shutdown"] and gpus.sample() == {}


def test_no_gpu_means_no_gpu_rows():
    def missing():
        raise ImportError("No module named 'pynvml'")

    def no_driver():
        nvml = fake_nvml()
        nvml.nvmlInit = lambda: (_ for _ in ()).throw(FakeNvmlError("Driver Not Loaded"))
        return nvml

    assert GpuSampler(load_nvml=missing).sample() == {}
    assert GpuSampler(load_nvml=no_driver).sample() == {}
    assert GpuSampler(load_nvml=lambda: fake_nvml(devices=0)).sample() == {}


def test_the_default_nvml_loader_never_raises():
    # nvidia-ml-py may be installed (the `gpu` extra) on a machine without a driver: no rows,
    # no error. On a machine with GPUs there are rows, all under system/gpu/.
    rows = GpuSampler().sample()
    assert all(key.startswith("system/gpu/") for key in rows)


def test_host_and_process_rows_then_rates(tmp_path):
    logged: list[dict] = []
    sampler = SystemSampler(
        logged.append, 10, host=True, disk_path=str(tmp_path), gpus=GpuSampler(lambda: fake_nvml(1))
    )
    first = sampler.sample()
    assert 0 < first["system/process/rss_mib"] < 100_000
    assert first["system/process/threads"] >= 1
    assert 0 <= first["system/memory/used_percent"] <= 100
    assert first["system/memory/available_gib"] > 0
    assert 0 <= first["system/disk/used_percent"] <= 100
    assert "system/cpu/percent" in first and "system/process/cpu_percent" in first
    assert "system/network/sent_mib_s" not in first  # a rate needs two samples
    assert first["system/gpu/0/util_percent"] == 50.0
    second = sampler.sample()
    for key in ("system/network/sent_mib_s", "system/network/recv_mib_s"):
        assert second[key] >= 0
    assert all(isinstance(v, float) for v in second.values())


def test_an_attached_process_samples_only_itself_under_its_name():
    sampler = SystemSampler(lambda v: None, 10, host=False, prefix="system/process/trainer.rank3")
    rows = sampler.sample()
    assert set(rows) == {
        "system/process/trainer.rank3/cpu_percent",
        "system/process/trainer.rank3/rss_mib",
        "system/process/trainer.rank3/threads",
    }
    assert process_prefix(True, "x", None) == "system/process"
    assert process_prefix(False, "my job/step", "RANK=3") == "system/process/my_job_step.rank3"


def test_interval_zero_starts_nothing():
    sampler = SystemSampler(lambda v: None, 0, host=False)
    sampler.start()
    assert sampler._thread is None


def test_a_bad_interval_is_a_configuration_error(tmp_path):
    with pytest.raises(openruns.ConfigurationError, match="system_metrics_interval"):
        openruns.init(mode="offline", dir=tmp_path, system_metrics_interval=-1)
    with pytest.raises(openruns.ConfigurationError, match="system_metrics_interval"):
        openruns.init(mode="offline", dir=tmp_path, system_metrics_interval="often")

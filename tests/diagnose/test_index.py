"""The message index: templates read by a real child process from real source files (a package written here, vLLM
0.32 installed in the CPU engine, vLLM 0.26 from its wheel), matched against log lines, cached by versions."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.diagnose.index import load_index
from launcher.diagnose.templates import TemplateIndex
from tests.diagnose.texts import diagnose_text
from tests.helpers import ROOT, make_env

SOURCE = """
import logging
import os
from vllm import envs
logger = logging.getLogger(__name__)


def check_cache(model_config, num_blocks):
    if num_blocks <= 0 and envs.VLLM_CPU_KVCACHE_SPACE:
        raise ValueError(
            f"No free KV cache blocks for this request ({num_blocks}). "
            "Try raising `gpu_memory_utilization` or lowering `max_model_len`."
        )
    limit = model_config.max_model_len
    msg = "The model's max seq len (%d) is larger than the KV cache (%d)." % (limit, num_blocks)
    if limit > num_blocks:
        raise ValueError(msg)


def load(path):
    assert os.path.exists(path), "model folder {} has no config.json".format(path)
    logger.warning("Casting %s to %s: the checkpoint's dtype is not supported here.", "bfloat16", "float16")
    logger.error("Worker failed to load weights from %s", path)
"""
SERVING = """
def check_length(request, max_model_len):
    if request.max_tokens + request.prompt_len > max_model_len:
        raise ValueError(f"This request asks for {request.max_tokens} tokens beyond the context of {max_model_len}.")
"""
ARG_UTILS = """
class EngineArgs:
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
"""


NO_BLOCKS = (
    "No free KV cache blocks for this request (0). Try raising `gpu_memory_utilization` or lowering `max_model_len`."
)


def fake_env(tmp: Path) -> Path:
    """A real venv with a `vllm` 0.99.0 distribution of two source files."""
    files = {"vllm/__init__.py": "", "vllm/engine/arg_utils.py": ARG_UTILS, "vllm/worker.py": SOURCE}
    files["vllm/entrypoints/openai/serving_chat.py"] = SERVING
    return make_env(tmp, {"vllm": "0.99.0"}, files)


@pytest.fixture(scope="module")
def fake_vllm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake_env(tmp_path_factory.mktemp("fake"))


@pytest.fixture(scope="module")
def index(fake_vllm: Path) -> TemplateIndex:
    return load_index(fake_vllm)[0]


def site_of(index: TemplateIndex, line: str, following: str | None = None) -> dict[str, object] | None:
    i = index.match(line.encode(), following.encode() if following else None)
    return None if i is None else index.site(i).to_json()


def test_the_child_reads_each_kind_of_message(index: TemplateIndex) -> None:
    assert index.packages == {"vllm": "0.99.0"}
    texts = sorted(index.site(i).text for i in range(len(index)))
    assert texts == [
        "Casting … to …: the checkpoint's dtype is not supported here.",
        "No free KV cache blocks for this request (…). Try raising `gpu_memory_utilization` or lowering "
        "`max_model_len`.",
        "The model's max seq len (…) is larger than the KV cache (…).",
        "This request asks for … tokens beyond the context of ….",
        "Worker failed to load weights from …",
        "model folder … has no config.json",
    ]


def test_a_site_keeps_where_and_when_and_the_knobs(index: TemplateIndex) -> None:
    site = site_of(index, f"ERROR 12-03 10:00:00 [core.py:1] ValueError: {NO_BLOCKS}")
    assert site == {
        "package": "vllm",
        "file": "vllm/worker.py",
        "line": 10,
        "function": "check_cache",
        "exception": "ValueError",
        "condition": "num_blocks <= 0 and envs.VLLM_CPU_KVCACHE_SPACE",
        "knobs": ["VLLM_CPU_KVCACHE_SPACE", "model_config.max_model_len"],
        "template": "No free KV cache blocks for this request (…). Try raising `gpu_memory_utilization` or lowering "
        "`max_model_len`.",
    }


@pytest.mark.parametrize(
    ("line", "following", "function"),
    [
        ('ValueError: The model"s max seq len (4096) is larger than the KV cache (3664).', None, "check_cache"),
        ("AssertionError: model folder /m has no   config.json", None, "load"),  # re-flowed spaces
        ("(Worker pid=3) ERROR 12-03 [w.py:9] Worker failed to load", "weights from /models/x", "load"),  # wrapped
    ],
    ids=["quotes", "spaces", "wrapped"],
)
def test_matching_tolerates_what_logs_do_to_messages(
    index: TemplateIndex, line: str, following: str | None, function: str
) -> None:
    site = site_of(index, line, following)
    assert site is not None and site["function"] == function


def test_a_short_common_phrase_is_not_a_match(index: TemplateIndex) -> None:
    assert site_of(index, "INFO: the engine has no config.json for this LoRA adapter, using the base model") is None


def test_a_message_that_ends_early_matches_what_it_has(index: TemplateIndex) -> None:
    """A line cut short (or an older release that said less) still reaches its template; a line that goes on
    with other words after the same start does not."""
    cut = "ValueError: No free KV cache blocks for this request (0). Try raising `gpu_memory_utilization`"
    assert site_of(index, cut)["function"] == "check_cache"  # type: ignore[index]
    other = "ValueError: No free KV cache blocks for this request (0). Try raising the pool size by hand"
    assert site_of(index, other) is None


def test_an_index_finding_names_the_site_the_advice_and_the_flag(index: TemplateIndex) -> None:
    (finding,) = diagnose_text(f"ValueError: {NO_BLOCKS}\n", index=index)
    assert finding["origin"] == "index" and finding["severity"] == "error"
    assert finding["cause"] == (
        "raised by check_cache (vllm/worker.py:10) when num_blocks <= 0 and envs.VLLM_CPU_KVCACHE_SPACE; that code "
        "reads VLLM_CPU_KVCACHE_SPACE, --max-model-len (model_config.max_model_len)"
    )
    assert finding["fix"] == (
        "the message says: Try raising `gpu_memory_utilization` or lowering `max_model_len`.; it names "
        "--gpu-memory-utilization, --max-model-len"
    )


def test_an_error_template_logged_as_a_warning_is_not_an_error(index: TemplateIndex) -> None:
    line = "(APIServer pid=1) WARNING 12-03 10:00:00 [worker.py:22] Worker failed to load weights from /m\n"
    (finding,) = diagnose_text(line, index=index)
    assert finding["severity"] == "info"


def test_a_refused_request_in_a_running_server_is_not_a_failed_server(index: TemplateIndex) -> None:
    log = (
        "(APIServer pid=1) INFO:     Application startup complete.\n"
        "(APIServer pid=1) ERROR 12-03 10:00:09 [serving_chat.py:200] ValueError: This request asks for 9000 tokens "
        "beyond the context of 4096.\n"
        '(APIServer pid=1) INFO:     127.0.0.1:50416 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'
    )
    (finding,) = diagnose_text(log, index=index)
    assert finding["severity"] == "warning"
    assert finding["title"] == (
        "A request was refused; the server kept serving: ValueError: This request asks for … tokens beyond the "
        "context of …."
    )


def test_the_same_error_before_serving_is_a_failure(index: TemplateIndex) -> None:
    log = "ERROR 12-03 10:00:09 [serving_chat.py:200] ValueError: This request asks for 9000 tokens beyond the "
    (finding,) = diagnose_text(log + "context of 4096.\n", index=index)
    assert finding["severity"] == "error"


def test_the_cache_follows_the_package_versions(tmp_path: Path) -> None:
    fake_vllm = fake_env(tmp_path)
    first = load_index(fake_vllm)[1]
    again = load_index(fake_vllm)[1]
    assert (again.cached, again.path) == (True, first.path)
    site = next(fake_vllm.parent.parent.glob("lib/python3*/site-packages"))
    (site / "vllm-0.99.0.dist-info").rename(site / "vllm-0.99.1.dist-info")
    meta = site / "vllm-0.99.1.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("0.99.0", "0.99.1"))
    upgraded = load_index(fake_vllm)[1]
    assert upgraded.packages == {"vllm": "0.99.1"} and upgraded.path != first.path and not upgraded.cached
    assert not first.path.exists()  # the stale index went with the upgrade


def test_cli_uses_the_engine_index(fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("ERROR 12-03 10:00:00 [worker.py:9] AssertionError: model folder /m/x has no config.json\n")
    assert main(["diagnose", str(log), "--python", str(fake_vllm), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["index"]["packages"] == {"vllm": "0.99.0"} and doc["index"]["templates"] == 6
    (finding,) = doc["findings"]
    assert (finding["id"], finding["origin"]) == ("raised:vllm/worker.py:load", "index")


# Wording drift between the two vLLM versions available here: vLLM 0.26 (its wheel, the one the H200 runs) says
# "Found a different quantization schemes for <shards> in <layer>.", vLLM 0.32 (the CPU engine) "Found different
# quantization schemes for the shards of <layer>.". Each version's line is the message that version's source formats
# for the same failure (its template with the same values); no public log of the 0.32 wording exists yet.
UTILS = "vllm/model_executor/layers/quantization/compressed_tensors/utils.py"
WHEELS = sorted((ROOT / ".gpu" / "dl").glob("vllm-0.26.0-*.whl"))  # where the GPU install downloads it (git-ignored)


@pytest.mark.engine
@pytest.mark.skipif(not WHEELS, reason="the vLLM 0.26 wheel is not in .gpu/dl (the GPU install puts it there)")
def test_the_index_follows_a_reworded_message(engine_python: Path, tmp_path: Path) -> None:
    old, new = tmp_path / "026", tmp_path / "032"
    with zipfile.ZipFile(WHEELS[0]) as wheel:
        wheel.extract(UTILS, old)
    find = "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"
    installed = Path(subprocess.run([engine_python, "-c", find], capture_output=True, text=True).stdout.strip())
    (new / UTILS).parent.mkdir(parents=True)
    shutil.copy(installed / UTILS.removeprefix("vllm/"), new / UTILS)
    indexes = {
        v: load_index(sys.executable, {"vllm": (root / "vllm", v)})[0] for v, root in (("0.26", old), ("0.32", new))
    }

    def logged(index: TemplateIndex) -> str:
        (i,) = [i for i in range(len(index)) if "quantization schemes" in index.site(i).text]
        gaps = index.parts(i).count(None)  # 0.26: the shards and the layer; 0.32: the layer
        values = iter(["['q_proj', 'k_proj', 'v_proj']", "model.layers.0.self_attn.qkv_proj"][-gaps:])
        message = "".join(p if p is not None else next(values) for p in index.parts(i))
        return f"(EngineCore_DP0 pid=7) ERROR 12-03 10:00:00 [core.py:1] ValueError: {message}"

    lines = {v: logged(index) for v, index in indexes.items()}
    assert "Found a different quantization schemes for ['q_proj'" in lines["0.26"]
    assert "Found different quantization schemes for the shards of model.layers.0" in lines["0.32"]
    for version, index in indexes.items():
        other = "0.32" if version == "0.26" else "0.26"
        # each version's index knows its own wording and not the other's: the wording did change
        assert site_of(index, lines[version])["function"] == "should_ignore_layer"  # type: ignore[index]
        assert site_of(index, lines[other]) is None
        # and the curated rule keyed on the raise site explains both, whatever the sentence
        findings = diagnose_text(lines[version] + "\n", index=index)
        assert [f["id"] for f in findings] == ["mixed-quantization-schemes"], findings


# SGLang's sources in the form its releases have them: ServerArgs declares the command line, a check raises.
SGLANG_SERVER_ARGS = """
from dataclasses import dataclass

@dataclass
class ServerArgs:
    model_path: str
    max_running_requests: int | None = None
"""
SGLANG_SCHEDULER = """
def check_pool(server_args, max_total_tokens):
    if server_args.max_running_requests > max_total_tokens:
        raise ValueError(
            f"The token pool holds {max_total_tokens} tokens, fewer than max_running_requests "
            f"({server_args.max_running_requests})."
        )
"""


def test_sglang_is_read_when_the_interpreter_has_it(tmp_path: Path) -> None:
    files = {"sglang/__init__.py": "", "sglang/srt/server_args.py": SGLANG_SERVER_ARGS}
    files["sglang/srt/managers/scheduler.py"] = SGLANG_SCHEDULER
    python = make_env(tmp_path, {"sglang": "0.5.0"}, files)
    index = load_index(python)[0]
    assert index.packages == {"sglang": "0.5.0"}
    line = "[2025-01-01 12:00:00 TP0] ValueError: The token pool holds 4096 tokens, fewer than max_running_requests "
    line += "(8192)."
    (finding,) = diagnose_text(line + "\n", index=index)
    assert finding["id"] == "raised:sglang/srt/managers/scheduler.py:check_pool"
    # a ServerArgs field is a flag of sglang.launch_server
    assert "--max-running-requests" in str(finding["fix"]), finding["fix"]


def test_a_source_folder_adds_a_package_the_engine_lacks(
    fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """diagnose --source: an unpacked wheel's package folder, versioned by the .dist-info beside it."""
    kernel = tmp_path / "wheel" / "sgl_kernel"
    kernel.mkdir(parents=True)
    (kernel / "load_utils.py").write_text(
        "def load(path):\n    raise ImportError(f'Could not load any common_ops library from {path}')\n"
    )
    info = tmp_path / "wheel" / "sgl_kernel-0.3.21.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sgl-kernel\nVersion: 0.3.21\n")
    (info / "RECORD").write_text("sgl_kernel/load_utils.py,,\n")
    log = tmp_path / "sglang.log"
    log.write_text("ImportError: Could not load any common_ops library from /opt/sgl_kernel/sm100\n")
    assert main(["diagnose", str(log), "--python", str(fake_vllm), "--source", str(kernel), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["index"]["packages"] == {"vllm": "0.99.0", "sgl_kernel": "0.3.21"}
    (finding,) = doc["findings"]
    assert finding["site"]["package"] == "sgl_kernel" and finding["origin"] == "index"


def test_a_source_that_is_no_package_folder_is_one_line(
    fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "x.log"
    log.write_text("ERROR something failed\n")
    assert main(["diagnose", str(log), "--python", str(fake_vllm), "--source", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err == (
        f"nemolaunch: {tmp_path / 'none'} is not a package's source folder; give a folder of .py files, e.g. an "
        "unpacked wheel's sglang/\n"
    )


def test_a_message_both_engines_print_is_the_logs_engines(tmp_path: Path) -> None:
    """SGLang copied vLLM's loaders: the same sentence is in both. The log's engine (named in its paths) decides;
    a bare line is the interpreter's engine's, and a message only the other engine prints is a lead there."""
    loader = (
        "def load(model):\n    raise AttributeError(f'Model {model} does not support BitsAndBytes quantization yet.')\n"
    )
    files = {"vllm/__init__.py": "", "vllm/loader.py": loader, "sglang/__init__.py": "", "sglang/loader.py": loader}
    files["sglang/pool.py"] = (
        "def pool():\n    raise RuntimeError('Not enough memory for the KV pool; increase --mem-fraction-static')\n"
    )
    index = load_index(make_env(tmp_path, {"vllm": "0.99.0", "sglang": "0.5.0"}, files))[0]
    line = "AttributeError: Model Qwen2ForCausalLM does not support BitsAndBytes quantization yet.\n"

    def package(log: str) -> object:
        (finding,) = [f for f in diagnose_text(log, index=index) if f["origin"] == "index"]
        return finding["site"]["package"]  # type: ignore[index]

    sglang_frame = '  File "/usr/lib/python3/site-packages/sglang/srt/model_loader/loader.py", line 9, in load\n'
    vllm_frame = '  File "/usr/lib/python3/site-packages/vllm/model_executor/model_loader/loader.py", line 9, in load\n'
    assert package(sglang_frame + line) == "sglang"
    assert package(vllm_frame + line) == "vllm"
    assert package(line) == "vllm"
    # (worded unlike SGLang's real "... Please try to increase ...", which a curated rule explains)
    pool = "RuntimeError: Not enough memory for the KV pool; increase --mem-fraction-static\n"
    # a lead stands beside the log's own root error, which it does not replace
    (lead,) = [f for f in diagnose_text(pool, index=index) if f["origin"] == "index"]
    assert lead["site"]["package"] == "sglang" and "--mem-fraction-static" in str(lead["fix"])  # type: ignore[index]
    assert "the log does not say it comes from sglang" in str(lead["cause"])
    (named,) = [f for f in diagnose_text(sglang_frame + pool, index=index) if f["origin"] == "index"]
    assert "does not say" not in str(named["cause"])

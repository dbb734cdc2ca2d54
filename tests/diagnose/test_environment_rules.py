"""Rules for what the environment lacks (a CUDA build of torch, a system library, DNS, a recent tokenizers), each
against a line as a public thread shows it (the thread in the comment; none is in a fresh set's hold-out)."""

from __future__ import annotations

import pytest

from tests.diagnose.texts import assert_named, diagnose_text


@pytest.mark.parametrize(
    ("line", "rule", "names"),
    [
        (  # vllm-project/vllm-ascend#780
            'ERROR 05-07 05:58:46 core.py:291]     raise AssertionError("Torch not compiled with CUDA enabled")\n'
            "ERROR 05-07 05:58:46 core.py:291] AssertionError: Torch not compiled with CUDA enabled\n",
            "torch-without-cuda",
            "+cuXXX",
        ),
        (  # open-mmlab/mmsegmentation#1567
            "ImportError: libGL.so.1: cannot open shared object file: No such file or directory\n",
            "system-library-missing",
            "apt-get install libgl1",
        ),
        (  # vllm-project/vllm#3656: vLLM 0.3's address lookup on an offline host
            '    s.connect(("dns.google", 80))  # Doesn\'t need to be reachable\n'
            "socket.gaierror: [Errno -3] Temporary failure in name resolution\n",
            "dns-resolution-failed",
            "VLLM_HOST_IP",
        ),
        (  # allenai/open-instruct#738
            "Exception: data did not match any variant of untagged enum ModelWrapper at line 1251012 column 3\n",
            "tokenizers-too-old",
            "pip install -U tokenizers",
        ),
    ],
    ids=["cpu-torch", "libgl", "dns", "tokenizer-json"],
)
def test_a_missing_piece_of_the_environment_is_named(line: str, rule: str, names: str) -> None:
    assert_named(line, rule, names)


def test_a_hub_retry_warning_in_a_log_that_goes_on_is_a_warning() -> None:
    # gpustack/gpustack#3343: huggingface_hub warns and retries; the log does not fail
    line = (
        "server-1    | 2025-11-18 10:26:53.662346+08:00 - huggingface_hub.utils._http - WARNING - "
        "'(MaxRetryError('HTTPSConnectionPool(host=\\'huggingface.co\\', port=443): Max retries exceeded with url: "
        '/Qwen/Qwen3-0.6B/resolve/main/config.json (Caused by NameResolutionError("<urllib3.connection.'
        "HTTPSConnection object at 0x72e2e7ca0f10>: Failed to resolve \\'huggingface.co\\' ([Errno -3] Temporary "
        "failure in name resolution)\"))'), '(Request ID: 2e3fb3cb-79a7-40a2-b518-4b11e967a69a)')' thrown while "
        "requesting HEAD https://huggingface.co/Qwen/Qwen3-0.6B/resolve/main/config.json\n"
    )
    findings = {f["id"]: f for f in diagnose_text(line)}
    assert findings["dns-resolution-failed"]["severity"] == "warning", findings


def test_a_cuda_library_keeps_its_own_rule() -> None:
    # zai-org/GLM-4#510 (a cases.jsonl thread): libcudart is CUDA's, not a system package
    line = "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n"
    ids = {f["id"] for f in diagnose_text(line)}
    assert "cuda-runtime-library-missing" in ids and "system-library-missing" not in ids, ids


@pytest.mark.parametrize(
    ("line", "rule", "names"),
    [
        (  # nicofdga/DZ-FaceDetailer#21 (cut after the first sentence)
            "NotImplementedError: Could not run 'torchvision::nms' with arguments from the 'CUDA' backend. This could "
            "be because the operator doesn't exist for this backend, or was omitted during the selective/custom build "
            "process (if using custom build).\n",
            "op-not-built-for-backend",
            "torchvision::nms's package made for CUDA",
        ),
        (  # sgl-project/sglang#1117: Triton's helper built during CUDA-graph capture
            "/tmp/tmps1rkq3y3/main.c:5:10: fatal error: Python.h: No such file or directory\n"
            "    5 | #include <Python.h>\n",
            "python-headers-missing",
            "python3-dev",
        ),
        (  # huggingface/transformers#34841 (the address after "URL:" cut)
            "requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for URL: <the model's config.json>\n",
            "hub-rate-limited",
            "HF_HUB_OFFLINE=1",
        ),
    ],
    ids=["op-backend", "python-h", "hub-429"],
)
def test_a_build_or_download_the_environment_lacks_is_named(line: str, rule: str, names: str) -> None:
    assert_named(line, rule, names)


@pytest.mark.parametrize(
    ("line", "rule", "names"),
    [
        (  # jupyter/notebook#7522
            "ImportError: \n"
            "A module that was compiled using NumPy 1.x cannot be run in\nNumPy 2.0.0 as it may crash.\n",
            "numpy-abi-mismatch",
            "numpy<2",
        ),
        (  # oobabooga/textgen#2513
            "    from torch._C import *  # noqa: F403\n"
            "ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory\n",
            "cudnn-library-missing",
            "nvidia-cudnn-cuXX",
        ),
        (  # foundation-model-stack/foundation-model-stack#384: Llama 3.1's config, an older transformers
            "[rank2]: ValueError: `rope_scaling` must be a dictionary with two fields, `type` and `factor`, got "
            "{'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0, 'original_max_position_embeddings': "
            "8192, 'rope_type': 'llama3'}\n",
            "transformers-too-old",
            "upgrade transformers",
        ),
        (  # fengyizhu/ChatTTS-VLLM#2: code written for another torch
            "AttributeError: module 'torch.serialization' has no attribute 'FILE_LIKE'\n",
            "package-version-mismatch",
            "torch version",
        ),
        (  # openreasoner/openr#28 (its title)
            "AttributeError: '_OpNamespace' '_C' object has no attribute 'rms_norm'\n",
            "vllm-ops-not-registered",
            "Failed to import from vllm._C",
        ),
    ],
    ids=["numpy2", "libcudnn", "rope-scaling", "module-attribute", "ops-namespace"],
)
def test_a_package_of_another_version_is_named(line: str, rule: str, names: str) -> None:
    assert_named(line, rule, names)


@pytest.mark.parametrize(
    ("line", "rule", "names"),
    [
        (  # svip-lab/PPGNet#2: the checkpoint was an LFS pointer
            "_pickle.UnpicklingError: invalid load key, 'v'.\n",
            "checkpoint-not-downloaded",
            "git lfs pull",
        ),
        (  # liuyuan-pal/Gen6D#39: the download was incomplete
            "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory\n",
            "checkpoint-not-downloaded",
            "download the file again",
        ),
        (  # gpoesia/minimo#21
            "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two "
            "options, do those steps only if you trust the source of the checkpoint.\n",
            "torch-load-weights-only",
            "weights_only=False",
        ),
        (  # autogluon/autogluon#5270
            "ValueError: Due to a serious vulnerability issue in `torch.load`, even with `weights_only=True`, we now "
            "require users to upgrade torch to at least v2.6 in order to use the function.\n",
            "package-too-old",
            "torch>=2.6",
        ),
    ],
    ids=["lfs-pointer", "zip-cut", "weights-only", "torch-2.6-required"],
)
def test_a_checkpoint_torch_cannot_read_is_named(line: str, rule: str, names: str) -> None:
    assert_named(line, rule, names)


@pytest.mark.parametrize(
    ("line", "rule", "names"),
    [
        (  # sp-uhh/storm#14
            "    raise EnvironmentError('CUDA_HOME environment variable is not set. '\n"
            "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.\n",
            "cuda-home-not-set",
            "export CUDA_HOME",
        ),
        (  # icon-lab/SynDiff#34 (its title)
            "RuntimeError: Ninja is required to load C++ extensions\n",
            "ninja-missing",
            "pip install ninja",
        ),
        (  # modelscope/ms-swift#7100 (its title; an nvcc that did not match was the cause)
            "RuntimeError: Ninja build failed. Ninja output:\n",
            "jit-build-failed",
            "flashinfer-jit-cache",
        ),
        (  # nunchux-ai/nunchaku#805
            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
            "cpu!\n",
            "tensors-on-two-devices",
            "inputs.to(model.device)",
        ),
    ],
    ids=["cuda-home", "ninja", "jit-build", "two-devices"],
)
def test_a_build_or_placement_failure_is_named(line: str, rule: str, names: str) -> None:
    assert_named(line, rule, names)

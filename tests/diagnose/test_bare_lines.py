"""A bare error line with nothing around it (a thread quoting only the last line) still names its class: compiler
and loader errors, a TensorRT engine from another version, the driver's kernel module against its libraries, a
helper process of the server lost, a source build, the host's GPU or Python refused; a line written in lower case;
a line that says it failed and that no rule knows. Lines from the fourth fresh set
(tests/fixtures/diagnose/fresh-2026-12-03d.jsonl, measured once before these rules were written), from the other
fresh sets where named, and from the public threads named."""

from __future__ import annotations

import pytest

from launcher.diagnose.templates import TemplateIndex
from tests.diagnose.texts import diagnose_text

CASES = [
    # (thread the line is quoted from, line, rule, what the fix must name)
    (
        "opendatalab/MinerU#419",
        "ImportError: libnccl.so.2: cannot open shared object file: No such file or directory",
        "nvidia-library-missing",
        "libnccl.so.2 for your CUDA and put its folder on LD_LIBRARY_PATH",
    ),
    (
        "modelscope/ms-swift#8349",
        '7 errors detected in the compilation of "/root/.cache/flashinfer/0.6.4/90a/generated/gdn_prefill_sm90/'
        'gdn_prefill_kernel_bf16_g0b1a0i1.cu".',
        "cuda-compile-failed",
        "read the first 'error:' line above",
    ),
    (
        "woct0rdho/triton-windows#66",
        "`ptxas` failed with error code 4294967295 `ptxas` stderr:",
        "ptxas-failed",
        "TRITON_PTXAS_PATH",
    ),
    (
        "NVIDIA/TensorRT-LLM#1664",
        "E0530 02:04:50.281196 2894 model_lifecycle.cc:638] failed to load 'tensorrt_llm' version 1: Internal: "
        "unexpected error when creating modelInstanceState: [TensorRT-LLM][ERROR] Assertion failed: Failed to "
        "deserialize cuda engine (/tmp/tritonbuild/tensorrtllm/tensorrt_llm/cpp/tensorrt_llm/runtime/"
        "tllmRuntime.cpp:72)",
        "tensorrt-engine-incompatible",
        "rebuild the engine",
    ),
    (
        "Oneflow-Inc/oneflow#3106",
        "Failed to initialize NVML: Driver/library version mismatch",
        "nvml-driver-library-mismatch",
        "reboot the host",
    ),
    (
        "HonuRobotics/dockwater#10",
        "stderr: nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown",
        "nvidia-driver-not-loaded",
        "sudo modprobe nvidia",
    ),
    (
        "NVIDIA/k8s-device-plugin#165",
        "0/3 nodes are available: 3 insufficient nvidia.com/gpu.",
        "k8s-no-gpu-advertised",
        "device plugin",
    ),
    (
        "FlashML-org/FreeToken#269",
        "backend worker freetoken-detokenizer-0 exited during load",
        "worker-process-lost",
        "read the helper process's own error above",
    ),
    (
        "sgl-project/sglang#22511",
        "health check failed. server could not get a response from detokenizer for last 20 seconds",
        "worker-process-lost",
        "read the detokenizer process's own error above",
    ),
    (
        "NVIDIA/nccl#983",
        "call ncclCommInitRank got Signal: Bus error (7)",
        "bus-error-shm",
        "--shm-size",
    ),
    (
        "NVIDIA/nvidia-docker#1730",
        "Failed to initialize NVML: Unknown Error",
        "container-lost-gpu-access",
        "restart the container",
    ),
    (
        "JosephKJ/OWOD#81",
        "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the system to recover this "
        "GPU",
        "gpu-hardware-ecc",
        "reboot",
    ),
    (
        "ceccocats/tkDNN#134",
        "/usr/local/cuda/include/crt/host_config.h:138:2: error: #error -- unsupported GNU version! gcc versions "
        "later than 8 are not supported!",
        "nvcc-host-compiler-unsupported",
        "CC=gcc-8 CXX=g++-8",
    ),
    (
        "Dao-AILab/flash-attention#1593",
        "ERROR: Failed building wheel for flash-attn",
        "source-build-failed",
        "pip install flash-attn --only-binary :all:",
    ),
    (
        "Dao-AILab/flash-attention#1921",
        "subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '64']' returned non-zero exit status 1.",
        "source-build-failed",
        "MAX_JOBS=4",
    ),
    (
        "Dao-AILab/flash-attention#298",
        "error: command '/opt/conda/bin/nvcc' failed with exit code 255",
        "source-build-failed",
        "install a prebuilt wheel instead",
    ),
    (
        "NVIDIA/TensorRT-LLM#498",
        "[TensorRT-LLM][ERROR] [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, "
        "mCudaStream->get()): out of memory (/data/TensorRT-LLM/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)",
        "cuda-error-out-of-memory",
        "rebuild it with smaller ones",
    ),
    (
        "NVIDIA-NeMo/Speech#14399",
        "torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
        "via c10d key-value store by key '0', but store->get('0') got error: wait timeout after 600000ms, keys: "
        "/default_pg/0//cuda//0",
        "rendezvous-timeout",
        "read the first error of the ranks that did not join",
    ),
    (
        "zai-org/ChatGLM-6B#1232",
        "RuntimeError: [1] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d key-value "
        "store by key '0', but store->get('0') got error: Socket Timeout",
        "rendezvous-timeout",
        "MASTER_ADDR and MASTER_PORT",
    ),
    (
        "ollama/ollama#8770",
        "Error: llama runner process has terminated: exit status 2",
        "worker-process-lost",
        "read the runner process's own error above",
    ),
    (
        "NVIDIA/apex#1700",
        "FileNotFoundError: [Errno 2] No such file or directory: ':/usr/local/cuda/bin/nvcc'",
        "cuda-home-not-set",
        "no ':' in it",
    ),
    (
        "MVIG-SJTU/AlphaPose#765",
        "unable to execute \"'/usr/local/cuda'/bin/nvcc\": No such file or directory",
        "cuda-home-not-set",
        "set CUDA_HOME",
    ),
    (
        "huggingface/accelerate#2799",
        "RuntimeError: Expected is_sm80 || is_sm90 to be true, but got false.",
        "kernel-arch-check-failed",
        "attn_implementation='sdpa'",
    ),
    (
        "project-baize/baize-chatbot#31",
        "OSError: Unable to load weights from pytorch checkpoint file for 'model_cache/models--decapoda-research--"
        "llama-30b-hf/snapshots/f991780f9362b2fcaefad066cd235058844562b7/pytorch_model-00039-of-00061.bin'. If you "
        "tried to load a PyTorch model from a TF 2.0 checkpoint, please set from_tf=True.",
        "checkpoint-unreadable",
        "download it again",
    ),
    (
        "vllm-project/vllm#21677",
        "error: externally-managed-environment",
        "pip-externally-managed",
        "python3 -m venv",
    ),
]


@pytest.mark.parametrize(("thread", "line", "rule", "fix"), CASES, ids=[c[0] for c in CASES])
def test_a_bare_line_names_its_class(thread: str, line: str, rule: str, fix: str) -> None:
    findings = {f["id"]: f for f in diagnose_text(line + "\n")}
    assert findings[rule]["severity"] == "error"
    assert fix in str(findings[rule]["fix"])
    assert "root-error" not in findings


@pytest.mark.parametrize(
    "line",
    [
        # NVIDIA/nccl#162 (fresh-2026-12-03b.jsonl, benign): NCCL looks for its optional network plugin
        "Unable to load libnccl-net.so : libnccl-net.so: cannot open shared object file: No such file or directory",
        "VM-0-14-tencentos:162637:162637 [6] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared "
        "object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation",
    ],
)
def test_an_optional_nccl_plugin_is_not_a_missing_library(line: str) -> None:
    assert not [f for f in diagnose_text(line + "\n") if f["severity"] == "error"]


def test_a_library_with_its_own_rule_gets_only_that_rule() -> None:
    """vllm-project/vllm#3387 (the source of cuda-runtime-library-missing): CUDA's runtime keeps its own rule."""
    line = "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory\n"
    assert [f["id"] for f in diagnose_text(line)] == ["cuda-runtime-library-missing"]


def test_a_line_written_in_lower_case_is_read_without_case() -> None:
    """OpenBuddy/OpenBuddy#45 (fresh-2026-12-03d.jsonl): the thread's title lower-cased vLLM's message."""
    line = (
        "valueerror: bfloat16 is only supported on gpus with compute capability of at least 8.0. your tesla "
        "v100-sxm2-32gb gpu has compute capability 7.0.\n"
    )
    (finding,) = diagnose_text(line)
    assert (finding["id"], finding["severity"]) == ("bf16-unsupported-gpu", "error")
    assert "--dtype half" in str(finding["fix"])


def test_case_still_counts_on_a_line_that_has_capitals() -> None:
    """Oneflow-Inc/oneflow#3106's line with its case changed: a pattern's case is ignored only on a line written
    wholly in lower case (here the rule's 'Driver/library' against 'driver/library')."""
    assert diagnose_text("failed to initialize nvml: driver/library version mismatch\n")[0]["id"] == (
        "nvml-driver-library-mismatch"
    )
    assert "nvml-driver-library-mismatch" not in {
        f["id"] for f in diagnose_text("Failed to initialize NVML: driver/library version mismatch\n")
    }


@pytest.mark.parametrize(
    ("thread", "line", "what"),
    [
        ("ggml-org/llama.cpp#14692", "CUDA error: operation not supported", "(operation not supported)"),
        ("ikawrakow/ik_llama.cpp#747", "ggml-cuda.cu:116: CUDA error", "(the error it names)"),
        ("NVIDIA/libnvidia-container#107", "cuda error\uff0cinitialization error", "(initialization error)"),
    ],
)
def test_any_cuda_error_report_is_an_error_naming_what_failed(thread: str, line: str, what: str) -> None:
    (finding,) = diagnose_text(line + "\n")
    assert (finding["id"], finding["severity"]) == ("cuda-error", "error")
    assert f"CUDA_LAUNCH_BLOCKING=1 makes the failing call report itself {what}" in str(finding["fix"])


def test_a_sentence_mentioning_a_cuda_error_is_no_report() -> None:
    """kekzl/imp#1048 (fresh-2026-12-03d.jsonl, benign): a teardown that cleared a CUDA error it expected."""
    assert diagnose_text("Engine teardown: cleared a leaked CUDA error (graph update constraint)\n") == []


def test_a_known_cuda_error_keeps_its_own_rule() -> None:
    """The catch-all gives way: 'CUDA error: out of memory' is the out-of-memory rule alone."""
    line = "RuntimeError: CUDA error: out of memory\n"
    assert "cuda-error" not in {f["id"] for f in diagnose_text(line)}


def test_an_undefined_symbol_names_the_package_its_library_is_in() -> None:
    """OpenBMB/BMTrain#111 (fresh-2026-12-03d.jsonl): the package is the folder under site-packages."""
    line = "/site-packages/bmtrain/nccl/_C.cpython-38-x86_64-linux-gnu.so: undefined symbol: ncclBroadcast\n"
    (finding,) = diagnose_text(line)
    assert finding["id"] == "extension-undefined-symbol"
    assert "upgrade bmtrain to a release that links it" in str(finding["fix"])
    assert "rebuild _C.cpython-38-x86_64-linux-gnu.so in this environment" in str(finding["fix"])


def test_a_misspelt_option_names_the_engine_argument_it_meant() -> None:
    """huggingface/open-r1#309 (fresh-2026-12-03b.jsonl): the British spelling of gpu_memory_utilization. The
    index holds the engine arguments of the installed vLLM (here three of vLLM's own)."""
    index = TemplateIndex(
        {
            "packages": {},
            "engine_args": ["gpu_memory_utilization", "max_model_len", "tensor_parallel_size"],
            "templates": [],
            "anchors": [],
        }
    )
    line = "TypeError: VLLMModelConfig.__init__() got an unexpected keyword argument 'gpu_memory_utilisation'\n"
    (finding,) = diagnose_text(line, index=index)
    assert finding["id"] == "unexpected-keyword-argument"
    assert str(finding["fix"]).endswith(
        "; 'gpu_memory_utilisation' is no engine argument; did you mean gpu_memory_utilization "
        "(--gpu-memory-utilization)?"
    )
    # an option removed from the release, far from every argument it has, gets no guess (vllm-project/vllm#9398)
    other = "TypeError: EngineArgs.__init__() got an unexpected keyword argument 'num_scheduler_steps'\n"
    assert "did you mean" not in str(diagnose_text(other, index=index)[0]["fix"])


@pytest.mark.parametrize(
    ("thread", "line"),
    [
        ("amdegroot/ssd.pytorch#577", "RuntimeError: NCCL Error 2: unhandled system error"),
        # retyped by hand in the thread (holdout.jsonl)
        ("xorbitsai/inference#2836", "NCCLerror: unhandled system error (run withNCCL DEBUG=INFo for details)"),
    ],
)
def test_any_wording_of_an_nccl_system_error_is_that_error(thread: str, line: str) -> None:
    (finding,) = diagnose_text(line + "\n")
    assert (finding["id"], finding["severity"]) == ("nccl-system-error", "error")
    assert "--shm-size=16g" in str(finding["fix"]) and "CUDA_VISIBLE_DEVICES=0" in str(finding["fix"])


def test_a_line_that_says_it_failed_is_a_warning_to_read_when_no_rule_knows_it() -> None:
    """sgl-project/sglang-omni#2156 (fresh-2026-12-03b.jsonl): the one line the thread quotes."""
    line = (
        "Setup Custom allreduce failed with CUDASymmetricMemoryAllocator::rendezvous: detected allocations from "
        "overlapping devices from different ranks\n"
    )
    (finding,) = diagnose_text(line)
    assert (finding["id"], finding["severity"], finding["origin"]) == ("root-error", "warning", "fallback")
    assert finding["evidence"] == [{"line": 1, "text": line.strip()}]


@pytest.mark.parametrize(
    ("thread", "line"),
    [
        # bmaltais/kohya_ss#1949 (fresh-2026-12-03c.jsonl, benign): an optional import, caught
        ("bmaltais/kohya_ss#1949", "Error caught was: No module named 'triton'"),
        # verl-project/verl#393 (fresh-2026-12-03c.jsonl, benign): a Python warning
        (
            "verl-project/verl#393",
            "/data/zhihao_xu/miniconda3/envs/logicrl/lib/python3.10/site-packages/vllm/connections.py:8: "
            "RuntimeWarning: Failed to read commit hash: No module named 'vllm._version'",
        ),
    ],
)
def test_a_failure_the_program_handled_is_no_finding(thread: str, line: str) -> None:
    assert diagnose_text(line + "\n") == []

"""Rules for classes a running stack meets (torchrun's signals, vLLM's worker RPCs and quantization dtypes, xformers,
Triton's compiler, TensorRT engines, Ray workers, Kubernetes and Slurm scheduling, WSL, the Hub's Xet downloads, a GPU
nvidia-smi cannot reach), each against either the
installed library's own message, rebuilt from its format string with the file:line and version it is in, or a line
as a public repository's notes quote it from their own log (no seen thread shows these classes)."""

from __future__ import annotations

import pytest

from tests.diagnose.texts import assert_named, diagnose_text

# Rebuilt from the engine venv's sources (torch 2.13.0+cpu, vLLM 0.32.0); not captures
FROM_SOURCE = {
    # torch/distributed/elastic/multiprocessing/api.py:1003: "failed (exitcode: %s) local_rank: %s (pid: %s) of
    # binary: %s", a rank killed by SIGBUS (exit code -7)
    "torchrun-sigbus": (
        "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -7) local_rank: 0 (pid: 4242) of "
        "binary: /usr/bin/python3\n"
    ),
    # torch/distributed/elastic/multiprocessing/errors/__init__.py:141-143: f"Signal {n} ({name}) received by PID
    # {pid}", the message torchrun's error summary carries for a rank killed by SIGSEGV
    "torchrun-sigsegv": "  error_file: <N/A>\n  traceback : Signal 11 (SIGSEGV) received by PID 4242\n",
    # vllm/config/vllm.py:910: f"{dtype} is not supported for quantization method {method}. Supported dtypes: ..."
    "awq-bf16": (
        "ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: [torch.float16]\n"
    ),
    # vllm/v1/executor/multiproc_executor.py:442: f"RPC call to {method} timed out."
    "rpc-timeout": "TimeoutError: RPC call to execute_model timed out.\n",
    # vllm/v1/structured_output/backend_xgrammar.py:461, raised as the request's validation error
    "xgrammar-schema": (
        "vllm.exceptions.VLLMValidationError: The provided JSON schema contains features not supported by xgrammar.\n"
    ),
}

# As public repositories' notes and session logs quote their own logs
PUBLIC = {
    # torch.multiprocessing sharing tensors through one descriptor each
    "torch-shm-fds": (
        "RuntimeError: unable to open shared memory object </torch_735354_2766238047_18> in read-write mode: Too "
        "many open files (24)\n"
    ),
    # xformers 0.0.x on an RTX 5090 (capability 12.0)
    "xformers-sm120": (
        "NotImplementedError: No operator found for `memory_efficient_attention_forward`\n"
        "  `fa3F@0.0.0` is not supported because:\n"
        "      requires device with capability <= (9, 0) but your GPU has capability (12, 0) (too new)\n"
    ),
    # kube-scheduler's event for a pod whose memory request no node has free, as kubectl describe pod printed it
    "k8s-memory": (
        "  Warning  FailedScheduling  11s (x5 over 18s)  default-scheduler  0/5 nodes are available: 5 Insufficient "
        "memory.\n"
    ),
    # kube-scheduler's event for a GPU pod without a toleration
    "k8s-taint": (
        "  Warning  FailedScheduling  5m  default-scheduler  0/2 nodes available: 2 node(s) had untolerated taint "
        "{nvidia.com/gpu: }\n"
    ),
    # TensorRT deserializing an engine built by another release (its author shortened the assertion)
    "trt-version-tag": "Error Code 1: Serialization (Version tag does not match)\n",
    # a Ray worker node without vLLM installed
    "ray-no-module": "ray.exceptions.RaySystemError: System error: No module named 'vllm'\n",
    # nvidia-smi on a host where one GPU dropped out
    "device-handle": "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error\n",
    # slurmstepd after the job's cgroup hit its --mem
    "slurm-oom": (
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1042215.batch cgroup. Some of your processes may "
        "have been killed by the cgroup out-of-memory handler.\n"
    ),
    # slurmstepd at the job's --time, after a progress bar
    "slurm-time": (
        " 22%|██▏       | 11/50 [1:55:26<6:49:05, 629.37s/it]slurmstepd: error: *** JOB 42221 ON clr1247 CANCELLED AT "
        "2022-04-14T16:20:46 DUE TO TIME LIMIT ***\n"
    ),
    # sbatch asking one node for more GPUs than it has
    "slurm-config": "sbatch: error: Batch job submission failed: Requested node configuration is not available\n",
    # hf_xet under vLLM's model download
    "xet": (
        "RuntimeError: Data processing error: CAS service error : Reqwest Error: error decoding response body, "
        "domain: no-url\n"
    ),
    # Triton 3.x on an sm_100 kernel, as a bug note quotes it
    "triton-pass": (
        "RuntimeError: PassManager::run failed\nPipeline failed while executing\n"
        "`TritonNvidiaGPUOptimizeTMemLayoutsPass`\n"
    ),
    # nvidia-smi in a container under WSL 2 (docker exec)
    "wsl": "Failed to initialize NVML: GPU access blocked by the operating system\n",
    # torch's CUDA initialisation inside a snap without the GPU interface connected
    "cuda-init-304": (
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
        "NumCudaDevices() that might have already set an error? Error 304: OS call failed or operation not "
        "supported on this OS\n"
    ),
    # torch.utils.cpp_extension's compiler check in an image without g++
    "which-cxx": "subprocess.CalledProcessError: Command '['which', 'c++']' returned non-zero exit status 1.\n",
    # requests behind an authenticating proxy, as a troubleshooting page quotes it
    "proxy-407": (
        "HTTPSConnectionPool: Tunnel connection failed: 407 Proxy Authentication Required\n"
        "curl: (56) CONNECT tunnel failed, response 407\n"
    ),
    # cuBLAS failing under a vLLM V1 engine, as a deployment's notes quote it
    "cublas-exec": (
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx(...)`\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
    ),
    # vLLM V0's scheduler in a notebook's offline run
    "preemption": (
        "WARNING 08-06 01:40:11 scheduler.py:1754] Sequence group 242 is preempted by PreemptionMode.RECOMPUTE mode "
        "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
        "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        "total_num_cumulative_preemption=1\n"
    ),
    # vLLM V0's scheduler dropping a prompt above --max-num-batched-tokens (a pull request's description)
    "v0-prompt-limit": (
        "WARNING 02-20 17:08:38 scheduler.py:949] Input prompt (100005 tokens) is too long and exceeds limit of 2048\n"
    ),
    # the Hub refusing a download while the authors review the access request
    "gated-pending": (
        "GatedRepoError: 403 Client Error... Your request to access model meta-llama/Meta-Llama-3-8B-Instruct is "
        "awaiting a review from the repo authors.\n"
    ),
    # Ray's dashboard agent when the node's raylet died (its raylet.err showed a disk over 95% full)
    "raylet-died": "2026-07-11 07:47:41 ... Raylet is terminated. Termination is unexpected.\n",
    # NCCL's bootstrap (bootstrap.cc: WARN("NET/Socket : No usable listening interface found"))
    "nccl-no-listen": "node1:42:42 [0] NCCL WARN NET/Socket : No usable listening interface found\n",
}

# huggingface_hub/utils/_http.py:881 (huggingface_hub 2.4.0): f"{status} Client Error." + "\\n\\n" +
# f"Revision Not Found for url: {url}."; not a capture
REVISION = (
    "huggingface_hub.errors.RevisionNotFoundError: 404 Client Error.\n\nRevision Not Found for url: "
    "https://huggingface.co/api/models/Qwen/Qwen3-8B/revision/v9.\n"
)

# Python's own OSError text for errno 116 (ESTALE, os.strerror(116) on Linux); not a capture
ESTALE = "OSError: [Errno 116] Stale file handle: '/home/u/.triton/cache/5f/kernel.json'\n"


@pytest.mark.parametrize(
    ("key", "rule", "names"),
    [
        ("torchrun-sigbus", "bus-error-shm", "--shm-size"),
        ("torchrun-sigsegv", "native-crash", "PYTHONFAULTHANDLER=1"),
        ("awq-bf16", "quantization-dtype-unsupported", "--dtype float16"),
        ("rpc-timeout", "worker-rpc-timeout", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"),
        ("torch-shm-fds", "open-file-limit", "set_sharing_strategy('file_system')"),
        ("xformers-sm120", "xformers-no-kernel", "VLLM_ATTENTION_BACKEND"),
        ("k8s-taint", "k8s-no-gpu-advertised", "toleration"),
        ("k8s-memory", "k8s-insufficient-resource", "requests of memory"),
        ("trt-version-tag", "tensorrt-engine-incompatible", "rebuild the engine"),
        ("ray-no-module", "package-missing", "every node"),
        ("device-handle", "gpu-device-handle-lost", "Above 4G Decoding"),
        ("slurm-oom", "host-oom-killed", "#SBATCH --mem"),
        ("slurm-time", "slurm-time-limit", "--time"),
        ("slurm-config", "slurm-request-unsatisfiable", "--gres=gpu"),
        ("xet", "hub-xet-download-failed", "HF_HUB_DISABLE_XET=1"),
        ("triton-pass", "triton-compile-failed", "triton 3.3+"),
        ("wsl", "wsl-gpu-blocked", "wsl --update"),
        ("cuda-init-304", "cuda-init-failed", "CUDA error 304"),
        ("which-cxx", "c-compiler-missing", "build-essential"),
        ("proxy-407", "http-proxy-failed", "HTTPS_PROXY"),
        ("cublas-exec", "cublas-status", "nvidia-cublas-cu12"),
        ("gated-pending", "hub-gated-or-unauthorized", "ungated copy"),
        ("raylet-died", "ray-node-dead", "over 95% full"),
    ],
    ids=lambda v: v if isinstance(v, str) and v in FROM_SOURCE | PUBLIC else None,
)
def test_a_runtime_failure_reaches_its_class(key: str, rule: str, names: str) -> None:
    assert_named((FROM_SOURCE | PUBLIC)[key], rule, names)


@pytest.mark.parametrize(
    ("text", "rule", "names"),
    [
        (FROM_SOURCE["xgrammar-schema"], "structured-output-schema-unsupported", '"backend": "guidance"'),
        (PUBLIC["preemption"], "kv-cache-preemption", "--kv-cache-dtype fp8"),
        (PUBLIC["v0-prompt-limit"], "prompt-longer-than-context", "--max-num-batched-tokens"),
    ],
    ids=["xgrammar-schema", "preemption", "v0-prompt-limit"],
)
def test_what_slows_or_refuses_requests_is_a_warning(text: str, rule: str, names: str) -> None:
    assert_named(text, rule, names, "warning")


def test_an_address_this_host_lacks_names_the_host_ip_variables() -> None:
    # Python's OSError text for errno 99 (EADDRNOTAVAIL, os.strerror(99) on Linux); not a capture
    assert_named("OSError: [Errno 99] Cannot assign requested address\n", "cannot-assign-address", "VLLM_HOST_IP")


def test_torchs_ipv6_retry_warning_is_not_an_address_error() -> None:
    # torch's c10d client retrying over IPv6 localhost while the store starts (socket.cpp's "[c10d] The client socket
    # has failed to connect to [%s]:%d (errno: %d - %s)."): it goes on, so no error; built, not a capture
    line = (
        "[W socket.cpp:601] [c10d] The client socket has failed to connect to [localhost]:29500 (errno: 99 - Cannot "
        "assign requested address).\n"
    )
    assert not [f for f in diagnose_text(line) if f["severity"] == "error"]


def test_a_missing_hub_revision_names_the_revision_flag() -> None:
    assert_named(REVISION, "hub-repo-not-found", "--revision")


def test_nccl_without_a_listening_interface_names_the_interface_variable() -> None:
    # NCCL's WARN alone, in a log that goes on, is a warning
    assert_named(PUBLIC["nccl-no-listen"], "nccl-no-network-interface", "NCCL_SOCKET_IFNAME", "warning")


def test_a_stale_nfs_cache_names_local_cache_folders() -> None:
    assert_named(ESTALE, "network-fs-stale-handle", "TRITON_CACHE_DIR")


def test_an_rpc_timeout_is_named_instead_of_the_engine_death_it_causes() -> None:
    # the engine core dies of the timeout: the catch-all gives way to the named class
    ids = {f["id"] for f in diagnose_text(FROM_SOURCE["rpc-timeout"])}
    assert "worker-rpc-timeout" in ids and "engine-core-died" not in ids, ids


def test_a_release_tag_mismatch_outside_tensorrt_is_not_an_engine_error() -> None:
    # the same three words in a release script (a public repository's CI) are not TensorRT's
    line = "Version tag does not match checkout.\n"
    assert "tensorrt-engine-incompatible" not in {f["id"] for f in diagnose_text(line)}

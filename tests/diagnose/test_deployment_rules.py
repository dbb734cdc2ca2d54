"""Rules for where the server runs (GPU hardware and firmware, container runtimes, Kubernetes, MPI, Ray, RDMA, Triton
Inference Server, TGI) and the fixes widened for classes the fifth fresh set showed. The excerpts are the public
threads' own (fresh-2026-12-03e.jsonl was measured once before any rule was written against it and is a development
set since; fresh-2026-12-03b.jsonl's threads used here are outside its hold-out quarter). Where no seen thread shows a
class, the line is the component's own message as its source prints it, with the source named."""

from __future__ import annotations

import json

import pytest

from tests.diagnose.texts import assert_named, diagnose_text
from tests.helpers import FIXTURES

SETS = ("fresh-2026-12-03e.jsonl", "fresh-2026-12-03b.jsonl")
EXCERPTS = {
    case["source"]: case["excerpt"]
    for name in SETS
    for case in map(json.loads, (FIXTURES / "diagnose" / name).read_text().splitlines())
}
HELD_OUT_B = set(json.loads((FIXTURES / "diagnose" / "fresh-2026-12-03b-holdout.json").read_text())["holdout_threads"])


def _excerpt(source: str) -> str:
    assert source.split("#")[0] not in HELD_OUT_B, "a hold-out thread of the second set must not train a rule"
    return EXCERPTS[source]


@pytest.mark.parametrize(
    ("source", "rule", "names"),
    [
        ("https://github.com/NVIDIA/gpu-operator/issues/349", "container-gpu-runtime-missing", "--runtime=containerd"),
        ("https://github.com/NVIDIA/gpu-operator/issues/730", "container-gpu-runtime-missing", "RuntimeClass"),
        ("https://github.com/NVIDIA/open-gpu-kernel-modules/issues/507", "gpu-fell-off-bus", "power"),
        ("https://github.com/NVIDIA/nccl/issues/1474", "gpudirect-rdma-peermem", "DMA-BUF"),
        ("https://github.com/NVIDIA/TensorRT/issues/3989", "pinned-host-memory-failed", "CUDA_VISIBLE_DEVICES"),
        ("https://github.com/KimMeen/Time-LLM/issues/158", "privileged-port", "port above 1024"),
        ("https://github.com/NVIDIA/TensorRT-LLM/issues/1796", "mpi-world-size-mismatch", "mpirun -n"),
        ("https://github.com/NVIDIA/TensorRT-LLM/issues/1700", "mpi-rank-killed", "signal 9"),
        (
            "https://github.com/triton-inference-server/server/issues/4200",
            "triton-server-model-load-failed",
            "config.pbtxt",
        ),
        ("https://github.com/triton-inference-server/server/issues/3607", "triton-server-model-load-failed", "branch"),
        ("https://github.com/NVIDIA/nvidia-docker/issues/1330", "nvidia-driver-not-loaded", "modprobe nvidia"),
        ("https://github.com/OpenRLHF/OpenRLHF/pull/728", "ray-placement-group-too-small", "vllm_num_engines"),
        ("https://github.com/vllm-project/vllm/issues/569", "tokenizer-load-failed", "--tokenizer"),
        ("https://github.com/runpod-workers/worker-vllm/issues/99", "bitsandbytes-flags-incomplete", "--quantization"),
        # the fixes widened for a known class met in another way
        ("https://github.com/meta-pytorch/torchtune/issues/392", "port-in-use", "--rdzv_endpoint localhost:0"),
        ("https://github.com/ModalMinds/MM-EUREKA/issues/54", "ray-gcs-unreachable", "MASTER_ADDR"),
        ("https://github.com/Jiayi-Pan/TinyZero/issues/75", "ray-gcs-unreachable", "ray stop"),
        ("https://github.com/yunqing-me/WatermarkDM/issues/8", "invalid-device-ordinal", "--nproc_per_node"),
        ("https://github.com/sgl-project/sglang/issues/748", "arch-missing-in-binary", "--disable-flashinfer"),
        ("https://github.com/mmcdermott/MEDS_EIC_AR/issues/163", "arch-missing-in-binary", "sgl-kernel build"),
        ("https://github.com/meta-llama/llama/issues/427", "checkpoint-shape-mismatch", "n_kv_heads"),
        # a library path pasted as a markdown link between the library and its message
        ("https://github.com/Dao-AILab/flash-attention/issues/854", "extension-torch-abi", "flash_attn"),
    ],
    ids=lambda v: v.split("github.com/")[-1] if v.startswith("https://") else None,
)
def test_a_seen_thread_reaches_its_class(source: str, rule: str, names: str) -> None:
    assert_named(_excerpt(source), rule, names)


def test_a_container_started_without_gpus_is_a_warning_naming_gpus() -> None:
    assert_named(
        _excerpt("https://github.com/mmartial/ComfyUI-Nvidia-Docker/issues/57"),
        "container-started-without-gpus",
        "--gpus all",
        "warning",
    )


@pytest.mark.parametrize(
    ("line", "rule", "names"),
    [
        # libibverbs' start-up warning (rdma-core libibverbs/init.c, check_memlock_limit), as a public Open MPI
        # users' list post quotes it
        ("libibverbs: Warning: RLIMIT_MEMLOCK is 32768 bytes.\n", "memlock-limit-low", "--ulimit memlock=-1:-1"),
        # Open MPI/PRRTE's refusal (schizo base: "%s has detected an attempt to run as root.")
        ("mpirun has detected an attempt to run as root.\n", "mpi-launch-refused", "--allow-run-as-root"),
        # Open MPI's help text for -n above the host's slots
        (
            "There are not enough slots available in the system to satisfy the 8 slots\n"
            "that were requested by the application:\n",
            "mpi-launch-refused",
            "--oversubscribe",
        ),
        # text-generation-inference flash_causal_lm.py warmup: f"Not enough memory to handle {n} prefill tokens. "
        (
            "RuntimeError: Not enough memory to handle 4096 prefill tokens. "
            "You need to decrease `--max-batch-prefill-tokens`\n",
            "tgi-prefill-memory",
            "--max-batch-prefill-tokens",
        ),
        # Ray GCS's message (gcs_node_manager.cc) as a driver logged it, quoted in a public repository's notes
        (
            "2022-09-02 12:53:00,741 WARNING worker.py:1829 -- The node with node id: "
            "5ad7fa5dd64fc1fec7a82cceecabed8e5eb247ec97064bb50a1c2a11 and address: 137.78.248.21 and node name: "
            "137.78.248.21 has been marked dead because the detector has missed too many heartbeats from it. This "
            "can happen when a    (1) raylet crashes unexpectedly (OOM, preempted node, etc.)\n",
            "ray-node-dead",
            "raylet.out",
        ),
        # Triton core's message (backend_model.cc: "unable to find backend library for backend '...', try specifying
        # runtime on the model configuration."), as a public repository's troubleshooting notes quote the log
        (
            "E0326 10:10:41.293702 1 model_lifecycle.cc:654] \"failed to load 'model_name' version 1: Invalid "
            "argument: unable to find backend library for backend 'tensorflow', try specifying runtime on the model "
            'configuration."\n',
            "triton-server-model-load-failed",
            "tensorflow",
        ),
        # the NVIDIA driver's GSP message (kernel_gsp.c: "Timeout waiting for RPC from GSP%d! Expected function %d
        # (%s) (0x%x 0x%x)."), an older driver's form from a dmesg a public repository's notes quote
        (
            "[  113.669216] NVRM: Xid (PCI:0000:00:06): 119, pid='<unknown>', name=<unknown>, Timeout waiting for "
            "RPC from GSP! Expected function FREE (0x0 0x0).\n",
            "gpu-gsp-timeout",
            "NVreg_EnableGpuFirmware=0",
        ),
        # an Xid without a rule of its own, the catch-all naming its number: a line built from the driver's Xid
        # prefix ("NVRM: Xid (PCI:%s): %d, pid=%d, name=%s, ...") with Xid 31 (MMU fault), not a capture
        ("NVRM: Xid (PCI:0000:3b:00): 31, pid=2468, name=python3, Ch 00000010\n", "gpu-xid", "Xid 31"),
        # built from kubelet's eviction message (pkg/kubelet/eviction/helpers.go: "The node was low on resource: %v. "
        # then the container's usage), not a capture
        (
            "Message: The node was low on resource: ephemeral-storage. Container vllm was using 52Gi, which exceeds "
            "its request of 0.\n",
            "k8s-pod-evicted",
            "ephemeral-storage request",
        ),
        # the container status reason as kubectl describe pod prints it (built, not a capture)
        ("      Reason:       OOMKilled\n", "k8s-pod-oom-killed", "resources.limits.memory"),
        # built from asyncio base_events.py:1525 (Python 3.11.7): 'error while attempting to bind on address %r: %s'
        # with errno 13, in uvicorn's error prefix; not a capture
        (
            "ERROR:    [Errno 13] error while attempting to bind on address ('0.0.0.0', 80): permission denied\n",
            "privileged-port",
            "--port 8000",
        ),
        # libnvidia-container's requirement check, as docker run prints it for an image newer than the driver
        (
            "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver "
            "to a newer version, or use an earlier cuda container: unknown.\n",
            "driver-too-old",
            "cuda-compat",
        ),
    ],
    ids=[
        "memlock",
        "mpi-root",
        "mpi-slots",
        "tgi-prefill",
        "ray-node-dead",
        "triton-backend",
        "gsp",
        "xid-13",
        "evicted",
        "oomkilled",
        "privileged-uvicorn",
        "container-cuda-requirement",
    ],
)
def test_a_components_own_message_reaches_its_class(line: str, rule: str, names: str) -> None:
    # what a component logs at WARNING in a log that goes on is a warning (findings.compose)
    severity = "warning" if rule in ("memlock-limit-low", "ray-node-dead") else "error"
    assert_named(line, rule, names, severity)


# lines as public repositories' notes and troubleshooting pages quote them from their own logs (no seen thread shows
# these classes); each names the component whose message it is
PUBLIC_LINES = {
    # kubelet's event, as kubectl describe pod printed it
    "probe-restart": (
        "  Normal   Killing    35s                kubelet  Container app failed liveness probe, will be restarted\n"
    ),
    # containerd's CDI injection, as docker printed it
    "cdi": (
        " task: OCI runtime create failed: could not apply required modification to OCI specification: error "
        "modifying OCI spec: failed to inject CDI devices: unresolvable CDI devices nvidia.com/gpu=all\n"
    ),
    # Ray's check_version_info, at ray start --address on a worker node
    "ray-version": (
        "RuntimeError: Version mismatch: The cluster was started with:\n    Ray: 2.54.0\n    Python: 3.10.21\n"
        "This process on node 10.202.182.66 was started with:\n    Ray: 2.54.0\n    Python: 3.10.19\n"
    ),
    # NCCL's socket transport (misc/socket.cc)
    "nccl-connect": (
        "misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<39275> failed : Software caused "
        "connection abort\n"
    ),
    # torch's TCPStore client at a rank that cannot reach MASTER_ADDR
    "rendezvous-connect": (
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect "
        "to (172.17.0.9, 46229).\n"
    ),
    # NVRTC inside a torch JIT kernel on a GPU newer than the bundled NVRTC (sm_103 with NVRTC 12.8)
    "nvrtc-arch": "RuntimeError: nvrtc: error: invalid value for --gpu-architecture (-arch)\n",
    # nvcc below 12.8 building a torch extension for sm_120
    "nvcc-arch": "nvcc fatal   : Unsupported gpu architecture 'compute_120'\n",
    # docker's pull refusal
    "pull-denied": (
        "docker: Error response from daemon: pull access denied for mysql-container, repository does not exist or "
        "may require 'docker login': denied: requested access to the resource is denied.\n"
    ),
    # nvidia-smi's own message on a host whose kernel module is not loaded
    "smi-no-driver": (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.\n"
    ),
    # the NVIDIA kernel module in dmesg, a GPU the driver cannot bring up
    "rm-init": "[    6.080914] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0xffff:1863)\n",
    # the NVIDIA kernel module in dmesg after a driver upgrade without a reboot
    "api-mismatch": (
        "[2140090.470492] NVRM: API mismatch: the client has the version 470.129.06, but\n"
        "                 NVRM: this kernel module has the version 470.103.01.  Please\n"
    ),
    # the NVIDIA device plugin's start-up on a node whose default runtime is not nvidia
    "device-plugin-nvml": (
        "2024/01/04 06:08:15 Failed to initialize NVML: could not load NVML library.\n"
        "2024/01/04 06:08:15 If this is a GPU node, did you set the docker default runtime to `nvidia`?\n"
    ),
    # kubelet's admission of a pod pinned with nodeName, as kubectl get events printed it
    "admission": (
        "32s         Warning   UnexpectedAdmissionError   pod/trm-train-arc2-4gpu-9lltn   Allocate failed due to "
        "requested number of devices unavailable for nvidia.com/gpu. Requested: 4, Available: 0, which is unexpected\n"
    ),
    # Triton's Python backend (shm_manager), as a Triton client printed the request's error
    "triton-python-shm": (
        "tritonclient.utils.InferenceServerException: [400] in ensemble 'ensemble_model', Failed to process the "
        "request(s) for model instance 'detection_preprocessing_0', message: Failed to increase the shared memory "
        "pool size for key 'triton_python_backend_shm_region_6' to 67108864 bytes.\n"
    ),
    # SGLang's launcher when a scheduler process exits during start
    "sglang-scheduler": "[01-28 04:18:10] Rank 0 scheduler is dead. Please check if there are relevant logs.\n",
    # SGLang 0.5's refusal of a prompt longer than --context-length, as a client logged it
    "sglang-too-long": "The input (204281 tokens) is longer than the model's context length (202752 tokens)\n",
    # docker run --gpus in an unprivileged LXC container
    "cgroup-rules": (
        "nvidia-container-cli: mount error: failed to add device rules: unable to find any existing device filters "
        "attached to the cgroup: bpf_prog_query(BPF_CGROUP_DEVICE) failed: operation not permitted: unknown.\n"
    ),
    # the NVIDIA device plugin (newer releases) on a node whose containerd does not use the nvidia runtime
    "device-plugin-toolkit": (
        "E1119 17:44:43.345466       1 factory.go:112] Incompatible strategy detected auto\n"
        "E1119 17:44:43.345479       1 factory.go:113] If this is a GPU node, did you configure the NVIDIA Container "
        "Toolkit?\n"
    ),
    # the GPU Operator's driver container on a node whose kernel headers the mirrors no longer carry
    "operator-kernel": (
        "W: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/jammy-security/InRelease  Temporary failure "
        "resolving 'archive.ubuntu.com'\nCould not resolve Linux kernel version\n"
    ),
}


@pytest.mark.parametrize(
    ("key", "rule", "names"),
    [
        ("probe-restart", "k8s-probe-restart", "startupProbe"),
        ("cdi", "container-gpu-runtime-missing", "nvidia-ctk cdi generate"),
        ("ray-version", "ray-version-mismatch", "same Ray and Python"),
        ("nccl-connect", "nccl-socket-connect-failed", "NCCL_SOCKET_IFNAME"),
        ("rendezvous-connect", "rendezvous-timeout", "MASTER_ADDR"),
        ("nvrtc-arch", "cuda-compiler-too-old-for-gpu", "nvidia-cuda-nvrtc"),
        ("nvcc-arch", "cuda-compiler-too-old-for-gpu", "knows compute_120"),
        ("pull-denied", "container-image-pull-denied", "imagePullSecrets"),
        ("smi-no-driver", "nvidia-driver-not-loaded", "modprobe nvidia"),
        ("rm-init", "gpu-init-failed", "open kernel modules"),
        ("api-mismatch", "nvml-driver-library-mismatch", "reboot"),
        ("device-plugin-nvml", "container-gpu-runtime-missing", "--set-as-default"),
        ("admission", "k8s-no-gpu-advertised", "nodeName"),
        ("triton-python-shm", "triton-python-backend-shm", "--shm-size"),
        ("sglang-scheduler", "worker-process-lost", "scheduler process's own error"),
        ("sglang-too-long", "request-exceeds-context", "--context-length"),
        ("cgroup-rules", "container-cgroup-device-rules", "no-cgroups = true"),
        ("device-plugin-toolkit", "container-gpu-runtime-missing", "runtimeClassName: nvidia"),
        ("operator-kernel", "gpu-operator-driver-kernel", "driver.usePrecompiled=true"),
    ],
    ids=lambda v: v if isinstance(v, str) and v in PUBLIC_LINES else None,
)
def test_a_publicly_quoted_line_reaches_its_class(key: str, rule: str, names: str) -> None:
    # NCCL's WARN alone, in a log that does not go on to fail, is a warning (findings.compose); a refused request is
    assert_named(PUBLIC_LINES[key], rule, names, "warning" if key in ("nccl-connect", "sglang-too-long") else "error")


def test_a_tgi_shard_failure_gives_way_to_the_shards_own_error() -> None:
    # a public repository's notes quote TGI on a T4: the shard's out-of-memory, then the launcher's catch-all lines
    log = (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB. GPU\n"
        "2024-09-02T23:29:59.823812Z ERROR text_generation_launcher: Shard 0 failed to start\n"
        "2024-09-02T23:29:59.823837Z  INFO text_generation_launcher: Shutting down shards\n"
        "Error: ShardCannotStart\n"
    )
    ids = {f["id"] for f in diagnose_text(log)}
    assert "gpu-out-of-memory" in ids and "tgi-shard-failed" not in ids, ids
    assert_named(log.split("\n", 1)[1], "tgi-shard-failed", "--max-batch-prefill-tokens")


def test_a_secure_boot_refusal_names_module_signing() -> None:
    # the kernel's EKEYREJECTED text as modprobe prints it (built from modprobe's "could not insert '%s': %s"; not a
    # capture)
    line = "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n"
    assert_named(line, "secure-boot-module-rejected", "mokutil --import")


def test_a_cgroup_failure_of_the_container_runtime_is_not_a_missing_toolkit() -> None:
    assert "container-gpu-runtime-missing" not in {f["id"] for f in diagnose_text(PUBLIC_LINES["cgroup-rules"])}


def test_an_xid_with_its_own_rule_is_not_also_the_catch_all() -> None:
    ids = {f["id"] for f in diagnose_text(_excerpt("https://github.com/NVIDIA/open-gpu-kernel-modules/issues/507"))}
    ids |= {f["id"] for f in diagnose_text("NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.\n")}
    assert "gpu-fell-off-bus" in ids and "gpu-xid" not in ids and "gpu-hardware-ecc" not in ids, ids


def test_a_driver_too_old_for_the_image_is_not_a_missing_toolkit() -> None:
    line = "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver\n"
    assert "container-gpu-runtime-missing" not in {f["id"] for f in diagnose_text(line)}

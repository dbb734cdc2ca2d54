"""Failure classes written as classes, each tested on lines quoted from public threads (none of them in a recall
fixture): any undefined symbol of a Python extension, a container runtime without the NVIDIA toolkit (or without
shared memory), ranks whose GPU torch.distributed does not know or shares, one allocation too large for any GPU, and
operator-facing classes whose common wording no rule had: transformers' missing chat template, the driver's own
libraries, a path the process may not use, pip's unresolvable requirements, shared memory of data loaders, a rank
killed by SIGKILL, a stuck NCCL watchdog, a model folder without config.json, an option the release does not take,
a CPU without the binary's instructions, a CUDA toolkit other than torch's, no release for this Python, model files
found neither in a folder nor on the Hub, a process the shell reports Killed, a native crash, a
C/C++ runtime older than a package needs, no C compiler for a source build, a Hub download that timed out, NCCL's
shared memory, lost peers and missing bootstrap interface."""

from __future__ import annotations

import pytest

from tests.diagnose.texts import assert_named, diagnose_text

CASES = [
    # (thread the line is quoted from, line, rule, severity, what the fix must name)
    (
        "MVIG-SJTU/AlphaPose#614",
        "ImportError: /home/XXXXXXXX/exp/AlphaPose/alphapose/models/layers/dcn/"
        "deform_conv_cuda.cpython-37m-x86_64-linux-gnu.so: undefined symbol: THPVariableClass",
        "extension-python-abi",
        "error",
        "import torch before the extension",
    ),
    (
        "godweiyang/NN-CUDA-Example#4",
        "OSError: /home/gzy/NN-CUDA-Example/pytorch/build/libadd2.so: undefined symbol: THPVariableClass",
        "extension-python-abi",
        "error",
        "libadd2.so was built for another torch or Python",
    ),
    (
        "lesgourg/class_public#589",
        "ImportError: ./classy.so: undefined symbol: _ZGVbN2v_tan",
        "extension-undefined-symbol",
        "error",
        "rebuild classy.so in this environment",
    ),
    (
        "hiyouga/LlamaFactory#5268",
        'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]]',
        "container-gpu-runtime-missing",
        "error",
        "nvidia-container-toolkit",
    ),
    (
        "infiniflow/ragflow#9573",
        'Error response from daemon: could not select device driver "nvidia" with capabilities: [[gpu]]',
        "container-gpu-runtime-missing",
        "error",
        "nvidia-ctk runtime configure",
    ),
    (
        "NVIDIA/libnvidia-container#231",
        "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared "
        "object file: no such file or directory",
        "container-gpu-runtime-missing",
        "error",
        "nvidia-smi must work on the host",
    ),
    (
        "duixcom/Duix-Avatar#221",
        "WARNING: The NVIDIA Driver was not detected. GPU functionality will not be available.",
        "container-started-without-gpus",
        "warning",
        "--gpus all",
    ),
    (
        "NVIDIA/Fuser#4504",
        "tests/python/multidevice/test_deepseek_v3.py [rank0]:[W522 22:27:03.825695149 ProcessGroupNCCL.cpp:4789] "
        "[PG ID 0 PG GUID 0 Rank 0]  using GPU 0 as device used by this process is currently unknown. This can "
        "potentially cause a hang if this rank to GPU mapping is incorrect. You can specify device_id in "
        "init_process_group() to force use of a particular device.",
        "nccl-device-unknown",
        "warning",
        "torch.cuda.set_device(local_rank)",
    ),
    (
        "deepspeedai/DeepSpeed#7266",
        "[W404 00:15:21.693690333 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 0]  using GPU 0 to perform "
        "barrier as devices used by this process are currently unknown. This can potentially cause a hang if this "
        "rank to GPU mapping is incorrect.",
        "nccl-device-unknown",
        "warning",
        "device_id=torch.device('cuda', local_rank)",
    ),
    (
        "QwenLM/Qwen2.5-Omni#240",
        "CUDA out of memory. Tried to allocate 124.68 GiB. GPU 0 has a total capacity of 95.22 GiB of which 51.23 "
        "GiB is free.",
        "single-allocation-too-large",
        "error",
        "124.68 GiB in one tensor: use a fused attention",
    ),
    (
        "Francis-Rings/StableAvatar#83",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 62.02 GiB.",
        "single-allocation-too-large",
        "error",
        "pip install flash-attn",
    ),
    (
        "OpenRLHF/OpenRLHF#613",
        "[rankx]: ValueError: Cannot use chat template functions because tokenizer.chat_template is not set and no "
        "template argument was passed! For information about writing templates and setting the "
        "tokenizer.chat_template attribute, please see the documentation at "
        "https://huggingface.co/docs/transformers/main/en/chat_templating",
        "no-chat-template",
        "error",
        "--chat-template",
    ),
    (
        "NVIDIA/Megatron-LM#661",
        "Duplicate GPU detected : rank 3 and rank 0 both on CUDA device f000",
        "nccl-duplicate-gpu",
        "error",
        "torch.cuda.set_device(local_rank)",
    ),
    (
        "MeetKai/functionary#182",
        "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory",
        "driver-library-missing",
        "error",
        "--gpus all",
    ),
    (
        "nv-tlabs/GET3D#72",
        "NOTE: The SHMEM allocation limit is set to the default of 64MB.  This may be",
        "container-shm-default",
        "warning",
        "--shm-size=16g",
    ),
    (
        "ray-project/ray-llm#112",
        "(ServeController pid=1431) PermissionError: [Errno 13] Permission denied: '/home/paperspace/data'",
        "permission-denied",
        "error",
        "ls -ld /home/paperspace/data",
    ),
    (
        "PeterGriffinJin/Search-R1#150",
        "ERROR: Cannot install vllm because these package versions have conflicting dependencies.",
        "pip-resolution-impossible",
        "error",
        "The conflict is caused by:",
    ),
    (
        "waybarrios/vllm-mlx#19",
        "ERROR: ResolutionImpossible: for help visit "
        "https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts",
        "pip-resolution-impossible",
        "error",
        "fresh virtual environment",
    ),
    (
        "nianticlabs/simplerecon#3",
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
        "bus-error-shm",
        "error",
        "--shm-size=16g",
    ),
    (
        "THU-DA-6D-Pose-Group/GDR-Net#16",
        "RuntimeError: DataLoader worker (pid 3216) is killed by signal: Bus error. It is possible that dataloader's "
        "workers are out of shared memory. Please try to raise your shared memory limit.",
        "bus-error-shm",
        "error",
        "--ipc=host",
    ),
    (
        "meta-llama/llama#856",
        "[2023-10-13 17:40:02,544] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
        "local_rank: 0 (pid: 62498) of binary: /home/znr/miniconda3/envs/llama/bin/python",
        "host-oom-killed",
        "error",
        "host memory",
    ),
    (
        "fidelity/stoke#31",
        "  traceback : Signal 9 (SIGKILL) received by PID 10398",
        "host-oom-killed",
        "error",
        "host memory",
    ),
    (
        "snowflakedb/ArcticTraining#219",
        "[rank7]:[E626 05:14:36.393067540 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 7] "
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
        "collectives.",
        "nccl-watchdog-stuck",
        "error",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    ),
    (
        "vllm-project/vllm-omni#474",
        "(APIServer pid=48263) ValueError: Could not detect config format for no config file found. With "
        "config_format 'auto', ensure your model has either config.json (HF format) or params.json (Mistral format).",
        "model-config-missing",
        "error",
        "snapshots/<commit>/",
    ),
    (
        "vllm-project/vllm#9398",
        "TypeError: EngineArgs.__init__() got an unexpected keyword argument 'num_scheduler_steps'",
        "unexpected-keyword-argument",
        "error",
        "EngineArgs.__init__ of the installed release takes no 'num_scheduler_steps'",
    ),
    (
        "NVIDIA-NeMo/RL#870",
        "TypeError: EngineArgs.__init__() got an unexpected keyword argument 'logprobs_mode'",
        "unexpected-keyword-argument",
        "error",
        "install the release the calling code was written for",
    ),
    (
        "intel/ipex-llm#12922",
        "start-vllm-service.sh: line 18:  1669 Illegal instruction     (core dumped) python -m "
        "ipex_llm.vllm.cpu.entrypoints.openai.api_server --served-model-name $served_model_name --port 8001",
        "cpu-illegal-instruction",
        "error",
        "/proc/cpuinfo",
    ),
    (
        "icip-cas/AutoAlign#25",
        "RuntimeError: The detected CUDA version (11.8) mismatches the version that was used to compile PyTorch "
        "(12.4). Please make sure to use the same CUDA versions.",
        "cuda-toolkit-torch-mismatch",
        "error",
        "the toolkit found is CUDA 11.8",
    ),
    (
        "vllm-project/vllm#42358",
        "ERROR: No matching distribution found for vllm==0.20.2+rocm721",
        "pip-no-matching-distribution",
        "error",
        "change the pin of vllm==0.20.2+rocm721",
    ),
    (
        "JIA-Lab-research/Seg-Zero#12",
        'ERROR: Could not find a version that satisfies the requirement xgrammar==0.1.11; platform_machine == "x86_64" '
        "(from vllm) (from versions: 0.1.14, 0.1.15, 0.1.16, 0.1.17)",
        "pip-no-matching-distribution",
        "error",
        "xgrammar==0.1.11",
    ),
    (
        "openvla/openvla#82",
        "OSError: Can't load tokenizer for 'meta-llama/Llama-2-7b-hf'. If you were trying to load it from "
        "'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
        "hub-files-not-loadable",
        "error",
        "HF_TOKEN",
    ),
    (
        "vllm-project/vllm-ascend#9999",
        "0SError: Can't load the configuration of '/data/0wen/0wen3-0.6B'",
        "hub-files-not-loadable",
        "error",
        "if '/data/0wen/0wen3-0.6B' is a path",
    ),
    (
        "liunian-Jay/MU-GOT#17",
        "INFO 11-20 10:45:57 gpu_executor.py:102] # GPU blocks: 12453, # CPU blocks: 2730\nKilled",
        "host-oom-killed",
        "error",
        "host memory",
    ),
    (
        "deepseek-ai/DeepSeek-VL2#90",
        "Loading checkpoint shards:  75%|███████████████████████████████████████████████ ...... 3/4 "
        "[00:08<00:02,  2.83s/it]Killed",
        "host-oom-killed",
        "error",
        "host memory",
    ),
    (
        "vllm-project/vllm#17770",
        "(RayWorkerWrapper pid=2191173, ip=10.52.51.232) *** SIGSEGV received at time=1746566409 on cpu 131 ***",
        "native-crash",
        "error",
        "PYTHONFAULTHANDLER=1",
    ),
    (
        "kvcache-ai/ktransformers#439",
        "ImportError: /home/ubuntu/anaconda3/envs/ktransformers-0.3/bin/../lib/libstdc++.so.6: version "
        "`GLIBCXX_3.4.32' not found (required by /home/ubuntu/anaconda3/envs/ktransformers-0.3/lib/python3.11/"
        "site-packages/KTransformersOps.cpython-311-x86_64-linux-gnu.so)",
        "system-library-too-old",
        "error",
        "GLIBCXX_3.4.32 is missing",
    ),
    (
        "ali-vilab/videocomposer#18",
        "ImportError: /usr/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.32' not found",
        "system-library-too-old",
        "error",
        "newer OS or base image",
    ),
    (
        "sumerc/yappi#96",
        "  unable to execute 'cc': No such file or directory",
        "c-compiler-missing",
        "error",
        "build-essential",
    ),
    (
        "Netflix/dispatch#5627",
        "`error: [Errno 2] No such file or directory: 'gcc'",
        "c-compiler-missing",
        "error",
        "--only-binary=:all:",
    ),
    (
        "huggingface/huggingface_hub#1718",
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='cdn-lfs.huggingface.co', port=443): Read "
        "timed out.",
        "hub-download-timeout",
        "error",
        "cdn-lfs.huggingface.co did not answer in time",
    ),
    (
        "NVIDIA/nccl#525",
        "[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
        "nccl-shared-memory",
        "warning",  # a NCCL WARN line in a log that has not failed yet
        "--shm-size",
    ),
    (
        "NVIDIA/nccl#2076",
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, "
        "remote process exited or there was a network error, NCCL version 2.21.5",
        "nccl-remote-error",
        "error",
        "first error of the other ranks",
    ),
    (
        "AMDResearch/hpcfund#58",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "nccl-remote-error",
        "error",
        "NCCL_SOCKET_IFNAME",
    ),
    (
        "marin-community/marin#6940",
        "Bootstrap : no socket interface found",
        "nccl-no-network-interface",
        "error",
        "ip -br addr",
    ),
]


@pytest.mark.parametrize(("thread", "line", "rule", "severity", "names"), CASES, ids=[c[0] for c in CASES])
def test_a_line_of_the_class_reaches_its_rule(thread: str, line: str, rule: str, severity: str, names: str) -> None:
    assert_named(line + "\n", rule, names, severity)


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        # a torch C++ symbol stays with the rule that names the torch to match (godweiyang/NN-CUDA-Example#4)
        (
            "OSError: /xxx/NN-CUDA-Example/pytorch/build/libadd2.so: undefined symbol: "
            "_ZNK3c106IValue23reportToTensorTypeErrorEv",
            "extension-torch-abi",
        ),
        # a cache folder keeps its own rule (Jittor/JittorLLMs#97)
        ("PermissionError: [Errno 13] Permission denied: '/data/.cache'", "cache-dir-not-writable"),
        # an allocation a serving GPU can hold is plain GPU out of memory (noonghunna/club-3090#16)
        (
            "(EngineCore pid=112) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 50.00 MiB. GPU 0 has "
            "a total capacity of 23.56 GiB of which 21.75 MiB is free.",
            "gpu-out-of-memory",
        ),
    ],
    ids=["torch-symbol", "cache-folder", "small-allocation"],
)
def test_a_more_specific_rule_comes_first(line: str, rule: str) -> None:
    findings = diagnose_text(line + "\n")
    assert findings[0]["id"] == rule
    catch_alls = {"extension-undefined-symbol", "single-allocation-too-large", "permission-denied"}
    assert not catch_alls & {str(f["id"]) for f in findings}


def test_a_download_retry_warning_is_not_a_failed_download() -> None:
    """huggingface_hub logs a timed-out request it then retries (unslothai/unsloth#3486, as posted)."""
    line = (
        "'(ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out. (read "
        "timeout=10)\"), '(Request ID: 7d76f590-4653-46a3-8cec-2473bc91d595)')' thrown while requesting HEAD "
        "https://huggingface.co/unsloth/Qwen2.5-7B-Instruct-bnb-4bit/resolve/main/model.safetensors.index.json\n"
    )
    assert "hub-download-timeout" not in {f["id"] for f in diagnose_text(line)}

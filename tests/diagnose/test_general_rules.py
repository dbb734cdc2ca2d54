"""General failure classes (overflowed sampling, a checkpoint of another shape, a rendezvous not every rank reached,
cuDNN failing), each against a line as a public thread shows it (the thread in the comment; none is in a fresh
set's hold-out)."""

from __future__ import annotations

import pytest

from tests.diagnose.texts import assert_named, diagnose_text


@pytest.mark.parametrize(
    ("line", "rule", "names"),
    [
        (  # LianjiaTech/BELLE#412 (float16 inference; bfloat16 was the way out)
            "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n",
            "sampling-probabilities-not-finite",
            "--dtype bfloat16",
        ),
        (  # Deci-AI/super-gradients#1476
            "\tsize mismatch for heads.head1.stem.seq.conv.weight: copying a param with shape "
            "torch.Size([96, 96, 1, 1]) from checkpoint, the shape in current model is torch.Size([128, 96, 1, 1]).\n",
            "checkpoint-shape-mismatch",
            "heads.head1.stem.seq.conv.weight differs",
        ),
        (  # OpenRLHF/OpenRLHF#1040 (its title)
            "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 clients joined.\n",
            "rendezvous-timeout",
            "MASTER_ADDR",
        ),
        (  # yukkyo/PyTorch-FilterResponseNormalizationLayer#4 (its title; memory was the cause there)
            "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED\n",
            "cudnn-status",
            "torch.backends.cudnn.enabled=False",
        ),
    ],
    ids=["nan-sampling", "shape-mismatch", "rendezvous", "cudnn"],
)
def test_a_general_failure_class_is_named(line: str, rule: str, names: str) -> None:
    assert_named(line, rule, names)


# Neroued/ninfer#187, a C++ server's start as posted
NINFER = (
    "2026-09-06 12:21:45.865  INFO  starting engine\n"
    "2026-09-06 12:21:46.013  ERROR startup failed | planning runtime | 1.18 ms\n"
    "2026-09-06 12:21:46.017  FATAL server failed during startup | artifact object was not consumed by the "
    "selected target: dflash2/feature_projection\n"
)


def test_a_line_logged_as_an_error_is_read_when_nothing_else_names_the_failure() -> None:
    """No traceback, no exception, no rule: the first line the software logged at ERROR is the root, a warning to
    read; a line logged at FATAL is a failure of its own."""
    (root,) = [f for f in diagnose_text(NINFER.replace("FATAL", "INFO ")) if f["id"] == "root-error"]
    assert root["severity"] == "warning" and "startup failed" in str(root["evidence"]), root
    (root,) = [f for f in diagnose_text(NINFER) if f["id"] == "root-error"]
    assert root["severity"] == "error" and "server failed during startup" in str(root["evidence"]), root


@pytest.mark.parametrize(
    ("line", "rule", "names"),
    [
        (  # triton-lang/triton#2971: a new Triton on a driver of CUDA 11.4
            "    self.module, self.function, self.n_regs, self.n_spills = driver.utils.load_binary(\n"
            "RuntimeError: Triton Error [CUDA]: device kernel image is invalid.\n",
            "triton-kernel-image-invalid",
            "upgrade the NVIDIA driver",
        ),
        (  # lllyasviel/FramePack#246 (its title; memory ran short and layers went to the CPU)
            "ValueError: Pointer argument (at 0) cannot be accessed from Triton (cpu tensor?)\n",
            "triton-cpu-tensor",
            "--cpu-offload-gb 0",
        ),
    ],
    ids=["kernel-image-invalid", "cpu-tensor"],
)
def test_a_triton_launch_failure_is_named(line: str, rule: str, names: str) -> None:
    assert_named(line, rule, names)


def test_sglangs_capture_failure_names_its_options() -> None:
    # sgl-project/sglang#4205, as posted (cut there)
    line = (
        "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
        "closed by peer\n"
    )
    finding = {f["id"]: f for f in diagnose_text(line)}["sglang-graph-capture-failed"]
    assert "--disable-cuda-graph" in str(finding["fix"]) and "--cuda-graph-max-bs" in str(finding["fix"]), finding

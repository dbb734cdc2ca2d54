"""The memory one sequence holds (KV per token, a hybrid's Mamba state) and doctor's concurrency bound from it."""

from __future__ import annotations

from dataclasses import asdict

from checks import memory
from checks.seqmem import sequence_memory
from launcher.model import known, nemotron


def test_supers_state_outweighs_its_kv() -> None:
    """Super: SSM 40 x 128 x 64 x 128 x 4 B = 167,772,160 + conv 40 x 10,240 x 3 x 2 B = 2,457,600; KV on its 8
    attention layers: 8 x 2 heads x 128 x 2 (K, V) = 4096 elements a token, 4 KiB at FP8."""
    seq = sequence_memory(nemotron.SUPER_CONFIG)
    assert seq is not None
    assert (seq.mamba_layers, seq.attention_layers) == (40, 8)
    assert seq.state_bytes() == 170_229_760
    assert (seq.kv_bytes_per_token("fp8"), seq.kv_bytes_per_token()) == (4096, 8192)
    assert seq.sequences_that_fit(100 * 2**30, 8192) == 100 * 2**30 // (170_229_760 + 8192 * 8192)
    llama = sequence_memory(known.KNOWN["llama-3-8b"].config)
    assert llama is not None and llama.state_bytes() == 0 and llama.kv_bytes_per_token() == 32 * 8 * 128 * 2 * 2


def test_doctor_sizes_a_hybrids_sequences() -> None:
    seq = sequence_memory(nemotron.SUPER_CONFIG)
    assert seq is not None
    gpu = {"name": "NVIDIA H200", "memory_total_mib": 143771}
    facts = {
        "model": {
            "path": "/m",
            "config": True,
            "weight_files": 17,
            "weight_bytes": 75 * 2**30,
            "sequence_memory": asdict(seq),
        },
        "nvml": {"ok": True, "gpus": [gpu]},
    }
    [result] = memory.check(facts)  # type: ignore[arg-type]
    free = (143771 / 1024 * 0.9 - 75) * 2**30
    assert result.status == "pass"
    long, short = int(free // (170_229_760 + 8192 * 8192)), int(free // (170_229_760 + 1024 * 8192))
    assert (long, short) == (232, 308)
    assert result.observed.endswith(
        "; each sequence holds 170 MB of Mamba state + 8 KiB of BF16 KV per token (4 KiB at FP8): the KV budget "
        f"holds {long} sequences of 8192 tokens, {short} of 1024"
    )

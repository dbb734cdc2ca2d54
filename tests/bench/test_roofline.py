"""The decode roofline against numbers known from model cards and datasheets, and a real H200 bench summary."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from launcher.bench import roofline as roofline
from launcher.cli.main import main
from launcher.model.shapes import KNOWN
from tests.helpers import FIXTURES

# The random-weight 1.1B Llama that benchmarks/gpu_bench.sh served on the H200 for the h200-graphs fixture.
LLAMA_1B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 1024,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


@pytest.mark.parametrize(
    ("name", "total", "active_with_embedding"),
    [
        ("llama-3.1-8b", 8.03e9, 8.03e9),  # "8B"; 8,030,261,248 parameters in the safetensors index
        ("qwen3-30b-a3b", 30.5e9, 3.3e9),  # the card: 30.5B in total, 3.3B activated
        ("mixtral-8x7b", 46.7e9, 12.9e9),  # Mistral's announcement: 46.7B total, 12.9B per token
        ("llama-3.1-70b", 70.6e9, 70.6e9),
    ],
)
def test_parameter_counts_match_the_model_cards(name: str, total: float, active_with_embedding: float) -> None:
    t = roofline.model_traffic(KNOWN[name].config)
    assert t.total_params == pytest.approx(total, rel=0.01)
    assert t.active_params + t.embed_params == pytest.approx(active_with_embedding, rel=0.02)


def test_distinct_experts_is_top_k_for_one_token_and_approaches_all_experts() -> None:
    assert roofline.expected_distinct_experts(128, 8, 1) == pytest.approx(8)
    assert roofline.expected_distinct_experts(128, 8, 16) == pytest.approx(128 * (1 - (120 / 128) ** 16))
    assert roofline.expected_distinct_experts(8, 2, 256) == pytest.approx(8, rel=1e-6)


def test_llama3_8b_step_bytes_and_ceiling_on_an_h200() -> None:
    t = roofline.model_traffic(KNOWN["llama-3-8b"].config)
    lm_head = 4096 * 128256
    body = t.dense_params  # everything but the embeddings and the lm_head
    bf16 = roofline.step_bytes(t, 1, 0)
    assert bf16.weights == 2 * (body + lm_head)
    fp8 = roofline.step_bytes(t, 1, 0, "fp8")
    assert fp8.weights == body + 2 * lm_head  # the lm_head stays bf16
    nvfp4 = roofline.step_bytes(t, 1, 0, "nvfp4")
    assert nvfp4.weights == pytest.approx(0.5625 * body + 2 * lm_head)
    # KV: 32 layers x 8 kv heads x 128 x (K and V) x 2 bytes per token, for each sequence
    kv = roofline.step_bytes(t, 4, 1024)
    assert kv.kv == 32 * 8 * 128 * 2 * 2 * 1024 * 4
    assert roofline.step_bytes(t, 4, 1024, kv_dtype="fp8").kv == kv.kv / 2
    # 15.0 GB per step in bf16 over 4.8 TB/s: 320 tok/s for one user at most
    assert roofline.ceiling_tok_s(bf16.total, 1, 4.8e12) == pytest.approx(320, rel=0.01)


def test_moe_weights_grow_with_the_experts_routed_to() -> None:
    t = roofline.model_traffic(KNOWN["qwen3-30b-a3b"].config)
    one, many = roofline.step_bytes(t, 1, 0), roofline.step_bytes(t, 256, 0)
    assert one.distinct_experts == pytest.approx(8)
    assert many.distinct_experts == pytest.approx(128, rel=1e-3)
    per_expert = 48 * 2 * 3 * 2048 * 768
    assert many.weights - one.weights == pytest.approx(per_expert * (many.distinct_experts - 8))


def test_nvml_bandwidth_is_clock_times_bus_width_times_two() -> None:
    # H100 SXM: NVML reports a 2619 MHz max memory clock on a 5120-bit bus; the datasheet says 3.35 TB/s
    h100 = {"name": "NVIDIA H100 80GB HBM3", "memory_clock_max_mhz": 2619, "memory_bus_width_bits": 5120}
    bw = roofline.gpu_bandwidth(h100)
    assert bw is not None and bw.source == "nvml"
    assert bw.bytes_per_s == pytest.approx(3.35e12, rel=0.001)
    assert bw.datasheet_bytes_per_s == 3.35e12
    assert roofline.gpu_bandwidth({"name": "NVIDIA H100 PCIe"}).bytes_per_s == 2.0e12  # type: ignore[union-attr]
    assert roofline.gpu_bandwidth({"name": "Some New GPU"}) is None


@pytest.mark.parametrize(
    ("config", "argv", "expected"),
    [
        ({}, [], "bf16"),
        ({}, ["--quantization", "fp8"], "fp8"),
        ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}, [], "nvfp4"),
        ({"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}, [], "fp8"),
        (
            {
                "quantization_config": {
                    "quant_method": "compressed-tensors",
                    "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float"}}},
                }
            },
            [],
            "nvfp4",
        ),
    ],
    ids=["bf16", "online-fp8", "modelopt-nvfp4", "fp8-checkpoint", "compressed-tensors-nvfp4"],
)
def test_weight_dtype(config: dict, argv: list[str], expected: str) -> None:  # type: ignore[type-arg]
    assert roofline.weight_dtype_of(config, argv) == expected


def test_annotate_a_real_h200_run() -> None:
    summary = json.loads((FIXTURES / "bench" / "h200-graphs" / "summary.json").read_text())
    r = roofline.annotate(summary, LLAMA_1B)
    assert r.applies and r.bandwidth is not None and r.bandwidth.bytes_per_s == 4.8e12
    level = r.levels[0]
    assert level.concurrency == 1
    context = summary["workload"]["input_len"] + summary["workload"]["output_len"] / 2
    t = roofline.model_traffic(LLAMA_1B)
    step = 2 * (t.dense_params + t.head_params) + 16 * 4 * 128 * 2 * 2 * context
    assert level.step_bytes == pytest.approx(step)
    measured = summary["levels"][0]["output_throughput_tok_s"]
    assert level.percent_of_limit == pytest.approx(100 * measured * step / 4.8e12)
    assert r.ceiling_per_user_tok_s == pytest.approx(4.8e12 / step)


def test_tensor_parallel_spreads_the_bytes_over_the_gpus() -> None:
    summary = json.loads((FIXTURES / "bench" / "h200-graphs" / "summary.json").read_text())
    single = roofline.annotate(summary, LLAMA_1B)
    tp = copy.deepcopy(summary)
    tp["provenance"]["launched_by_nemolaunch"]["argv"] += ["--tensor-parallel-size", "2"]
    double = roofline.annotate(tp, LLAMA_1B)
    assert double.ceiling_per_user_tok_s == pytest.approx(2 * single.ceiling_per_user_tok_s)  # type: ignore[operator]


def test_roofline_cli_says_it_does_not_apply_to_the_cpu_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = {"workload": {"input_len": 32, "output_len": 16}, "provenance": {"gpu": None}, "levels": []}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_1B))
    rc = main(["roofline", str(tmp_path / "summary.json"), "--model", str(tmp_path)])
    assert rc == 3
    assert capsys.readouterr().out == (
        "roofline does not apply: no NVIDIA GPU in this run (the CPU engine): "
        "a GPU memory-bandwidth roofline does not apply\n"
    )


def test_roofline_cli_json_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_1B))
    summary = FIXTURES / "bench" / "h200-graphs" / "summary.json"
    assert main(["roofline", str(summary), "--model", str(tmp_path / "config.json"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "nemolaunch.roofline/1" and [lv["concurrency"] for lv in doc["levels"]] == [1, 4, 16, 64]
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["roofline", str(tmp_path / "bad.json"), "--model", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"nemolaunch: {tmp_path / 'bad.json'}: not JSON (Expecting property name enclosed in double quotes at line 1 "
        "column 2); give a bench summary.json\n"
    )


def test_bench_prints_one_roofline_line_from_the_summary() -> None:
    from launcher.cli.bench import roofline_line

    summary = json.loads((FIXTURES / "bench" / "h200-graphs" / "summary.json").read_text())
    doc = roofline.annotate(summary, LLAMA_1B).to_json()
    ceiling = doc["ceiling_per_user_tok_s"]
    shares = [f"c={lv['concurrency']} {lv['percent_of_limit']:.0f}%" for lv in doc["levels"]]
    assert roofline_line(doc) == (
        f"roofline: at most {ceiling:.0f} tok/s per user at c=1 by memory bandwidth; measured share of the limit: "
        f"{', '.join(shares)} (nemolaunch roofline SUMMARY --model DIR for the table)"
    )
    cpu = roofline.annotate({**summary, "provenance": {}}, LLAMA_1B).to_json()
    assert roofline_line(cpu) == f"roofline: does not apply ({cpu['reason']})"
    assert roofline_line(None) is None


def test_a_shape_folders_recorded_flags_set_the_weight_dtype() -> None:
    """The H200 fidelity run served a `model shape llama-3-8b --quantization fp8` folder outside nemolaunch serve:
    the summary has no argv, so the folder's recorded flags (`--quantization fp8`) must decide the weights' bytes."""
    from launcher.model import shapes as shapes

    summary = json.loads((FIXTURES / "gpu-h200-2026-12-01" / "bench-llama3-8b-fp8-c1.summary.json").read_text())
    config = shapes.resolve("llama-3-8b", "fp8").config
    as_bf16 = roofline.annotate(summary, config)
    as_fp8 = roofline.annotate(summary, config, served_args=["--load-format", "dummy", "--quantization", "fp8"])
    assert (as_bf16.weight_dtype, as_fp8.weight_dtype) == ("bf16", "fp8")
    assert as_fp8.levels[0].percent_of_limit == pytest.approx(46.4, abs=0.1)


def test_a_levels_prompts_as_the_server_counted_them_set_its_context() -> None:
    """The H200 fidelity run of 2026-12-02 sent a dataset of 256-token prompts, but the level's input_len is the
    sweep's default (512): the KV cache read per step must follow the prompts really sent (mean_prompt_tokens, from
    the server's usage), where the summary has them."""
    from launcher.model import shapes as shapes

    path = FIXTURES / "gpu-h200-2026-12-02" / "fidelity" / "nemolaunch-c256.summary.json"
    summary = json.loads(path.read_text())
    config = shapes.resolve("llama-3.1-8b", "fp8").config
    args = ["--load-format", "dummy", "--quantization", "fp8"]
    labelled = roofline.annotate(summary, config, served_args=args)
    summary["levels"][0]["mean_prompt_tokens"] = 256.0
    counted = roofline.annotate(summary, config, served_args=args)
    assert labelled.levels[0].context_len == 512 + 64 and counted.levels[0].context_len == 256 + 64
    assert counted.levels[0].kv_bytes == pytest.approx(labelled.levels[0].kv_bytes * 320 / 576)
    assert counted.context_len == 320  # the report's line and the c=1 ceiling use the first level's


def test_a_masked_prompt_count_falls_back_to_the_levels_length() -> None:
    """bench summaries written on 2026-12-02 before the fix in checks.secrets carry "mean_prompt_tokens":
    "<redacted>" (the H200's MoE shape and c=256 runs): roofline reads the level's input_len instead of dying in
    float()."""
    from launcher.model import shapes as shapes

    path = FIXTURES / "gpu-h200-2026-12-02b" / "fidelity256" / "nemolaunch-c256.summary.json"
    summary = json.loads(path.read_text())
    assert summary["levels"][0]["mean_prompt_tokens"] == "<redacted>"  # as bench wrote it on the H200
    config = shapes.resolve("llama-3.1-8b", "fp8").config
    got = roofline.annotate(summary, config, served_args=["--load-format", "dummy", "--quantization", "fp8"])
    assert got.levels[0].context_len == 512 + 64


def test_nemotron_super_hybrid_step_bytes_by_hand() -> None:
    """Super's NVFP4 release (the MIXED_PRECISION map) at c=1 and a mean context of 320 tokens (256 in, 128 out),
    counted by hand from the config and the release's per-class FP8 layer lists (launcher/model/nemotron.py):

    Mamba (40 layers): in_proj 4096 x (2x8192 + 2x8x128 + 128) = 76,021,760 params, FP8 on 28 layers, BF16 on 12;
      out_proj 8192 x 4096 = 33,554,432, FP8 on 29, BF16 on 11
      -> 28x76,021,760 + 12x76,021,760x2 + 29x33,554,432 + 11x33,554,432x2 = 5,664,407,552 B
    Attention (8 layers): q 4096x4096 and k, v 4096x256 in BF16; o 4096x4096 FP8 on layers 69 and 78, BF16 on 6
      -> 8x(16,777,216x2 + 2x1,048,576x2) + 2x16,777,216 + 6x16,777,216x2 = 536,870,912 B
    MoE, read every step (40 layers): router 4096x512 BF16 -> 40x2,097,152x2 = 167,772,160 B;
      shared up 4096x5376 = 22,020,096: FP8 x39, BF16 x1; shared down: FP8 x37, NVFP4 x1 (0.5625 B), BF16 x2
      -> 22,020,096 x (39 + 2 + 37 + 0.5625 + 4) = 1,817,897,675.. B (exactly 22,020,096 x 82.5625);
      latent fc1 and fc2 4096x1024 = 4,194,304 each: FP8 on 3 + 1 layers, BF16 on 37 + 39
      -> 4,194,304 x (4 + 2x76) = 654,311,424 B
    lm_head 4096x131072 BF16 -> 1,073,741,824 B
    Routed experts at c=1: 22 of 512 per layer, up and down 1024x2688 = 2,752,512 each, NVFP4
      -> 40 x 22 x 2 x 2,752,512 x 0.5625 = 2,724,986,880 B
    Mamba state, read and written: SSM 40x128x64x128 x 4 B (fp32) = 167,772,160; conv 40 x (8192 + 2x8x128) x 3 x
      2 B (bf16) = 2,457,600 -> 2 x 170,229,760 = 340,459,520 B
    KV (FP8, from the checkpoint's kv_cache_scheme): 8 layers x 2 KV heads x 128 x (K and V) x 1 B x 320 tokens
      = 1,310,720 B
    Total 12,981,895,168 B per step: 4.8 TB/s over it is 369.7 tok/s for one user at most."""
    from launcher.model import quant, shapes

    config = shapes.resolve("nemotron-3-super-120b-a12b", "nvfp4").config
    t = roofline.model_traffic(config)
    q = quant.read(config)
    got = roofline.step_bytes(t, 1, 320, q, "fp8")
    weights = 5_664_407_552 + 536_870_912 + 167_772_160 + 22_020_096 * 82.5625 + 654_311_424 + 1_073_741_824
    assert got.weights == pytest.approx(weights + 2_724_986_880, rel=1e-12)
    assert got.mamba == 340_459_520 and got.kv == 1_310_720
    assert got.total == pytest.approx(12_981_895_168, rel=1e-12)
    assert roofline.ceiling_tok_s(got.total, 1, 4.8e12) == pytest.approx(369.75, abs=0.01)
    # at c=64 each sequence brings its own state and KV; the experts read grow to those routed to
    many = roofline.step_bytes(t, 64, 320, q, "fp8")
    assert many.mamba == 64 * 340_459_520 and many.kv == 64 * 1_310_720
    distinct = 512 * (1 - (1 - 22 / 512) ** 64)
    assert many.weights - got.weights == pytest.approx(40 * 2 * 2_752_512 * 0.5625 * (distinct - 22))


def test_a_biased_router_on_dummy_weights_reads_the_same_experts_at_every_level() -> None:
    """vLLM's dummy weights route every token of NemotronH to the experts its correction bias ranks first
    (benchmarks/dummy_routing.py with vLLM's grouped_topk: Super 22.0-25.7 of 512 at c=1-64). Served so, the
    weights read per step stay those of c=1 while each sequence brings its state and KV: Super's sweep on the H200
    (2026-12-03) read 9.6 ms a token at c=16 where uniform routing needs 9.9 ms of datasheet bandwidth."""
    from launcher.model import quant, shapes

    config = shapes.resolve("nemotron-3-super-120b-a12b", "nvfp4").config
    t = roofline.model_traffic(config)
    q = quant.read(config)
    one = roofline.step_bytes(t, 1, 320, q, "fp8", dummy_weights=True)
    many = roofline.step_bytes(t, 64, 320, q, "fp8", dummy_weights=True)
    assert one.total == pytest.approx(12_981_895_168, rel=1e-12)  # c=1: 22 experts either way (the test above)
    assert many.distinct_experts == 22 and many.weights == one.weights
    assert many.mamba == 64 * 340_459_520 and many.kv == 64 * 1_310_720
    real = roofline.step_bytes(t, 64, 320, q, "fp8")
    assert real.distinct_experts == pytest.approx(512 * (1 - (1 - 22 / 512) ** 64))
    # a softmax router without a bias (Qwen3) routes dummy weights uniformly: no change
    qwen = roofline.model_traffic(KNOWN["qwen3-30b-a3b"].config)
    assert roofline.step_bytes(qwen, 64, 320, dummy_weights=True) == roofline.step_bytes(qwen, 64, 320)


def test_the_h200_super_sweep_under_dummy_routing_stays_under_its_limit() -> None:
    """The 2026-12-03 sweep's levels (measured TPOT, the server's argv with --load-format dummy): uniform routing
    put c=16 and c=32 above 100% of the bandwidth limit, which no run can be; the experts the dummy router reads
    keep every level under it."""
    from launcher.model import shapes

    config = shapes.resolve("nemotron-3-super-120b-a12b", "nvfp4").config
    tpot = {1: 6.9, 16: 9.6, 32: 13.5, 64: 21.3}
    summary = {
        "workload": {"input_len": 256, "output_len": 128},
        "provenance": {"gpu": [{"name": "NVIDIA H200"}], "launched_by_nemolaunch": {"argv": [
            "vllm", "--kv-cache-dtype", "fp8", "--load-format", "dummy"]}},
        "levels": [{"concurrency": c, "tpot_ms": {"mean": ms}} for c, ms in tpot.items()],
    }  # fmt: skip
    got = roofline.annotate(summary, config)
    assert got.applies and "the same 22 per layer at every level" in got.reason
    shares = {lv.concurrency: lv.percent_of_limit_decode for lv in got.levels}
    assert all(share is not None and share < 100 for share in shares.values()), shares
    argv = summary["provenance"]["launched_by_nemolaunch"]["argv"]  # type: ignore[index]
    argv[-2:] = []  # the same levels with real weights: uniform routing
    uniform = roofline.annotate(summary, config)
    assert {lv.concurrency: round(lv.percent_of_limit_decode or 0) for lv in uniform.levels}[32] > 100


def test_nemotron_nano_weights_follow_its_hf_quant_config() -> None:
    """Nano's release excludes lm_head, the 6 attention layers and the Mamba layer before each: those stay BF16
    (the router too, as vLLM keeps it); every other matrix read at c=1 is NVFP4, 0.5625 B a parameter."""
    from launcher.model import nemotron, quant

    t = roofline.model_traffic(nemotron.NANO_CONFIG)
    q = quant.read(nemotron.NANO_CONFIG, nemotron.nano_hf_quant_config())
    mamba_pair = 2688 * (2 * 4096 + 2 * 8 * 128 + 64) + 4096 * 2688  # in_proj + out_proj of one Mamba layer
    attention = 2688 * 4096 * 2 + 2688 * 256 * 2  # q and o; k and v
    bf16 = 6 * (mamba_pair + attention) + 131072 * 2688 + 23 * 2688 * 128  # + lm_head + routers
    fp4 = t.active_params - bf16  # the other Mamba layers, shared experts, 6 routed experts per MoE layer
    assert roofline.step_bytes(t, 1, 0, q).weights == pytest.approx(2 * bf16 + 0.5625 * fp4)


def test_a_request_rate_summary_gets_a_roofline_per_level() -> None:
    """bench's own request-rate output has "concurrency": null per level: roofline takes each level's mean
    requests in flight (achieved_concurrency) instead of dying in int(None)."""
    summary = json.loads((FIXTURES / "bench" / "h200-graphs" / "summary.json").read_text())
    for level in summary["levels"]:
        level["request_rate"], level["concurrency"] = 2.0 * level["concurrency"], None
    summary["levels"][1]["achieved_concurrency"] = 3.5
    summary["levels"][2].pop("achieved_concurrency", None)
    r = roofline.annotate(summary, LLAMA_1B)
    assert [lv.concurrency for lv in r.levels][1] == 3.5 and r.levels[1].request_rate == 8.0
    assert len(r.levels) == len(summary["levels"]) - 1
    assert r.skipped == ["the level at request rate 32.0 has no concurrency nor achieved_concurrency"]


def test_a_mixed_precision_checkpoint_is_modelled_not_refused() -> None:
    """The H200 run of 2026-12-03 was refused with "quantization 'modelopt' is not modelled"."""
    from launcher.model import shapes

    summary = json.loads((FIXTURES / "bench" / "h200-graphs" / "summary.json").read_text())
    config = shapes.resolve("nemotron-3-super-120b-a12b", "nvfp4").config
    r = roofline.annotate(summary, config)
    assert r.applies and r.weight_dtype == "mixed nvfp4+fp8" and r.kv_dtype == "fp8"
    assert r.mamba_state_bytes_per_seq == 170_229_760
    assert "Mamba state 170.2 MB per sequence (SSM fp32, conv bf16)" in r.reason

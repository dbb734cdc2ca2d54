"""Nemotron 3 Super and Nano shapes: the published config fields, the NVFP4 releases' quantization files rebuilt
from their per-class layer lists, the folder's label read from what it carries, and (with the real engine) the
installed vLLM parsing both configs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.errors import BadInput
from launcher.model import nemotron, quant
from launcher.model import shapes as shapes

SUPER, NANO = nemotron.SUPER, nemotron.NANO


def test_the_published_layer_patterns() -> None:
    """Super: 88 layers = 40 Mamba + 40 MoE + 8 attention (the model card's LatentMoE hybrid); Nano: 52 = 23 + 23 +
    6."""
    for config, counts in ((nemotron.SUPER_CONFIG, (40, 40, 8)), (nemotron.NANO_CONFIG, (23, 23, 6))):
        pattern = config["hybrid_override_pattern"]
        assert len(pattern) == config["num_hidden_layers"]
        assert tuple(pattern.count(k) for k in "ME*") == counts
    s = nemotron.SUPER_CONFIG
    assert (s["n_routed_experts"], s["num_experts_per_tok"], s["moe_latent_size"]) == (512, 22, 1024)
    assert (s["mamba_num_heads"], s["mamba_head_dim"], s["ssm_state_size"], s["n_groups"]) == (128, 64, 128, 8)
    assert nemotron.layers_of(s["hybrid_override_pattern"], "*") == [7, 16, 25, 36, 47, 58, 69, 78]
    assert "auto_map" not in s  # no remote code in a shape folder: vLLM's own NemotronHConfig reads it


def test_supers_mixed_precision_map_matches_the_release() -> None:
    """The release names 41,100 modules: 139 FP8 and 40,961 NVFP4 (40 layers x 512 experts x 2 + layer 1's shared
    down_proj). Each FP8 class sits on the layers of its kind: Mamba projections on M, shared experts and latent
    projections on E, o_proj on attention."""
    layers = nemotron.super_quantized_layers()
    algos = [q["quant_algo"] for q in layers.values()]
    assert (len(layers), algos.count("FP8"), algos.count("NVFP4")) == (41100, 139, 40961)
    pattern = nemotron.SUPER_CONFIG["hybrid_override_pattern"]
    kind = {"in_proj": "M", "out_proj": "M", "o_proj": "*", "fc1_latent_proj": "E", "fc2_latent_proj": "E"}
    for leaf, fp8_layers in nemotron.SUPER_FP8_LAYERS.items():
        assert {pattern[i] for i in fp8_layers} == {kind.get(leaf, "E")}, leaf
    assert layers["backbone.layers.1.mixer.shared_experts.down_proj"] == {"quant_algo": "NVFP4", "group_size": 16}
    assert layers["backbone.layers.87.mixer.experts.511.down_proj"]["quant_algo"] == "NVFP4"
    assert "backbone.layers.8.mixer.shared_experts.down_proj" not in layers  # BF16, as released
    qc = nemotron.super_quantization_config()
    assert (qc["quant_method"], qc["quant_algo"], qc["kv_cache_scheme"]["num_bits"]) == (
        "modelopt",
        "MIXED_PRECISION",
        8,
    )
    assert len(qc["config_groups"]["group_0"]["targets"]) == 139
    assert nemotron.super_hf_quant_config()["quantization"]["quantized_layers"] == layers


def test_nanos_hf_quant_config_matches_the_release() -> None:
    """As transcribed from nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4 @ 6efb4a2a: lm_head, then per attention
    layer the Mamba layer before it (in_proj, out_proj) and its q/k/v/o, then every conv1d."""
    q = nemotron.nano_hf_quant_config()["quantization"]
    assert (q["quant_algo"], q["kv_cache_quant_algo"], q["group_size"]) == ("NVFP4", "FP8", 16)
    exclude = q["exclude_modules"]
    assert exclude[:7] == [
        "lm_head",
        "backbone.layers.4.mixer.in_proj",
        "backbone.layers.4.mixer.out_proj",
        "backbone.layers.5.mixer.q_proj",
        "backbone.layers.5.mixer.k_proj",
        "backbone.layers.5.mixer.v_proj",
        "backbone.layers.5.mixer.o_proj",
    ]
    leaves = ["in_proj", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj"]
    assert exclude[31:37] == [
        f"backbone.layers.{i}.mixer.{leaf}" for i, leaf in zip((41, 41, 42, 42, 42, 42), leaves, strict=True)
    ]
    convs = [int(e.split(".")[2]) for e in exclude if e.endswith("conv1d")]
    assert convs == [0, 2, 4, 7, 9, 11, 14, 16, 18, 21, 23, 25, 28, 30, 32, 35, 37, 39, 41, 44, 46, 48, 50]
    assert len(exclude) == 1 + 6 * 6 + 23


@pytest.mark.parametrize(
    ("name", "quantization", "label", "files", "args"),
    [
        (SUPER, None, "bf16", [], ["--load-format", "dummy"]),
        (SUPER, "fp8", "fp8", [], ["--load-format", "dummy", "--quantization", "fp8"]),
        (SUPER, "nvfp4", "mixed nvfp4+fp8", ["hf_quant_config.json"], ["--load-format", "dummy"]),
        (NANO, "nvfp4", "nvfp4", ["hf_quant_config.json"], ["--load-format", "dummy"]),
        (NANO, "bf16", "bf16", [], ["--load-format", "dummy"]),
    ],
    ids=["super-bf16", "super-fp8-online", "super-nvfp4-release", "nano-nvfp4-release", "nano-bf16"],
)
def test_variants_and_their_labels(
    name: str, quantization: str | None, label: str, files: list[str], args: list[str]
) -> None:
    spec = shapes.resolve(name, quantization)
    assert (spec.quantization, sorted(spec.files), spec.serve_args) == (label, files, args)
    assert ("quantization_config" in spec.config) == (name == SUPER and quantization == "nvfp4")


def test_a_scaled_down_super_gets_a_map_that_fits_it() -> None:
    spec = shapes.resolve(
        SUPER, "nvfp4", {"hybrid_override_pattern": "ME*E", "num_hidden_layers": 4, "n_routed_experts": 4}
    )
    layers = spec.config["quantization_config"]["quantized_layers"]
    experts = sorted(n for n in layers if ".experts." in n)
    assert len(experts) == 2 * 4 * 2 and experts[0] == "backbone.layers.1.mixer.experts.0.down_proj"
    assert spec.files["hf_quant_config.json"]["quantization"]["quantized_layers"] == layers


def _copy_out(folder: Path, spec: shapes.ShapeSpec) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(spec.config))
    for file_name, doc in spec.files.items():
        (folder / file_name).write_text(json.dumps(doc))
    return folder / "config.json"


def test_a_config_json_keeps_and_labels_its_own_quantization(tmp_path: Path) -> None:
    """`model shape CONFIG.json` of a checkpoint that carries its quantization (Super's map in config.json; Nano's
    in the hf_quant_config.json beside it) labels the folder with it (it said "bf16" before), keeps the files, and
    --quantization bf16 drops them."""
    super_json = _copy_out(tmp_path / "super", shapes.resolve(SUPER, "nvfp4"))
    nano_json = _copy_out(tmp_path / "nano", shapes.resolve(NANO, "nvfp4"))
    kept = shapes.resolve(str(super_json))
    assert kept.quantization == "mixed nvfp4+fp8" and kept.files["hf_quant_config.json"]
    nano = shapes.resolve(str(nano_json))
    assert (nano.quantization, "quantization_config" in nano.config, list(nano.files)) == (
        "nvfp4",
        False,
        ["hf_quant_config.json"],
    )
    dropped = shapes.resolve(str(super_json), "bf16")
    assert (dropped.quantization, dropped.files, "quantization_config" in dropped.config) == ("bf16", {}, False)
    with pytest.raises(BadInput) as e:
        shapes.resolve(str(nano_json), "fp8")
    assert e.value.line() == (
        f"{nano_json} already carries its quantization (nvfp4); leave out --quantization to keep the checkpoint's "
        "own, or give --quantization bf16 to drop it"
    )


def test_quantization_per_module() -> None:
    """Where each module's bytes come from: Super's map (an unnamed module stays BF16), Nano's exclusions."""
    sup = quant.read(shapes.resolve(SUPER, "nvfp4").config)
    assert sup.dtype_of("backbone.layers.0.mixer.in_proj") == "fp8"
    assert sup.dtype_of("backbone.layers.6.mixer.out_proj") == "bf16"  # layer 6's out_proj is not in the FP8 list
    assert sup.dtype_of("backbone.layers.1.mixer.experts.0.up_proj") == "nvfp4"
    assert (sup.kv, sup.base) == ("fp8", "bf16")
    nano = quant.read(nemotron.NANO_CONFIG, nemotron.nano_hf_quant_config())
    assert nano.dtype_of("backbone.layers.5.mixer.q_proj") == "bf16"
    assert nano.dtype_of("backbone.layers.6.mixer.shared_experts.up_proj") == "nvfp4"
    assert nano.dtype_of("lm_head") == "bf16"


def test_write_a_super_folder_through_the_cli(engine_python: Path, tmp_path: Path) -> None:
    out = tmp_path / "super"
    assert main(["model", "shape", SUPER, str(out), "--quantization", "nvfp4", "--python", str(engine_python)]) == 0
    marker = json.loads((out / shapes.MARKER).read_text())
    assert marker["quantization"] == "mixed nvfp4+fp8"
    on_disk = json.loads((out / "hf_quant_config.json").read_text())
    assert len(on_disk["quantization"]["quantized_layers"]) == 41100
    assert "(mixed nvfp4+fp8)" in (out / "README.md").read_text()
    # vLLM's dummy weights route every token of a NemotronH MoE to the same experts: the folder says so
    assert marker["weights"].endswith(shapes.DUMMY_ROUTING) and shapes.DUMMY_ROUTING in (out / "README.md").read_text()


def test_only_a_router_with_a_correction_bias_routes_dummy_weights_to_fixed_experts() -> None:
    assert nemotron.biased_router(nemotron.SUPER_CONFIG) and nemotron.biased_router(nemotron.NANO_CONFIG)
    assert not nemotron.biased_router(shapes.KNOWN["qwen3-30b-a3b"].config)  # softmax, no bias: uniform
    assert not nemotron.biased_router({**nemotron.NANO_CONFIG, "hybrid_override_pattern": "M-M*"})  # no MoE


# Runs under the engine's interpreter: vLLM's own config classes read each folder (no weights, no model built).
_PARSE = """
import json, sys
from vllm.config import LoadConfig, ModelConfig
from vllm.model_executor.model_loader.weight_utils import get_quant_config
out = {}
for path in sys.argv[1:]:
    mc = ModelConfig(model=path)
    hf = mc.hf_config
    qc = get_quant_config(mc, LoadConfig(load_format="dummy"))
    out[path] = [mc.architectures[0], mc.quantization, type(qc).__name__, mc.is_hybrid, hf.num_hidden_layers,
                 getattr(hf, "moe_latent_size", None), hf.n_routed_experts, hf.num_experts_per_tok,
                 getattr(hf, "num_nextn_predict_layers", 0), hf.mamba_ssm_cache_dtype, hf.n_groups, hf.chunk_size]
print(json.dumps(out))
"""


@pytest.mark.engine
def test_the_installed_vllm_parses_both_configs(engine_python: Path, tmp_path: Path) -> None:
    """The CPU engine's vLLM (0.32) reads each folder as it would serve it: NemotronH, hybrid, the ModelOpt config
    class that builds the layers (MIXED_PRECISION for Super, NVFP4 for Nano), and the published Mamba fields that
    vLLM's NemotronHConfig takes under other names (n_groups, chunk_size)."""
    folders = [tmp_path / "super", tmp_path / "nano"]
    for name, folder in zip((SUPER, NANO), folders, strict=True):
        assert (
            main(["model", "shape", name, str(folder), "--quantization", "nvfp4", "--python", str(engine_python)]) == 0
        )
    done = subprocess.run(
        [str(engine_python), "-c", _PARSE, *map(str, folders)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got[str(folders[0])] == [
        "NemotronHForCausalLM", "modelopt_mixed", "ModelOptMixedPrecisionConfig", True, 88, 1024, 512, 22, 1,
        "float32", 8, 128,
    ]  # fmt: skip
    assert got[str(folders[1])] == [
        "NemotronHForCausalLM", "modelopt_fp4", "ModelOptNvFp4Config", True, 52, None, 128, 6, 0, "float32", 8, 128,
    ]  # fmt: skip


# Nano's layer kinds at a size the 2-core CPU engine serves in about a minute: a Mamba-2 mixer, an attention layer
# and a dense relu2 MLP ("-"). No MoE layer ("E"): NemotronH's experts are relu2 without a gate, and the CPU
# engine's vLLM 0.32 refuses them while building the model ("NotImplementedError: is_act_and_mul=False is supported
# only for CUDA, XPU and ROCm for now", observed 2026-12-03 serving the pattern "M*E" here).
SMALL_HYBRID = [
    'hybrid_override_pattern="M*-"',
    "num_hidden_layers=3",
    "hidden_size=256",
    "intermediate_size=512",
    "mamba_num_heads=8",
    "mamba_head_dim=32",
    "n_groups=2",
    "ssm_state_size=16",
    "chunk_size=64",
    "num_attention_heads=4",
    "head_dim=64",
    "vocab_size=8192",
    "max_position_embeddings=4096",
]


@pytest.mark.engine
def test_a_scaled_down_nemotron_h_serves_on_the_cpu_engine(engine_python: Path, tmp_path: Path, port: int) -> None:
    """One server: Nano's architecture scaled down (Mamba-2 + attention + MLP), started by bench --profile cpu,
    swept at c=1,2; every request returns the tokens asked for."""
    shape = tmp_path / "nano-small"
    sets = [a for s in SMALL_HYBRID for a in ("--set", s)]
    assert main(["model", "shape", NANO, str(shape), *sets, "--python", str(engine_python)]) == 0
    out = tmp_path / "bench"
    served = ["bench", "--profile", "cpu", "--model", str(shape), "--python", str(engine_python), "--port", str(port)]
    sweep = ["--concurrency", "1,2", "--input-len", "32", "--output-len", "16", "--num-prompts", "4", "--out", str(out)]
    assert main([*served, *sweep]) == 0, (out / "server.log").read_text()[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for level in summary["levels"]:
        assert (level["completed"], level["failed"], level["length_mismatched"]) == (4, 0, 0)
    assert "NemotronHForCausalLM" in (out / "server.log").read_text()

"""`nemolaunch model shape`: what a shape folder holds, how serve treats a weightless folder, and (with the real
engine) a scaled-down Qwen3 MoE shape served by the vLLM CPU engine and benchmarked through nemolaunch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.errors import BadInput
from launcher.model import shapes as shapes

# Qwen3-30B-A3B's architecture at a size the 2-core CPU engine serves quickly: 16 experts, top-4, 2 layers.
SMALL_MOE = [
    "num_hidden_layers=2",
    "hidden_size=256",
    "num_attention_heads=4",
    "num_key_value_heads=2",
    "head_dim=64",
    "moe_intermediate_size=128",
    "num_experts=16",
    "num_experts_per_tok=4",
    "vocab_size=8192",
    "max_position_embeddings=4096",
]


def _fake_shape(folder: Path, serve_args: list[str]) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(shapes.KNOWN["llama-3-8b"].config))
    (folder / shapes.MARKER).write_text(json.dumps({"schema": shapes.SCHEMA, "serve_args": serve_args}))
    return folder


def test_known_shapes_keep_the_model_cards_sizes() -> None:
    qwen = shapes.resolve("qwen3-30b-a3b").config
    assert (qwen["num_experts"], qwen["num_experts_per_tok"], qwen["moe_intermediate_size"]) == (128, 8, 768)
    assert qwen["vocab_size"] == 151936
    assert shapes.resolve("llama-3.1-8b").config["vocab_size"] == 128256
    assert shapes.resolve("mixtral-8x7b").config["num_local_experts"] == 8


@pytest.mark.parametrize(
    ("name", "quantization", "args", "ignore"),
    [
        ("llama-3.1-8b", "bf16", ["--load-format", "dummy"], None),
        ("llama-3.1-8b", "fp8", ["--load-format", "dummy", "--quantization", "fp8"], None),
        ("llama-3.1-8b", "nvfp4", ["--load-format", "dummy"], ["lm_head"]),
        ("qwen3-30b-a3b", "nvfp4", ["--load-format", "dummy"], ["lm_head", "*.mlp.gate"]),
        ("mixtral-8x7b", "nvfp4", ["--load-format", "dummy"], ["lm_head", "*.block_sparse_moe.gate"]),
    ],
    ids=["dense-bf16", "dense-fp8-online", "dense-nvfp4", "qwen-moe-nvfp4", "mixtral-nvfp4"],
)
def test_quantization_variants(name: str, quantization: str, args: list[str], ignore: list[str] | None) -> None:
    spec = shapes.resolve(name, quantization)
    assert spec.serve_args == args
    qc = spec.config.get("quantization_config")
    assert (qc["ignore"] if qc else None) == ignore
    if qc:
        assert (qc["quant_method"], qc["quant_algo"], qc["group_size"]) == ("modelopt", "NVFP4", 16)


def test_a_config_json_and_overrides(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**shapes.KNOWN["qwen3-8b"].config, "vocab_size": 2048}))
    spec = shapes.resolve(str(tmp_path / "config.json"), "bf16", shapes.parse_overrides(("num_hidden_layers=4",)))
    assert spec.config["num_hidden_layers"] == 4 and spec.config["vocab_size"] == 2048
    assert spec.overrides == {"num_hidden_layers": 4}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope-7b"], "unknown model shape 'nope-7b'; give a config.json or one of llama-3-8b, llama-3.1-8b"),
        (["llama-3-8b", "--set", "layers"], "--set 'layers' is not KEY=VALUE; write e.g. --set num_hidden_layers=4"),
        (["llama-3-8b", "--set", "vocab_size=512"], "vocab_size 512 is below the tokenizer's 1024 ids"),
        (
            ["llama-3-8b", "--set", "vocab_size=1000000000000"],
            "llama-3-8b: vocab_size must be a positive integer below 2,097,152, not 1000000000000",
        ),
        (["llama-3-8b", "--set", "num_hidden_layers=nan"], "llama-3-8b: num_hidden_layers must be a positive integer"),
        (["llama-3-8b", "--set", "hidden_size=-1"], "llama-3-8b: hidden_size must be a positive integer"),
    ],
    ids=["unknown-name", "bad-set", "vocab-too-small", "vocab-1e12", "layers-nan", "hidden-negative"],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["model", "shape", argv[0], str(tmp_path / "out"), *argv[1:]])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"nemolaunch: {message}")
    assert not (tmp_path / "out").exists()


def test_list_shows_the_known_shapes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "shape", "--list"]) == 0
    out = capsys.readouterr().out
    for name in shapes.KNOWN:
        assert f"\n{name} " in out
    rows = {line.split()[0]: line.split()[1:4] for line in out.splitlines()[2:]}
    assert rows["qwen3-30b-a3b"] == ["Qwen3MoeForCausalLM", "30.5B", "3.4B"]
    # the model cards: Nano 31.6B total, 3.6B active with embeddings; Super 120B total, 12B active (12.8B with them)
    assert rows["nemotron-3-nano-30b-a3b"] == ["NemotronHForCausalLM", "31.6B", "3.6B"]
    assert rows["nemotron-3-super-120b-a12b"] == ["NemotronHForCausalLM", "120.7B", "12.8B"]


def test_launch_args_for_a_shape_add_only_what_the_profile_lacks(tmp_path: Path) -> None:
    shape = _fake_shape(tmp_path / "s", ["--load-format", "dummy", "--quantization", "fp8"])
    extra, notes = shapes.launch_args(str(shape), ["--max-model-len", "2048"])
    assert extra == ["--load-format", "dummy", "--quantization", "fp8"]
    assert "without weights" in notes[0]
    extra, _ = shapes.launch_args(str(shape), ["--load-format=dummy"])
    assert extra == ["--quantization", "fp8"]


def test_a_weightless_folder_that_is_no_shape_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(BadInput) as e:
        shapes.launch_args(str(tmp_path), [])
    assert e.value.line() == (
        f"{tmp_path} holds no weights (no *.safetensors or *.bin); to serve its shapes with random weights add "
        '"--load-format", "dummy" to the profile\'s extra_args, or write the folder with `nemolaunch model shape`'
    )
    assert shapes.launch_args(str(tmp_path), ["--load-format", "dummy"]) == ([], [])
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert shapes.launch_args(str(tmp_path), []) == ([], [])


def test_serve_dry_run_adds_the_shapes_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shape = _fake_shape(tmp_path / "s", ["--load-format", "dummy", "--quantization", "fp8"])
    rc = main(["serve", "--profile", "sm90", "--model", str(shape), "--vllm-version", "0.26.0", "--json"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    argv = plan["argv"]
    assert argv[argv.index("--load-format") + 1] == "dummy" and argv[argv.index("--quantization") + 1] == "fp8"
    assert any("model shape without weights" in n for n in plan["notes"])


def test_write_a_shape_folder(engine_python: Path, tmp_path: Path) -> None:
    """The real tokenizer build (needs the engine's tokenizers and transformers), padded to Llama 3's vocabulary."""
    out = tmp_path / "llama"
    assert (
        main(["model", "shape", "llama-3.1-8b", str(out), "--quantization", "fp8", "--python", str(engine_python)]) == 0
    )
    config = json.loads((out / "config.json").read_text())
    marker = json.loads((out / shapes.MARKER).read_text())
    vocab = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    assert config["vocab_size"] == len(vocab) == 128256
    assert sorted(vocab.values()) == list(range(128256))
    assert (config["bos_token_id"], config["eos_token_id"]) == (vocab["<s>"], vocab["</s>"])
    assert marker["serve_args"] == ["--load-format", "dummy", "--quantization", "fp8"]
    assert "--load-format dummy --quantization fp8" in (out / "README.md").read_text()
    assert not shapes.has_weights(out)
    assert main(["model", "shape", "llama-3.1-8b", str(out), "--python", str(engine_python)]) == 2  # not empty


@pytest.mark.engine
def test_a_moe_shape_serves_on_the_cpu_engine(engine_python: Path, tmp_path: Path, port: int) -> None:
    """One server: the scaled-down Qwen3 MoE shape, started by bench --profile cpu (which must add --load-format
    dummy itself), swept at c=1,2; every request returns the tokens asked for, and the roofline says it does not
    apply to the CPU engine."""
    shape = tmp_path / "qwen3-moe"
    sets = [a for s in SMALL_MOE for a in ("--set", s)]
    assert main(["model", "shape", "qwen3-30b-a3b", str(shape), *sets, "--python", str(engine_python)]) == 0
    out = tmp_path / "bench"
    served = ["bench", "--profile", "cpu", "--model", str(shape), "--python", str(engine_python), "--port", str(port)]
    sweep = ["--concurrency", "1,2", "--input-len", "32", "--output-len", "16", "--num-prompts", "4", "--out", str(out)]
    rc = main([*served, *sweep])
    assert rc == 0, (out / "server.log").read_text()[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert "--load-format" in summary["provenance"]["launched_by_nemolaunch"]["argv"]
    for level in summary["levels"]:
        assert (level["completed"], level["failed"], level["length_mismatched"]) == (4, 0, 0)
    log = (out / "server.log").read_text()
    assert "Qwen3MoeForCausalLM" in log
    assert main(["roofline", str(out / "summary.json"), "--model", str(shape)]) == 3

#!/usr/bin/env bash
# On a GPU host with vLLM, from the repository root: the seed's enforce-eager comparison made with nemolaunch.
#   bash benchmarks/gpu_bench.sh OUTDIR
# A random-weight 1.1B Llama (vLLM's dummy load format, the tiny model's tokenizer) is swept at concurrency
# 1,4,16,64 with CUDA graphs and with --enforce-eager; compare writes the report. Prints the tables last and
# copies the summaries, the report, its plots and the two server logs into OUTDIR (flat: 7 files).
set -eu
out=$1
export PYTHONUNBUFFERED=1
work=$(mktemp -d)
python3 -m launcher model tiny "$work/tiny" --python python3
mkdir -p "$work/llama-1b"
cp "$work/tiny"/tokenizer* "$work/tiny"/chat_template.jinja "$work/llama-1b/"
python3 - "$work/llama-1b/config.json" <<'PY'
import json, sys
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
           "intermediate_size": 5632, "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 4,
           "head_dim": 128, "vocab_size": 1024, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
           "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16", "tie_word_embeddings": False},
          open(sys.argv[1], "w"))
PY
for mode in graphs eager; do
  graphs=$([ $mode = graphs ] && echo true || echo false)
  printf 'schema = 1\ndescription = "H200, dummy 1.1B, %s"\n[vllm]\ncuda_graphs = %s\nmax_model_len = 2048\nextra_args = ["--load-format", "dummy"]\n' \
    "$mode" "$graphs" > "$work/$mode.toml"
  python3 -m launcher bench --profile "$work/$mode.toml" --model "$work/llama-1b" --python python3 --label "$mode" \
    --concurrency 1,4,16,64 --input-len 256 --output-len 128 --out "$work/$mode" 2>&1 | grep -v "^(\|^INFO\|^WARNING" || true
  cp "$work/$mode/summary.json" "$out/$mode-summary.json"
  cp "$work/$mode/server.log" "$out/$mode-server.log"
done
python3 -m launcher compare "$work/graphs" "$work/eager" --out "$work/report"
cp "$work/report/report.md" "$work/report/throughput.png" "$work/report/latency.png" "$out/"

#!/usr/bin/env bash
# On the H200 with vLLM 0.26 importable (../shared/gpu/), from the repository root; three commands, each < 9 min:
#   bash benchmarks/gpu_ab.sh graphs OUTDIR   # graphs vs --enforce-eager, with an A/A calibration side (~7 min)
#   bash benchmarks/gpu_ab.sh fp8 OUTDIR      # online FP8: CUTLASS vs torch per-tensor, with an A/A side (~7 min)
#   bash benchmarks/gpu_ab.sh tune OUTDIR     # tune on a dummy-weight Llama-8B-like model, 7-minute budget (~8 min)
# Each run is co-resident (three servers on the GPU, 0.28 of memory each), 3 interleaved ABBA rounds of short
# passes after one warm-up pass per server. Copies ab.json / report.md / ratios.png (or the tuned profile and
# tune.json) and the server logs' last lines into OUTDIR, and prints the verdicts last.
set -eu
what=$1
out=$2
mkdir -p "$out"
export PYTHONUNBUFFERED=1
work=$(mktemp -d)
python3 -m launcher model tiny "$work/tiny" --python python3 >/dev/null
model() {  # NAME HIDDEN INTERMEDIATE LAYERS HEADS KV_HEADS
  mkdir -p "$work/$1"
  cp "$work/tiny"/tokenizer* "$work/tiny"/chat_template.jinja "$work/$1/"
  python3 - "$work/$1/config.json" "$2" "$3" "$4" "$5" "$6" <<'PY'
import json, sys
path, hidden, inter, layers, heads, kv = sys.argv[1], *map(int, sys.argv[2:])
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "head_dim": 128, "vocab_size": 1024, "max_position_embeddings": 4096,
           "rms_norm_eps": 1e-5, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False}, open(path, "w"))
PY
}
profile() {  # NAME EXTRA_VLLM_LINES (dummy weights, 2048 context)
  printf 'schema = 1\ndescription = "H200 %s"\n[vllm]\nmax_model_len = 2048\ncuda_graphs = true\n%s\n' "$1" "$2" > "$work/$1.toml"
}
quiet() { grep -v "^(\|^INFO\|^WARNING\|^DEBUG" || true; }
workload="--input-len 256 --output-len 64 --num-prompts 64 --warmup 2 --rounds 3"
start=$(date +%s)
case $what in
  graphs)
    model llama-1b 2048 5632 16 16 4
    profile graphs 'extra_args = ["--load-format", "dummy"]'
    python3 -m launcher ab --model "$work/llama-1b" --python python3 --config "graphs=$work/graphs.toml" \
      --config "eager=$work/graphs.toml,cuda_graphs=false" --calibrate --concurrency 4,32 $workload \
      --out "$work/ab" > "$work/verdicts.txt" 2> >(quiet > "$work/progress.txt") || true
    ;;
  fp8)
    model llama-1b 2048 5632 16 16 4
    profile fp8 'extra_args = ["--load-format", "dummy", "--quantization", "fp8"]'
    python3 -m launcher ab --model "$work/llama-1b" --python python3 --config "cutlass=$work/fp8.toml" \
      --config "torch=$work/fp8.toml,disabled_kernels=[\"CutlassFP8ScaledMMLinearKernel\"]" --calibrate \
      --concurrency 4,32 $workload --out "$work/ab" > "$work/verdicts.txt" 2> >(quiet > "$work/progress.txt") || true
    ;;
  tune)
    model llama-8b 4096 14336 32 32 8
    profile base 'extra_args = ["--load-format", "dummy"]'
    python3 -m launcher tune --model "$work/llama-8b" --python python3 --base "$work/base.toml" --budget 7 \
      --knobs max_num_seqs,async_scheduling,kv_cache_dtype,max_num_batched_tokens --concurrency 1,32 \
      --input-len 256 --output-len 64 --num-prompts 64 --rounds 3 --name h200-llama8b-tuned \
      --out "$work/tune" > "$work/verdicts.txt" 2> >(quiet > "$work/progress.txt") || true
    ;;
  *) echo "usage: gpu_ab.sh graphs|fp8|tune OUTDIR" >&2; exit 2 ;;
esac
sleep 1
cp "$work/progress.txt" "$out/$what-progress.txt"
if [ -d "$work/ab" ]; then
  cp "$work/ab/ab.json" "$work/ab/report.md" "$out/" 2>/dev/null || true
  cp "$work/ab/ratios.png" "$out/" 2>/dev/null || true
  for log in "$work"/ab/logs/*.log; do tail -n 40 "$log" > "$out/$what-$(basename "$log")"; done
fi
if [ -d "$work/tune" ]; then
  cp "$work/tune/tune.json" "$work"/tune/*.toml "$out/" 2>/dev/null || true
  [ -f "$work/tune/final/ab-1/ab.json" ] && cp "$work/tune/final/ab-1/ab.json" "$out/tune-final-ab.json"
  [ -f "$work/tune/final/ab-1/report.md" ] && cp "$work/tune/final/ab-1/report.md" "$out/tune-final-report.md"
fi
echo "wall-clock: $(( $(date +%s) - start )) s"
cat "$work/verdicts.txt"

#!/usr/bin/env bash
# On a GPU host where vLLM imports (`python3`), from the repository root: nemolaunch bench against vLLM's own
# client on one warm server, and what continuous usage stats cost that server.
#   bash benchmarks/gpu_bench_fidelity.sh OUTDIR
# A Llama-3-8B-shaped model (dummy weights, online FP8, the tiny model's tokenizer: vocab 1024, so the lm_head is
# cheaper than the real 128k one) is served by vLLM directly; bench_fidelity.py runs A B B A x 2 at c = 1, 16, 64,
# 256 (256 in / 128 out, ignore_eos, 2 warm-up passes of each client at c=256), then server-cost at c=256.
# Writes OUTDIR/fidelity.json, fidelity.md, server-cost.json, server.log; prints the tables last. About 5-6.5 min
# on an H200 (server start 60-150 s of it); every step has a time limit so it ends within 7.
set -eu
out=$(mkdir -p "$1" && cd "$1" && pwd)
export PYTHONUNBUFFERED=1
work=$(mktemp -d)
python3 -m launcher model tiny "$work/tiny" --python python3 >/dev/null
mkdir -p "$work/llama3-8b"
cp "$work/tiny"/tokenizer* "$work/tiny"/chat_template.jinja "$work/llama3-8b/"
python3 - "$work/llama3-8b/config.json" <<'PY'
import json, sys
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "head_dim": 128, "vocab_size": 1024, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False}, open(sys.argv[1], "w"))
PY
port=8765
url=http://127.0.0.1:$port
python3 -m vllm.entrypoints.openai.api_server --model "$work/llama3-8b" --served-model-name llama3-8b \
  --load-format dummy --quantization fp8 --max-model-len 2048 --max-num-seqs 256 --gpu-memory-utilization 0.85 \
  --host 127.0.0.1 --port $port >"$out/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
ready() { python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1] + '/v1/models', timeout=5)" "$url" 2>/dev/null; }
for _ in $(seq 200); do
  ready && break
  kill -0 $pid 2>/dev/null || { tail -20 "$out/server.log"; exit 1; }
  sleep 1
done
ready
echo "server ready after $SECONDS s" >&2
timeout 330 python3 benchmarks/bench_fidelity.py --url "$url" --engine python3 --tokenizer "$work/llama3-8b" \
  --out "$out" --levels 1,16,64,256 --input-len 256 --output-len 128 --blocks 2 --warmup-passes 2 --min-prompts 8 \
  >"$out/fidelity.log" 2>&1 || echo "fidelity run failed or ran out of time: see fidelity.log" >&2
timeout 45 python3 benchmarks/bench_fidelity.py server-cost --url "$url" --pid $pid --out "$out" --concurrency 256 \
  --requests-per-stream 1 --output-len 128 --blocks 1 >"$out/server-cost.log" 2>&1 || echo "server-cost failed" >&2
rm -rf "$out/work"
echo "total $SECONDS s" >&2
cat "$out/server-cost.log" "$out/fidelity.log"

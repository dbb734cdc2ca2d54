#!/usr/bin/env bash
# On a GPU host with vLLM (0.26 on the H200), from the repository root: model shapes served with dummy weights, and
# each level's share of the memory-bandwidth limit.
#   bash benchmarks/gpu_shapes.sh OUTDIR
#   SHAPES="llama-3.1-8b:nvfp4" bash benchmarks/gpu_shapes.sh OUTDIR     # other shapes, NAME:QUANTIZATION each
#   NUM_PROMPTS=32 ...                                                    # prompts per level (default 64)
# Default: the Llama-3.1-8B shape with online FP8 and the Qwen3-30B-A3B MoE shape in bf16, written by
# `nemolaunch model shape` (no weights: serve adds --load-format dummy), each served once with CUDA graphs and swept
# at concurrency 1 and 16, 64 prompt / 64 output tokens. About 5-6 minutes on a fresh H200 (two cold vLLM starts of
# ~2.5 min each; each shape's bench is cut off after 300 s). Writes per shape NAME-summary.json, NAME-server.log,
# NAME-roofline.txt and NAME-roofline.json into OUTDIR (flat), and prints the roofline tables last.
set -eu
out=$1
mkdir -p "$out"
export PYTHONUNBUFFERED=1
work=$(mktemp -d)
shapes=${SHAPES:-"llama-3.1-8b:fp8 qwen3-30b-a3b:bf16"}
# max_num_seqs 16 is the sweep's top concurrency: CUDA graphs are captured for batch sizes up to it only
printf 'schema = 1\ndescription = "H200, model shapes with dummy weights"\n[vllm]\ncuda_graphs = true\nmax_model_len = 4096\nmax_num_seqs = 16\n' \
  > "$work/shapes.toml"
for item in $shapes; do
  name=${item%%:*} quant=${item##*:}
  tag=$name-$quant
  python3 -m launcher model shape "$name" "$work/$tag" --quantization "$quant" --python python3
  timeout 300 python3 -m launcher bench --profile "$work/shapes.toml" --model "$work/$tag" --python python3 \
    --label "$tag" --concurrency 1,16 --input-len 64 --output-len 64 --num-prompts "${NUM_PROMPTS:-64}" --warmup 4 \
    --out "$work/$tag" 2>&1 | grep -v "^(\|^INFO\|^WARNING\|^DEBUG" || true
  [ -f "$work/$tag/server.log" ] && cp "$work/$tag/server.log" "$out/$tag-server.log"
  if [ -f "$work/$tag/summary.json" ]; then
    cp "$work/$tag/summary.json" "$out/$tag-summary.json"
    python3 -m launcher roofline "$work/$tag/summary.json" --model "$work/$tag" > "$out/$tag-roofline.txt" || true
    python3 -m launcher roofline "$work/$tag/summary.json" --model "$work/$tag" --json > "$out/$tag-roofline.json" || true
  else
    echo "$tag: no summary (see $tag-server.log)" > "$out/$tag-roofline.txt"
  fi
done
for item in $shapes; do
  tag=${item%%:*}-${item##*:}
  echo "== $tag"
  cat "$out/$tag-roofline.txt"
done

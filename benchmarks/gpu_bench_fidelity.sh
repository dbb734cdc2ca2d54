#!/usr/bin/env bash
# On a GPU host where vLLM imports (`python3`), from the repository root: nemolaunch bench against vLLM's own
# client on one warm server.
#   bash benchmarks/gpu_bench_fidelity.sh OUTDIR
# Llama-3.1-8B's real shapes (`nemolaunch model shape llama-3.1-8b --quantization fp8`, or MODEL_DIR written before: real 128k vocabulary, the
# project's tokenizer padded to it, dummy weights, online FP8; the flags vLLM needs are read from the folder's
# nemolaunch-shape.json) served by vLLM directly; bench_fidelity.py runs 1 warm-up pass of each client at
# c=256, then A B B A x 2 at c = 1, 16, 64, 256 (256 in / 128 out, ignore_eos), nemolaunch with
# its default --client-processes; `nemolaunch roofline` on one nemolaunch pass at each level; then, if time remains,
# server-cost (what continuous usage stats cost the API server). Every pass records the API server's and the engine
# core's CPU per output token. ONE_PROCESS_ARM=1 adds nemolaunch with one client process to the same blocks
# (A B C C B A): on 2026-12-02 c=256 read 6% low with its default of 2 processes there. BLOCKS: default 2.
# PIN=1 pins the API server to core 0, the engine core to 1-2 and both clients to the other cores.
# PROMPTS_PER_STREAM (default 4): a pass's prompts per stream (longer passes average the server's hiccups).
# Writes OUTDIR/fidelity.json, fidelity.md, roofline.txt, server.log, fidelity.log (and server-cost.json); prints
# the ratio table last. Budget: 6 min wall-clock in all (server start 60-150 s; every step has a time limit).
# For a dry run elsewhere (the CPU engine), these may be changed: PY (runs nemolaunch), ENGINE_PY (imports vLLM),
# SHAPE_ARGS (extra `model shape` arguments, e.g. --set num_hidden_layers=1), QUANT, LEVELS, IN_LEN, OUT_LEN, BUDGET, SERVER_ARGS.
set -u
out=$(mkdir -p "$1" && cd "$1" && pwd)
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
ENGINE_PY=${ENGINE_PY:-python3}
budget=${BUDGET:-${STAGE_S:-360}}  # gpu_session.sh gives its stage's limit in STAGE_S
left() { echo $((budget - SECONDS)); }
work=$(mktemp -d)
model=${MODEL_DIR:-$work/llama-3.1-8b}
if [ ! -f "$model/config.json" ]; then
  # shellcheck disable=SC2086
  $PY -m launcher model shape llama-3.1-8b "$model" --quantization "${QUANT:-fp8}" --python "$ENGINE_PY" ${SHAPE_ARGS:-} \
    >"$out/shape.log" 2>&1 \
    || { cat "$out/shape.log"; exit 1; }
fi
flags=$($PY -c "import json, sys; print(' '.join(json.load(open(sys.argv[1]))['serve_args']))" \
  "$model/nemolaunch-shape.json")
port=8765
url=http://127.0.0.1:$port
# shellcheck disable=SC2086  # the recorded flags are words
"$ENGINE_PY" -m vllm.entrypoints.openai.api_server --model "$model" --served-model-name llama-3.1-8b $flags \
  --max-model-len 2048 --max-num-seqs 256 ${SERVER_ARGS---gpu-memory-utilization 0.85} --host 127.0.0.1 --port $port >"$out/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
ready() { $PY -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1] + '/v1/models', timeout=5)" "$url" 2>/dev/null; }
until ready; do
  kill -0 $pid 2>/dev/null || { tail -30 "$out/server.log"; exit 1; }
  [ "$SECONDS" -lt 200 ] || { echo "the server did not start within 200 s" >&2; tail -30 "$out/server.log"; exit 1; }
  sleep 1
done
echo "server ready after $SECONDS s" >&2
grep -E "Model loading took|torch.compile takes|Graph capturing finished|init engine|Available KV cache memory" \
  "$out/server.log" | sed 's/^.*\] //' >&2
pin=()
if [ -n "${PIN:-}" ] && [ "$(nproc)" -lt 6 ]; then
  echo "PIN needs 6 cores or more ($(nproc) here): not pinned" >&2
elif [ -n "${PIN:-}" ]; then  # each its own cores: c=256 varied +-15% pass to pass with one client on 2026-12-02
  last=$(($(nproc) - 1))
  taskset -a -p -c 0 $pid >/dev/null  # the API server, every thread
  for child in $(pgrep -P $pid); do taskset -a -p -c 1-2 "$child" >/dev/null; done  # the engine core
  pin=(taskset -c "3-$last")  # both clients and everything they start
  echo "pinned: API server to core 0, its children to 1-2, the clients to 3-$last" >&2
fi
# what is left minus 25 s for the roofline and the stop; bench_fidelity.py drops the last blocks (never a level)
# when its own --budget says they would not fit, so the table is always printed
limit=$(($(left) - 25))
timeout "$limit" "${pin[@]}" $PY benchmarks/bench_fidelity.py --url "$url" --engine "$ENGINE_PY" --tokenizer "$model" \
  --out "$out" --levels "${LEVELS:-1,16,64,256}" --input-len "${IN_LEN:-256}" --output-len "${OUT_LEN:-128}" \
  --blocks "${BLOCKS:-2}" --warmup-passes 1 --min-prompts 8 --prompts-per-stream "${PROMPTS_PER_STREAM:-4}" \
  --budget "$((limit - 10))" --server-pid $pid \
  ${ONE_PROCESS_ARM:+--one-process-arm} >"$out/fidelity.log" 2>&1 \
  || echo "fidelity run failed or ran out of time: see fidelity.log" >&2
: >"$out/roofline.txt"
for summary in "$out"/nemolaunch-c*.summary.json; do
  [ -f "$summary" ] || continue
  timeout 15 $PY -m launcher roofline "$summary" --model "$model" >>"$out/roofline.txt" 2>&1 || true
done
if [ "$(left)" -gt 40 ]; then
  timeout "$(($(left) - 15))" $PY benchmarks/bench_fidelity.py server-cost --url "$url" --pid $pid --out "$out" \
    --concurrency 256 --requests-per-stream 1 --output-len 128 --blocks 1 >"$out/server-cost.log" 2>&1 \
    || echo "server-cost failed or ran out of time" >&2
fi
rm -rf "$out/work"
echo "total $SECONDS s" >&2
cat "$out/roofline.txt" "$out"/server-cost.log 2>/dev/null
cat "$out/fidelity.log"

#!/usr/bin/env bash
# The seed's experiment on the H200: Nemotron 3 Super 120B-A12B's shape as released (NVFP4 experts, ModelOpt
# MIXED_PRECISION map, FP8 KV; `nemolaunch model shape ... --quantization nvfp4`, no weights: --load-format dummy),
# served with profiles/sm120.toml's flags of record + max_model_len 8192, swept at the seed's concurrencies
# 1,2,4,8,16,32,64 (256 prompt / 128 output tokens), then each level's share of the memory-bandwidth limit.
# On the lent machine, with vLLM 0.26 installed in /tmp/site (../shared/gpu/README.md), from the repository root:
#   setsid bash benchmarks/gpu_nemotron.sh OUT > OUT.log 2>&1 < /dev/null &
#   tail -f OUT.log                     # progress: one timestamped line per phase, bench's line per level
# Knobs: SHAPE (default nemotron-3-super-120b-a12b; nemotron-3-nano-30b-a3b fits beside another server),
# LEVELS (default 1,2,4,8,16,32,64), DURATION (seconds of load per level, default 30), WARMUP (unmeasured requests
# before each level, default 16), LIMIT_S (the bench's start + sweep, default 780).
# Time: start ~5 min (2026-12-03: weights 19.6 s, init 191.6 s, serving after 318 s), sweep 7 x (30 s + warm-up
# and drain) ~ 4-5 min; ~10 min in all. Writes into OUT: timeline.txt (each phase's start, end and exit code),
# shape.log, profile.toml (the profile served), summary.json, server.log, bench.log, roofline.txt, roofline.json,
# gpu-samples.csv (power, clocks, memory every 5 s: dummy weights can overstate clocks on power-capped parts) and
# `done` at the end. An interrupted run keeps what it wrote.
set -u
out=${1:?usage: gpu_nemotron.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
shape=${SHAPE:-nemotron-3-super-120b-a12b}
export PYTHONPATH=${PYTHONPATH:-/tmp/site} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$out/timeline.txt"; }

log "start: $shape, levels ${LEVELS:-1,2,4,8,16,32,64}, ${DURATION:-30} s each"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$out/gpu.txt" 2>&1
python3 -c "import vllm; print('vllm', vllm.__version__)" > "$out/stack.txt" 2>&1
log "stack: $(tail -n 1 "$out/stack.txt")"
nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks.mem,memory.used,utilization.gpu --format=csv -l 5 \
  > "$out/gpu-samples.csv" 2>&1 &
sampler=$!
trap 'kill "$sampler" 2>/dev/null' EXIT

work=$(mktemp -d)
model=$work/$shape
python3 -m launcher model shape "$shape" "$model" --quantization nvfp4 --python python3 > "$out/shape.log" 2>&1
rc=$?
log "shape: exit $rc ($(tail -n 2 "$out/shape.log" | head -n 1))"
[ "$rc" = 0 ] || { touch "$out/done"; exit "$rc"; }

# profiles/sm120.toml as it is (the seed's flags of record), with max_model_len 8192 in its [vllm] table
sed 's/^\[vllm\]$/[vllm]\nmax_model_len = 8192/' profiles/sm120.toml > "$out/profile.toml"

log "bench: starting vLLM (about 5 min), then the sweep"
timeout "${LIMIT_S:-780}" python3 -m launcher bench --profile "$out/profile.toml" --model "$model" --python python3 \
  --label "$shape-sm120" --concurrency "${LEVELS:-1,2,4,8,16,32,64}" --input-len 256 --output-len 128 \
  --duration "${DURATION:-30}" --warmup "${WARMUP:-16}" --out "$work/bench" 2>&1 \
  | grep -v "^(\|^INFO\|^WARNING\|^DEBUG" | tee "$out/bench.log"
rc=${PIPESTATUS[0]}
log "bench: exit $rc"
for f in summary.json server.log report.md; do
  [ -f "$work/bench/$f" ] && cp "$work/bench/$f" "$out/$f"
done
if [ -f "$out/summary.json" ]; then
  python3 -m launcher roofline "$out/summary.json" --model "$model" > "$out/roofline.txt" 2>&1
  python3 -m launcher roofline "$out/summary.json" --model "$model" --json > "$out/roofline.json" 2>&1
  log "roofline: written"
  cat "$out/roofline.txt"
else
  log "roofline: no summary.json (see server.log and bench.log)"
fi
touch "$out/done"
log "done"

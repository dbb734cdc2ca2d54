#!/usr/bin/env bash
# On the GPU host (vLLM importable by python3), from the repository root: what timing each kernel in three process
# starts costs a warm probe, and which kernels tie on this GPU.
#   bash benchmarks/gpu_probe_starts.sh OUTDIR
# Order: a dense run that fills the JIT caches (--starts 1, not compared), then warm, each with every chain its
# model needs (online FP8): dense --starts 1, dense --starts 3, MoE --starts 1 (it fills the MoE kernels' Triton
# cache too), MoE --starts 1 again, MoE --starts 3. Writes OUTDIR/probe-LABEL.json and .log, times.txt and
# summary.txt (benchmarks/probe_starts_summary.py: per run its wall-clock and seconds, then per chain the
# recommendation, its ties and every correct kernel's speed in each start); prints the summary last.
# Wall-clock: at most 8 minutes (limits 150 + 60 + 120 + 90 + 60 + 120 s), expected about 6.
set -u
out=${1:?usage: gpu_probe_starts.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1
models=tests/fixtures/models
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
: > "$out/times.txt"

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # probe LABEL LIMIT_S ARGS...

dense=(--model "$models/llama-3.1-8b-instruct" --quantization fp8)
moe=(--model "$models/qwen3-30b-a3b" --quantization fp8)
probe fill 150 "${dense[@]}" --starts 1
python3 benchmarks/probe_wait_builds.py "$out/probe-fill.json" fill 15 | tee -a "$out/times.txt"
probe dense-1 60 "${dense[@]}" --starts 1
probe dense-3 120 "${dense[@]}" --starts 3
probe moe-fill 90 "${moe[@]}" --starts 1
probe moe-1 60 "${moe[@]}" --starts 1
probe moe-3 120 "${moe[@]}" --starts 3
python3 benchmarks/probe_starts_summary.py "$out" | tee "$out/summary.txt"

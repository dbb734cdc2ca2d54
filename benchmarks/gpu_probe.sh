#!/usr/bin/env bash
# On the GPU host (vLLM importable by python3), from the repository root: how long `probe --model` takes on a
# fresh machine and warm, for a dense model and an MoE model, each with every chain it needs (online FP8).
#   bash benchmarks/gpu_probe.sh OUTDIR
# "Fresh" is made real by pointing FlashInfer's, Triton's, torch inductor's and CUDA's caches at empty folders for
# each fresh run; the warm run of each model reuses the folders its fresh run filled. Writes to OUTDIR: the
# probe reports (probe-*.json, small), their logs, times.txt and summary.txt; prints the summary last.
# Order: dense fresh, dense warm, MoE fresh, MoE warm. After each fresh run the script waits (at most 15 s) for the
# FlashInfer JIT build that run started (it goes on in the background when the probe's --build-wait ends), so the
# warm run reuses the completed build; times.txt says whether it completed. probe's report carries the timeline
# (harness ready, chains read, each build and each kernel's start / set-up done / let through / end), printed last.
# Wall-clock: at most 6.5 minutes (sanity 15 s, fresh 120 + wait 15 + warm 45 (the targets), twice: 375 s, each
# run +3 s if it ignores Ctrl-C), then the summary; expected about 5 minutes.
# A run past its limit gets Ctrl-C: probe keeps what it measured (exit 130), the summary shows what it cut off.
# NEMOLAUNCH_FLASHINFER_NICE=attention=0 in the environment runs FlashInfer's attention compile at normal priority
# (default: nice 10, the set-ups first), to compare the fresh runs.
# The comparison without the out-of-pool FlashInfer build (NEMOLAUNCH_FLASHINFER_PREBUILD=0, attention only)
# runs last, only if 140 s are left before the 6.5-minute mark (so in practice only after fast fresh runs).
set -u
out=${1:?usage: gpu_probe.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
budget_end=$(( $(date +%s) + 390 ))
caches=$(mktemp -d /tmp/nemolaunch-gpu-probe.XXXXXX)
export PYTHONUNBUFFERED=1
models=tests/fixtures/models
echo "NEMOLAUNCH_FLASHINFER_NICE=${NEMOLAUNCH_FLASHINFER_NICE:-unset, every compile at nice 10}" > "$out/times.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

# 1. sanity: the harness imports torch, vLLM and FlashInfer and lists the kernels it has probes for (a probe
#    broken by an import shows here; in the runs each kernel is its own forked child, so a broken probe is that
#    kernel's failure, never the run's)
echo '{"jobs": [], "timeout_s": 10, "parallel": 1}' \
    | timeout -k 3 15 python3 launcher/child/kernel_probe.py --serve > "$out/sanity.json" 2> "$out/sanity.log"
echo "sanity: exit $?: $(head -c 400 "$out/sanity.json")"

use_caches() {  # every cache a first run fills, under $caches/$1
    export FLASHINFER_WORKSPACE_BASE=$caches/$1/flashinfer TRITON_CACHE_DIR=$caches/$1/triton \
        TORCHINDUCTOR_CACHE_DIR=$caches/$1/inductor CUDA_CACHE_PATH=$caches/$1/cuda
    mkdir -p "$FLASHINFER_WORKSPACE_BASE" "$TRITON_CACHE_DIR" "$TORCHINDUCTOR_CACHE_DIR" "$CUDA_CACHE_PATH"
}

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # probe LABEL LIMIT_S ARGS...

cold() {  # a fresh machine's disk too: the page cache dropped (root only; said in times.txt either way)
    if sync && echo 3 2>/dev/null > /proc/sys/vm/drop_caches; then
        echo "$1: page cache dropped before it" >> "$out/times.txt"
    else
        echo "$1: page cache NOT dropped (not root?): imports read a warm disk" >> "$out/times.txt"
    fi
}

use_caches dense
cold dense-fresh
probe dense-fresh 120 --model "$models/llama-3.1-8b-instruct" --quantization fp8
python3 benchmarks/probe_wait_builds.py "$out/probe-dense-fresh.json" dense-fresh 15 | tee -a "$out/times.txt"
probe dense-warm 45 --model "$models/llama-3.1-8b-instruct" --quantization fp8
use_caches moe
cold moe-fresh
probe moe-fresh 120 --model "$models/qwen3-30b-a3b" --quantization fp8
python3 benchmarks/probe_wait_builds.py "$out/probe-moe-fresh.json" moe-fresh 15 | tee -a "$out/times.txt"
probe moe-warm 45 --model "$models/qwen3-30b-a3b" --quantization fp8
du -sh "$caches"/*/flashinfer 2>/dev/null | tee -a "$out/times.txt"

# optional: the fresh attention chain with FlashInfer's two modules compiled by its wrappers one after the other,
# inside the set-up pool (the probe's default builds them first, outside it)
left=$(( budget_end - $(date +%s) - 10 ))
if [ "$left" -ge 140 ]; then
    use_caches attention-no-prebuild
    NEMOLAUNCH_FLASHINFER_PREBUILD=0 probe attention-fresh-no-prebuild $(( left < 150 ? left : 150 )) \
        --model "$models/llama-3.1-8b-instruct" --only attention
else
    echo "attention-fresh-no-prebuild skipped: $left s left before the 6.5-minute mark" | tee -a "$out/times.txt"
fi
rm -rf "$caches"

python3 benchmarks/probe_summary.py "$out" | tee "$out/summary.txt"

#!/usr/bin/env bash
# On the GPU host (vLLM importable by python3), from the repository root: how long `probe --model` takes on a
# fresh machine and warm, for a dense model and an MoE model, each with every chain it needs (online FP8).
#   bash benchmarks/gpu_probe.sh OUTDIR
# "Fresh" is made real by pointing FlashInfer's, Triton's, torch inductor's and CUDA's caches at empty folders for
# each fresh run; the warm run of each model reuses the folders its fresh run filled. Writes to OUTDIR: the
# probe reports (probe-*.json, small), their logs and times.txt; prints the headline numbers last.
# Wall-clock: about 7 minutes expected (sanity 0.5, fresh runs ~2 and ~2, warm ~0.7 each, the no-prebuild run
# ~2); each step has a limit (60+130+140+50+50+130 s), so at most 9.5 minutes.
set -u
out=${1:?usage: gpu_probe.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
caches=$(mktemp -d /tmp/nemolaunch-gpu-probe.XXXXXX)
export PYTHONUNBUFFERED=1
models=tests/fixtures/models
: > "$out/times.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

# 1. sanity: the harness imports torch, vLLM and FlashInfer and lists its kernels (a probe broken by an import
#    shows here, and later only as its own kernel's failure)
echo '{"jobs": [], "timeout_s": 10, "parallel": 1}' \
    | timeout 60 python3 launcher/child/kernel_probe.py --serve > "$out/sanity.json" 2> "$out/sanity.log"
echo "sanity: exit $?: $(head -c 600 "$out/sanity.json")"

use_caches() {  # every cache a first run fills, under $caches/$1
    export FLASHINFER_WORKSPACE_BASE=$caches/$1/flashinfer TRITON_CACHE_DIR=$caches/$1/triton \
        TORCHINDUCTOR_CACHE_DIR=$caches/$1/inductor CUDA_CACHE_PATH=$caches/$1/cuda
    mkdir -p "$FLASHINFER_WORKSPACE_BASE" "$TRITON_CACHE_DIR" "$TORCHINDUCTOR_CACHE_DIR" "$CUDA_CACHE_PATH"
}

probe() {  # probe LABEL LIMIT_S ARGS...: one timed probe run, its report kept
    # past its limit a run gets Ctrl-C (probe keeps what it measured, exit 130), then a kill 15 s later
    local label=$1 limit=$2 start end rc
    shift 2
    start=$(date +%s%N)
    timeout -s INT -k 15 "$limit" python3 -m launcher probe --json --python python3 "$@" \
        > "$out/probe-$label.json" 2> "$out/probe-$label.log"
    rc=$?
    end=$(date +%s%N)
    echo "$label exit $rc in $(( (end - start) / 1000000000 )).$(( (end - start) / 100000000 % 10 )) s" | tee -a "$out/times.txt"
}

use_caches dense
probe dense-fresh 130 --model "$models/llama-3.1-8b-instruct" --quantization fp8
use_caches moe
probe moe-fresh 140 --model "$models/qwen3-30b-a3b" --quantization fp8
use_caches dense
probe dense-warm 50 --model "$models/llama-3.1-8b-instruct" --quantization fp8
use_caches moe
probe moe-warm 50 --model "$models/qwen3-30b-a3b" --quantization fp8
# the fresh attention chain with FlashInfer's two modules compiled by its wrappers, one after the other (what
# the probe did before it built them in one ninja run): its FLASHINFER set-up against dense-fresh's is what the
# one ninja run saves
use_caches attention-no-prebuild
NEMOLAUNCH_FLASHINFER_PREBUILD=0 probe attention-fresh-no-prebuild 130 \
    --model "$models/llama-3.1-8b-instruct" --only attention
du -sh "$caches"/*/flashinfer 2>/dev/null | tee -a "$out/times.txt"
rm -rf "$caches"

python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for f in sorted(out.glob("probe-*.json")):
    try:
        d = json.loads(f.read_text())
    except json.JSONDecodeError:
        print(f"{f.name}: no report ({(out / f.name.replace('.json', '.log')).read_text()[-300:]!r})")
        continue
    print(f"{f.stem}: {d['seconds']} s, chains {sorted(d['chains_probed'])}, recommended {d['recommended']}")
    for k in d["kernels"]:
        if k["status"] != "not-probed":
            print(f"    {k['chain']:11} {k['kernel'][:38]:38} {k['status']:11} {k['seconds']:6} s set-up {k.get('setup_s')} s {(k['error'] or '')[:80]}")
print((out / "times.txt").read_text())
PY

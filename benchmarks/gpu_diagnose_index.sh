#!/usr/bin/env bash
# On a GPU host, from the repository root: build the message index of the installed serving stack (vLLM, torch,
# FlashInfer, Triton, transformers, huggingface_hub, Ray, and the strings of libnccl / libcudart / vLLM's _C), time
# a cached load, and diagnose the H200 fixture logs and the fresh public excerpts with it.
#   bash benchmarks/gpu_diagnose_index.sh OUTDIR [PYTHON]
# Needs click and psutil beside the engine; PYTHON is the engine's interpreter (default python3). Prints a summary.
set -u
out=$1 py=${2:-python3}
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME="$out/cache"
mkdir -p "$out"
python3 - "$py" <<'PY' | tee "$out/index.txt"
import collections, json, sys, time
from launcher.diagnose.index import load_index
start = time.perf_counter()
index, info = load_index(sys.argv[1])
built = time.perf_counter() - start
start = time.perf_counter()
load_index(sys.argv[1])
kinds = collections.Counter(index.site(i).exception == "compiled" for i in range(len(index)))
libs = collections.Counter(index.site(i).file for i in range(len(index)) if index.site(i).exception == "compiled")
print(f"packages {info.packages}")
print(f"templates {len(index)} ({kinds[True]} from compiled libraries: {dict(libs)}); {info.path.stat().st_size} bytes")
print(f"build {built:.1f} s (child {info.build_s} s); cached load {time.perf_counter() - start:.2f} s")
PY
for log in tests/fixtures/logs/h200-*.log; do
  python3 -m launcher diagnose "$log" --python "$py" --json > "$out/$(basename "$log" .log).json"
  echo "diagnose $(basename "$log"): exit $?"
done
python3 benchmarks/diagnose_recall.py tests/fixtures/diagnose/fresh-2026-12-03.jsonl --python "$py" | tail -4 | tee "$out/recall.txt"
python3 benchmarks/diagnose_speed.py 200 --python "$py" | tee "$out/speed.txt"

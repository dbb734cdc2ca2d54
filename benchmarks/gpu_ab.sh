#!/usr/bin/env bash
# nemolaunch ab and tune on the H200 (vLLM 0.26 importable as python3), from the repository root. Two commands:
#   bash benchmarks/gpu_ab.sh ab OUTDIR     # ~9 min: ONE ab, three co-resident servers on a dummy Llama-3.1-8B
#                                           # shape with online FP8: base (CUDA graphs, vLLM's FP8 kernel: CUTLASS),
#                                           # eager (cuda_graphs=false) and base-again (--calibrate: the A/A side)
#   bash benchmarks/gpu_ab.sh tune OUTDIR   # ~6.5 min: one tune of the same model and workload from the H200 probe
#                                           # of 2026-12-01 (its close call: per-tensor torch FP8 against CUTLASS),
#                                           # its final judged against the ab's measured A/A floor ($GPU_AB_FLOOR:
#                                           # the ab.json the ab command wrote, when given)
# Both: concurrency 1 and 64, 128 in / 32 out tokens, one unmeasured warm-up pass per server start; ab asks 3
# interleaved order-balanced rounds ($GPU_AB_ROUNDS) and keeps what the guard leaves if they do not fit. Every
# server has the same settings (max_model_len 2048, max_num_seqs 256, CUDA graphs) and model folder as
# gpu_bench_fidelity.sh's, so a later start can hit vLLM's compile cache. Each command runs under a wall-clock guard (SIGTERM: nemolaunch keeps
# the completed rounds / trials and still writes its results). A side that cannot start is a result (infeasible,
# with its diagnosis), never the end of the script. Writes into OUTDIR: ab.json, report.md, ratios.png, the server
# logs' last lines and start-up phases (starts-*.txt), progress (stderr) and verdicts (stdout); for tune:
# tune.json, the tuned profile, the final ab's ab.json/report.md. Prints the verdicts last.
# GPU_AB_MODEL: a model folder written before (`nemolaunch model shape llama-3.1-8b DIR --quantization fp8`);
# without it the script writes one.
#
# Rehearsal on the vLLM CPU engine (tests this script's logic, not the GPU): set GPU_AB_CPU_ENGINE to the engine's
# python and GPU_AB_CPU_MODEL to a model folder (the tiny model); GPU_AB_LAUNCHER is the python that runs nemolaunch.
set -u
what=${1:-}
out=${2:-}
if [ -z "$out" ] || { [ "$what" != ab ] && [ "$what" != tune ]; }; then
  echo "usage: gpu_ab.sh ab|tune OUTDIR" >&2
  exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1
launcher=${GPU_AB_LAUNCHER:-python3}
work=$(mktemp -d)
start=$(date +%s)

if [ -n "${GPU_AB_CPU_ENGINE:-}" ]; then  # rehearsal: same commands, CPU-sized
  engine=$GPU_AB_CPU_ENGINE
  ab_model=$GPU_AB_CPU_MODEL
  tune_model=$GPU_AB_CPU_MODEL
  env_table=$'[env]\nVLLM_CPU_KVCACHE_SPACE = "1"'
  conc=1,8
  seqs=2
  lens="--input-len 32 --output-len 16"
  ab_limit_s=${GPU_AB_LIMIT_S:-600}
  tune_budget_min=${GPU_AB_TUNE_BUDGET_MIN:-6}
  tune_limit_s=${GPU_AB_LIMIT_S:-480}
  tune_args=(--knobs max_num_seqs,cuda_graphs)
else
  engine=python3
  ab_model=${GPU_AB_MODEL:-$work/llama-3.1-8b-fp8}
  tune_model=$ab_model
  env_table=''
  conc=1,64
  seqs=256
  lens="--input-len 128 --output-len 32"
  # 3 starts (H200 2026-12-02: 149 s cold, 82 s eager, 69 s with the compile cache) + warm-ups + rounds of ~60 s
  # (an eager pass takes ~15 s: 30 tok/s at c=1): 450 s left 1 round (150 s after the starts), 570 s should leave 3
  ab_limit_s=${GPU_AB_LIMIT_S:-570}
  tune_budget_min=${GPU_AB_TUNE_BUDGET_MIN:-6}  # base ~120 s, torch ~120 s, 6 screening + 12 final passes of ~3 s
  tune_limit_s=${GPU_AB_LIMIT_S:-375}
  tune_args=(--knobs probe --from docs/measurements/runs/2026-12-01/gpu-h200-2026-12-01/probe-dense-fresh.json)
fi
[ -f "${GPU_AB_FLOOR:-}" ] && tune_args+=(--noise-floor "$GPU_AB_FLOOR")

shape() {  # DIR ARGS...: a weightless model folder with real shapes (vLLM fills dummy weights; the folder's
  # own flags, --load-format dummy and --quantization fp8, are added by nemolaunch at launch)
  local dir=$1
  shift
  "$launcher" -m launcher model shape llama-3.1-8b "$dir" --python "$engine" "$@" >> "$out/shape.txt" 2>&1 ||
    echo "gpu_ab: nemolaunch model shape failed (see $out/shape.txt)" >&2
}
profile() {  # FILE DESCRIPTION: 2048 context, CUDA graphs, the batch cap of gpu_bench_fidelity.sh's server
  printf 'schema = 1\ndescription = "%s"\n[vllm]\nmax_model_len = 2048\nmax_num_seqs = %s\ncuda_graphs = true\n%s\n' \
    "$2" "$seqs" "$env_table" > "$1"
}
keep() {  # copy what a run left, whatever state it is in
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$out/"; done
  return 0
}
logs() {  # RUN_DIR PREFIX: the last lines of every server log, and the phases of its start-up
  local log
  for log in "$1"/logs/*.log "$1"/*/*/logs/*.log; do
    [ -f "$log" ] || continue
    tail -n 60 "$log" > "$out/$2-$(basename "$log")"
    grep -E "Loading weights took|Model loading took|Dynamo bytecode transform|torch.compile takes|Compiling a graph|compile cache|Graph capturing finished|init engine|Available KV cache memory|KV cache size|Starting vLLM API server" \
      "$log" | sed 's/^.*\] //' > "$out/starts-$2-$(basename "$log" .log).txt"
  done
  return 0
}
quiet() { grep --line-buffered -v "^(\|^INFO\|^WARNING\|^DEBUG" || true; }

if [ -z "${GPU_AB_CPU_ENGINE:-}" ] && [ ! -f "$ab_model/config.json" ]; then
  shape "$ab_model" --quantization fp8  # Llama-3.1-8B's shape (real 128k vocabulary), quantized online by vLLM
fi

rc=0
case $what in
  ab)
    p=$work/base.toml
    profile "$p" "gpu_ab: CUDA graphs"
    timeout -s TERM "$ab_limit_s" "$launcher" -m launcher ab --model "$ab_model" --python "$engine" \
      --config "base=$p" --config "eager=$p,cuda_graphs=false" --calibrate \
      --concurrency "$conc" $lens --warmup 2 --warmup-passes 1 --rounds "${GPU_AB_ROUNDS:-3}" --out "$work/ab" \
      > "$work/verdicts.txt" 2> >(quiet > "$work/progress.txt") || rc=$?
    sleep 1
    keep "$work/verdicts.txt" "$work/progress.txt" "$work/ab/ab.json" "$work/ab/report.md" "$work/ab/ratios.png"
    logs "$work/ab" ab
    ;;
  tune)
    p=$work/base.toml
    profile "$p" "gpu_ab tune base: CUDA graphs"
    timeout -s TERM "$tune_limit_s" "$launcher" -m launcher tune --model "$tune_model" --python "$engine" \
      --base "$p" "${tune_args[@]}" --budget "$tune_budget_min" --concurrency "$conc" $lens \
      --rounds 3 --name gpu-ab-tuned --out "$work/tune" \
      > "$work/verdicts.txt" 2> >(quiet > "$work/progress.txt") || rc=$?
    sleep 1
    keep "$work/verdicts.txt" "$work/progress.txt" "$work/tune/tune.json" "$work/tune/gpu-ab-tuned.toml"
    for d in "$work"/tune/final/ab-*/; do [ -d "$d" ] && cp "$d/ab.json" "$out/tune-final-ab.json" && cp "$d/report.md" "$out/tune-final-report.md"; done
    logs "$work/tune" tune
    ;;
esac

echo "gpu_ab $what: exit $rc (130: stopped by the wall-clock guard, completed rounds kept; 1: a side could not serve)"
echo "gpu_ab $what: wall-clock $(( $(date +%s) - start )) s; results in $out"
if [ "$what" = ab ] && [ -f "$out/ab.json" ]; then
  "$launcher" - "$out/ab.json" <<'PY'
import sys
from pathlib import Path
from launcher.ab.document import read_ab
from launcher.ab.report import sentence
doc = read_ab(Path(sys.argv[1]))
print(f"rounds {len(doc['rounds'])}/{doc['workload']['rounds_asked']} ({doc['status']}), mode {doc['mode']}, "
      f"noise floor {doc['noise_floor']['source']}")
for s in doc["sides"]:
    print(f"  {s['name']}: {s['status']} starts {s['startups_s']} s" + (f": {s['diagnosis']}" if s["diagnosis"] else ""))
for name, per_level in doc["verdicts"].items():
    for c, m in per_level.items():
        print(f"  {name} vs {doc['baseline']} c={c}: {sentence(m['output_tok_s'], name)}")
PY
fi
cat "$out/verdicts.txt" 2>/dev/null
rm -rf "$work"
exit "$rc"

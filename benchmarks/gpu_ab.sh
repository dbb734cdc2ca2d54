#!/usr/bin/env bash
# nemolaunch ab and tune on the H200 (vLLM 0.26 importable as python3), from the repository root. Two commands:
#   bash benchmarks/gpu_ab.sh ab OUTDIR     # < 8 min: ONE ab, four co-resident servers on a dummy 1B Llama with
#                                           # online FP8: base (CUDA graphs, vLLM's FP8 kernel: CUTLASS), base-again
#                                           # (A/A calibration), eager (cuda_graphs=false), torch (CUTLASS disabled)
#   bash benchmarks/gpu_ab.sh tune OUTDIR   # < 6 min: one tune of max_num_seqs on a dummy Llama-8B-like model
# ab: 3 interleaved order-balanced rounds at concurrency 1,16,64 of short passes (128 in / 32 out tokens), one
# unmeasured warm-up pass per server start. Each command runs under a wall-clock guard (SIGTERM: nemolaunch keeps
# the completed rounds / trials and still writes its results). A side that cannot start is a result (infeasible,
# with its diagnosis), never the end of the script. Writes into OUTDIR: ab.json, report.md, ratios.png, the server
# logs' last lines, progress (stderr) and verdicts (stdout); for tune: tune.json, the tuned profile, the final ab's
# ab.json/report.md. Prints the verdicts last.
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
  ab_conc=1,8
  tune_conc=1,8
  tune_seqs=2
  lens="--input-len 32 --output-len 16"
  ab_limit_s=${GPU_AB_LIMIT_S:-600}
  tune_budget_min=${GPU_AB_TUNE_BUDGET_MIN:-6}
  tune_limit_s=${GPU_AB_LIMIT_S:-480}
else
  engine=python3
  ab_model=$work/llama-1b
  tune_model=$work/llama-8b
  env_table=''
  ab_conc=1,16,64
  tune_conc=1,64
  tune_seqs=16
  lens="--input-len 128 --output-len 32"
  ab_limit_s=450          # 4 starts (40-150 s each; base-again hits the compile cache) + 28 passes of ~3-6 s
  tune_budget_min=5.5     # base start ~150 s, candidate ~85 s, 6 screening passes, 8 final passes of ~5 s
  tune_limit_s=345
fi

shape() {  # DIR ARGS...: a weightless model folder with real shapes (vLLM fills dummy weights; the folder's
  # own flags, --load-format dummy and --quantization fp8, are added by nemolaunch at launch)
  local dir=$1
  shift
  "$launcher" -m launcher model shape llama-3.1-8b "$dir" --python "$engine" "$@" >> "$out/shape.txt" 2>&1 ||
    echo "gpu_ab: nemolaunch model shape failed (see $out/shape.txt)" >&2
}
profile() {  # FILE DESCRIPTION EXTRA_VLLM_LINES: 2048 context, CUDA graphs
  printf 'schema = 1\ndescription = "%s"\n[vllm]\nmax_model_len = 2048\ncuda_graphs = true\n%s\n%s\n' \
    "$2" "$3" "$env_table" > "$1"
}
keep() {  # copy what a run left, whatever state it is in
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$out/"; done
  return 0
}
logs() {  # RUN_DIR PREFIX: the last lines of every server log
  for log in "$1"/logs/*.log; do [ -f "$log" ] && tail -n 60 "$log" > "$out/$2-$(basename "$log")"; done
  return 0
}
quiet() { grep --line-buffered -v "^(\|^INFO\|^WARNING\|^DEBUG" || true; }

if [ -z "${GPU_AB_CPU_ENGINE:-}" ]; then
  if [ "$what" = ab ]; then  # Llama-3.2-1B's shape (real 128k vocabulary), quantized online to FP8 by vLLM
    shape "$ab_model" --quantization fp8 --set hidden_size=2048 --set intermediate_size=8192 \
      --set num_hidden_layers=16 --set num_key_value_heads=8 --set head_dim=64 --set tie_word_embeddings=true
  else
    shape "$tune_model"  # Llama-3.1-8B, bf16
  fi
fi

rc=0
case $what in
  ab)
    p=$work/base.toml
    profile "$p" "gpu_ab: online FP8, CUDA graphs" ""
    timeout -s TERM "$ab_limit_s" "$launcher" -m launcher ab --model "$ab_model" --python "$engine" \
      --config "base=$p" --config "eager=$p,cuda_graphs=false" \
      --config "torch=$p,disabled_kernels=[\"CutlassFP8ScaledMMLinearKernel\"]" --calibrate \
      --concurrency "$ab_conc" $lens --warmup 2 --warmup-passes 1 --rounds 3 --out "$work/ab" \
      > "$work/verdicts.txt" 2> >(quiet > "$work/progress.txt") || rc=$?
    sleep 1
    keep "$work/verdicts.txt" "$work/progress.txt" "$work/ab/ab.json" "$work/ab/report.md" "$work/ab/ratios.png"
    logs "$work/ab" ab
    ;;
  tune)
    p=$work/base.toml
    profile "$p" "gpu_ab tune base: max_num_seqs $tune_seqs" "max_num_seqs = $tune_seqs"
    timeout -s TERM "$tune_limit_s" "$launcher" -m launcher tune --model "$tune_model" --python "$engine" \
      --base "$p" --knobs max_num_seqs,cuda_graphs --budget "$tune_budget_min" --concurrency "$tune_conc" $lens \
      --rounds 2 --name gpu-ab-tuned --out "$work/tune" \
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
import json, sys
doc = json.load(open(sys.argv[1]))
print(f"rounds {len(doc['rounds'])}/{doc['workload']['rounds_asked']} ({doc['status']}), mode {doc['mode']}, "
      f"noise floor {doc['noise_floor']['source']}")
for s in doc["sides"]:
    print(f"  {s['name']}: {s['status']} starts {s['startups_s']} s" + (f": {s['diagnosis']}" if s["diagnosis"] else ""))
for name, per_level in doc["verdicts"].items():
    for c, m in per_level.items():
        print(f"  {name} vs {doc['baseline']} c={c}: {m['output_tok_s']['text']}")
PY
fi
cat "$out/verdicts.txt" 2>/dev/null
rm -rf "$work"
exit "$rc"

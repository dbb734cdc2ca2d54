#!/usr/bin/env bash
# ab v2 on the H200 (vLLM 0.26 importable as python3, gpu/README.md), from the repository root, in the background:
#   nohup bash benchmarks/gpu_ab.sh all OUTDIR > OUTDIR.log 2>&1 &
# Stages (each its own command, each about one lease; `all` runs fp8, nano, then moe, ~55 min of device time):
#   fp8   ~20 min: dummy Llama-3.1-8B shape, online FP8, three co-resident servers (started one after the other):
#         base (vLLM's FP8 kernel on SM90: CUTLASS), torch (disabled_kernels=[CutlassFP8ScaledMMLinearKernel]:
#         per-tensor torch scaled-mm) and base-again (--calibrate: the A/A). c=1,32,64, headline c=64. Measures
#         the A/A spread per round at each level (issue 26: at most 1.5%) and judges torch against CUTLASS at
#         every level.
#   moe   ~18 min: dummy Qwen3-30B-A3B shape, online FP8: vLLM's default MoE kernel, moe_backend=triton and
#         moe_backend=marlin, co-resident, c=1,8,32,64, headline c=32. No A/A (a fourth 30 GB server does not fit
#         beside three), so its verdicts say "noise not measured" unless a noise stored for this machine, model and
#         window matches.
#   nano  ~17 min: issue 27's graphs-vs-eager question on the dummy Nemotron 3 Nano 30B-A3B shape as released
#         (NVFP4 experts, FP8 KV), served with profiles/sm120.toml's flags of record co-resident: graphs (the
#         profile) against eager (cuda_graphs=false), c=1, 32 output tokens, headline c=1 (the seed's 27 vs 97
#         tok/s). No NVFP4 MoE backend ab: on SM90 only Marlin runs (probe, 2026-12-03), so there is no second
#         backend.
#   tune  ~6 min (optional): tune from the 2026-12-01 probe's close call, the final against the fp8 stage's noise.
# All with ab's defaults (5 s steady windows, 2% threshold, Pocock-corrected looks, up to 8 rounds) and --budget
# (GPU_AB_FP8_MIN, GPU_AB_MOE_MIN, GPU_AB_NANO_MIN or GPU_AB_BUDGET_MIN for all), so each stage ends on time; a
# wall-clock guard (SIGTERM: nemolaunch keeps the completed rounds) backs it up.
# A side that cannot start is a result (infeasible, with its diagnosis), never the end of the script.
# Writes into OUTDIR/STAGE: ab.json, report.md, ratios.png, progress (stderr), verdicts (stdout), the server logs'
# last lines. Prints, per stage: its device time (wall clock on the GPU host), the noise, every verdict.
# GPU_AB_DENSE / GPU_AB_MOE: model folders written before (`nemolaunch model shape NAME DIR --quantization fp8`).
#
# Rehearsal on the vLLM CPU engine (this script's logic, not the GPU): GPU_AB_CPU_ENGINE=<engine python>
# GPU_AB_CPU_MODEL=<tiny model>; GPU_AB_LAUNCHER is the python that runs nemolaunch.
set -u
what=${1:-}
out=${2:-}
case $what in fp8|moe|nano|tune|all) ;; *) what= ;; esac
if [ -z "$out" ] || [ -z "$what" ]; then
  echo "usage: gpu_ab.sh fp8|moe|nano|tune|all OUTDIR" >&2
  exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1
launcher=${GPU_AB_LAUNCHER:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -n "${GPU_AB_CPU_ENGINE:-}" ]; then  # rehearsal: same commands, CPU-sized
  engine=$GPU_AB_CPU_ENGINE
  dense=$GPU_AB_CPU_MODEL
  moe=$GPU_AB_CPU_MODEL
  env_table=$'[env]\nVLLM_CPU_KVCACHE_SPACE = "1"'
  fp8_levels=1,8
  moe_levels=1,8
  moe_headline=8
  lens=(--input-len 32 --output-len 16)
  torch_set='max_num_seqs=4'  # the CPU engine has no FP8 kernels: a real difference to find instead
  moe_sets=('max_num_seqs=2' 'max_num_seqs=4')
  budget_fp8=${GPU_AB_BUDGET_MIN:-8}
  budget_moe=${GPU_AB_BUDGET_MIN:-8}
  nano=$GPU_AB_CPU_MODEL
  nano_levels=1,8
  nano_headline=1
  nano_out=()
  budget_nano=${GPU_AB_BUDGET_MIN:-8}
else
  engine=python3
  dense=${GPU_AB_DENSE:-$work/llama-3.1-8b-fp8}
  moe=${GPU_AB_MOE:-$work/qwen3-30b-a3b-fp8}
  env_table=''
  fp8_levels=1,32,64
  moe_levels=1,8,32,64
  moe_headline=32
  lens=(--input-len 256 --output-len 64)
  torch_set='disabled_kernels=["CutlassFP8ScaledMMLinearKernel"]'
  moe_sets=('moe_backend="triton"' 'moe_backend="marlin"')
  # each stage alone fills most of one 30-minute lease (the H200, 2026-12-03, third lease: Nano's two starts took
  # 270 + 160 s, its warm-up ~2 min, a c=1,8 round ~230 s). fp8: three starts one after the other (~150 s cold,
  # then ~90 s each), warm-up ~3 min, rounds of ~150 s, 4 for the A/A spread; moe: three 30B starts, 4 levels
  budget_fp8=${GPU_AB_FP8_MIN:-${GPU_AB_BUDGET_MIN:-20}}
  budget_moe=${GPU_AB_MOE_MIN:-${GPU_AB_BUDGET_MIN:-18}}
  nano=${GPU_AB_NANO:-$work/nemotron-3-nano-30b-a3b-nvfp4}
  # eager Nano ran 51 tok/s with 32 in flight and 11-15 tok/s at c=1 (2-3 s a 32-token answer; a c=8 pass once
  # completed nothing in 33 s) (2026-12-03): the seed's question is single-stream, so c=1 alone, 32-token answers
  nano_levels=1
  nano_headline=1
  nano_out=(--output-len 32)
  budget_nano=${GPU_AB_NANO_MIN:-${GPU_AB_BUDGET_MIN:-17}}
fi

profile() {  # FILE DESCRIPTION: 4096 context, CUDA graphs
  printf 'schema = 1\ndescription = "%s"\n[vllm]\nmax_model_len = 4096\ncuda_graphs = true\n%s\n' "$2" "$env_table" > "$1"
}
shape() {  # NAME DIR: a weightless model folder with real shapes, online FP8 (vLLM fills dummy weights)
  [ -n "${GPU_AB_CPU_ENGINE:-}" ] || [ -f "$2/config.json" ] && return 0
  "$launcher" -m launcher model shape "$1" "$2" --quantization fp8 --python "$engine" >> "$out/shape.txt" 2>&1 ||
    echo "gpu_ab: nemolaunch model shape $1 failed (see $out/shape.txt)" >&2
}
quiet() { grep --line-buffered -v "^(\|^INFO\|^WARNING\|^DEBUG" || true; }
logs() {  # RUN_DIR DEST: the last lines of every server log
  local log
  for log in "$1"/logs/*.log "$1"/*/*/logs/*.log; do
    [ -f "$log" ] && tail -n 80 "$log" > "$2/log-$(basename "$log")"
  done
  return 0
}
summary() {  # AB_JSON: the noise and every verdict, as nemolaunch renders them
  "$launcher" - "$1" <<'PY'
import sys
from pathlib import Path
from launcher.ab.document import read_ab
from launcher.ab.report import sentence
doc = read_ab(Path(sys.argv[1]))
print(f"  {len(doc['rounds'])} round(s) of {doc['planned_rounds']} planned; stopped: {doc['stopped_by']}")
print(f"  windows (s): {doc['windows'] or 'as asked'}; noise: {doc['noise']['source']}")
for c, metrics in doc["noise"]["levels"].items():
    n = metrics.get("output_tok_s")
    if n:
        print(f"  A/A c={c}: per-round spread {n['sd'] * 100:.2f}% over {n['df'] + 1} rounds, bias {n['bias'] * 100:+.2f}%")
for s in doc["sides"]:
    print(f"  {s['name']}: {s['status']}, starts {s['startups_s']} s" + (f": {s['diagnosis']}" if s["diagnosis"] else ""))
for name, per_level in doc["verdicts"].items():
    for c, m in per_level.items():
        v = m["output_tok_s"]
        print(f"  {name} vs {doc['baseline']} c={c} ({'headline' if v['headline'] else 'exploratory'}): "
              f"{sentence(v, name)}; ratios {v['ratios']}")
dropped = sorted({d for lv in doc["verdicts"].values() for m in lv.values() for d in m["output_tok_s"]["dropped"]})
print("  dropped passes: " + ("; ".join(dropped) if dropped else "none"))
PY
}
run_ab() {  # STAGE BUDGET_MIN ARGS...: one ab, its device time and results
  local stage=$1 budget=$2
  shift 2
  local dest=$out/$stage
  mkdir -p "$dest"
  # inside gpu_session.sh the stage's time limit (STAGE_S) bounds ab's budget, guard included: a stage killed from
  # outside loses the round under way and the files below (the H200, 2026-12-03: the nano stage, exit 124)
  [ -n "${STAGE_S:-}" ] && budget=$(awk "BEGIN { b = (${STAGE_S} - 250) / 60; print (b < $budget) ? b : $budget }")
  local t0 rc=0
  t0=$(date +%s)
  timeout -s TERM "$(awk "BEGIN { print int($budget * 60 + 240) }")" "$launcher" -m launcher ab --python "$engine" \
    "${lens[@]}" --budget "$budget" --out "$work/$stage" "$@" \
    > "$dest/verdicts.txt" 2> >(quiet > "$dest/progress.txt") || rc=$?
  sleep 1
  for f in ab.json report.md ratios.png; do [ -f "$work/$stage/$f" ] && cp "$work/$stage/$f" "$dest/"; done
  logs "$work/$stage" "$dest"
  echo "gpu_ab $stage: exit $rc, device time $(( $(date +%s) - t0 )) s (budget $budget min); results in $dest"
  [ -f "$dest/ab.json" ] && summary "$dest/ab.json"
  return 0
}

fp8() {
  shape llama-3.1-8b "$dense"
  profile "$work/dense.toml" "gpu_ab fp8: CUDA graphs, vLLM's FP8 kernel choice"
  run_ab fp8 "$budget_fp8" --model "$dense" --config "base=$work/dense.toml" \
    --config "torch=$work/dense.toml,$torch_set" --calibrate --concurrency "$fp8_levels"
}
moe_stage() {
  shape qwen3-30b-a3b "$moe"
  profile "$work/moe.toml" "gpu_ab moe: CUDA graphs, vLLM's MoE kernel choice"
  run_ab moe "$budget_moe" --model "$moe" --config "default=$work/moe.toml" \
    --config "triton=$work/moe.toml,${moe_sets[0]}" --config "marlin=$work/moe.toml,${moe_sets[1]}" \
    --concurrency "$moe_levels" --headline-level "$moe_headline"
}
nano_stage() {
  if [ -z "${GPU_AB_CPU_ENGINE:-}" ] && [ ! -f "$nano/config.json" ]; then
    "$launcher" -m launcher model shape nemotron-3-nano-30b-a3b "$nano" --quantization nvfp4 --python "$engine" \
      >> "$out/shape.txt" 2>&1 || echo "gpu_ab: nemolaunch model shape nemotron-3-nano-30b-a3b failed" >&2
  fi
  # the seed's flags of record as they are, 4096 context (the CPU rehearsal: the tiny profile's KV space)
  if [ -n "${GPU_AB_CPU_ENGINE:-}" ]; then
    profile "$work/nano.toml" "gpu_ab nano rehearsal"
  else
    sed 's/^\[vllm\]$/[vllm]\nmax_model_len = 4096/' profiles/sm120.toml > "$work/nano.toml"
  fi
  run_ab nano "$budget_nano" --model "$nano" --config "graphs=$work/nano.toml" \
    --config "eager=$work/nano.toml,cuda_graphs=false" --concurrency "$nano_levels" --headline-level "$nano_headline" \
    "${nano_out[@]}"
}
tune_stage() {
  shape llama-3.1-8b "$dense"
  profile "$work/dense.toml" "gpu_ab tune base: CUDA graphs"
  local t0 rc=0 noise=()
  [ -f "$out/fp8/ab.json" ] && noise=(--noise "$out/fp8/ab.json")
  mkdir -p "$out/tune"
  t0=$(date +%s)
  timeout -s TERM 600 "$launcher" -m launcher tune --model "$dense" --python "$engine" --base "$work/dense.toml" \
    --knobs probe --from docs/measurements/runs/2026-12-01/gpu-h200-2026-12-01/probe-dense-fresh.json \
    "${noise[@]}" --budget 6 --concurrency "$fp8_levels" "${lens[@]}" --name gpu-ab-tuned --out "$work/tune" \
    > "$out/tune/verdicts.txt" 2> >(quiet > "$out/tune/progress.txt") || rc=$?
  for f in tune.json gpu-ab-tuned.toml; do [ -f "$work/tune/$f" ] && cp "$work/tune/$f" "$out/tune/"; done
  echo "gpu_ab tune: exit $rc, device time $(( $(date +%s) - t0 )) s"
}

case $what in
  fp8) fp8 ;;
  moe) moe_stage ;;
  nano) nano_stage ;;
  tune) tune_stage ;;
  all) fp8; nano_stage; moe_stage ;;
esac
for f in "$out"/*/verdicts.txt; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
exit 0

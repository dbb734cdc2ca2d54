#!/usr/bin/env bash
# One H200 session's GPU work, stage after stage, in the background, so that no time is lost between the calls
# that start it and collect its results (on the lent machine vLLM 0.26 is importable as python3 once
# ../shared/gpu's install ran; from the repository root):
#   setsid bash benchmarks/gpu_session.sh RESULTS [STAGE ...] > RESULTS.log 2>&1 < /dev/null &
#   bash benchmarks/gpu_session.sh --collect RESULTS TARBALL SECONDS   # waits until done or SECONDS pass,
#                                                                      # refreshing TARBALL every 15 s
# Stages (default: ab-fp8 ab-nano ab-moe, in this order, ~55 min: each ab stage fills most of one 30-minute lease,
# so name one): ab-fp8, ab-nano, ab-moe and tune (gpu_ab.sh, ab budgets of 20, 17 and 18 min, cut to what the
# deadline leaves), fidelity (gpu_bench_fidelity.sh), probe (gpu_probe.sh), probe-mamba (gpu_probe_hybrid.sh,
# Mamba chains only), moe (gpu_shapes.sh on the Qwen3-30B-A3B shape, online FP8); on request fidelity256 (c=256
# alone, three clients), fidelity256-pinned (c=256 against vLLM's client, 3 blocks of longer passes, each process
# on cores of its own) and probe-nice0 (probe with FlashInfer's attention compile at normal priority). Each stage's
# command gets its time limit less 10 s in STAGE_S. Each writes RESULTS/STAGE/ and its console output
# RESULTS/STAGE.log; RESULTS/session.txt says when each began and ended and its exit code;
# RESULTS/done marks the end. ab, tune and fidelity serve the same model folder (the Llama-3.1-8B shape,
# online FP8) with the same settings, so later vLLM starts can hit the compile cache. SESSION_S (default 1500)
# bounds the whole run: a stage starts only if its minimum fits in what is left, and is cut at the deadline.
set -u
if [ "${1:-}" = --collect ]; then
  results=$2 tarball=$3 wait_s=$4
  end=$(($(date +%s) + wait_s))
  while :; do
    tar czf "$tarball.part" -C "$results" . 2>/dev/null && mv "$tarball.part" "$tarball"
    [ -f "$results/done" ] && break
    [ "$(date +%s)" -lt "$end" ] || break
    sleep 15
  done
  tail -n 40 "$results/session.txt" 2>/dev/null
  exit 0
fi
results=${1:?usage: gpu_session.sh RESULTS [STAGE ...] | --collect RESULTS TARBALL SECONDS}
shift
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(ab-fp8 ab-nano ab-moe)
mkdir -p "$results"
results=$(cd "$results" && pwd)
deadline=$(($(date +%s) + ${SESSION_S:-1500}))
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0} HF_HUB_OFFLINE=1
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$results/session.txt"; }

log "session: stages ${stages[*]}; deadline in ${SESSION_S:-1500} s"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  > "$results/gpu.txt" 2>&1
python3 -c "import vllm, torch, flashinfer; print('vllm', vllm.__version__, 'torch', torch.__version__, 'flashinfer', flashinfer.__version__)" \
  > "$results/stack.txt" 2>&1
# nemolaunch runs from this checkout, not installed: a dependency pyproject.toml names that does not import here
# can fail stages in seconds (2026-12-02: tomli_w was missing and both probe stages ended in 17 s); said first in
# session.txt, which --collect prints
if ! python3 - > "$results/deps.txt" 2>&1 <<'PY'
import importlib, re, sys, tomllib
names = {"nvidia-ml-py": "pynvml", "tomli-w": "tomli_w"}  # distribution -> import name where they differ
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
missing = []
for dep in deps:
    dist = re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0]
    try:
        importlib.import_module(names.get(dist, dist.replace("-", "_")))
    except ImportError:
        missing.append(dist)
if missing:
    sys.exit("missing here: " + " ".join(missing) + " (carry their wheels and install them into the site folder)")
print("nemolaunch's dependencies import")
PY
then
  log "session: WARNING $(tail -n 1 "$results/deps.txt")"
fi
model=/tmp/nemolaunch-session/llama-3.1-8b-fp8
mkdir -p "$(dirname "$model")"
[ -f "$model/config.json" ] \
  || python3 -m launcher model shape llama-3.1-8b "$model" --quantization fp8 --python python3 > "$results/shape.log" 2>&1

ab_limit() { awk "BEGIN { print int($1 * 60 + 270) }"; }  # BUDGET_MIN: an ab stage's wall-clock limit in seconds
stage() {  # NAME MIN_S MAX_S COMMAND...: run if MIN_S fits before the deadline, at most MAX_S
  local name=$1 min=$2 max=$3 left rc
  shift 3
  left=$((deadline - $(date +%s)))
  if [ "$left" -lt "$min" ]; then
    log "$name: skipped ($left s left, needs $min)"
    return
  fi
  [ "$left" -lt "$max" ] && max=$left
  log "$name: start (limit $max s)"
  mkdir -p "$results/$name"
  STAGE_S=$((max - 10)) timeout -s TERM -k 20 "$max" "$@" > "$results/$name.log" 2>&1
  rc=$?
  log "$name: exit $rc"
}

for s in "${stages[@]}"; do
  case $s in
    fidelity) stage fidelity 240 400 env MODEL_DIR="$model" bash benchmarks/gpu_bench_fidelity.sh "$results/fidelity" ;;
    # c=256 alone, nemolaunch with its default client split and with one process beside vLLM's client (A B C C B A)
    fidelity256) stage fidelity256 240 420 env MODEL_DIR="$model" LEVELS=256 ONE_PROCESS_ARM=1 \
      bash benchmarks/gpu_bench_fidelity.sh "$results/fidelity256" ;;
    # c=256, nemolaunch's default against vLLM's client, 3 blocks of passes twice as long (8 prompts per stream),
    # the API server, the engine core and the clients each on cores of their own
    fidelity256-pinned) stage fidelity256-pinned 300 480 env MODEL_DIR="$model" LEVELS=256 BLOCKS=3 \
      PROMPTS_PER_STREAM=8 PIN=1 bash benchmarks/gpu_bench_fidelity.sh "$results/fidelity256-pinned" ;;
    # gpu_ab.sh's stages, one folder: tune reads the fp8 stage's noise from it
    # each at most its ab budget and gpu_ab.sh's guard (4 min) and a little more: ab ends itself within its budget
    ab-fp8) stage ab-fp8 300 "$(ab_limit "${GPU_AB_FP8_MIN:-${GPU_AB_BUDGET_MIN:-20}}")" env GPU_AB_DENSE="$model" \
      bash benchmarks/gpu_ab.sh fp8 "$results/ab" ;;
    ab-nano) stage ab-nano 300 "$(ab_limit "${GPU_AB_NANO_MIN:-${GPU_AB_BUDGET_MIN:-17}}")" \
      bash benchmarks/gpu_ab.sh nano "$results/ab" ;;
    ab-moe) stage ab-moe 300 "$(ab_limit "${GPU_AB_MOE_MIN:-${GPU_AB_BUDGET_MIN:-18}}")" \
      bash benchmarks/gpu_ab.sh moe "$results/ab" ;;
    tune) stage tune 240 600 env GPU_AB_DENSE="$model" bash benchmarks/gpu_ab.sh tune "$results/ab" ;;
    probe) stage probe 150 400 bash benchmarks/gpu_probe.sh "$results/probe" ;;
    # the same with FlashInfer's attention compile at normal priority (the long pole of a fresh run at nice 10)
    probe-nice0) stage probe-nice0 150 400 env NEMOLAUNCH_FLASHINFER_NICE=attention=0 \
      bash benchmarks/gpu_probe.sh "$results/probe-nice0" ;;
    # issue 27: the FlashInfer Mamba backend on the Nemotron 3 shapes after its probe fix (FLASHINFER ok = fixed)
    probe-mamba) stage probe-mamba 90 300 env ONLY=mamba bash benchmarks/gpu_probe_hybrid.sh "$results/probe-mamba" ;;
    moe) stage moe 150 280 env SHAPES="qwen3-30b-a3b:fp8" NUM_PROMPTS=32 bash benchmarks/gpu_shapes.sh "$results/moe" ;;
    *) log "$s: unknown stage" ;;
  esac
done
log "session: done"
touch "$results/done"

#!/usr/bin/env bash
# On the GPU host (vLLM importable by python3), from the repository root: probe --model on the Nemotron 3 Super and
# Nano shapes (NVFP4 as released; config files only, no weights): the chains each uses (FP8 and NVFP4 GEMMs, the
# NVFP4 routed experts in Super's 1024-wide latent, attention, the Mamba backend), three starts per kernel.
#   bash benchmarks/gpu_probe_hybrid.sh OUTDIR
#   ONLY=mamba bash benchmarks/gpu_probe_hybrid.sh OUTDIR     (only these chains: probe's --only)
# Writes OUTDIR/probe-super.json, probe-nano.json (and .log), times.txt and summary.txt
# (benchmarks/probe_starts_summary.py); prints the summary last. Wall-clock: at most 9 minutes (limits 300 + 240 s);
# a run past its limit gets Ctrl-C and keeps what it measured (exit 130). FlashInfer's Mamba module is a JIT build
# in its kernel's set-up (not prebuilt): a fresh machine pays its compile inside the 180 s per-kernel timeout.
set -u
out=${1:?usage: gpu_probe_hybrid.sh OUTDIR}
mkdir -p "$out/models/super" "$out/models/nano"
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 - "$out/models" <<'PY'
import json, sys
from pathlib import Path
from launcher.model import nemotron
models = Path(sys.argv[1])
config = {**nemotron.SUPER_CONFIG, "quantization_config": nemotron.super_quantization_config()}
(models / "super" / "config.json").write_text(json.dumps(config))
(models / "nano" / "config.json").write_text(json.dumps(nemotron.NANO_CONFIG))
(models / "nano" / "hf_quant_config.json").write_text(json.dumps(nemotron.nano_hf_quant_config()))
PY
: > "$out/times.txt"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # probe LABEL LIMIT_S ARGS...
only=()
[ -n "${ONLY:-}" ] && only=(--only "$ONLY")
probe super 300 --model "$out/models/super" ${only[@]+"${only[@]}"}
probe nano 240 --model "$out/models/nano" ${only[@]+"${only[@]}"}
python3 benchmarks/probe_starts_summary.py "$out" | tee "$out/summary.txt"

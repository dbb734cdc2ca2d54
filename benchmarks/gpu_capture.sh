#!/usr/bin/env bash
# On a GPU host, from the repository root: record doctor and probe there, as fixtures for the tests; then probe
# again (JIT caches now warm) and recheck the shipped sm90 profile against the GPU.
#   bash benchmarks/gpu_capture.sh LABEL OUTDIR
# Needs python3 with torch (CUDA), click, nvidia-ml-py, psutil and packaging; vLLM/FlashInfer are optional
# (PYTHONPATH may point at them). Prints a summary last.
set -u
label=$1 out=$2
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,persistence_mode --format=csv,noheader
python3 -m launcher doctor --json --python python3 > "$out/doctor-$label.json"
echo "doctor exit $?"
start=$(date +%s)
python3 -m launcher probe --json --python python3 > "$out/probe-$label.json" 2> "$out/probe-$label.log"
echo "probe exit $? in $(( $(date +%s) - start )) s"
start=$(date +%s)
python3 -m launcher probe --json --python python3 > "$out/probe-$label-warm.json" 2> "$out/probe-$label-warm.log"
echo "probe again (JIT caches warm) exit $? in $(( $(date +%s) - start )) s"
python3 -m launcher probe --recheck sm90 --python python3 > "$out/recheck-$label.txt" 2>&1
echo "probe --recheck sm90 exit $?"
tail -12 "$out/recheck-$label.txt"
# Ctrl-C 30 s in: exit 130, and the kernels measured so far are still in the report
timeout --preserve-status -s INT 30 python3 -m launcher probe --json --python python3 > "$out/probe-$label-interrupted.json" 2>/dev/null
echo "interrupted probe exit $?"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('interrupted', d['interrupted'], 'ok', sum(k['status'] == 'ok' for k in d['kernels']))" "$out/probe-$label-interrupted.json"
sleep 2; echo "processes left: $(pgrep -fc kernel_probe.py)"
python3 - "$out/doctor-$label.json" "$out/probe-$label.json" <<'PY'
import json, sys
doctor, probe = (json.load(open(p)) for p in sys.argv[1:3])
for c in doctor["checks"]:
    print(f"{c['status']:5} {c['id']}: {c['observed'][:150]}")
print(doctor["summary"])
print("probe:", probe["vllm_version"], probe["seconds"], "s", probe["chain_sources"], "recommended", probe["recommended"])
for k in probe["kernels"]:
    if k["status"] == "not-probed":
        continue
    t = {(s["m"], s["n"], s["k"]): (round(s["us"], 1), s.get("relative"), s.get("rel_err")) for s in k["shapes"]}
    print(f"{k['chain']:11} {k['kernel'][:40]:40} {str(k['declared']):5} {k['status']:11} {k['seconds']:5}s "
          f"set-up {k.get('setup_s')}s {(k['error'] or '')[:90]}")
    for key in sorted(t)[:6]:
        print("   ", key, t[key])
PY

#!/usr/bin/env bash
# Issue 17's capture, for a host with two (or more) NVIDIA GPUs and vLLM 0.26 importable by python3, run from
# the repository root:
#   bash benchmarks/gpu_multi.sh OUTDIR [MODEL_DIR]
# Records doctor --json there (topology, P2P, NVLink, /dev/shm, NCCL: keep it as tests/fixtures/doctor/ fixture),
# doctor --profile for TP=2, the rendered TP=2 / DP=2 commands, then serves MODEL_DIR (default: the tiny model,
# built there) at tensor parallel size 2 and at data parallel size 2, each with --smoke, and counts what is left. Expected wall-clock: about 6 minutes (two vLLM starts of ~2 min each).
# NVLink multicast stays off in every process started here (the device's rules): the three variables below
# are exported, and serve passes the environment through to vLLM and its workers.
set -u
out=$1 model=${2:-}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi topo -m > "$out/nvidia-smi-topo.txt" 2>&1
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv > "$out/gpus.csv"
df -m /dev/shm > "$out/shm.txt"
python3 -m launcher doctor --json --python python3 > "$out/doctor-2gpu.json"
echo "doctor exit $?"
if [ -z "$model" ]; then
  model=$out/model
  python3 -m launcher model tiny "$model" --python python3 > "$out/model.log" 2>&1 || echo "model tiny failed"
fi
cat > "$out/tp2.toml" <<TOML
schema = 1
description = "two GPUs, tensor parallel 2"
[vllm]
tensor_parallel_size = 2
gpu_memory_utilization = 0.85
max_model_len = 2048
[why]
tensor_parallel_size = "issue 17: TP=2 on two H200s"
TOML
cat > "$out/dp2.toml" <<TOML
schema = 1
description = "two GPUs, data parallel 2"
[vllm]
data_parallel_size = 2
gpu_memory_utilization = 0.85
max_model_len = 2048
max_num_seqs = 64
TOML
python3 -m launcher doctor --json --python python3 --only topology,shm,nccl,ib,parallel --model "$model" \
  --profile "$out/tp2.toml" > "$out/doctor-tp2.json"
echo "doctor --profile tp2 exit $?"
python3 -m launcher serve --profile "$out/tp2.toml" --model "$model" --python python3 --dry-run > "$out/tp2-command.txt" 2>&1
python3 -m launcher serve --profile "$out/dp2.toml" --model "$model" --python python3 --dry-run > "$out/dp2-command.txt" 2>&1
for layout in tp2 dp2; do
  start=$(date +%s)
  timeout 600 python3 -m launcher serve --profile "$out/$layout.toml" --model "$model" --python python3 --smoke \
    --quiet --port 8123 --log-file "$out/serve-$layout.log" > "$out/serve-$layout.txt" 2>&1
  echo "serve $layout --smoke exit $? in $(( $(date +%s) - start )) s"
  sleep 3
  echo "  processes left: $(pgrep -fc 'vllm|VLLM::' || true); GPU memory used (MiB): $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr '\n' ' ')"
  grep -E "smoke test|NCCL_NVLS|custom all-reduce|symm" "$out/serve-$layout.txt" "$out/serve-$layout.log" | head -5
done
python3 - "$out/doctor-2gpu.json" "$out/doctor-tp2.json" <<'PY'
import json, sys
for path in sys.argv[1:]:
    doc = json.load(open(path))
    for c in doc["checks"]:
        if c["id"].split(".")[0] in ("gpu", "topology", "shm", "nccl", "ib", "parallel"):
            print(f"{c['status']:5} {c['id']}: {c['observed'][:150]}")
    print(path, doc["summary"]["verdict"])
PY

# Shell functions the benchmarks/gpu_probe*.sh scripts share; source it after setting $out (the run's folder):
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

probe() {  # probe LABEL LIMIT_S ARGS...: one timed probe run, its report kept in $out, its time in $out/times.txt
    local label=$1 limit=$2 start end rc
    shift 2
    start=$(date +%s%N)
    timeout -s INT -k 3 "$limit" python3 -m launcher probe --json --python python3 "$@" \
        > "$out/probe-$label.json" 2> "$out/probe-$label.log"
    rc=$?
    end=$(date +%s%N)
    echo "$label exit $rc in $(( (end - start) / 1000000000 )).$(( (end - start) / 100000000 % 10 )) s (limit $limit s)" \
        | tee -a "$out/times.txt"
}

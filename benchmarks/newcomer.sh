#!/usr/bin/env bash
# The newcomer's path, as README.md and docs/tutorial/cpu-quickstart.md give it, on a fresh clone: `make bench`,
# then `nemolaunch --help`, `doctor` and the quickstart's CPU commands exactly as written (no --python: the
# engine `make bench` built is found by default). From anywhere:
#   bash benchmarks/newcomer.sh [REPO [LOGDIR]]
# REPO: what to clone (default: this checkout's main branch; NEWCOMER_BRANCH picks another). LOGDIR: keep each
# step's output there (NN.log); without it the logs go with the clone.
# Prints one line per step: its exit code, the code the docs promise, its wall time, the command; then whether
# make bench built the engine or reused the one cached in ~/.cache/nemolaunch (its folder is named by the lock's
# hash: building it is ~3.5 GB and ~4 minutes, downloads included). Caches other than the engine (doctor's import
# probes) start empty: XDG_CACHE_HOME points into the clone's folder. Exits 0 when every step exited as documented.
# Removes the clone on the way out, and stops any process left with its working folder in the clone (there should
# be none: the last step counts them).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
repo=${1:-$here}
logdir=${2:-}
branch=${NEWCOMER_BRANCH:-main}
work=$(mktemp -d /tmp/newcomer.XXXXXX)
clone=$work/nemolaunch
[ -n "$logdir" ] && mkdir -p "$logdir" && logdir=$(cd "$logdir" && pwd)
logdir=${logdir:-$work/logs}
mkdir -p "$logdir"
export XDG_CACHE_HOME=$work/cache
unset NEMOLAUNCH_PYTHON VIRTUAL_ENV PYTHONPATH

left() {  # pids of processes whose working folder is in the clone (what the steps started and did not stop)
  for p in /proc/[0-9]*; do
    case $(readlink "$p/cwd" 2>/dev/null) in "$clone"|"$clone"/*) echo "${p#/proc/}" ;; esac
  done
}
cleanup() {
  for pid in $(left); do kill "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

n=0
failed=0
step() {  # step EXPECTED LABEL COMMAND...: run it in the clone, its output to LOGDIR/NN.log; one line with LABEL
  local expected=$1 label=$2; shift 2
  n=$((n + 1))
  local log t0 t1 rc verdict=ok
  log=$logdir/$(printf %02d "$n").log
  t0=$(date +%s.%N)
  ( { cd "$clone" 2>/dev/null || cd "$work"; } && "$@" ) > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  [ "$rc" = "$expected" ] || { verdict=DIFFERS; failed=$((failed + 1)); }
  printf '%2d  exit %-3s (documented %s) %-7s %6.1f s  %s\n' "$n" "$rc" "$expected" "$verdict" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$label"
}

lock_hash=$(git -C "$repo" show "$branch:lockfiles/cpu.txt" | sha256sum | cut -c1-12)
engine=$HOME/.cache/nemolaunch/engine-$lock_hash
cached=no
[ -f "$engine/.complete" ] && cached=yes
echo "newcomer path: $repo ($branch, $(git -C "$repo" rev-parse --short "$branch")), $(date -u +%Y-%m-%dT%H:%M:%SZ)," \
  "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

step 0 "git clone $repo && cd nemolaunch" git clone -q --branch "$branch" "$repo" "$clone"
step 0 "make bench" make bench
bench=$(ls -d "$clone"/build/bench/cpu-* 2>/dev/null | head -1)
step 0 "(check) make bench left summary.json, requests.jsonl, report.md, plots, server.log" \
  test -s "$bench/summary.json" -a -s "$bench/requests.jsonl" -a -s "$bench/report.md" \
  -a -s "$bench/throughput.png" -a -s "$bench/latency.png" -a -s "$bench/server.log"
for cmd in "--help" "doctor" "profile list" "serve --profile cpu --model build/tiny-llama --smoke" \
  "lock verify lockfiles/cpu.txt"; do
  # shellcheck disable=SC2086  # the command as the newcomer types it, split on spaces
  step 0 ".venv/bin/nemolaunch $cmd" .venv/bin/nemolaunch $cmd
done
step 0 "(check) no process left with its working folder in the clone" test -z "$(left)"

if [ "$cached" = yes ]; then
  echo "engine: reused $engine (cached before this run; make bench did not build it)"
else
  echo "engine: built by make bench into $engine"
fi
echo "$((n - failed)) of $n steps exited as documented; logs: $logdir"
[ "$failed" = 0 ]

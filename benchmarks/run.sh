#!/usr/bin/env bash
# Runs every benchmark in benchmarks/ and prints where the figures go (docs/benchmarks.md).
# JSON results and plots land in benchmarks/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
ran=0
for b in benchmarks/bench_*.py; do
  echo "== $b"
  case "$b" in
    # tidemark vs kube-scheduler vs the bind-only clients (the ceiling: the fastest of them per round), 5 alternating rounds
    */bench_e2e_binds.py)
      python "$b" --rounds 5 --json benchmarks/results/e2e-binds.json --plot benchmarks/results/e2e-binds.png ;;
    # scheduler_perf's workloads: simulate, live, and kube-scheduler's own scheduler_perf
    */bench_perf_suite.py) python "$b" --json benchmarks/results/perf-suite.json ;;
    # the quick colocation run (every kind and arm, 2 rounds); the full one is `make bench-colocation`
    */bench_colocation.py)
      python "$b" --quick --json benchmarks/results/colocation-quick.json --plot benchmarks/results/colocation-quick.png ;;
    # fleet scale at 20 nodes (root; `make bench-fleet` runs 20 and 50)
    */bench_fleet.py) python "$b" --nodes 20 --json benchmarks/results/fleet-quick.json ;;
    *) python "$b" ;;
  esac
  ran=1
done
if [ "$ran" = 0 ]; then echo "no benchmarks yet (the scheduler and agent issues add them)"; fi

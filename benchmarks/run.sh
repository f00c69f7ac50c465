#!/usr/bin/env bash
# Runs every benchmark in benchmarks/ and prints where the figures go (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
ran=0
for b in benchmarks/bench_*.py; do
  echo "== $b"
  python "$b"
  ran=1
done
if [ "$ran" = 0 ]; then echo "no benchmarks yet (the scheduler and agent issues add them)"; fi

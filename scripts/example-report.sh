#!/usr/bin/env bash
# Regenerate the example report in reports/example/ from fresh measurements on this machine:
# the default sweeps of every op (gemm and lstm in both training passes), the Ascend tile experiment (a full tile_n x tile_k grid), a conv tile
# study (TPE over conv2d's tiles at a ResNet-like 3x3 layer), and the report.
# Usage: scripts/example-report.sh            (about 8 minutes on 2 cores; needs the README's install)
set -euo pipefail
cd "$(dirname "$0")/.."
opbench=${OPBENCH:-.venv/bin/opbench}
work=reports/example-inputs   # measurements (git-ignored); only the report is committed
rm -rf "$work"
mkdir -p "$work"
export OPBENCH_RECORDS_DIR="$work/records"   # the study's tuned record stays out of tuning/records/

"$opbench" sweep gemm --pass fwd,bwd --out "$work" --quiet
"$opbench" sweep conv --out "$work" --quiet
"$opbench" sweep rnn --out "$work" --quiet
"$opbench" sweep gru --out "$work" --quiet
"$opbench" sweep lstm --pass fwd,bwd --out "$work" --quiet
"$opbench" tune gemm --m 16 --k 256 --n 1024 --sampler grid --params tile_n,tile_k --trials 100 \
  --study ascend-tile-grid --out "$work" >/dev/null
"$opbench" tune conv --batch 4 --in-channels 64 --out-channels 64 --input-size 28 --padding 1 \
  --sampler tpe --seed 0 --trials 40 --study conv-3x3-tiles --out "$work" >/dev/null
"$opbench" report "$work"/gemm-*.json "$work"/conv-*.json "$work"/rnn-*.json "$work"/gru-*.json \
  "$work"/lstm-*.json \
  --study ascend-tile-grid --study conv-3x3-tiles --storage "sqlite:///$PWD/$work/tuning/studies.db" \
  --baseline torch --title "opbench example report" --out reports/example --force

#!/usr/bin/env bash
# Issue 43's AMX checks, and the CUDA paths, in one run, for the device machine (an Intel host with
# AMX-BF16 and an NVIDIA GPU). Most important first, since a device run is paid for whole and may be cut
# short: the build; the AMX tests with OPBENCH_REQUIRE_AMX=1 (every layout on the real tiles against the
# emulator); our bf16 GEMM on every micro-kernel layout beside torch's bf16 (benchmarks/amx.py); the LSTM in
# bf16 beside torch's with our thread count and one-row layouts varied (benchmarks/bf16.py --variant); the
# LSTM's per-step products alone; then `opbench peak` and `opbench sweep gemm` on the GPU where there is one.
# Every step has its own time limit and log under OUT (at most 8 files come back from a device run: 7 logs
# and the sweep's results as one archive), and one step failing does not stop the next. 243 s on the
# device host's 16 vCPUs (2026-11-29), plus about 35 s to start the machine.
#
#     bash scripts/amx_device.sh [OUT]            # OUT: default $OUT (the device's), else ./amx-out
#
# Python packages the device image lacks (Optuna, SQLAlchemy) travel as wheels in .whl (the device
# README); they are installed into /tmp/site when that folder exists. A dry run anywhere, on the exact
# emulator with small shapes and without the build (timings say nothing):
#
#     ISA=amx-emu SHAPE=48x40x70 SKIP_BUILD=1 bash scripts/amx_device.sh /tmp/amx-dry
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-amx-out}}
mkdir -p "$out"
isa=${ISA:-amx}
py=${PYTHON:-python3}
threads=$(nproc)
layouts=1x1,1x2,2x1,1x3,3x1,1x4,4x1,1x1k2,1x2k2,2x1k2  # every layout but the default 2x2 (gemm_amx.toml)

step() {  # step NAME SECONDS COMMAND...: the command's output in OUT/NAME.log, its status and last lines here
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(date -u +%T))"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "rc=$? $name"
  tail -n 30 "$out/$name.log"
}

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); $(nproc) vCPUs;" \
  "amx: $(grep -o 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
if [ -d .whl ]; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl && export PYTHONPATH=/tmp/site
fi
if [ -z "${SKIP_BUILD:-}" ]; then
  step build 240 "$py" -m pip install --no-build-isolation --no-deps -e .
fi
export OPBENCH_RECORDS_DIR=/tmp/amx-records
if [ "$isa" = amx ]; then
  export OPBENCH_REQUIRE_AMX=1
fi
step tests 150 "$py" -m pytest -q -p no:cacheprovider tests/test_amx.py tests/test_amx_layouts.py
gemm=()
lstm=(--suites lstm)
if [ -n "${SHAPE:-}" ]; then
  gemm=(--gemm "$SHAPE")
  lstm=(--suites lstm --rounds 1)
fi
step layouts 220 "$py" benchmarks/amx.py --isa "$isa" --threads "$threads" --rounds 3 --layouts "$layouts" \
  "${gemm[@]}"
step lstm 180 "$py" benchmarks/bf16.py "${lstm[@]}" --threads "$threads" --peers torch \
  --variant t1:threads=1 --variant t4:threads=4 --variant "1x1:isa=$isa,amx_rows=1,amx_cols=1" \
  --variant "1x4:isa=$isa,amx_rows=1,amx_cols=4"
# The LSTM suite's per-step recurrent products (B x 4H x H), alone, on all threads and on one.
products=${PRODUCTS:-8x1024x256,1x2048x512,16x2048x512,64x2048x512,64x4096x1024}
each='for t in "$0" 1; do "$1" benchmarks/amx.py --isa "$2" --threads $t --rounds 3 --layouts 1x1,1x4 --gemm "$3"; done'
gpu=
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
  step cuda-peak 60 "$py" -m opbench peak --device cuda
fi
step products 120 bash -c "$each" "$threads" "$py" "$isa" "$products"
if [ -n "$gpu" ]; then
  step cuda-sweep 150 "$py" -m opbench sweep gemm --device cuda --out /tmp/cuda-sweep
  tar -czf "$out/cuda-sweep.tgz" -C /tmp cuda-sweep 2>/dev/null
fi
echo "== done ($(date -u +%T))"

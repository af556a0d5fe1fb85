#!/usr/bin/env bash
# Issue 43's AMX checks in one run, for a machine with AMX-BF16 (the device machine's Intel host): build, the
# AMX tests with OPBENCH_REQUIRE_AMX=1 (real tiles against the emulator, every layout), our bf16 GEMM on the
# default and four other layouts against torch's bf16 interleaved (benchmarks/amx.py), and a grid of the 11
# layouts on BERT-base's 1024x3072x768 through the tuner. Every step has its own time limit and log under
# OUT, and one step failing does not stop the next: a device run is paid for whole. About 8 minutes on 16
# vCPUs.
#
#     bash scripts/amx_device.sh [OUT]            # OUT: default $OUT (the device's), else ./amx-out
#
# A dry run anywhere, on the exact emulator with small shapes and without the build (timings say nothing):
#
#     ISA=amx-emu SHAPE=48x40x70 SKIP_BUILD=1 bash scripts/amx_device.sh /tmp/amx-dry
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-amx-out}}
mkdir -p "$out"
isa=${ISA:-amx}
shape=${SHAPE:-1024x3072x768}
py=${PYTHON:-python3}
threads=$(nproc)

step() {  # step NAME SECONDS COMMAND...: the command's output in OUT/NAME.log, its status and last lines here
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(date -u +%T))"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "rc=$? $name"
  tail -n 25 "$out/$name.log"
}

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); amx: $(grep -o 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
if [ -z "${SKIP_BUILD:-}" ]; then
  step build 420 "$py" -m pip install --no-build-isolation --no-deps -e .
fi
export OPBENCH_RECORDS_DIR="$out/records"
if [ "$isa" = amx ]; then
  export OPBENCH_REQUIRE_AMX=1
fi
step tests 300 "$py" -m pytest -q -p no:cacheprovider tests/test_amx.py tests/test_amx_layouts.py
gemm=()
if [ -n "${SHAPE:-}" ]; then
  gemm=(--gemm "$shape")
fi
step layouts 300 "$py" benchmarks/amx.py --isa "$isa" --threads "$threads" --rounds 3 \
  --layouts 1x2,1x4,4x1,1x2k2 "${gemm[@]}"
IFS=x read -r m n k <<<"$shape"
step grid 300 "$py" -m opbench tune gemm --m "$m" --n "$n" --k "$k" --dtype bf16 --isa "$isa" \
  --space gemm_amx --params amx_rows,amx_cols,amx_ksteps --sampler grid --trials 32 --seed 0 \
  --threads "$threads" --out "$out"
echo "== done ($(date -u +%T))"

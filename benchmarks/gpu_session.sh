#!/usr/bin/env bash
# Everything issue 22 still needs from a lent GPU, in one device call (the kit's check.sh does
# the suite and main jobs; this adds the launch checks, the benchmark table twice, jax's GPU
# suite and the affinity probe). On your machine first: `bash ../shared/gpu/prepare.sh`
# (the wheels in .gpu/), then the device tool:
#     run(command="bash benchmarks/gpu_session.sh", carry=[".gpu"], timeout_s=560)
# and read summary.txt among the returned files. Steps run in order of need while the
# budget (BUDGET seconds, default 520) lasts; each is time-limited and logged to $OUT (eight
# files at most: the device tool returns no more). STEPS="1 3 5" runs only those steps (a
# rerun), SUITE="test_x.py ..." only those test files in step 2; JAX_WORKERS and JAX_LIMIT
# (default 12 and 170 s) size step 5.
#   1. test_launch, test_cuda_kernels, test_cublas_direct on the GPU; if they fail, the rest
#      runs with NEEDLE_DIRECT_LAUNCH=0 (cupy's own kernel launches)
#   2. the suite on cuda,torch:cuda (12 workers)
#   3. benchmarks/gpu.py --cupy-launches (the issue's table, with the launch A/B column)
#   4. benchmarks/launch_costs.py (host us per launch: cupy's RawKernel vs DirectLaunch)
#   5. the suite on jax's GPU backend (12 workers)
#   6. benchmarks/gpu.py again, pinned to CPU 0 from its start (taskset)
#   7. benchmarks/affinity.py from CPU 0 and from the last CPU (does placement decide?)
set -u
ROOT=$(pwd); SCRATCH=$(mktemp -d); OUT=${OUT:-$SCRATCH/out}; mkdir -p "$OUT"
DEADLINE=$(( $(date +%s) + ${BUDGET:-520} ))
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false  # jax: not 75% of the GPU each
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
left() { echo $(( DEADLINE - $(date +%s) )); }
# step NAME MIN LIMIT LOG CMD...: runs CMD for at most LIMIT s (less if the budget is short),
# only if MIN s are left and STEPS names its number; logs its exit code, time and the log's
# last line (appended to LOG)
step() {
  local name=$1 min=$2 limit=$3 logf=$4; shift 4
  local n=${name%% *}; n=${n%[ab]}
  case " ${STEPS:-1 2 3 4 5 6 7} " in *" $n "*) ;; *) return 98 ;; esac
  local l; l=$(left)
  if [ "$l" -lt "$min" ]; then log "$name: skipped, $l s of the budget left"; return 99; fi
  [ "$limit" -gt "$l" ] && limit=$l
  local t0; t0=$(date +%s)
  timeout "$limit" "$@" >> "$OUT/$logf" 2>&1
  local rc=$?
  log "$name: rc=$rc in $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/$logf")"
  return $rc
}
log "$(date -u) $(nvidia-smi -L 2>&1 | head -1); $(nproc) CPUs"
SITE=$SCRATCH/site; BUILD=$SCRATCH/build; mkdir -p "$SITE" "$BUILD"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$BUILD" \
  .gpu/whl/setuptools-*.whl .gpu/whl/wheel-*.whl > "$SCRATCH/install.log" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
  $(ls .gpu/whl/*.whl | grep -v -e /setuptools- -e /wheel-) >> "$SCRATCH/install.log" 2>&1
PYTHONPATH=$BUILD python3 -m pip install -q --no-index --no-deps --no-build-isolation \
  --target "$SITE" . >> "$SCRATCH/install.log" 2>&1 \
  || log "project install failed: $(tail -3 "$SCRATCH/install.log" | tr '\n' ' ')"
export PYTHONPATH=$SITE
cd "$SCRATCH"  # import and test the installed package, never the source folder
python3 -c "import cupy, needle as ndl; print('cupy', cupy.__version__, '| cuda:', ndl.cuda().enabled())" \
  2>&1 | tail -1 | tee -a "$OUT/summary.txt"
PYTEST=(python3 -m pytest -q -p no:cacheprovider --rootdir "$ROOT" -c "$ROOT/pyproject.toml")
T=$ROOT/tests
FILES=("$T")  # SUITE="test_a.py test_b.py": step 2 runs only those files of tests/
[ -n "${SUITE:-}" ] && FILES=($(for f in $SUITE; do echo "$T/$f"; done))
step "1 launch and kernel tests on cuda" 60 120 pre.log "${PYTEST[@]}" -n 4 --device cuda \
  "$T/test_launch.py" "$T/test_cuda_kernels.py" "$T/test_cublas_direct.py"
rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 98 ] && [ "$rc" != 99 ]; then
  export NEEDLE_DIRECT_LAUNCH=0; log "direct launches OFF for the rest"
  grep -E "^(FAILED|ERROR)" "$OUT/pre.log" | head -10 | tee -a "$OUT/summary.txt"
fi
step "2 suite on cuda,torch:cuda" 90 200 suite-cuda.log "${PYTEST[@]}" -n 12 \
  --device cuda,torch:cuda --timeout 120 "${FILES[@]}" -k "not distributed and not mpi"
grep -E "^(FAILED|ERROR)" "$OUT/suite-cuda.log" | head -20 | tee -a "$OUT/summary.txt"
step "3 gpu.py --cupy-launches" 150 220 gpu1.log python3 "$ROOT/benchmarks/gpu.py" --cupy-launches
tail -12 "$OUT/gpu1.log" >> "$OUT/summary.txt" 2>/dev/null
step "4 launch_costs.py" 40 60 launch_costs.log python3 "$ROOT/benchmarks/launch_costs.py"
grep -E "RawKernel rg|DirectLaunch" "$OUT/launch_costs.log" | tee -a "$OUT/summary.txt"
step "5 suite on jax's GPU backend" 120 "${JAX_LIMIT:-170}" suite-jax.log "${PYTEST[@]}" \
  -n "${JAX_WORKERS:-12}" --device jax \
  --timeout 120 "$T" -k "not distributed and not mpi"
grep -sE "^(FAILED|ERROR)" "$OUT/suite-jax.log" | head -20 | tee -a "$OUT/summary.txt"
step "6 gpu.py pinned to CPU 0" 120 200 gpu2.log taskset -c 0 python3 "$ROOT/benchmarks/gpu.py" \
  --no-cpu-epoch --only mlp_h1024_b100,mlp_h4096_b1024,resnet9_b128,resnet9_b1024,transformer_b16,transformer_b256
tail -8 "$OUT/gpu2.log" >> "$OUT/summary.txt" 2>/dev/null
last=$(( $(nproc) - 1 ))
step "7a affinity from CPU 0" 40 90 affinity.log python3 "$ROOT/benchmarks/affinity.py" --start 0
step "7b affinity from CPU $last" 40 90 affinity.log python3 "$ROOT/benchmarks/affinity.py" \
  --start "$last"
log "done, $(left) s of the budget left"

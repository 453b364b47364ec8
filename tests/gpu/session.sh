#!/bin/bash
# One call of a GPU session (issue 19), as the device tool runs it from the repository root:
#   run(command="bash tests/gpu/session.sh", carry=[".whl"], timeout_s=540)
# Prepare here first: `echo /.whl/ >> .git/info/exclude` and `python3 -m pip download --no-deps
# --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux2014_x86_64
# -d .whl expecttest` (the GPU image lacks it; test_battery and test_module_db skip without it).
# Quiet timings first, then the whole suite in the background beside the verdict runs. pytest
# runs with -v, so that the failures' names come back even when the call's time runs out
# before pytest prints its summary (it did on 2026-11-26: 975 passed, 13 failed by 285 s).
export PYTHONUNBUFFERED=1
log() { echo "=== $(date +%T) $*"; }
{
log env
nvidia-smi -L
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name(), torch.get_num_threads())"
log install
python3 -m pip install -q --no-index --no-deps --no-build-isolation .whl/*.whl -e . 2>&1 | tail -3
log "the hostile tests that failed on 2026-11-26, serially, with their tracebacks"
timeout 120 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -x tests/test_hostile.py \
    -k "alone-jobs1-stdout-hangs_at_import or timeout_total" 2>&1 | tail -60
log "cost.py --on cuda"
timeout 100 python3 -W ignore benchmarks/cost.py --on cuda --repeat 2; echo rc=$?
log "start-up: imports of one layercheck run"
timeout 60 python3 -X importtime -m layercheck run layers/srelu.py --layout 24,24,20,128:SSCB --on cuda \
    --no-isolate 2>$OUT/importtime.log >/dev/null; sort -t'|' -k2 -n $OUT/importtime.log | tail -15
} 2>&1 | tee $OUT/part1.log
( OMP_NUM_THREADS=1 timeout 280 python3 -m pytest -v -p no:cacheprovider -p no:benchmark -n 15 -rfEs \
    > $OUT/suite.log 2>&1; echo "suite rc=$?" >> $OUT/suite.log ) &
SUITE=$!
{
log "triton layer and its buggy twin, --on cuda"
timeout 90 layercheck run tests/gpu/triton_leaky.py --layout 8,6,16:BCT --on cuda; echo rc=$?
timeout 90 layercheck run tests/gpu/triton_leaky_bug.py --layout 8,6,16:BCT --on cuda; echo rc=$?
log "bundled specs --on cuda, then the device check against the CPU"
timeout 120 layercheck run specs --on cuda; echo rc=$?
timeout 120 layercheck run specs --check device; echo rc=$?
log "float16/bfloat16 opt-in on cuda"
timeout 120 layercheck run layers/srelu.py layers/prelu.py --layout 4,6,5,8:SSCB --on cuda --enable autocast \
    --enable dtype:float16 --enable dtype:bfloat16; echo rc=$?
} > $OUT/part2.log 2>&1
wait $SUITE
grep -E "^\[gw.*(FAILED|ERROR)|passed|failed|suite rc" $OUT/suite.log | tail -40

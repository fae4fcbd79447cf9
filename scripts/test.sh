#!/bin/bash
# Install what is missing, build under ASan+UBSan, run the tests, then a
# short fuzz run when clang is present. This is what CI runs (.ci/run).
#   scripts/test.sh [extra ctest args, e.g. -L quick]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh --test
# Current PyTorch and the trainers' libraries from PyPI, built once per
# machine and reused (tests that need it skip when it cannot be built).
if [ -z "${LAUNCH_VENV:-}" ] && venv=$(bash scripts/venv.sh); then
  export LAUNCH_VENV=$venv
fi

BUILD=${BUILD_DIR:-build-test}
WERROR=OFF
if [ -n "${CI:-}" ]; then WERROR=ON; fi
# -DLAUNCH_CUTLASS=OFF: CUTLASS's GEMM (model/cuda/mlp_sm90.cu) runs only on
# a Hopper GPU (its tests: ctest -L gpu there); it would add minutes of nvcc
# to each sanitizer build where its headers happen to be.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DLAUNCH_ASAN=ON -DLAUNCH_UBSAN=ON -DLAUNCH_WERROR=$WERROR -DLAUNCH_CUTLASS=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)"

# Sanitizer builds are slower: give every test more time.
export LAUNCH_TEST_TIMEOUT_MULT=${LAUNCH_TEST_TIMEOUT_MULT:-2}
status=0
# The tests remove what they create: count the scratch and run directories
# in TMPDIR before and after (issue #27: a day of runs left 250 there).
scratch() { find "${TMPDIR:-/tmp}" -maxdepth 1 \( -name 'launch[-_]*' -o -name 'tmp*' \) \
              -newer "$BUILD/CMakeCache.txt" 2>/dev/null | sort; }
before=$(scratch)
# Two tests that compute at once, and beside them a third of those that
# mostly wait (tests/CMakeLists.txt, LAUNCH_WAITING_TESTS).
case $BUILD in /*) slots=$BUILD/cpu-slots.json ;; *) slots=$PWD/$BUILD/cpu-slots.json ;; esac
echo '{"version": {"major": 1, "minor": 0}, "local": [{"cpu": [{"id": "0", "slots": 2}]}]}' \
  >"$slots"
(cd "$BUILD" && ctest --output-on-failure --timeout 600 -j 3 --resource-spec-file "$slots" "$@") \
  || status=$?
left=$(comm -13 <(echo "$before") <(scratch) | sed '/^$/d')
if [ -n "$left" ]; then
  echo "the tests left these in ${TMPDIR:-/tmp} (a test must remove what it creates):"
  echo "$left"
  status=1
fi

# ThreadSanitizer (librdzv is used from many threads; the test server runs
# on a thread of its own): the C tests again, in a Release build. Not the
# agent's end-to-end tests: TSan delivers a signal to a busy loop only at its
# next intercepted call (test_hang's stack dumps never come) and slows
# train_gpt's ring past the chaos test's deadlines (test_ckpt_resume); nor
# test_events and test_standby, train_gpt jobs under the agent whose
# threads (the hosted server, the metrics port, the checkpoint agreement)
# run under TSan in test_store_threads, test_metrics, test_ckpt_readonly and
# test_torchrun_compat already: they took 154 s and 45 s of CI's 30 minutes.
if [ $status -eq 0 ] && [ -z "${SKIP_TSAN:-}" ]; then
  cmake -S . -B "$BUILD-tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLAUNCH_TSAN=ON -DLAUNCH_WERROR=$WERROR -DLAUNCH_CUTLASS=OFF >/dev/null
  cmake --build "$BUILD-tsan" -j "$(nproc)"
  supp=$PWD/tests/tsan.supp # libevent's epoll and a reused fd number (the file says why)
  (cd "$BUILD-tsan" && TSAN_OPTIONS="halt_on_error=1 suppressions=$supp" \
     ctest --output-on-failure --resource-spec-file "$slots" \
     --timeout 600 -j 3 -L 'quick|integration' \
     -E 'test_agent|test_cli|test_doctor|test_hang|test_ckpt_resume|test_events|test_standby') \
    || status=$?
fi

# 6 s a target, one target a core (38 targets: ~2 minutes on 2 cores): a
# smoke run over each decoder's corpus and a few new inputs; longer runs:
# FUZZ_SECONDS=300 bash scripts/fuzz-short.sh.
if [ $status -eq 0 ] && [ -x scripts/fuzz-short.sh ] && command -v clang >/dev/null; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-6} bash scripts/fuzz-short.sh || status=$?
fi
exit $status

#!/usr/bin/env bash
# On a GPU machine without a registry, after scripts/install_gpu_smoke.sh: the package installed from this
# checkout under /tmp/pkg, then the smoke's e2e suites as one pytest run each, from outside the checkout; logs,
# JUnit XML, results file and report under OUT_DIR, named SUITE-LABEL.
#
#   scripts/run_gpu_smoke.sh [--suite-timeout S] OUT_DIR LABEL [SUITE ...]   (suites: draft_model eagle speculators_mtp)
#
# --suite-timeout S interrupts a suite's pytest after S seconds as Ctrl-C does, so that it still prints the failures
# and tracebacks of the tests it finished (a command cut off from outside prints none of them).
# SPEC_DECODE_E2E_RUNNER=V1|V2 asks for one model runner (unset: the one vLLM picks per case); LABEL says which.
set -uo pipefail
suite_timeout=0
if [ "${1:-}" = "--suite-timeout" ]; then suite_timeout=${2:?--suite-timeout needs seconds}; shift 2; fi
out=${1:?usage: $0 OUT_DIR LABEL [SUITE ...]}
label=${2:?usage: $0 OUT_DIR LABEL [SUITE ...]}
shift 2
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(draft_model eagle speculators_mtp)
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
# the package as pip installs it (the machine's setuptools builds it; no registry needed)
rm -rf /tmp/pkg && python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/pkg "$root" \
  || { echo "run_gpu_smoke: the package did not install from $root" >&2; exit 2; }
export PYTHONPATH=/tmp/site:/tmp/pkg SPEC_DECODE_CI_MATRIX="$root/hardware_matrix.yaml" \
  SPEC_DECODE_E2E_CONFIG=cases.h200_smoke.yaml HF_HUB_OFFLINE=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
status=0
for suite in "${suites[@]}"; do
  name="$suite-$label"
  start=$(date +%s)
  limit=(); [ "$suite_timeout" -gt 0 ] && limit=(timeout -s INT -k 30 "$suite_timeout")
  (cd /tmp && "${limit[@]}" python3 -m pytest -v -m e2e -p spec_decode_ci.pytest_plugin --pyargs "spec_decode_ci.suites.e2e.test_$suite" \
    --junitxml="$out/junit-$name.xml" --spec-decode-results "$out/results-$name.json") > "$out/$name.log" 2>&1 \
    || status=$?
  python3 -m spec_decode_ci.report report "$out/results-$name.json" --output "$out/report-$name.md" >/dev/null 2>&1 || true
  echo "$name: $(tail -1 "$out/$name.log") ($(( $(date +%s) - start )) s)"
done
exit $status

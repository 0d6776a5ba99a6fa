#!/usr/bin/env bash
# The device call that runs `make gpu-check` on a GPU machine, as benchmarks/gpu_prepare.py
# prints it: installs the carried wheels (.whl, and DALI's parts in $STAGE when earlier
# calls staged them there), runs the plan with the image's own Python (torch is there; no
# venv, no make needed), writes the docs' benchmarks page, and packs the results and the
# log into $OUT. Exits with the plan's status. This is for the project's lent GPU windows
# (15 minutes of device time, calls of at most 600 s carrying at most 64 MiB): the procedure
# is in `python benchmarks/gpu_prepare.py --help`. On a GPU machine of your own, run
# `make gpu-check` instead.
set -uo pipefail
started=$SECONDS
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu-check-out}
stage=${STAGE:-/tmp/stage}  # where the staging calls copied DALI's parts
mkdir -p "$out"

wheels=(.whl/*.whl)
if compgen -G "$stage/*.part-*" >/dev/null; then  # DALI, cut into parts by the staging
    (cd "$stage" && for wheel in $(ls ./*.part-* | sed 's/\.part-.*//' | sort -u); do
        cat "$wheel".part-* >"$wheel" && rm "$wheel".part-*
    done)
fi
compgen -G "$stage/*.whl" >/dev/null && wheels+=("$stage"/*.whl)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${wheels[@]}" || exit
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1

# a device call runs 600 s at most (CALL_S when the session has less device time left):
# the plan gets what the install left, less 30 s to pack
budget=$((${CALL_S:-600} - 30 - (SECONDS - started)))
[ "$budget" -gt 540 ] && budget=540
python3 benchmarks/gpu_check.py --budget-s "$budget" 2>&1 | tee "$out/gpu-check.log"
status=${PIPESTATUS[0]}
python3 benchmarks/docs_page.py
tar czf "$out/gpu-results.tgz" benchmarks/results/gpu docs/benchmarks.md
exit "$status"

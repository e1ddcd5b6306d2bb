#!/usr/bin/env bash
# One night of examples/ci/nightly-gpu.yml on one machine: the `specdec` job of one matrix shard, then the `merge`
# job, each in a fresh workspace, with the workflow's run commands verbatim (the `run:` blocks below are copied
# from it; keep them identical). What GitHub Actions does around them is done by hand here:
#   actions/checkout           -> a fresh workspace holding examples/test_specdec.py and the night's profile file
#                                 (examples/sglang-h200.yaml; PROFILES points at it instead of examples/sglang-gpu.yaml)
#   actions/cache/restore|save -> $STATE/cache/results, copied in before and (merge job) out after
#   upload/download-artifact   -> the shard file copied to the merge workspace; every uploaded path kept in
#                                 $STATE/NIGHT/ (specdec/ and merge/ as the jobs left them)
#   "Install" and "Pre-download models": not run (the interpreter and models are already on the machine; `pytest`
#   and `python` on PATH are that interpreter, the plugin registered by its pytest11 entry point or PYTEST_PLUGINS)
#   inputs.save_as / vars.SPECDEC_BASELINE -> SAVE_AS / BASELINE
# Usage: [SAVE_AS=night-1 [SAVE_REPEATS=24]] [BASELINE=night-1] bash benchmarks/gpu/nightly_night.sh NIGHT PROFILE_FILE
#   NIGHT: a label (night-1, ...), also the run id of the artifacts' names. Env: STATE (default /tmp/nightly),
#   MATRIX_NAME (default h200), MATRIX_PROFILES (default baseline,eagle3). SAVE_REPEATS: the one departure from the
#   workflow, the saved night's repeats instead of its 8 (a paired baseline's level is its own run: its pairs bound
#   every later compare's interval).
# Prints each job's output, then "NIGHT specdec exit N, merge exit M"; writes $STATE/NIGHT/exits.
set -uo pipefail
NIGHT=$1; PROFILE_FILE=$(readlink -f "$2"); ST=${STATE:-/tmp/nightly}; REPO=$PWD
MATRIX_NAME=${MATRIX_NAME:-h200}; MATRIX_PROFILES=${MATRIX_PROFILES:-baseline,eagle3}
J=$ST/$NIGHT/specdec; M=$ST/$NIGHT/merge
rm -rf "${ST:?}/$NIGHT"; mkdir -p "$J/examples" "$M"
cp "$REPO/examples/test_specdec.py" "$J/examples/"; cp "$PROFILE_FILE" "$J/examples/sglang-h200.yaml"
if [ -d "$ST/cache/results" ]; then mkdir -p "$J/.specdec" "$M/.specdec"
  cp -r "$ST/cache/results" "$J/.specdec/results"; cp -r "$ST/cache/results" "$M/.specdec/results"; fi

echo "===== $NIGHT: job specdec ($MATRIX_NAME: $MATRIX_PROFILES) $(date -u +%T)"
(
  cd "$J" || exit 9
  export PROFILES=examples/sglang-h200.yaml ARTIFACTS=artifacts/$MATRIX_NAME BASELINE=${BASELINE:-} SAVE_AS=${SAVE_AS:-}
  export GITHUB_STEP_SUMMARY=$PWD/step-summary.md
  echo "--- step: Preflight"
  pytest --specdec-profiles="$PROFILES" --specdec-check --server-profile=$MATRIX_PROFILES
  echo "preflight exit $?"
  echo "--- step: Baseline and EAGLE-3, compared with the named or last good night"
  (
  set -eo pipefail  # as GitHub Actions runs a step: bash -eo pipefail
  # --- verbatim from examples/ci/nightly-gpu.yml (steps.run), ${{ matrix.X }} as $MATRIX_X ---
          mkdir -p "$ARTIFACTS" shard
          compare=()
          if ls .specdec/results/*.json >/dev/null 2>&1; then compare=(--specdec-compare${BASELINE:+=$BASELINE}); fi
          repeats=()
          if [ -n "$SAVE_AS" ]; then repeats=(--specdec-repeats=8); fi
  [ -n "${SAVE_REPEATS:-}" ] && [ -n "$SAVE_AS" ] && repeats=(--specdec-repeats="$SAVE_REPEATS")  # not in the workflow: SAVE_REPEATS
          # Your own specdec tests go here (examples/test_specdec.py is this repository's).
          # --specdec-report copies this shard's run file (only this session's results) for the merge job.
          pytest examples/test_specdec.py -m specdec \
            --specdec-profiles="$PROFILES" --server-profile=$MATRIX_PROFILES \
            "${compare[@]}" "${repeats[@]}" \
            --specdec-report="shard/$MATRIX_NAME.json" \
            --junitxml="$ARTIFACTS/junit.xml"
  # --- end verbatim ---
  )
  echo $? > "$ST/$NIGHT/specdec.exit"
)
rc=$(cat "$ST/$NIGHT/specdec.exit" 2>/dev/null || echo 9)
echo "$NIGHT specdec exit $rc"

echo "===== $NIGHT: job merge $(date -u +%T)"
mkdir -p "$M/shards/specdec-shard-$MATRIX_NAME-$NIGHT"
cp "$J"/shard/*.json "$M/shards/specdec-shard-$MATRIX_NAME-$NIGHT/" 2>/dev/null
(
  cd "$M" || exit 9
  export GITHUB_STEP_SUMMARY=$PWD/step-summary.md SAVE_AS=${SAVE_AS:-}
  (
  set -eo pipefail
  # --- verbatim from examples/ci/nightly-gpu.yml (merge job, "Merge shards into one run, summary and trend") ---
          mkdir -p merged
          python -m pytest_specdec merge shards --results-dir .specdec/results \
            --markdown merged/summary.md --trend merged/trend.png \
            --metric output_tok_s --metric accept_length --metric ttft_ms_p50
          if [ -n "$SAVE_AS" ]; then
            python -m pytest_specdec save latest "$SAVE_AS" --results-dir .specdec/results
          fi
  # --- end verbatim ---
  )
  echo $? > "$ST/$NIGHT/merge.exit"
)
mrc=$(cat "$ST/$NIGHT/merge.exit" 2>/dev/null || echo 9)
rm -rf "$ST/cache/results"; mkdir -p "$ST/cache"; cp -r "$M/.specdec/results" "$ST/cache/results" 2>/dev/null
echo "specdec $rc merge $mrc" > "$ST/$NIGHT/exits"
echo "$NIGHT specdec exit $rc, merge exit $mrc $(date -u +%T)"

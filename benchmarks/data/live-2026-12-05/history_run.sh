#!/bin/bash
# Live check of a gated nightly's history (2026-12-05, late): store 1 run, then 6 unchanged runs with
# --specdec-compare (latest), one server at a time, output_tok_s at 15%: the unchanged, undecided nights join the
# history of the next compares (ResultRecord.history_problem) until 4 stored runs measure the run-to-run spread.
# Prints one line a run: the compare's verdict, its tok/s row, and the history it took.
cd "$(dirname "$0")"
PY=${PY:-python}
D=$(mktemp -d)
sed "s/@ARGS@//; s/output_tok_s:5%/output_tok_s:15%/" specdec.yaml.in > specdec.yaml
one() {
  $PY -m pytest -p no:cacheprovider -p no:randomly --specdec-profiles specdec.yaml --server-profile=eagle3 \
    --specdec-dir "$D" test_live.py "$@" > last.log 2>&1; rc=$?
  echo "$1 rc=$rc load=$(cut -d' ' -f1 /proc/loadavg) | $(grep -oE 'compare (passed|FAILED|undecided) after [0-9]+ repeats' last.log | head -1) | $(grep -E '^output_tok_s ' last.log | head -1 | awk '{$1=$1;print}') | $(grep -oE '\([0-9]+ stored runs?, [0-9]+ repeats[^)]*\)|run-to-run: too few' last.log | head -1)"
}
one --specdec-save base
for i in 1 2 3 4 5 6; do one --specdec-compare; done
rm -rf "$D" specdec.yaml last.log

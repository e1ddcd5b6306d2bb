#!/bin/bash
# Live check of a compare against ONE stored run (a fresh-user trial's false alarm): store 1 run of 2 repeats, then
# 6 unchanged runs and 3 + 3 slowed ones with --specdec-compare, one server at a time. Prints one line a run.
cd "$(dirname "$0")"
PY=${PY:-python}
D=$(mktemp -d)
one() { # name extra_args pytest-args...
  name=$1; args=$2; shift 2
  sed "s/@ARGS@/$args/" specdec.yaml.in > specdec.yaml
  l0=$(cut -d' ' -f1 /proc/loadavg); t0=$SECONDS
  $PY -m pytest -p no:cacheprovider -p no:randomly --specdec-profiles specdec.yaml --server-profile=eagle3 --specdec-dir "$D" test_live.py "$@" > last.log 2>&1; rc=$?
  row=$(grep -E "^output_tok_s " last.log | head -1 | awk '{$1=$1; print}')
  failed=$(grep -E " REGRESSED" last.log | awk '{print $1}' | sort -u | tr '\n' ' ')
  echo "$name rc=$rc load=$l0 $((SECONDS-t0))s | $(grep -oE 'compare (passed|FAILED|undecided) after [0-9]+ repeats' last.log | head -1) | $row | REGRESSED: ${failed:-none}"
}
one store "" --specdec-save base
for i in 1 2 3 4 5 6; do one unchanged "" --specdec-compare base; done
for i in 1 2 3; do one verify+1.5ms '"--ref-fault-verify-delay-ms", "1.5"' --specdec-compare base; done
for i in 1 2 3; do one verify+3.5ms '"--ref-fault-verify-delay-ms", "3.5"' --specdec-compare base; done
rm -rf "$D" specdec.yaml last.log

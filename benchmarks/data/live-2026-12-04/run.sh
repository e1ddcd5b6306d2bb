#!/bin/bash
# live check of the compare gate: history 3 unchanged runs, then 5 runs per cell
cd "$(dirname "$0")"
PY=python
one() { # cell args compare
  sed "s/@ARGS@/$2/" specdec.yaml.in > specdec.yaml
  l0=$(cut -d' ' -f1 /proc/loadavg); t0=$SECONDS
  $PY -m pytest -p no:cacheprovider -p no:benchmark --server-profile=eagle3 test_live.py $3 > last.log 2>&1; rc=$?
  v=$(grep -oE "compare (passed|FAILED|undecided) after [0-9]+ repeats" last.log | head -1)
  row=$(grep -E "^output_tok_s / baseline|^output_tok_s " last.log | head -2 | awk '{print $NF" "$(NF-3)" "$(NF-2)}' | tr '\n' '|')
  echo "$1 rc=$rc load=$l0 $((SECONDS-t0))s [$v] $(grep -oE 'output_tok_s[^|]*(REGRESSED|undecided|ok|improved) \(x[0-9.]+' last.log | tr '\n' ';')"
  cp last.log logs/$1.$RANDOM.log
}
mkdir -p logs
# history stored already
for cell in "0%:" "10%:\"--ref-fault-verify-delay-ms\", \"1.5\"" "20%:\"--ref-fault-verify-delay-ms\", \"3.5\""; do
  name=${cell%%:*}; args=${cell#*:}
  for i in 1 2 3 4 5; do one "$name" "$args" "--specdec-compare"; done
done
echo done

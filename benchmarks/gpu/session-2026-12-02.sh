#!/usr/bin/env bash
# The device commands of issue 29's GPU session (results in benchmarks/gpu/results-2026-12-02/), one step each, run
# from the repo root on the lent H200 after the .gpu-sglang parts were staged; go.sh KEEP=1 left SGLang 0.5.17 with
# EAGLE-3 on port 30000 (step "check"). Every step writes under $OUT (at most 8 files come back).
#   check:  the ids SGLang's own get_dataset draws == the plugin's draw (digests), and issue 29.6: the plugin's
#           short phase after its /flush_cache (benchmarks/gpu/short-phase.yaml), /server_info after it
#   spec:   plugin vs bench_serving at c64 on the EAGLE-3 server of go.sh, 3 passes ABABAB; then stops that server
#   plain:  a server without speculation, plugin vs bench_serving at c64 (256 prompts) and c256 (1024), 3 passes each
set -uo pipefail
STEP=$1; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source .gpu-sglang/part-04/sgenv.sh  # carry .gpu-sglang/part-04 in every step's call (it is not there otherwise)
# bench_serving 0.5.17 imports datasets (for mmmu) at start; the image has none: a stub that fails only if called.
mkdir -p /tmp/site/datasets && [ -e /tmp/site/datasets/__init__.py ] ||
  echo 'def load_dataset(*a, **k): raise ImportError("datasets: a stub (not shipped)")' > /tmp/site/datasets/__init__.py
PY=/tmp/sgvenv/bin/python
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TVM_FFI_CACHE_DIR=/tmp/tvmcache PYTHONUNBUFFERED=1
T=pytest_specdec/refserver/assets/target
case $STEP in
check)
  for n in 256 1024; do
    $PY benchmarks/gpu/record_random_ids.py --tokenizer $T --digest --num-prompts $n --input-len 128 \
      --output-len 256 --range-ratio 1 --seed 42 2>/dev/null
  done > "$OUT/random-ids.digests.device.jsonl"
  $PY - "$OUT/random-ids.digests.device.jsonl" <<'PY'
import json, sys
want = {json.dumps(json.loads(l)["args"], sort_keys=True): json.loads(l)["sha256"] for l in open("tests/data/sglang/0.5.17/random-ids.digests.jsonl")}
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(d["origin"], d["args"], "same ids as recorded from the wheel's source:", want.get(json.dumps(d["args"], sort_keys=True)) == d["sha256"])
PY
  # -p no:benchmark: the image has pytest-xdist and pytest-benchmark, whose "benchmarks disabled because xdist is
  # active" warning the project's filterwarnings=error turned into an INTERNALERROR on 2026-12-02 (not run there).
  $PY -m pytest -p pytest_specdec.plugin -p no:benchmark benchmarks/gpu/test_short_phase.py -m specdec -p no:cacheprovider \
    --specdec-profiles=benchmarks/gpu/short-phase.yaml --server-profile=eagle3-short > "$OUT/plugin_short_phase.txt" 2>&1
  echo "pytest exit $?"; grep -E "passed|failed|cross-check|accept_len" "$OUT/plugin_short_phase.txt"
  curl -s http://127.0.0.1:30000/server_info > "$OUT/flush-short-phase.server_info.json"
  $PY -c "import json; d=json.load(open('$OUT/flush-short-phase.server_info.json')); print('internal_states', d.get('internal_states'))"
  ;;
spec)
  D=/tmp/cvb-spec
  AFTER_PASS="tar czf $OUT/eagle3_c64.tar.gz -C $D ." SPEC=1 URL=http://127.0.0.1:30000 PY=$PY \
    bash benchmarks/gpu/client_vs_bench_serving.sh $D "64:256" 3
  cp $D/table.txt "$OUT/table_eagle3.txt"; tar czf "$OUT/eagle3_c64.tar.gz" -C $D .
  kill -- -"$(cat /tmp/sglang.pid)" 2>/dev/null; sleep 3; kill -9 -- -"$(cat /tmp/sglang.pid)" 2>/dev/null
  cp /tmp/sglang.log "$OUT/server_eagle3.log"
  ;;
plain)
  [ -e /tmp/sglang.pid ] && { kill -- -"$(cat /tmp/sglang.pid)" 2>/dev/null; sleep 2; kill -9 -- -"$(cat /tmp/sglang.pid)" 2>/dev/null; }
  D=/tmp/cvb-plain
  AFTER_PASS="tar czf $OUT/plain.tar.gz -C $D ." PY=$PY bash benchmarks/gpu/client_vs_bench_serving.sh $D "64:256 256:1024" 3
  cp $D/table.txt "$OUT/table_plain.txt"; tar czf "$OUT/plain.tar.gz" -C $D .
  ;;
esac
uptime

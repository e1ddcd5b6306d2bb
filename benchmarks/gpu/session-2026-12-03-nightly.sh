#!/usr/bin/env bash
# The device commands of "the GPU nightly for real" (2026-12-03; results in benchmarks/gpu/results-2026-12-03/):
# real SGLang 0.5.17 with CUDA graphs on the lent H200. Stage the bundle first, one command per part, carrying that
# part (`bash .gpu-sglang/part-NN/stage.sh`; the parts of benchmarks/gpu/repack_parts.py fit beside the ~22 MiB
# checkout, fetch.sh's 42.6 MiB first part no longer does). Then, in the same warm machine:
#   nightly   install the bundle (sgl-deep-gemm 0.1.5.post1 is in it), then the nights of examples/ci/nightly-gpu.yml
#             (benchmarks/gpu/nightly_night.sh, the workflow's commands verbatim) on benchmarks/gpu/nightly-h200.yaml,
#             as many as fit in this command; the next `nightly` goes on where it stopped (/tmp/nightly/next):
#               night-1  workflow_dispatch with save_as=night-1: stores the baseline, the merge job names it
#               night-2  scheduled, vars.SPECDEC_BASELINE=night-1, nothing changed: must pass (exit 0)
#               night-3  the same again: must pass
#               night-4  the profile file's eagle3 on aux ids [0, 1, 2] (a changed draft config, -16% tok/s and
#                        accept length 2.80 -> 2.34 on graphs): must fail (exit 1), the aux-id difference first
#             Outputs: nightly-N.tar.gz (every night's workspaces: junit.xml, shard JSON, step summaries, merged
#             summary.md and trend.png, the results store, server logs), nightly-N.console.txt.
#   parity    the plugin's client (benchmarks/bench_vs_serving.py, --workers auto, its default) against
#             bench_serving on one EAGLE-3 server and one baseline server with graphs: c64 x 1024 and c256 x 1024
#             random-ids prompts of 128 -> 256 tokens, ABBA, both arms pausing 1 s after /flush_cache; then on the
#             baseline server one c64 pass each with --workers 1, 2, 4 (the client's size). parity_*.tar.gz.
#   bisect    benchmarks/gpu/session-2026-12-03-bisect.sh (BISECT_GRAPHS=1: with CUDA graphs): both causes
#             named in <= 8 launches. bisect.txt, profile.yaml, logs.tar.gz, leftovers.txt.
#   tails     benchmarks/gpu/serving_tails.sh: the plugin's open loop (request_rate 16, 512 requests, cap 64) beside
#             bench_serving on one EAGLE-3 server with graphs, identical prompts and arrivals, 2 passes (AB, BA).
#             tails.tar.gz.
#   tests2    tests/gpu part 2 (crash + sweep) with SPECDEC_SGLANG_GRAPHS=1. tests2.tar.gz.
#   gate      (2026-12-04, issue 43's live check) GATE_N = 1..4: the nightly workflow (nightly_night.sh) on eagle3
#             alone, its own cache in /tmp/gate: gate-1 stores g-base (8 repeats), gate-2 and gate-3 compare the
#             unchanged profile with g-base (must pass), gate-4 compares the same profile with CUDA_LAUNCH_BLOCKING=1
#             in its env (a real env of about -20% tok/s on graphs, accept length unchanged: must fail on tok/s).
#             gate-N.tar.gz, gate-N.console.txt.
#   pgate     (2026-12-05, late) the gate with eagle3 paired with baseline (min_speedup): p-base, 2 unchanged, CLB.
#             (2026-12-06) PGATE_SAVE: p-base's pairs (default 8), PGATE_MAX: the profile's max_repeats (default 16).
#             PGATE_PAIRING=interleaved: both servers alive (they fit at --mem-fraction-static 0.3), no restarts.
#             PGATE_TOL (2026-12-06, late): the profiles' tolerances, space separated (the ratio rows' own,
#             output_tok_s/baseline:15%, beside wide raw rows).
#   calibrate (2026-12-05) PROFILE: `python -m pytest_specdec calibrate` on the nightly profile, CAL_RUNS server
#             starts (default 4): the run-to-run sd on one machine, by the shipped command. calibrate-PROFILE.txt.
#   trace     (2026-12-04) the nightly profiles with `trace:` on both and eagle3 paired with baseline (min_speedup):
#             the cycle-cost line with the split SGLang's own profiler spans timed. trace.tar.gz (traces, pytest.txt).
# Never begin a device command with `git checkout`: the device's checkout restores the commit the session started at,
# not the working tree sent (2026-12-06: pgate 5 and 6 ran the unchanged profile).
# NPARTS (default 5): the bundle's parts, each staged by its stage.sh before this command; the last carries sgenv.sh.
# Each step stops starting work when too little of the command's LIMIT (default 570 s) is left.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$SECONDS; LIMIT=${LIMIT:-570}
left() { echo $((LIMIT - (SECONDS - T0))); }
SYSPY=/opt/torch/.venv/bin/python3
PY=/tmp/sgvenv/bin/python
A=$PWD/pytest_specdec/refserver/assets
BASE_FLAGS="--attention-backend triton --speculative-draft-attention-backend triton --sampling-backend pytorch
  --grammar-backend none --skip-server-warmup --disable-radix-cache --disable-flashinfer-autotune
  --mm-feature-transport cpu --dtype bfloat16"

install_bundle() {  # session-2026-12-02-graphs.sh's install and CUDA_HOME shim; sgenv.sh kept in /tmp
  # A fresh machine's /tmp can hold another session's /tmp/site, even one of the same day without xgrammar (seen
  # 2026-12-04): the marker names this bundle's wheels.
  MARK=/tmp/site/.installed-$(ls /tmp/wh/*.whl 2>/dev/null | xargs -n1 basename | sha256sum | cut -c1-12)
  if [ ! -e "$MARK" ] || [ ! -d /tmp/site/xgrammar ]; then
    for n in $(seq -f %02g 1 "${NPARTS:-5}"); do
      [ -e /tmp/wh/.got-part-$n ] || { echo "MISSING part-$n (machine went cold?)"; exit 3; }; done
    rm -rf /tmp/site /tmp/cccl
    $SYSPY -m pip install -q --no-index --no-deps --target /tmp/cccl /tmp/wh/nvidia_cuda_cccl-*.whl || exit 4
    $SYSPY -m pip install -q --no-index --no-deps --target /tmp/site $(ls /tmp/wh/*.whl | grep -v nvidia_cuda_cccl) || exit 4
    cp "$(ls .gpu-sglang/part-*/sgenv.sh | tail -1)" /tmp/sgenv.sh  # the last part carries fetch.sh's scripts
    touch "$MARK"
    echo "installed after $((SECONDS - T0)) s"
  fi
  NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc /usr/local/cuda-13*/bin/nvcc 2>/dev/null | head -1 || true)
  CH=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  if [ ! -e "$CH/lib64/libcudart.so" ] && [ ! -e /tmp/cudahome/lib64/libcudart.so ]; then
    mkdir -p /tmp/cudahome/lib64; ln -sfn "$CH/bin" /tmp/cudahome/bin; ln -sfn "$CH/include" /tmp/cudahome/include
    RT=$(ls "$CH"/lib64/libcudart.so.13* "$CH"/lib/libcudart.so.13* "$CH"/targets/x86_64-linux/lib/libcudart.so.13* 2>/dev/null | head -1)
    [ -z "$RT" ] && RT=$($SYSPY -c "import glob,nvidia,os;print((glob.glob(os.path.join(list(nvidia.__path__)[0],'cu13/lib/libcudart.so.13*'))+[''])[0])" 2>/dev/null)
    ln -sfn "$RT" /tmp/cudahome/lib64/libcudart.so
  fi
  # shellcheck disable=SC1091
  source /tmp/sgenv.sh; PY=/tmp/sgvenv/bin/python  # sgenv.sh sets PY to the image interpreter
  [ -x $PY ] || { echo "no $PY: install failed"; exit 4; }
  mkdir -p /tmp/site/datasets && [ -e /tmp/site/datasets/__init__.py ] ||
    echo 'def load_dataset(*a, **k): raise ImportError("datasets: a stub (not shipped)")' > /tmp/site/datasets/__init__.py
  export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TVM_FFI_CACHE_DIR=/tmp/tvmcache PYTHONUNBUFFERED=1
  export TOKENIZERS_PARALLELISM=false
  if [ ! -e /tmp/dg.ok ]; then
    $PY -c "import torch, deep_gemm; print('import deep_gemm OK', deep_gemm.__file__, 'sms', deep_gemm.get_num_sms())" 2>&1 | tail -2 | tee /tmp/deep_gemm.txt
    grep -q "import deep_gemm OK" /tmp/deep_gemm.txt && touch /tmp/dg.ok
  fi
}

launch() {  # NAME PORT FLAGS... : a server in its own session, wait for /health
  local name=$1 port=$2; shift 2
  # shellcheck disable=SC2068
  setsid $PY -m sglang.launch_server --model-path "$A/target" --host 127.0.0.1 --port "$port" $@ > /tmp/$name.log 2>&1 &
  echo $! > /tmp/$name.pid
  $PY - "$port" "$(cat /tmp/$name.pid)" 400 <<'PY'
import os, sys, time, urllib.request
port, pid, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]); t0 = time.time()
while time.time() - t0 < limit:
    try: os.kill(pid, 0)
    except OSError: sys.exit(f"server died after {time.time() - t0:.0f} s")
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3).status == 200:
            print(f"ready after {time.time() - t0:.0f} s"); sys.exit(0)
    except Exception: time.sleep(1)
sys.exit("not ready in time")
PY
}
stop() { local p; p=$(cat /tmp/$1.pid 2>/dev/null) || return; kill -- -"$p" 2>/dev/null; sleep 3; kill -9 -- -"$p" 2>/dev/null; sleep 1; }
leftovers() { ps -eo pid,stat,args | grep -E "sglang::|sglang.launch_server" | grep -v grep | cut -c1-200; }

night_setup() {  # the PATH of the workflow's Install step and the night's profile files (once per machine)
  ST=/tmp/nightly; mkdir -p $ST /tmp/nightbin
  printf '#!/bin/sh\nexec /tmp/sgvenv/bin/python -m pytest "$@"\n' > /tmp/nightbin/pytest
  printf '#!/bin/sh\nexec /tmp/sgvenv/bin/python "$@"\n' > /tmp/nightbin/python
  chmod +x /tmp/nightbin/*
  # As the workflow's "Install" step leaves it: pytest and python on PATH, the plugin registered (here by
  # PYTEST_PLUGINS, as the package is on PYTHONPATH rather than installed).
  export PATH=/tmp/nightbin:$PATH PYTEST_PLUGINS=pytest_specdec.plugin STATE=$ST
  [ -e $ST/profiles-aux012.yaml ] && return
  FLAGS="$BASE_FLAGS --mem-fraction-static 0.3 --cuda-graph-max-bs-decode 8"
  for aux in "" "aux_hidden_state_layer_ids: [0, 1, 2],"; do
    f=$ST/profiles.yaml; [ -n "$aux" ] && f=$ST/profiles-aux012.yaml
    REPO=$PWD SGLANG_PYTHON=$PY CUDA_HOME=${CUDA_HOME:-} NVCC_APPEND_FLAGS=${NVCC_APPEND_FLAGS:-} FLAGS=$FLAGS AUX_IDS=$aux \
      $PY - "$f" <<'PY'
import json, os, shlex, sys
from pathlib import Path
os.environ["SERVER_FLAGS"] = ", ".join(json.dumps(w) for w in shlex.split(os.environ["FLAGS"]))
Path(sys.argv[1]).write_text(os.path.expandvars(Path("benchmarks/gpu/nightly-h200.yaml").read_text()))
PY
  done
}

gate() {  # N: issue 43's live check (see the header)
  local n=$1 G=/tmp/gate; night_setup; mkdir -p $G
  [ -e $ST/profiles-clb.yaml ] || $PY - $ST/profiles.yaml $ST/profiles-clb.yaml <<'PY'
import sys
from pathlib import Path
import yaml
doc = yaml.safe_load(Path(sys.argv[1]).read_text())
eagle3 = doc["profiles"]["eagle3"]
eagle3["env"] = {**doc["profiles"]["baseline"]["env"], "CUDA_LAUNCH_BLOCKING": "1"}
Path(sys.argv[2]).write_text(yaml.safe_dump(doc, sort_keys=False))
PY
  case $n in
    1) SAVE_AS=g-base STATE=$G MATRIX_PROFILES=eagle3 bash benchmarks/gpu/nightly_night.sh gate-1 $ST/profiles.yaml ;;
    4) BASELINE=g-base STATE=$G MATRIX_PROFILES=eagle3 bash benchmarks/gpu/nightly_night.sh gate-4 $ST/profiles-clb.yaml ;;
    *) BASELINE=g-base STATE=$G MATRIX_PROFILES=eagle3 bash benchmarks/gpu/nightly_night.sh gate-$n $ST/profiles.yaml ;;
  esac > $G/gate-$n.console.txt 2>&1
  grep -E "^(=====|preflight exit|gate-[0-9] )|specdec compare|output_tok_s|accept_length|  draft|REGRESSED|undecided|FAILED|passed in|failed in|specdec server time|saved as|CUDA_LAUNCH" \
    $G/gate-$n.console.txt | cut -c1-260
  cp $G/gate-$n.console.txt "$OUT/"; tar czf "$OUT/gate-$n.tar.gz" -C $G gate-$n 2>/dev/null
}

pgate() {  # N (2026-12-05, late): the gate above with eagle3 paired with baseline (min_speedup, floor 0.5): the
  # compare judges its ratio row, whose server-to-server spread is 0-2% where raw tok/s spreads 12-15%. 1 stores
  # p-base (8 pairs), 2 and 3 compare the unchanged profile (must pass), 4 compares eagle3 with CUDA_LAUNCH_BLOCKING=1
  # in its env only (its paired baseline arm unchanged; about -20% tok/s: must fail). Own cache in /tmp/pgate.
  # 5 (2026-12-06): eagle3 with SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1 (the draft extend runs eagerly; a real
  # env left from debugging a capture; accept length unchanged; not measured yet: its 2026-12-06 night ran the
  # unchanged profile, see results-2026-12-06-c). 6: eagle3 with
  # --disable-overlap-schedule (the scheduler's non-overlapped loop, scheduler.py:414; its size measured by this night).
  local n=$1 G=/tmp/pgate; night_setup; mkdir -p $G
  [ -e $ST/profiles-paired-clb.yaml ] || PGATE_MAX=${PGATE_MAX:-16} $PY - $ST/profiles.yaml $ST <<'PY'
import sys
from pathlib import Path
import yaml
doc = yaml.safe_load(Path(sys.argv[1]).read_text())
doc["profiles"]["eagle3"]["thresholds"]["min_speedup"] = {"vs": "baseline", "ratio": 0.5}
doc["profiles"]["baseline"]["workload"]["max_repeats"] = int(__import__("os").environ["PGATE_MAX"])
if __import__("os").environ.get("PGATE_PAIRING"):
    doc["profiles"]["eagle3"]["pairing"] = __import__("os").environ["PGATE_PAIRING"]
if __import__("os").environ.get("PGATE_TOL"):  # the ratio rows' own tolerances beside the raw rows' (2026-12-06)
    for name in ("baseline", "eagle3"):
        doc["profiles"][name]["tolerances"] = __import__("os").environ["PGATE_TOL"].split()
Path(sys.argv[2], "profiles-paired.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
eagle3 = doc["profiles"]["eagle3"]
eagle3["env"] = {**doc["profiles"]["baseline"]["env"], "CUDA_LAUNCH_BLOCKING": "1"}
Path(sys.argv[2], "profiles-paired-clb.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
eagle3["env"] = {**doc["profiles"]["baseline"]["env"], "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH": "1"}
Path(sys.argv[2], "profiles-paired-dxg.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
eagle3["env"] = dict(doc["profiles"]["baseline"]["env"])
eagle3["extra_args"] = [*doc["profiles"]["baseline"]["extra_args"], "--disable-overlap-schedule"]
Path(sys.argv[2], "profiles-paired-noov.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
PY
  case $n in
    1) SAVE_AS=p-base SAVE_REPEATS=${PGATE_SAVE:-8} STATE=$G MATRIX_PROFILES=eagle3 bash benchmarks/gpu/nightly_night.sh pgate-1 $ST/profiles-paired.yaml ;;
    4) BASELINE=p-base STATE=$G MATRIX_PROFILES=eagle3 bash benchmarks/gpu/nightly_night.sh pgate-4 $ST/profiles-paired-clb.yaml ;;
    5|15) BASELINE=p-base STATE=$G MATRIX_PROFILES=eagle3 bash benchmarks/gpu/nightly_night.sh pgate-$n $ST/profiles-paired-dxg.yaml ;;
    6) BASELINE=p-base STATE=$G MATRIX_PROFILES=eagle3 bash benchmarks/gpu/nightly_night.sh pgate-6 $ST/profiles-paired-noov.yaml ;;
    *) BASELINE=p-base STATE=$G MATRIX_PROFILES=eagle3 bash benchmarks/gpu/nightly_night.sh pgate-$n $ST/profiles-paired.yaml ;;
  esac > $G/pgate-$n.console.txt 2>&1
  grep -E "^(=====|preflight exit|pgate-[0-9] )|specdec compare|output_tok_s|accept_length|  draft|REGRESSED|undecided|FAILED|passed in|failed in|specdec server time|saved as|CUDA_LAUNCH|DRAFT_EXTEND|speedup" \
    $G/pgate-$n.console.txt | cut -c1-260
  cp $G/pgate-$n.console.txt "$OUT/"; tar czf "$OUT/pgate-$n.tar.gz" -C $G pgate-$n 2>/dev/null
}

calibrate() {  # PROFILE (2026-12-05): the shipped `calibrate` command on the nightly profile, CAL_RUNS (default 4)
  # server starts of it: the within-run and run-to-run sd a compare takes before 4 stored runs measure their own
  # (eagle3 has no min_speedup there: unpaired). calibrate-PROFILE.txt, PROFILE.json (the noise file), its logs.
  local p=$1 C=/tmp/cal; night_setup; mkdir -p $C
  timeout $(( $(left) - 15 )) $PY -m pytest_specdec calibrate $ST/profiles.yaml --profile "$p" --runs "${CAL_RUNS:-4}" \
    --noise-out $C/"$p".json --log-dir $C/logs > $C/calibrate-"$p".txt 2>&1
  echo "calibrate exit $?"; cut -c1-260 $C/calibrate-"$p".txt
  cp $C/calibrate-"$p".txt "$OUT/"; cp $C/"$p".json "$OUT/" 2>/dev/null; tar czf "$OUT/calibrate-$p-logs.tar.gz" -C $C logs
}

noop() { :; }  # TASKS=noop:-:1: install the bundle and stop (the next command gets the whole LIMIT)

night() {  # N: one night (nightly_night.sh), its console kept in /tmp/nightly/night-N.console.txt
  local n=$1; night_setup
  case $n in
    1) SAVE_AS=night-1 bash benchmarks/gpu/nightly_night.sh night-1 $ST/profiles.yaml ;;
    4) BASELINE=night-1 bash benchmarks/gpu/nightly_night.sh night-4 $ST/profiles-aux012.yaml ;;
    *) BASELINE=night-1 bash benchmarks/gpu/nightly_night.sh night-$n $ST/profiles.yaml ;;
  esac > $ST/night-$n.console.txt 2>&1
  grep -E "^(=====|---|preflight exit|night-[0-9] )|specdec compare|fingerprint|  draft|REGRESSED|undecided \(|FAILED|passed in|failed in|^test_|specdec server time|saved as|merged [0-9]|wrote " \
    $ST/night-$n.console.txt | cut -c1-260
  tar czf "$OUT/night-$n.tar.gz" -C $ST night-$n night-$n.console.txt 2>/dev/null
}

parity() {  # ARM (eagle3|baseline)
  local arm=$1
    if [ $arm = eagle3 ]; then
      flags="$BASE_FLAGS --mem-fraction-static 0.3 --cuda-graph-max-bs 64 --speculative-algorithm EAGLE3
        --speculative-draft-model-path $A/draft-eagle3 --speculative-num-steps 3 --speculative-eagle-topk 1
        --speculative-num-draft-tokens 4"; spec=1
    else flags="$BASE_FLAGS --mem-fraction-static 0.3 --cuda-graph-max-bs 256"; spec=""; fi
    echo "== $arm server with graphs, $(left) s left"
    launch p-$arm 30000 $flags || { grep -E "Error|Traceback" -A5 /tmp/p-$arm.log | tail -30; stop p-$arm; return; }
    curl -s http://127.0.0.1:30000/server_info > /tmp/par-$arm.server_info.json
    # 256 prompts at c64 last 3-5 s a pass on graphs (2026-12-04): start and drain dominated; 1024 last ~17 s.
    D=/tmp/par-$arm; loads="64:1024"; [ "$(left)" -gt 330 ] && loads="64:1024 256:1024"
    loads=${LOADS:-$loads}  # e.g. LOADS="256:1024" PASSES=8 (2026-12-04)
    echo "loads: $loads"
    URL=http://127.0.0.1:30000 SPEC=$spec ORDER=abba FLUSH_PAUSE_S=1 PY=$PY \
      bash benchmarks/gpu/client_vs_bench_serving.sh $D "$loads" "${PASSES:-4}"
    cp /tmp/par-$arm.server_info.json $D/
    if [ $arm = baseline ] && [ -z "${LOADS:-}" ] && [ "$(left)" -gt 60 ]; then
      for w in 1 2 4; do
        FLUSH_PAUSE_S=1 $PY benchmarks/gpu/pause_after_flush.py --base-url http://127.0.0.1:30000 --concurrency 64 \
          --num-prompts 1024 --input-len 128 --output-len 256 --range-ratio 1 --seed 42 --warmup-requests 1 \
          --flush-cache --workers $w > $D/workers_c64_w$w.txt 2>&1
        echo "workers $w: $(grep -E 'Output token throughput|Client worker|lag p99|WARNING' $D/workers_c64_w$w.txt | tr -s ' ' | tr '\n' ' ')"
      done
    fi
    stop p-$arm; gzip -c /tmp/p-$arm.log > $D/server.log.gz
    tar czf "$OUT/parity_$arm.tar.gz" -C $D .
}

workers() {  # CONC (2026-12-04): on one baseline server, bench_serving beside the plugin's client at 8, 1 and 2
  # workers, alternated (B 8 1 2 B 2 1 8 B): is the plugin's c256 shortfall on the baseline (0.85 of bench_serving's
  # tok/s, TTFT p50 0.38x, ITL p50 1.5x) the split over worker processes?
  local c=$1 D=/tmp/workers-$1; rm -rf $D; mkdir -p $D
  launch w-base 30000 "$BASE_FLAGS --mem-fraction-static 0.3 --cuda-graph-max-bs 256" || { stop w-base; return; }
  local i=0
  for arm in bench 8 1 2 bench 2 1 8 bench; do
    i=$((i + 1)); [ "$(left)" -lt 40 ] && break
    if [ $arm = bench ]; then
      $PY -m sglang.bench_serving --backend sglang --base-url http://127.0.0.1:30000 --dataset-name random-ids \
        --tokenize-prompt --random-input-len 128 --random-output-len 256 --random-range-ratio 1 --num-prompts 1024 \
        --seed 42 --max-concurrency $c --warmup-requests 1 --flush-cache --disable-tqdm --tokenizer "$A/target" \
        --model "$A/target" > $D/$i-bench.txt 2>&1
      f=$D/$i-bench.txt
    else
      FLUSH_PAUSE_S=1 $PY benchmarks/gpu/pause_after_flush.py --base-url http://127.0.0.1:30000 --concurrency $c \
        --num-prompts 1024 --input-len 128 --output-len 256 --range-ratio 1 --seed 42 --warmup-requests 1 \
        --flush-cache --workers $arm > $D/$i-w$arm.txt 2>&1
      f=$D/$i-w$arm.txt
    fi
    echo "$i $arm: $(grep -E '^(Output token throughput|Median TTFT|Median ITL|Client CPU|Client event-loop lag p99)' $f | tr -s ' ' | tr '\n' ' ')"
  done
  stop w-base; gzip -c /tmp/w-base.log > $D/server.log.gz
  tar czf "$OUT/workers_c$c.tar.gz" -C $D .
}

bisect() {
  LIMIT=$(left) OUT=$OUT GRAPHS=${BISECT_GRAPHS:-0} bash benchmarks/gpu/session-2026-12-03-bisect.sh 2>&1 | tail -70 | cut -c1-300
}

tails() {
  PY=$PY RATE=16 N=512 CONC=64 timeout $(( $(left) - 10 )) bash benchmarks/gpu/serving_tails.sh /tmp/tails 2 2>&1 | tail -20
  tar czf "$OUT/tails.tar.gz" -C /tmp/tails .
}

trace() {  # the verify share measured (issue 47.4): eagle3 paired with baseline, both traced by SGLang's profiler
  local D=/tmp/trace; rm -rf $D; mkdir -p $D/traces
  REPO=$PWD SGLANG_PYTHON=$PY CUDA_HOME=${CUDA_HOME:-} NVCC_APPEND_FLAGS=${NVCC_APPEND_FLAGS:-} \
    FLAGS="$BASE_FLAGS --mem-fraction-static 0.3 --cuda-graph-max-bs-decode 8" AUX_IDS="" $PY - $D <<'PY'
import json, os, shlex, sys
from pathlib import Path
import yaml
os.environ["SERVER_FLAGS"] = ", ".join(json.dumps(w) for w in shlex.split(os.environ["FLAGS"]))
d = Path(sys.argv[1])
doc = yaml.safe_load(os.path.expandvars(Path("benchmarks/gpu/nightly-h200.yaml").read_text()))
for name, prof in doc["profiles"].items():
    prof["trace"] = {"dir": str(d / "traces" / name), "requests": 4, "activities": ["CPU", "GPU"]}
doc["profiles"]["baseline"]["workload"]["max_repeats"] = 8
doc["profiles"]["eagle3"]["thresholds"]["min_speedup"] = {"vs": "baseline", "ratio": 0.5}
(d / "profiles.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
PY
  cp examples/test_specdec.py $D/
  (cd $D && timeout $(( $(left) - 15 )) $PY -m pytest -p pytest_specdec.plugin -p no:cacheprovider test_specdec.py \
    --specdec-profiles=profiles.yaml --server-profile=baseline,eagle3 -k test_profile_thresholds -rA 2>&1 |
    tee pytest.txt | grep -E "passed|failed|cycle|trace|speedup|tok/s|accept_len" | cut -c1-400)
  ls -la $D/traces/* | head; echo "SGLang left: $(leftovers | wc -l)"
  tar czf "$OUT/trace.tar.gz" -C $D .
}

tests2() {
  export SPECDEC_SGLANG_PYTHON=$PY SPECDEC_SGLANG_GRAPHS=1 SPECDEC_GPU_OUT=/tmp/gpuout-tests2
  mkdir -p $SPECDEC_GPU_OUT
  timeout $(( $(left) - 15 )) $PY -m pytest -p pytest_specdec.plugin -p no:cacheprovider -m gpu \
    tests/gpu/test_part2_crash_and_sweep.py -v -rA 2>&1 | tee "$SPECDEC_GPU_OUT/pytest_part2.txt" |
    grep -E "PASSED|FAILED|ERROR|passed|failed|tok/s|accept|num_steps" | cut -c1-250
  tar czf "$OUT/tests2.tar.gz" -C $SPECDEC_GPU_OUT .
  echo "SGLang left: $(leftovers | wc -l)"
}

install_bundle

# The queue: tasks in priority order, each with an estimate (s); a task runs when its estimate fits in what is left.
# Nights run in order (a night that does not fit holds the later ones back); the others fill the gaps. The queue
# and the estimates live in /tmp/queue, so the next command goes on where this one stopped.
Q=/tmp/queue; [ -e $Q ] || printf '%s\n' "night 1 330" "night 2 230" "night 3 230" "night 4 230" \
  "parity eagle3 200" "parity baseline 230" "tests2 - 300" > $Q
[ -n "${TASKS:-}" ] && printf '%s\n' $TASKS | sed 's/:/ /g' > $Q   # e.g. TASKS="parity:baseline:230"
while :; do
  ran=0; nights_blocked=0; mapfile -t lines < $Q
  for line in "${lines[@]}"; do
    read -r task arg est <<< "$line"
    case $task in night|gate|pgate) [ $nights_blocked = 1 ] && continue ;; esac
    if [ "$est" -lt "$(left)" ]; then
      echo "######## $task $arg (estimate $est s), $(left) s left"; t=$SECONDS
      case $task in tests2|trace) $task < /dev/null ;; *) $task "$arg" < /dev/null ;; esac
      d=$((SECONDS - t)); echo "######## $task $arg took $d s; SGLang processes left: $(leftovers | wc -l)"
      grep -v "^$task $arg " $Q > $Q.new; mv $Q.new $Q
      [ "$task" = night ] && sed -i "s/^night \([0-9]\) [0-9]*/night \1 $((d + 15))/" $Q
      ran=1; break
    fi
    case $task in night|gate|pgate) nights_blocked=1 ;; esac
  done
  [ $ran = 1 ] || break
done
echo "left in the queue: $(tr '\n' ';' < $Q)"
uptime
echo "step took $((SECONDS - T0)) s"

#!/usr/bin/env bash
# The device commands of issue 38 (results in benchmarks/gpu/results-2026-12-02-graphs/): real SGLang 0.5.17 with
# CUDA graphs on the lent H200, EAGLE-3 included. Run from the repo root after the bundle's parts 01-03 were staged
# (`bash .gpu-sglang/part-NN/stage.sh`, one command each, carry that part); every step's call carries
# .gpu-sglang/part-04 and .whl (sgl_deep_gemm-0.1.5.post1, see below). The first step stages part-04 itself.
#   eagle3:   install the bundle + deep_gemm, EAGLE-3 with graphs (the launch that crashed before), parity with
#             bench_serving on it (ABBA, 1 s pause after /flush_cache on both arms), then the same without speculation
#   tests1:   tests/gpu part 1 (and part 3 if time is left) with SPECDEC_SGLANG_GRAPHS=1
#   tests2:   tests/gpu part 2 with SPECDEC_SGLANG_GRAPHS=1
#   spread:   5 instances with graphs and 5 without, measured at c1 and c64 (benchmarks/gpu/spread.py)
#   capture:  benchmarks/gpu/capture_sglang.py with graphs (eagle3, baseline) -> tests/data
# Why deep_gemm: SGLang 0.5.17's EAGLEWorkerV2 (the only EAGLE worker left: speculative/spec_info.py:286-298,
# spec_registry.py:37) imports layers/attention/dsa_backend.py inside _capture_cuda_graphs on every CUDA build
# (speculative/eagle_worker_v2.py:414-420), whatever the attention backend; dsa_backend.py:89-90 does
# `if is_cuda(): import deep_gemm`. Only --disable-cuda-graph (decode backend "disabled", eagle_worker_v2.py:344)
# returns before it. sglang 0.5.17 pins sgl-deep-gemm==0.1.5.post1 (its METADATA), a cu13 build on tvm-ffi 0.1.11.
# The wheel, here (py3-none, 4.8 MB; git-ignore .whl first):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d .whl sgl-deep-gemm==0.1.5.post1
# Measured 2026-12-02: it imports as is (no LD_LIBRARY_PATH, no SGLANG_ENABLE_JIT_DEEPGEMM); the stand-in branch of
# deep_gemm_setup never ran. Servers here use --cuda-graph-max-bs (0.5.17's deprecated alias of
# --cuda-graph-max-bs-decode, same field), as recorded in tests/data/sglang/0.5.17-graphs.
set -uo pipefail
STEP=$1; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$SECONDS; LIMIT=${LIMIT:-570}
left() { echo $((LIMIT - (SECONDS - T0))); }
P4=.gpu-sglang/part-04
SYSPY=/opt/torch/.venv/bin/python3
PY=/tmp/sgvenv/bin/python
A=$PWD/pytest_specdec/refserver/assets
BASE_FLAGS="--attention-backend triton --sampling-backend pytorch --grammar-backend none --skip-server-warmup
  --disable-radix-cache --disable-flashinfer-autotune --mm-feature-transport cpu --dtype bfloat16"
GRAPHS="$BASE_FLAGS --cuda-graph-max-bs 64"
NOGRAPHS="$BASE_FLAGS --disable-cuda-graph"
SPEC="--speculative-algorithm EAGLE3 --speculative-draft-model-path $A/draft-eagle3 --speculative-num-steps 3
  --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --speculative-draft-attention-backend triton"

install_bundle() {  # go.sh's install and CUDA_HOME shim, without its launch
  if [ ! -e /tmp/site/.installed ]; then
    for n in 01 02 03 04; do [ -e /tmp/wh/.got-part-$n ] || { echo "MISSING part-$n (machine went cold?)"; exit 3; }; done
    rm -rf /tmp/site /tmp/cccl
    $SYSPY -m pip install -q --no-index --no-deps --target /tmp/cccl /tmp/wh/nvidia_cuda_cccl-*.whl || exit 4
    $SYSPY -m pip install -q --no-index --no-deps --target /tmp/site $(ls /tmp/wh/*.whl | grep -v nvidia_cuda_cccl) || exit 4
    touch /tmp/site/.installed
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
  source $P4/sgenv.sh; PY=/tmp/sgvenv/bin/python  # sgenv.sh sets PY to the image interpreter
  mkdir -p /tmp/site/datasets && [ -e /tmp/site/datasets/__init__.py ] ||
    echo 'def load_dataset(*a, **k): raise ImportError("datasets: a stub (not shipped)")' > /tmp/site/datasets/__init__.py
  export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TVM_FFI_CACHE_DIR=/tmp/tvmcache PYTHONUNBUFFERED=1
  export TOKENIZERS_PARALLELISM=false
}

deep_gemm_setup() {  # the pinned sgl-deep-gemm; writes /tmp/dg.env (sourced by every later step)
  [ -e /tmp/dg.env ] && { source /tmp/dg.env; echo "deep_gemm: $(cat /tmp/dg.env | tr '\n' ' ')"; return; }
  $SYSPY -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/sgl_deep_gemm-0.1.5.post1-*.whl || exit 4
  echo "export DG_MODE=real" > /tmp/dg.env
  r=$($PY -c "import torch, deep_gemm; print('import deep_gemm OK', deep_gemm.__file__, 'sms', deep_gemm.get_num_sms())" 2>&1 | tail -3)
  echo "$r" | tee -a "$OUT/deep_gemm.txt"
  if ! echo "$r" | grep -q "import deep_gemm OK"; then
    echo "== dlopen diagnosis" | tee -a "$OUT/deep_gemm.txt"
    $PY -c "import torch, tvm_ffi, ctypes; ctypes.CDLL('/tmp/site/deep_gemm/_C.so')" 2>&1 | tail -2 | tee -a "$OUT/deep_gemm.txt"
    ldd /tmp/site/deep_gemm/_C.so | grep "not found" | tee -a "$OUT/deep_gemm.txt"
    LP=""
    for lib in $(ldd /tmp/site/deep_gemm/_C.so | awk '/not found/{print $1}'); do
      f=$(find /opt/torch/.venv /tmp/site /usr/local/cuda* -name "$lib" 2>/dev/null | head -1)
      [ -n "$f" ] && LP="$LP:$(dirname "$f")"
    done
    echo "export LD_LIBRARY_PATH=${LP#:}:${LD_LIBRARY_PATH:-}" >> /tmp/dg.env; source /tmp/dg.env
    r=$($PY -c "import torch, deep_gemm; print('import deep_gemm OK with LD_LIBRARY_PATH', deep_gemm.get_num_sms())" 2>&1 | tail -3)
    echo "$r" | tee -a "$OUT/deep_gemm.txt"
    if ! echo "$r" | grep -q "import deep_gemm OK"; then
      echo "== deep_gemm does not load: a stand-in module and SGLANG_ENABLE_JIT_DEEPGEMM=0" | tee -a "$OUT/deep_gemm.txt"
      rm -rf /tmp/site/deep_gemm; mkdir -p /tmp/site/deep_gemm
      echo '"""Stand-in: sglang dsa_backend.py:90 imports it; never called with SGLANG_ENABLE_JIT_DEEPGEMM=0."""' > /tmp/site/deep_gemm/__init__.py
      printf 'export DG_MODE=stub\nexport SGLANG_ENABLE_JIT_DEEPGEMM=0\n' > /tmp/dg.env
    fi
  fi
  source /tmp/dg.env
}

launch() {  # NAME FLAGS... : start a server on PORT (default 30000) in its own session, wait for /health
  local name=$1; shift; local port=${PORT:-30000}
  # shellcheck disable=SC2068
  setsid $PY -m sglang.launch_server --model-path "$A/target" --host 127.0.0.1 --port "$port" $@ > /tmp/$name.log 2>&1 &
  echo $! > /tmp/$name.pid
  $PY - "$port" "$(cat /tmp/$name.pid)" "${WAIT_S:-400}" <<'PY'
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
  local rc=$?
  grep -E "Capture .*(begin|end)|Load weight end|KV Cache is allocated|max_running_requests|Error|error:|Traceback" /tmp/$name.log | grep -v -i "warn" | cut -c1-300 | tail -20
  return $rc
}
stop() { local p; p=$(cat /tmp/$1.pid 2>/dev/null) || return; kill -- -"$p" 2>/dev/null; sleep 3; kill -9 -- -"$p" 2>/dev/null; sleep 1; }

install_bundle
case $STEP in
eagle3)
  deep_gemm_setup
  nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
  ok=0
  for try in 1 2 3; do
    echo "== EAGLE-3 with CUDA graphs, try $try (DG_MODE=$DG_MODE, SGLANG_ENABLE_JIT_DEEPGEMM=${SGLANG_ENABLE_JIT_DEEPGEMM:-default}) $(left) s left"
    if launch eagle3g $GRAPHS --mem-fraction-static 0.3 $SPEC; then ok=1; break; fi
    grep -B2 -A12 "Traceback" /tmp/eagle3g.log | grep -v -i warn | tail -40 > "$OUT/eagle3g.crash$try.txt"; cat "$OUT/eagle3g.crash$try.txt"
    stop eagle3g; gzip -c /tmp/eagle3g.log > "$OUT/eagle3g.try$try.log.gz"
    if [ "$DG_MODE" = real ] && [ -z "${SGLANG_ENABLE_JIT_DEEPGEMM:-}" ]; then echo "export SGLANG_ENABLE_JIT_DEEPGEMM=0" >> /tmp/dg.env
    else rm -rf /tmp/site/deep_gemm; mkdir -p /tmp/site/deep_gemm; echo '"""Stand-in."""' > /tmp/site/deep_gemm/__init__.py
      printf 'export DG_MODE=stub\nexport SGLANG_ENABLE_JIT_DEEPGEMM=0\n' > /tmp/dg.env; fi
    source /tmp/dg.env
  done
  echo "dg.env: $(tr "\n" " " < /tmp/dg.env)"
  [ $ok = 1 ] || { gzip -c /tmp/eagle3g.log > "$OUT/eagle3g.log.gz"; exit 5; }
  curl -s http://127.0.0.1:30000/server_info > "$OUT/eagle3g.server_info.json"
  D=/tmp/par-eagle3
  URL=http://127.0.0.1:30000 SPEC=1 ORDER=abba FLUSH_PAUSE_S=1 PY=$PY \
    bash benchmarks/gpu/client_vs_bench_serving.sh $D "64:256" 4
  tar czf "$OUT/parity_eagle3.tar.gz" -C $D .
  stop eagle3g; gzip -c /tmp/eagle3g.log > "$OUT/eagle3g.log.gz"
  if [ "$(left)" -gt 200 ]; then
    echo "== baseline with CUDA graphs $(left) s left"
    launch baseg $GRAPHS --mem-fraction-static 0.3 || exit 6
    D=/tmp/par-base
    URL=http://127.0.0.1:30000 ORDER=abba FLUSH_PAUSE_S=1 PY=$PY bash benchmarks/gpu/client_vs_bench_serving.sh $D "64:256" 4
    tar czf "$OUT/parity_baseline.tar.gz" -C $D .
    stop baseg; gzip -c /tmp/baseg.log > "$OUT/baseg.log.gz"
  fi
  ;;
tests1|tests2|tests3)
  deep_gemm_setup
  export SPECDEC_SGLANG_PYTHON=$PY SPECDEC_SGLANG_GRAPHS=1 SPECDEC_GPU_OUT=/tmp/gpuout-$STEP
  mkdir -p $SPECDEC_GPU_OUT
  case $STEP in tests1) mods="tests/gpu/test_part1_verdicts.py ${MORE:-}";; tests2) mods="tests/gpu/test_part2_crash_and_sweep.py ${MORE:-}";; *) mods=tests/gpu/test_part3_openai_apis.py;; esac
  for m in $mods; do
    echo "== $m $(left) s left"
    timeout $(( $(left) - 15 )) $PY -m pytest -p pytest_specdec.plugin -p no:benchmark -p no:cacheprovider -m gpu "$m" -v -rA 2>&1 | tee "$SPECDEC_GPU_OUT/pytest_$(basename $m .py).txt" | grep -E "PASSED|FAILED|ERROR|passed|failed|tok/s|accept|cycle|speedup" | cut -c1-250
  done
  tar czf "$OUT/$STEP.tar.gz" -C $SPECDEC_GPU_OUT .
  ;;
spread)
  deep_gemm_setup
  $PY benchmarks/gpu/spread.py --python $PY --out /tmp/spread --instances "${N:-5}" --graph-flags "$GRAPHS" \
    --nograph-flags "$NOGRAPHS" --mem-fraction "${MEMF:-0.12}" --budget-s $(( $(left) - 20 )) ${SPREAD_ARGS:-}
  tar czf "$OUT/spread.tar.gz" -C /tmp/spread .; cp /tmp/spread/table.txt "$OUT/spread_table.txt" 2>/dev/null
  ;;
capture)
  deep_gemm_setup
  timeout $(( $(left) - 10 )) $PY benchmarks/gpu/capture_sglang.py --python $PY --out /tmp/capture --only "${ONLY:-eagle3,baseline}" \
    --server-flags "$GRAPHS --mem-fraction-static 0.3 --enable-metrics --decode-log-interval 10 --speculative-draft-attention-backend triton"
  tar czf "$OUT/capture.tar.gz" -C /tmp/capture .
  ;;
esac
uptime
echo "step $STEP took $((SECONDS - T0)) s"

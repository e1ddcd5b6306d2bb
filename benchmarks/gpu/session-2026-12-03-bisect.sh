#!/usr/bin/env bash
# The device command of "bisect at GPU cost" (2026-12-03): `python -m pytest_specdec bisect` on real SGLang 0.5.17
# on the lent H200, the case that took 11 launches and 520 s unfinished before: GOOD = EAGLE-3 on its trained aux
# ids, BAD = aux ids [0, 1, 2] + CUDA_LAUNCH_BLOCKING=1 + two harmless variables (benchmarks/gpu/bisect-h200.yaml).
# Goal: both causes named in <= 8 launches within this one 10-minute command. Expected: 4 launches (GOOD, BAD, the
# aux ids alone, which decide the exact symptom in one phase and then serve as the paired arm, and
# CUDA_LAUNCH_BLOCKING on top of them), ~5 min at ~45-60 s a launch.
#
# Run from the repo root on a warm machine after the bundle's parts were staged, as for
# session-2026-12-02-graphs.sh (`bash .gpu-sglang/part-NN/stage.sh`, one command each, carry that part); this
# command carries the last part (P4, default .gpu-sglang/part-04):
#   bash benchmarks/gpu/session-2026-12-03-bisect.sh            # without CUDA graphs, as the case was measured
#   GRAPHS=1 bash benchmarks/gpu/session-2026-12-03-bisect.sh   # with graphs (needs deep_gemm: the bundle's
#                                                               # sgl-deep-gemm, installed by the nightly script)
# MAX_PAIRS (default 24): the bisect's --max-pairs (without graphs a 10% tok/s part needed ~70 pairs a probe).
# Outputs under $OUT (default /tmp/out): bisect.txt (the CLI's whole output: the differences, the estimate, a line
# per launch and per probe, the report), profile.yaml (the filled-in profile file), logs.tar.gz (the server logs),
# leftovers.txt (SGLang processes after the bisect: must be empty). The bisect runs under `timeout` (SIGTERM 30 s
# before the command's limit): stopped, it still prints what it knows and stops its servers (exit 3).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$SECONDS; LIMIT=${LIMIT:-570}
left() { echo $((LIMIT - (SECONDS - T0))); }
P4=${P4:-.gpu-sglang/part-04}
SYSPY=/opt/torch/.venv/bin/python3
PY=/tmp/sgvenv/bin/python

install_bundle() {  # session-2026-12-02-graphs.sh's install and CUDA_HOME shim, unchanged
  # The nightly script's install (marker .installed-<wheels>, sgenv.sh kept in /tmp) counts too.
  if ! ls /tmp/site/.installed* >/dev/null 2>&1 || [ ! -d /tmp/site/xgrammar ]; then
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
  if [ -e /tmp/sgenv.sh ]; then source /tmp/sgenv.sh; else source $P4/sgenv.sh; fi; PY=/tmp/sgvenv/bin/python  # sgenv.sh sets PY to the image interpreter
  mkdir -p /tmp/site/datasets && [ -e /tmp/site/datasets/__init__.py ] ||
    echo 'def load_dataset(*a, **k): raise ImportError("datasets: a stub (not shipped)")' > /tmp/site/datasets/__init__.py
  export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TVM_FFI_CACHE_DIR=/tmp/tvmcache PYTHONUNBUFFERED=1
  export TOKENIZERS_PARALLELISM=false
}

install_bundle
# The flags of tests/gpu/conftest.py (a bare wheel install), the servers' memory share as there.
FLAGS="--attention-backend triton --speculative-draft-attention-backend triton --sampling-backend pytorch
  --grammar-backend none --skip-server-warmup --disable-radix-cache --disable-flashinfer-autotune
  --mm-feature-transport cpu --dtype bfloat16 --mem-fraction-static 0.3"
if [ "${GRAPHS:-0}" = 1 ]; then
  # shellcheck disable=SC1091
  # sgl-deep-gemm from the bundle (the nightly script's install checks it: /tmp/dg.ok); the older stand-in's env.
  if [ -e /tmp/dg.env ]; then source /tmp/dg.env
  elif ! $PY -c "import deep_gemm" 2>/dev/null; then echo "GRAPHS=1 needs deep_gemm (sgl-deep-gemm in the bundle)"; exit 6; fi
  FLAGS="$FLAGS --cuda-graph-max-bs-decode 8"
else
  FLAGS="$FLAGS --disable-cuda-graph"
fi
W=/tmp/bisect-h200; rm -rf $W; mkdir -p $W
REPO=$PWD SGLANG_PYTHON=$PY CUDA_HOME=${CUDA_HOME:-} NVCC_APPEND_FLAGS=${NVCC_APPEND_FLAGS:-} FLAGS=$FLAGS \
  $PY - "$W/specdec.yaml" <<'PY'
import json, os, shlex, sys
from pathlib import Path
os.environ["SERVER_FLAGS"] = ", ".join(json.dumps(w) for w in shlex.split(os.environ["FLAGS"]))
text = os.path.expandvars(Path("benchmarks/gpu/bisect-h200.yaml").read_text())
if "SGLANG_ENABLE_JIT_DEEPGEMM" in os.environ:  # the deep_gemm stand-in (graphs script): the server needs it too
    text = text.replace('      TOKENIZERS_PARALLELISM: "false"\n', '      TOKENIZERS_PARALLELISM: "false"\n'
                        f'      SGLANG_ENABLE_JIT_DEEPGEMM: "{os.environ["SGLANG_ENABLE_JIT_DEEPGEMM"]}"\n', 1)
Path(sys.argv[1]).write_text(text)
PY
cp $W/specdec.yaml "$OUT/profile.yaml"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
echo "== bisect, $(left) s left"
timeout -s TERM $(( $(left) - 30 )) $PY -m pytest_specdec bisect $W/specdec.yaml --good good --bad bad \
  --log-dir $W/logs --max-launches 8 --max-pairs ${MAX_PAIRS:-24} 2>&1 | tee "$OUT/bisect.txt"
echo "bisect exit ${PIPESTATUS[0]}"
sleep 2
ps -eo pid,stat,args | grep -E "sglang::|sglang.launch_server" | grep -v grep > "$OUT/leftovers.txt"
echo "SGLang processes left: $(wc -l < "$OUT/leftovers.txt") (must be 0)"; cat "$OUT/leftovers.txt"
ls $W/servers 2>/dev/null | sed 's/^/server record left: /'
tar czf "$OUT/logs.tar.gz" -C $W logs 2>/dev/null
uptime
echo "took $((SECONDS - T0)) s"

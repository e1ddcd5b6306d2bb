#!/usr/bin/env bash
# The plugin's measuring client against SGLang's own bench_serving on one real SGLang server without speculation,
# interleaved (issue 13.5). On a GPU machine with SGLang (the lent H200: after `source .gpu-sglang/part-NN/sgenv.sh`):
#   PY=/tmp/sgvenv/bin/python bash benchmarks/gpu/client_vs_bench_serving.sh OUTDIR [CONCURRENCIES] [REPEATS]
# Prints one table: output tok/s, TTFT p50, ITL p50 of both clients per concurrency and repeat, and their ratios.
set -uo pipefail
PY=${PY:-python3}; OUT=${1:-/tmp/cvb}; CONCS=${2:-"64 256"}; REPS=${3:-2}; PORT=${PORT:-31100}
mkdir -p "$OUT"; rm -f "$OUT"/*.txt
A=$PWD/pytest_specdec/refserver/assets
FLAGS=${SPECDEC_SGLANG_FLAGS-"--attention-backend triton --sampling-backend pytorch --grammar-backend none
  --disable-cuda-graph --skip-server-warmup --disable-radix-cache --disable-flashinfer-autotune
  --mm-feature-transport cpu --dtype bfloat16 --mem-fraction-static 0.3"}
# shellcheck disable=SC2086
setsid "$PY" -m sglang.launch_server --model-path "$A/target" --host 127.0.0.1 --port "$PORT" $FLAGS \
  > "$OUT/server.log" 2>&1 &
SP=$!
trap 'kill -- -$SP 2>/dev/null; sleep 3; kill -9 -- -$SP 2>/dev/null' EXIT
"$PY" - "$PORT" "$SP" <<'PY' || exit 3
import os, sys, time, urllib.request
port, pid = int(sys.argv[1]), int(sys.argv[2]); t0 = time.time()
while time.time() - t0 < 400:
    try: os.kill(pid, 0)
    except OSError: sys.exit("server died: see server.log")
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3).status == 200:
            print(f"ready after {time.time() - t0:.0f} s"); sys.exit(0)
    except Exception: time.sleep(2)
sys.exit("server not ready in 400 s")
PY
URL=http://127.0.0.1:$PORT
bench() {  # $1 concurrency, $2 prompts, $3 file
  "$PY" -m sglang.bench_serving --backend sglang --base-url "$URL" --dataset-name random-ids \
    --random-input-len 128 --random-output-len 256 --random-range-ratio 1 --num-prompts "$2" \
    --max-concurrency "$1" --tokenizer "$A/target" --model "$A/target" > "$3" 2>&1
}
ours() {
  PYTHONPATH=$PWD:${PYTHONPATH:-} "$PY" benchmarks/bench_vs_serving.py --base-url "$URL" --concurrency "$1" \
    --num-prompts "$2" --input-len 128 --output-len "${OUTLEN:-256}" > "$3" 2>&1
}
for c in $CONCS; do
  n=$((c * 2)); [ "$n" -lt 256 ] && n=256; n=${NPROMPTS:-$n}
  for r in $(seq 1 "$REPS"); do  # alternate which client goes first
    if [ $((r % 2)) = 1 ]; then bench "$c" "$n" "$OUT/bench_c${c}_r$r.txt"; ours "$c" "$n" "$OUT/ours_c${c}_r$r.txt"
    else ours "$c" "$n" "$OUT/ours_c${c}_r$r.txt"; bench "$c" "$n" "$OUT/bench_c${c}_r$r.txt"; fi
  done
done
"$PY" - "$OUT" <<'PY'
import glob, os, re, sys
out = sys.argv[1]
def grab(path, label):
    m = re.search(re.escape(label) + r"\s+([\d.]+)", open(path).read())
    return float(m.group(1)) if m else float("nan")
keys = [("Output token throughput (tok/s):", "tok/s"), ("Median TTFT (ms):", "TTFT p50 ms"), ("Median ITL (ms):", "ITL p50 ms")]
print(f"{'conc':>5} {'rep':>3} " + " ".join(f"{'bench ' + k:>16} {'ours ' + k:>16} {'ratio':>6}" for _, k in keys))
for path in sorted(glob.glob(os.path.join(out, "bench_c*_r*.txt")), key=lambda p: [int(x) for x in re.findall(r"\d+", os.path.basename(p))]):
    c, r = re.findall(r"\d+", os.path.basename(path))
    ours = os.path.join(out, f"ours_c{c}_r{r}.txt")
    cells = []
    for label, _ in keys:
        b, o = grab(path, label), grab(ours, label)
        cells.append(f"{b:>16.2f} {o:>16.2f} {o / b if b else float('nan'):>6.3f}")
    print(f"{c:>5} {r:>3} " + " ".join(cells))
PY

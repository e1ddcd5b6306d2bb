#!/usr/bin/env bash
# The plugin's measuring client against SGLang's own bench_serving on one real SGLang server, on identical prompts
# (issue 29): bench_serving `--dataset-name random-ids --tokenize-prompt` and the plugin's `prompts: random` draw the
# same token ids (benchmarks/bench_vs_serving.py, workload.random_prompts), both flush the cache after their warmup
# request and both send input_ids to /generate. Passes alternate strictly, bench_serving then the plugin (ABABAB).
# On a GPU machine with SGLang (the lent H200: after `source .gpu-sglang/part-NN/sgenv.sh`):
#   PY=/tmp/sgvenv/bin/python bash benchmarks/gpu/client_vs_bench_serving.sh OUTDIR "CONC:PROMPTS ..." [PASSES]
#   e.g. "64:256 256:1024" 3.  SPEC=1: the server runs EAGLE-3 (3 steps, topk 1, 4 draft tokens) and the accept
#   lengths are compared too.  URL=http://...: measure a server already running (nothing launched or stopped).
# ORDER=abba: passes alternate bench,plugin then plugin,bench (ABBA; issue 38: with ABABAB the plugin was second
#   every time). FLUSH_PAUSE_S=1: the plugin's arm sleeps that long after its /flush_cache, as bench_serving does
#   (benchmarks/gpu/pause_after_flush.py; unset: the plugin starts at once, as before).
# Prints one table per load (per pass, then the medians and the plugin/bench ratios) and writes it to OUTDIR/table.txt.
set -uo pipefail
PY=${PY:-python3}; OUT=${1:-/tmp/cvb}; LOADS=${2:-"64:256 256:1024"}; PASSES=${3:-3}; PORT=${PORT:-31100}
IN=${INPUT_LEN:-128}; OUTLEN=${OUTPUT_LEN:-256}; SEED=${SEED:-42}
mkdir -p "$OUT"; rm -f "$OUT"/*.txt
A=$PWD/pytest_specdec/refserver/assets
FLAGS=${SPECDEC_SGLANG_FLAGS-"--attention-backend triton --sampling-backend pytorch --grammar-backend none
  --disable-cuda-graph --skip-server-warmup --disable-radix-cache --disable-flashinfer-autotune
  --mm-feature-transport cpu --dtype bfloat16 --mem-fraction-static 0.3"}
SPECFLAGS=""; OURSPEC=""
if [ -n "${SPEC:-}" ]; then
  SPECFLAGS="--speculative-algorithm EAGLE3 --speculative-draft-model-path $A/draft-eagle3 --speculative-num-steps 3
    --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --speculative-draft-attention-backend triton"
  OURSPEC="--speculative --num-steps 3"
fi
if [ -z "${URL:-}" ]; then
  # shellcheck disable=SC2086
  setsid "$PY" -m sglang.launch_server --model-path "$A/target" --host 127.0.0.1 --port "$PORT" $FLAGS $SPECFLAGS \
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
fi
bench() {  # $1 concurrency, $2 prompts, $3 file
  "$PY" -m sglang.bench_serving --backend sglang --base-url "$URL" --dataset-name random-ids --tokenize-prompt \
    --random-input-len "$IN" --random-output-len "$OUTLEN" --random-range-ratio 1 --num-prompts "$2" --seed "$SEED" \
    --max-concurrency "$1" --warmup-requests 1 --flush-cache --disable-tqdm \
    --tokenizer "$A/target" --model "$A/target" > "$3" 2>&1
}
ours() {
  # shellcheck disable=SC2086
  local script=benchmarks/bench_vs_serving.py
  [ -n "${FLUSH_PAUSE_S:-}" ] && script=benchmarks/gpu/pause_after_flush.py
  PYTHONPATH=$PWD:${PYTHONPATH:-} "$PY" $script --base-url "$URL" --concurrency "$1" \
    --num-prompts "$2" --input-len "$IN" --output-len "$OUTLEN" --range-ratio 1 --seed "$SEED" \
    --warmup-requests 1 --flush-cache $OURSPEC > "$3" 2>&1
}
for load in $LOADS; do
  c=${load%%:*}; n=${load##*:}
  for r in $(seq 1 "$PASSES"); do
    if [ "${ORDER:-abab}" = abba ] && [ $((r % 2)) = 0 ]; then
      ours "$c" "$n" "$OUT/ours_c${c}_r$r.txt"; bench "$c" "$n" "$OUT/bench_c${c}_r$r.txt"; first=plugin
    else
      bench "$c" "$n" "$OUT/bench_c${c}_r$r.txt"; ours "$c" "$n" "$OUT/ours_c${c}_r$r.txt"; first=bench
    fi
    echo "c$c pass $r done, $first first ($(date +%T))"
    [ -n "${AFTER_PASS:-}" ] && eval "$AFTER_PASS"
  done
done
"$PY" - "$OUT" "$LOADS" <<'PY' | tee "$OUT/table.txt"
import os, re, statistics, sys
out, loads = sys.argv[1], sys.argv[2].split()
def grab(path, label):
    try: text = open(path).read()
    except OSError: return float("nan")
    m = re.search(r"^" + re.escape(label) + r"\s+([\d.]+)", text, re.M)
    return float(m.group(1)) if m else float("nan")
keys = [("Output token throughput (tok/s):", "tok/s", "{:.0f}"), ("Median TTFT (ms):", "TTFT p50 ms", "{:.1f}"),
        ("Median ITL (ms):", "ITL p50 ms", "{:.2f}"), ("Accept length:", "accept len", "{:.2f}")]
for load in loads:
    c = load.split(":")[0]
    rows = []
    for r in range(1, 100):
        b, o = os.path.join(out, f"bench_c{c}_r{r}.txt"), os.path.join(out, f"ours_c{c}_r{r}.txt")
        if not os.path.exists(b): break
        rows.append([(grab(b, k), grab(o, k)) for k, _, _ in keys] + [(float("nan"), grab(o, "Accept length (server_info):"))])
    print(f"c{c}, {load.split(':')[1]} prompts: " + " | ".join(f"bench {n} / plugin {n}" for _, n, _ in keys) + " | plugin's server_info accept len")
    for i, row in enumerate(rows, 1):
        print(f"  pass {i}: " + " | ".join(f"{fmt.format(b)} / {fmt.format(o)}" for (b, o), (_, _, fmt) in zip(row, keys)) + f" | {row[-1][1]:.2f}")
    if rows:
        med = [(statistics.median(r[j][0] for r in rows), statistics.median(r[j][1] for r in rows)) for j in range(len(keys))]
        print("  median: " + " | ".join(f"{fmt.format(b)} / {fmt.format(o)} ({o / b:.3f})" for (b, o), (_, _, fmt) in zip(med, keys)))
PY

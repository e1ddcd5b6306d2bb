#!/usr/bin/env bash
# p99 TTFT and goodput of an open loop: the plugin (workload.request_rate) beside SGLang's own bench_serving
# (--request-rate), on one real SGLang EAGLE-3 server, identical prompts and identical arrival times. Both draw the
# random-ids prompts and then the Poisson gaps from one numpy generator seeded with SEED (bench_serving:
# np.random.seed(args.seed) -> sample_random_requests -> get_request's np.random.exponential(1/rate); the plugin:
# workload.random_prompts and workload.workload_arrivals, checked equal in tests/test_workload.py), both send
# input_ids to /generate, both cap the requests in flight at CONC, both flush the cache after their warmup request.
# Passes alternate bench,plugin then plugin,bench (ABBA).
# On a GPU machine with SGLang (the lent H200, after the bundle is installed as session-2026-12-02-graphs.sh does;
# its `install_bundle` and `deep_gemm_setup` set PY and the environment):
#   PY=/tmp/sgvenv/bin/python bash benchmarks/gpu/serving_tails.sh OUTDIR [PASSES]
# Settings (environment): RATE (req/s, default 16), N (requests, 512), CONC (cap, 64), SEED (42), INPUT_LEN (128),
#   OUTPUT_LEN (256), SLO_TTFT_MS (300), SLO_TPOT_MS (25); GRAPHS=0 for --disable-cuda-graph; URL=http://... to
#   measure a server already running (nothing launched or stopped; it must run EAGLE-3 3/1/4 on the bundled draft).
# bench_serving 0.5.17 has no --goodput: its goodput is computed from its --output-details (ttfts, itls,
#   output_lens, errors) with vLLM's definition (TTFT <= SLO and TPOT = sum(itl) / (output_len - 1) <= SLO, TPOT 0
#   for one token); 0.5.23 also prints its own "Request goodput" line, shown when present.
# Prints one table (per pass, then medians: TTFT p50/p99 ms, ITL p99 ms, goodput req/s, output tok/s for both) and
# writes it to OUTDIR/table.txt; the plugin's per-request lines go to OUTDIR/plugin_rN.jsonl.
set -uo pipefail
PY=${PY:-python3}; OUT=${1:-/tmp/tails}; PASSES=${2:-4}; PORT=${PORT:-31200}
RATE=${RATE:-16}; N=${N:-512}; CONC=${CONC:-64}; SEED=${SEED:-42}; IN=${INPUT_LEN:-128}; OUTLEN=${OUTPUT_LEN:-256}
SLO_TTFT_MS=${SLO_TTFT_MS:-300}; SLO_TPOT_MS=${SLO_TPOT_MS:-25}
mkdir -p "$OUT"; rm -f "$OUT"/*.txt "$OUT"/*.jsonl "$OUT"/*.json
A=$PWD/pytest_specdec/refserver/assets
FLAGS="--attention-backend triton --sampling-backend pytorch --grammar-backend none --skip-server-warmup
  --disable-radix-cache --disable-flashinfer-autotune --mm-feature-transport cpu --dtype bfloat16
  --mem-fraction-static 0.3"
if [ "${GRAPHS:-1}" = 0 ]; then FLAGS="$FLAGS --disable-cuda-graph"; else FLAGS="$FLAGS --cuda-graph-max-bs $CONC"; fi
SPEC="--speculative-algorithm EAGLE3 --speculative-draft-model-path $A/draft-eagle3 --speculative-num-steps 3
  --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --speculative-draft-attention-backend triton"
if [ -z "${URL:-}" ]; then
  # shellcheck disable=SC2086
  setsid "$PY" -m sglang.launch_server --model-path "$A/target" --host 127.0.0.1 --port "$PORT" \
    --max-running-requests "$CONC" $FLAGS $SPEC > "$OUT/server.log" 2>&1 &
  SP=$!
  trap 'kill -- -$SP 2>/dev/null; sleep 3; kill -9 -- -$SP 2>/dev/null' EXIT
  "$PY" - "$PORT" "$SP" <<'PY' || exit 3
import os, sys, time, urllib.request
port, pid = int(sys.argv[1]), int(sys.argv[2]); t0 = time.time()
while time.time() - t0 < 600:
    try: os.kill(pid, 0)
    except OSError: sys.exit("server died: see server.log")
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3).status == 200:
            print(f"ready after {time.time() - t0:.0f} s"); sys.exit(0)
    except Exception: time.sleep(2)
sys.exit("server not ready in 600 s")
PY
  URL=http://127.0.0.1:$PORT
fi
VOCAB=$("$PY" -c "from transformers import AutoTokenizer as T; print(T.from_pretrained('$A/target').vocab_size)")
cat > "$OUT/specdec.yaml" <<YAML
profiles:
  tails:
    server: sglang
    url: $URL
    model_path: $A/target
    speculative: {algorithm: EAGLE3, draft_model_path: $A/draft-eagle3, num_steps: 3, eagle_topk: 1,
                  num_draft_tokens: 4}
    workload:
      prompts: random
      random: {input_len: $IN, range_ratio: 1.0, seed: $SEED, vocab_size: $VOCAB}
      max_new_tokens: $OUTLEN
      num_requests: $N
      concurrency: $CONC
      request_rate: $RATE
      burstiness: 1.0
      warmup_requests: 1
      repeats: 1
      slo: {ttft_ms: $SLO_TTFT_MS, tpot_ms: $SLO_TPOT_MS}
YAML
bench() {  # $1 output file (JSONL with details), $2 the printed report
  local goodput=()
  "$PY" -m sglang.bench_serving --help 2>/dev/null | grep -q -- "--goodput" &&
    goodput=(--goodput "ttft:$SLO_TTFT_MS" "tpot:$SLO_TPOT_MS")
  "$PY" -m sglang.bench_serving --backend sglang --base-url "$URL" --dataset-name random-ids --tokenize-prompt \
    --random-input-len "$IN" --random-output-len "$OUTLEN" --random-range-ratio 1 --num-prompts "$N" \
    --seed "$SEED" --request-rate "$RATE" --max-concurrency "$CONC" --warmup-requests 1 --flush-cache \
    --disable-tqdm --tokenizer "$A/target" --model "$A/target" --output-file "$1" --output-details \
    "${goodput[@]}" > "$2" 2>&1
}
ours() {  # $1 per-request JSONL, $2 the printed figures
  PYTHONPATH=$PWD:${PYTHONPATH:-} "$PY" - "$OUT/specdec.yaml" "$1" > "$2" 2>&1 <<'PY'
import json, sys
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.measure import runner
from pytest_specdec.report.request_log import RequestLog
profile = load_profiles(sys.argv[1]).get("tails")
server = runner.attach(profile, profile.url, budget_s=120)
RequestLog.start(__import__("pathlib").Path(sys.argv[2]))
m = runner.measure(server)
RequestLog(__import__("pathlib").Path(sys.argv[2]))(m)
r = m.metrics
print(json.dumps({"ttft_p50": r.ttft_ms_p50, "ttft_p99": r.ttft_ms_p99, "itl_p99": r.itl_ms_p99,
                  "goodput": r.goodput_per_s, "tok_s": r.output_tok_s, "duration_s": r.duration_s,
                  "ok": r.num_ok, "tails_ttft_p99": r.tails.get("ttft_ms_p99"),
                  "tails_goodput": r.tails.get("goodput_per_s")}))
PY
}
for r in $(seq 1 "$PASSES"); do
  if [ $((r % 2)) = 0 ]; then
    ours "$OUT/plugin_r$r.jsonl" "$OUT/ours_r$r.txt"; bench "$OUT/bench_r$r.jsonl" "$OUT/bench_r$r.txt"; first=plugin
  else
    bench "$OUT/bench_r$r.jsonl" "$OUT/bench_r$r.txt"; ours "$OUT/plugin_r$r.jsonl" "$OUT/ours_r$r.txt"; first=bench
  fi
  echo "pass $r done, $first first ($(date +%T))"
done
"$PY" - "$OUT" "$PASSES" "$SLO_TTFT_MS" "$SLO_TPOT_MS" <<'PY' | tee "$OUT/table.txt"
import json, os, re, statistics, sys
out, passes, slo_ttft, slo_tpot = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
def bench(r):
    try: d = json.loads(open(os.path.join(out, f"bench_r{r}.jsonl")).read().splitlines()[-1])
    except (OSError, IndexError, ValueError): return None
    good = 0
    for ttft, itl, n, err in zip(d["ttfts"], d["itls"], d["output_lens"], d["errors"]):
        if err or not n: continue
        tpot = sum(itl) / (n - 1) if n > 1 else 0.0  # latency - ttft = the summed gaps in bench_serving's client
        good += ttft * 1000 <= slo_ttft and tpot * 1000 <= slo_tpot
    dur = d["duration"]
    text = open(os.path.join(out, f"bench_r{r}.txt")).read()
    own = re.search(r"^Request goodput \(req/s\):\s+([\d.]+)", text, re.M)
    return {"ttft_p50": d["median_ttft_ms"], "ttft_p99": d["p99_ttft_ms"], "itl_p99": d["p99_itl_ms"],
            "goodput": good / dur, "goodput_own": float(own.group(1)) if own else None,
            "tok_s": d["output_throughput"], "ok": d["completed"]}
def ours(r):
    try: return json.loads(open(os.path.join(out, f"ours_r{r}.txt")).read().strip().splitlines()[-1])
    except (OSError, IndexError, ValueError): return None
keys = [("ttft_p50", "TTFT p50 ms", "{:.1f}"), ("ttft_p99", "TTFT p99 ms", "{:.1f}"), ("itl_p99", "ITL p99 ms", "{:.2f}"),
        ("goodput", "goodput req/s", "{:.2f}"), ("tok_s", "tok/s", "{:.0f}"), ("ok", "ok", "{:d}")]
print("bench / plugin: " + " | ".join(n for _, n, _ in keys))
rows = []
for r in range(1, passes + 1):
    b, o = bench(r), ours(r)
    if b is None or o is None:
        print(f"  pass {r}: missing ({'bench' if b is None else 'plugin'})"); continue
    rows.append((b, o))
    extra = f" | bench's own goodput {b['goodput_own']:.2f}" if b.get("goodput_own") is not None else ""
    print(f"  pass {r}: " + " | ".join(f"{f.format(b[k])} / {f.format(o[k])}" for k, _, f in keys) + extra)
    t = o.get("tails_ttft_p99") or {}
    print(f"          plugin p99 TTFT 99% bounds {t.get('low')} to {t.get('high')} ms (n {t.get('n')})")
if rows:
    def med(side, k):
        v = statistics.median(row[side][k] for row in rows)
        return int(v) if k == "ok" else v
    print("  median: " + " | ".join(f"{f.format(med(0, k))} / {f.format(med(1, k))}" for k, _, f in keys))
PY

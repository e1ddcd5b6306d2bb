"""Repack the SGLang wheel bundle (``fetch.sh``'s ``.gpu-sglang/part-NN``) into parts that fit beside the checkout.

The lent machine takes 64 MiB a command: the tracked files (about 22 MiB on 2026-12-03) plus the part carried.
fetch.sh's first part is one 42.6 MiB wheel (xgrammar), which no longer fits; this script pools every part's
wheels, cuts wheels larger than ``--max-mib`` into ``NAME.chunk-NN`` pieces, and fills new parts first-fit,
largest first, each at most ``--max-mib`` MiB. Each part gets ``SHA256SUMS`` and a ``stage.sh`` that checks them,
copies the part into ``/tmp/wh`` and, once every chunk of a wheel is there, joins them into the wheel; the last
part also gets fetch.sh's scripts (go.sh, sgenv.sh, smoke.py, probe_http.py).

    python3 benchmarks/gpu/repack_parts.py .gpu-sglang --max-mib 37

Prints one line per part (its size in MiB) and ``NPARTS=N``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
from pathlib import Path

STAGE = r"""#!/bin/bash
# Run on the GPU box from the repo root: bash .gpu-sglang/part-NN/stage.sh (repack_parts.py's parts).
set -euo pipefail
P=$(cd "$(dirname "$0")" && pwd); N=$(basename "$P")
cd "$P" && sha256sum -c --quiet SHA256SUMS && echo "$N: checksums OK"
mkdir -p /tmp/wh /tmp/wh-chunks
for f in "$P"/*.whl; do [ -e "$f" ] && cp "$f" /tmp/wh/; done
for f in "$P"/*.chunk-* "$P"/*.total; do [ -e "$f" ] && cp "$f" /tmp/wh-chunks/; done
for t in /tmp/wh-chunks/*.total; do
  [ -e "$t" ] || continue; w=$(basename "$t" .total); n=$(cat "$t")
  if [ "$(ls /tmp/wh-chunks/"$w".chunk-* 2>/dev/null | wc -l)" = "$n" ] && [ ! -e "/tmp/wh/$w" ]; then
    cat /tmp/wh-chunks/"$w".chunk-* > "/tmp/wh/$w" && echo "joined $w"
  fi
done
touch "/tmp/wh/.got-$N"
echo "staged: $(ls /tmp/wh/.got-* | xargs -n1 basename | tr '\n' ' ')  /tmp/wh=$(du -sh /tmp/wh | cut -f1)"
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--max-mib", type=float, default=37.0)
    args = ap.parse_args()
    limit = int(args.max_mib * 2**20)
    old = sorted(p for p in args.bundle.iterdir() if p.name.startswith("part-"))
    pool = args.bundle / "pool"
    pool.mkdir(exist_ok=True)
    scripts = []
    for part in old:
        for f in part.iterdir():
            if f.suffix == ".whl":
                shutil.move(str(f), pool / f.name)
            elif f.name in ("go.sh", "sgenv.sh", "smoke.py", "probe_http.py"):
                shutil.move(str(f), pool / f.name)
                scripts.append(f.name)
        shutil.rmtree(part)
    items: list[tuple[int, Path, bytes | None]] = []
    for w in sorted(pool.glob("*.whl")):
        data = w.read_bytes()
        if len(data) <= limit:
            items.append((len(data), w, None))
            continue
        n = -(-len(data) // (limit // 2))
        size = -(-len(data) // n)
        for i in range(n):
            items.append((len(data[i * size : (i + 1) * size]), w, data[i * size : (i + 1) * size]))
    bins: list[list[tuple[int, Path, bytes | None, int]]] = []
    counters: dict[str, int] = {}
    for size, w, chunk in sorted(items, key=lambda t: -t[0]):
        idx = counters[w.name] = counters.get(w.name, 0) + 1 if chunk is not None else 0
        for b in bins:
            if sum(x[0] for x in b) + size <= limit:
                b.append((size, w, chunk, idx))
                break
        else:
            bins.append([(size, w, chunk, idx)])
    totals = {name: c for name, c in counters.items() if c}
    for i, b in enumerate(bins, 1):
        d = args.bundle / f"part-{i:02d}"
        d.mkdir()
        for _, w, chunk, idx in b:
            if chunk is None:
                shutil.copy(w, d / w.name)
            else:
                (d / f"{w.name}.chunk-{idx:02d}").write_bytes(chunk)
                (d / f"{w.name}.total").write_text(str(totals[w.name]))
        if i == len(bins):
            for s in scripts:
                shutil.copy(pool / s, d / s)
        (d / "stage.sh").write_text(STAGE)
        os.chmod(d / "stage.sh", 0o755)
        with open(d / "SHA256SUMS", "w") as sums:
            for f in sorted(d.iterdir()):
                if f.name != "SHA256SUMS":
                    sums.write(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n")
        print(f"{d.name}: {sum(f.stat().st_size for f in d.iterdir()) / 2**20:.1f} MiB")
    shutil.rmtree(pool)
    print(f"NPARTS={len(bins)}")


if __name__ == "__main__":
    main()

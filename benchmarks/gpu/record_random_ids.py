"""Record the prompts SGLang's bench_serving draws for ``--dataset-name random-ids --tokenize-prompt`` (a script).

Runs SGLang's own code, as ``sglang/benchmark/serving.py::run_benchmark`` does: ``random.seed(seed)``,
``np.random.seed(seed)``, ``get_dataset(args, tokenizer)`` (``RandomDataset.from_args(args).load(tokenizer)``), and
writes the token ids and output lengths as JSON, the test data ``tests/test_workload.py`` compares
``workload.random_prompts`` with. Where SGLang is installed (the GPU machine) the installed package is used;
``--source DIR`` (an unpacked sglang wheel, e.g. ``pip download --no-deps sglang==0.5.17``) loads only
``benchmark/datasets/{common,random}.py`` from it, so no GPU stack is needed.

Usage::

    python benchmarks/gpu/record_random_ids.py --tokenizer pytest_specdec/refserver/assets/target \\
        --num-prompts 6 --input-len 12 --output-len 20 --range-ratio 0.5 --seed 42 [--source /tmp/sg/site] > out.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import random
import sys
import types
from pathlib import Path


def _dataset_from_source(source: Path) -> types.ModuleType:
    # Stub the parent packages so that importing random.py does not run sglang/__init__ (the GPU stack).
    for name in ("sglang", "sglang.benchmark", "sglang.benchmark.datasets"):
        mod = types.ModuleType(name)
        mod.__path__ = [str(source / name.replace(".", "/"))]
        sys.modules[name] = mod
    utils = types.ModuleType("sglang.benchmark.utils")
    utils.download_and_cache_hf_file = utils.is_file_valid_json = None  # type: ignore[attr-defined]
    sys.modules["sglang.benchmark.utils"] = utils
    for name in ("common", "random"):
        full = f"sglang.benchmark.datasets.{name}"
        spec = importlib.util.spec_from_file_location(full, source / "sglang/benchmark/datasets" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return sys.modules["sglang.benchmark.datasets.random"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--num-prompts", type=int, default=6)
    parser.add_argument("--input-len", type=int, default=12)
    parser.add_argument("--output-len", type=int, default=20)
    parser.add_argument("--range-ratio", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--source", type=Path, default=None, help="an unpacked sglang wheel (no GPU stack needed)")
    parser.add_argument("--digest", action="store_true", help="only the SHA-256 of the prompts (for large draws)")
    args = parser.parse_args()
    import numpy as np
    from transformers import AutoTokenizer

    ns = argparse.Namespace(
        dataset_name="random-ids", random_input_len=args.input_len, random_output_len=args.output_len,
        num_prompts=args.num_prompts, random_range_ratio=args.range_ratio, dataset_path="", tokenize_prompt=True,
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    if args.source is not None:
        load = _dataset_from_source(args.source).RandomDataset.from_args(ns).load
        origin = f"{args.source}/sglang/benchmark/datasets/random.py"
    else:
        from sglang.benchmark.datasets import get_dataset

        def load(tokenizer: object) -> list:  # type: ignore[type-arg]
            return get_dataset(ns, tokenizer)

        import sglang

        origin = f"sglang {getattr(sglang, '__version__', '?')} get_dataset"
    random.seed(args.seed)  # as serving.py::run_benchmark, right before get_dataset
    np.random.seed(args.seed)
    with contextlib.redirect_stdout(sys.stderr):  # its "#Input tokens" lines
        rows = load(tokenizer)
    prompts = [{"input_ids": [int(t) for t in r.prompt], "output_len": int(r.output_len)} for r in rows]
    out = {
        "origin": origin, "tokenizer_vocab_size": tokenizer.vocab_size,
        "args": {k: v for k, v in vars(args).items() if k not in ("source", "tokenizer", "digest")},
        "sha256": hashlib.sha256(json.dumps(prompts).encode()).hexdigest(),
    }  # fmt: skip
    if not args.digest:
        out["prompts"] = prompts
    print(json.dumps(out))


if __name__ == "__main__":
    main()

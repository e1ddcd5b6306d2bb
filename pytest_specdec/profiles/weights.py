"""Reading checkpoint files without loading weights: the safetensors header.

Standard library only: preflight and the vLLM engine both read headers, and neither may import the other.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

__all__ = ["MAX_HEADER_BYTES", "read_safetensors_header"]

#: Largest safetensors JSON header we read (the format caps it at 100 MB; real drafts have a few KB).
MAX_HEADER_BYTES = 100_000_000


def read_safetensors_header(path: str | Path) -> dict[str, Any]:
    """The JSON header of a safetensors file: 8-byte little-endian length, then that many bytes of JSON.

    Reads only the header, never tensor data (format: https://github.com/huggingface/safetensors#format).

    :returns: tensor name -> ``{"dtype", "shape", "data_offsets"}`` (plus ``__metadata__`` when present).
    :raises ValueError: truncated file, absurd header length, or a header that is not a JSON object.
    :raises OSError: unreadable file.
    """
    with open(path, "rb") as fh:
        raw_len = fh.read(8)
        if len(raw_len) != 8:
            raise ValueError("file shorter than the 8-byte safetensors header length")
        (length,) = struct.unpack("<Q", raw_len)
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"header length {length} bytes is not plausible")
        header = json.loads(fh.read(length))
    if not isinstance(header, dict):
        raise ValueError("safetensors header is not a JSON object")
    return header

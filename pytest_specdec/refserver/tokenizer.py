"""The reference server's tokenizer: a model directory's ``tokenizer.json`` through the ``tokenizers`` library.

What the server asked of transformers' ``AutoTokenizer`` (``TokenizersBackend`` in transformers 5.x), without
importing transformers (4.3 s of a 7 s start): ``encode`` and ``decode`` call the same ``tokenizers.Tokenizer`` methods
as ``tokenization_utils_tokenizers.py`` does, and ``apply_chat_template`` renders the model's template in the jinja2
environment of ``utils/chat_template_utils.py::_compile_jinja_template`` (sandboxed, ``trim_blocks``,
``lstrip_blocks``, ``loopcontrols``, ``raise_exception``, ``strftime_now``, a ``tojson`` that does not escape HTML)
with the special tokens as variables. Not carried over: ``{% generation %}`` blocks and tool schemas.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["Tokenizer"]

#: The special-token keys of ``tokenizer_config.json`` a chat template sees (HF ``special_tokens_map``).
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class Tokenizer:
    """Encode, decode and chat-template for one model directory.

    :param model_dir: holds ``tokenizer.json``; ``tokenizer_config.json`` (special tokens, ``chat_template``,
        ``clean_up_tokenization_spaces``) and ``chat_template.jinja`` when present.
    :raises OSError: no readable ``tokenizer.json``.
    """

    def __init__(self, model_dir: str | Path) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        model_dir = Path(model_dir)
        self._tok = RustTokenizer.from_file(str(model_dir / "tokenizer.json"))
        config_path = model_dir / "tokenizer_config.json"
        config: dict[str, Any] = json.loads(config_path.read_text()) if config_path.exists() else {}
        self.special_tokens: dict[str, str] = {}
        for key in SPECIAL_TOKEN_KEYS:
            value = config.get(key)
            if isinstance(value, dict):  # older configs: an AddedToken dict
                value = value.get("content")
            if isinstance(value, str):
                self.special_tokens[key] = value
        eos = self.special_tokens.get("eos_token")
        #: The id of ``eos_token``; None when the config names none.
        self.eos_token_id: int | None = self._tok.token_to_id(eos) if eos is not None else None
        template_path = model_dir / "chat_template.jinja"
        # HF prefers chat_template.jinja over tokenizer_config.json's chat_template.
        self.chat_template: str | None = (
            template_path.read_text() if template_path.exists() else config.get("chat_template")
        )
        # HF skips this clean-up for BPE models, for which it corrupts text (tokenization_utils_tokenizers.py).
        self._clean_up = bool(config.get("clean_up_tokenization_spaces", False)) and (
            json.loads(self._tok.to_str())["model"]["type"] != "BPE"
        )
        self._template: Any = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``."""
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids``."""
        text: str = self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)
        if self._clean_up:
            for old, new in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                             (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):  # fmt: skip
                text = text.replace(old, new)
        return text

    def apply_chat_template(
        self, messages: list[dict], tokenize: bool = False, add_generation_prompt: bool = False
    ) -> str:
        """The prompt text of ``messages`` (``tokenize`` must be False: the caller encodes).

        :raises ValueError: the model has no chat template (HF's condition); ``tokenize`` True.
        :raises jinja2.TemplateError: the template failed (``raise_exception`` included).
        """
        if tokenize:
            raise ValueError("Tokenizer.apply_chat_template: only tokenize=False is implemented")
        if self.chat_template is None:
            raise ValueError("Cannot use chat template functions because tokenizer.chat_template is not set")
        if self._template is None:
            self._template = _compile(self.chat_template)
        text: str = self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self.special_tokens
        )
        return text


def _compile(template: str) -> Any:
    """The template in HF's environment (``chat_template_utils.py::_cached_compile_jinja_template``)."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template)

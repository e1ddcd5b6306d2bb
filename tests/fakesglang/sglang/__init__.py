"""A fake ``sglang`` 0.5.17 for the plugin's fast tests: ``python -m sglang.launch_server`` serves SGLang's HTTP API
(``/generate`` SSE, ``/server_info``, ``/metrics`` ...) from a script instead of a model. See ``launch_server.py``."""

__version__ = "0.5.17"

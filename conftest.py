"""Repository-level pytest configuration: the plugin's own tests drive pytest itself through ``pytester``."""

pytest_plugins = ["pytester"]

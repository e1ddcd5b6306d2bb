"""Where this pytest process sits in a pytest-xdist run: controller or worker, and the directory they share.

pytest-xdist gives a worker ``config.workerinput`` (a dict with ``workerid``) and each worker its own basetemp under
the controller's, so the controller's ``getbasetemp()`` is every worker's ``getbasetemp().parent`` (xdist
``docs/how-to.rst``, "execute only once"; ``workermanage.py`` reads ``config._tmp_path_factory`` the same way). The
plugin asks these questions only through here. Without xdist, a process is the controller of a run of one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["is_worker", "shared_dir", "worker_id"]


def is_worker(config: pytest.Config) -> bool:
    """True on an xdist worker (``config.workerinput`` set), False on the controller or without xdist."""
    return hasattr(config, "workerinput")


def worker_id(config: pytest.Config) -> str | None:
    """The worker's id (``gw0``, ``gw1``, ...), or None off a worker."""
    workerinput: dict[str, object] = getattr(config, "workerinput", {})
    value = workerinput.get("workerid")
    return str(value) if value else None


def shared_dir(config: pytest.Config) -> Path | None:
    """The directory the controller and every worker of this run can reach: the controller's basetemp, which is a
    worker's basetemp's parent. Creates basetemp on first use (``TempPathFactory.getbasetemp``).

    :returns: None when pytest's tmp_path plugin is off (``-p no:tmpdir``: no ``config._tmp_path_factory``).
    """
    factory: pytest.TempPathFactory | None = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return None
    basetemp = factory.getbasetemp()
    return basetemp.parent if is_worker(config) else basetemp

"""
The openruns tracking server (`pip install 'openruns[server]'`).

    from openruns.server import serve_in_thread
    handle = serve_in_thread("/tmp/openruns-data")     # 127.0.0.1, a free port
    print(handle.url); handle.stop()

Names are imported on first use, so that `openruns --help` (which imports the command modules
under this package) does not load FastAPI or SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ServerHandle",
    "ServerSettings",
    "create_app",
    "default_data_dir",
    "serve",
    "serve_in_thread",
]

_WHERE = {
    "ServerHandle": "serve",
    "ServerSettings": "config",
    "create_app": "app",
    "default_data_dir": "config",
    "serve": "serve",
    "serve_in_thread": "serve",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)

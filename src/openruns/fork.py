"""
The one fork policy for every thread owner in openruns.

`os.register_at_fork` cannot be undone, so one process-wide hook is registered once and calls
`_after_fork_in_child()` on every live registered object (held weakly, so a finished run is not
pinned). In the child each owner makes fresh locks, queues and threads, and drops (never closes
or flushes) inherited file descriptors and connections, whose buffers belong to the parent.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Protocol

__all__ = ["ForkAware", "register"]

logger = logging.getLogger("openruns")


class ForkAware(Protocol):
    def _after_fork_in_child(self) -> None: ...


_objects: weakref.WeakSet[ForkAware] = weakref.WeakSet()
_registered = False
_lock = threading.Lock()


def register(obj: ForkAware) -> None:
    global _registered
    with _lock:
        _objects.add(obj)
        if not _registered:
            os.register_at_fork(after_in_child=_reset_in_child)
            _registered = True


def _reset_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # the parent may have held it while forking
    for obj in list(_objects):
        try:
            obj._after_fork_in_child()
        except Exception:
            logger.exception("openruns: resetting %r after fork failed", obj)

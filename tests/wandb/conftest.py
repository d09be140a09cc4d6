"""A real `openruns server` process per module, and the native read client on it: the
fixtures of the Prime drop-in tests, for the W&B one."""

from tests.prime.conftest import client, server

__all__ = ["client", "server"]

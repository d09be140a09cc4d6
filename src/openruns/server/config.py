"""
Server settings: one frozen value object, built by `openruns server` from its flags or by
tests and scripts directly. Standard library only, so `openruns --help` stays cheap.

The data directory holds everything the server keeps (`openruns.db`, the SQLite file in WAL
mode, and `blobs/`): `--data-dir`, else `$OPENRUNS_DATA_DIR`, else
`$XDG_DATA_HOME/openruns` (`~/.local/share/openruns`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_PORT",
    "ServerConfigError",
    "ServerSettings",
    "default_data_dir",
    "is_loopback",
]

DEFAULT_PORT = 8765
MiB = 1024 * 1024


class ServerConfigError(Exception):
    """The server cannot start with these settings; the message says how to fix it."""


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("OPENRUNS_DATA_DIR"):
        return Path(env["OPENRUNS_DATA_DIR"])
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "openruns"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    """
    Everything the server reads. `auth=None` means: off on a loopback address, and refuse to
    start on any other address unless `insecure=True` (explicitly no auth) or `auth=True`.

        settings = ServerSettings(data_dir=Path("/srv/openruns"), host="0.0.0.0", auth=True)
    """

    data_dir: Path = dataclasses.field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    auth: bool | None = None
    insecure: bool = False
    public_url: str | None = None
    # A running run silent this long becomes crashed (owners heartbeat every quarter of it, at
    # most every 10 s); with the sweep every quarter, a SIGKILLed producer shows within 60 s.
    heartbeat_timeout: float = 45.0
    # Uploads to a finished run are still accepted this long, so the SDK's final drain lands.
    finish_grace: float = 60.0
    # Token bucket per API key / run token: requests per second and burst. 0 turns it off.
    rate_limit: float = 50.0
    rate_burst: int = 200
    max_body_bytes: int = 512 * MiB
    max_decompressed_bytes: int = 1024 * MiB
    # Ingest (metrics / episodes uploads) admitted at once, by count and by body bytes.
    max_ingest_requests: int = 32
    max_ingest_bytes: int = 1024 * MiB
    # Bodies of the JSON calls (create, patch, finish) are small; this caps them.
    max_json_bytes: int = 8 * MiB
    # Seconds a read query may run before it is interrupted (503).
    query_timeout: float = 30.0
    # Teams that may create external training runs through the Prime wire (server/prime/);
    # None: every team. The platform enables them per team; a team outside gets 403.
    prime_training_teams: frozenset[str] | None = None

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.data_dir / 'openruns.db'}"

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"

    def auth_enabled(self) -> bool:
        """Whether requests need a key; raises ServerConfigError for an unsafe bind."""
        if self.auth is not None:
            return self.auth
        if is_loopback(self.host) or self.insecure:
            return False
        raise ServerConfigError(
            f"refusing to listen on {self.host} without authentication: pass --auth to require "
            "API keys (create one with `openruns keys create --team TEAM`), or --insecure to "
            "accept unauthenticated requests from the network"
        )

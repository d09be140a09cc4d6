"""
Services the scale-out tests need, started on first use once per pytest run on loopback, and
thrown away when the run ends:

- a PostgreSQL cluster in a temporary directory, one for the run, shared by its xdist workers
  (Debian's `postgresql` package: initdb and pg_ctl; as root they run as the `postgres` user,
  which the package creates), with fsync off:
  a test cluster needs speed, not durability. Each test gets a fresh database copied from a
  migrated template (CREATE DATABASE ... TEMPLATE), so tests never see each other's rows; a
  database its test gave back (StoresFactory.release) is emptied to the template's state and
  handed out again instead (a copy costs the machine ~165 ms of CPU).
- an S3-compatible endpoint: moto's server mode, in a subprocess, one per worker (it serves
  on one core: shared, S3-heavy tests of one worker stalled the others'). Each test gets a
  fresh bucket. The server code speaks plain S3 to it, through the endpoint override.
- SQLite: each new data directory gets a copy of a database migrated once a worker.

Under CI=true a missing PostgreSQL fails the tests that need it; elsewhere they skip, saying
what to install. `Stores` is where one deployment keeps its data, whichever kind it is.

Loaded as a plugin by tests/conftest.py (`pytest_plugins`), so the session fixtures exist once.
The process that starts the run (xdist's controller, or pytest alone) names a directory in
$OPENRUNS_TESTS_SERVICES_DIR before any worker starts; the first worker to need PostgreSQL
starts it under a lock on that directory and writes where it listens, the others attach, and
the controller stops it when the run ends (one initdb instead of one per worker, which ran
at the same time on two cores).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import itertools
import json
import os
import pwd
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import patience

__all__ = ["BACKENDS", "PostgresCluster", "S3Endpoint", "Stores", "StoresFactory"]

# The configurations the server and API suites run against (a fixture param).
BACKENDS = ("sqlite", "postgres")

_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Where the run's shared services are described (see the module's docstring).
SHARED_DIR_ENV = "OPENRUNS_TESTS_SERVICES_DIR"
_shared_dir: Path | None = None  # read once at configure time: tests may clear the environment


def pytest_configure(config: pytest.Config) -> None:
    global _shared_dir
    if not hasattr(config, "workerinput") and not os.environ.get(SHARED_DIR_ENV):
        os.environ[SHARED_DIR_ENV] = tempfile.mkdtemp(prefix="openruns-services-")
        config.stash[_OWNER] = True
    _shared_dir = Path(os.environ[SHARED_DIR_ENV])


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_OWNER, False) and _shared_dir is not None:
        _stop_shared(_shared_dir)
        os.environ.pop(SHARED_DIR_ENV, None)


_OWNER = pytest.StashKey[bool]()


@contextlib.contextmanager
def _shared(name: str) -> Iterator[Path]:
    """The description file of a shared service, held under the run's lock."""
    assert _shared_dir is not None, "tests.services is loaded as a pytest plugin"
    with (_shared_dir / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield _shared_dir / f"{name}.json"


def _stop_shared(directory: Path) -> None:
    if (described := directory / "postgres.json").exists():
        PostgresCluster.stop_described(json.loads(described.read_text()))
    shutil.rmtree(directory, ignore_errors=True)


def _unavailable(reason: str) -> None:
    """Fail under CI (the service must be there), else skip saying what is missing."""
    if _CI:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


# Ports handed out for a server to bind later lie below the kernel's ephemeral range
# (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default): a port from that range can
# be taken, between choosing and binding, by any outgoing connection of a concurrent test.
_PORTS = range(20_000, 32_000)


def free_port() -> int:
    """A loopback port nothing listens on now, outside the ephemeral range."""
    for _ in range(200):
        port = random.choice(_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found in {_PORTS}")


def _wait(predicate: Any, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    detail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not come up in {timeout:g} s\n{detail}")


# -- PostgreSQL --------------------------------------------------------------------------------


def postgres_bin() -> Path | None:
    """The directory holding initdb and pg_ctl: on PATH, else Debian's newest version."""
    candidates = []
    if found := shutil.which("pg_ctl"):
        candidates.append(Path(found).resolve().parent)
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for path in candidates:
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    return None


_DATABASE_NAMES = itertools.count()  # of this process, whichever cluster object makes them


class PostgresCluster:
    """A throwaway cluster on 127.0.0.1; `new_database()` is a fresh, migrated database URL."""

    TEMPLATE = "openruns_template"

    def __init__(self, bindir: Path, durable: bool = False):
        self.bindir = bindir
        self.durable = durable  # fsync on: for benchmarks, like a real deployment
        self.root = Path(tempfile.mkdtemp(prefix="openruns-pg-"))
        self.user: str | None = None
        if os.geteuid() == 0:  # initdb refuses to run as root
            self.user = "postgres" if _has_user("postgres") else "nobody"
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self._admin: Any = None
        self._returned: list[str] = []  # databases given back (give_back), not yet reused
        self._pristine: _Pristine | None = None
        self.attached = False  # started by another process of the run, which stops it

    def describe(self) -> dict[str, Any]:
        return {"bindir": str(self.bindir), "root": str(self.root), "port": self.port,
                "user": self.user}  # fmt: skip

    @classmethod
    def attach(cls, described: dict[str, Any]) -> PostgresCluster:
        cluster = cls.__new__(cls)
        cluster.bindir, cluster.durable = Path(described["bindir"]), False
        cluster.root, cluster.user = Path(described["root"]), described["user"]
        cluster.data, cluster.log = cluster.root / "data", cluster.root / "server.log"
        cluster.port, cluster.attached = described["port"], True
        cluster._returned, cluster._pristine = [], None
        cluster._connect_admin()
        return cluster

    def _connect_admin(self) -> None:
        import psycopg

        self._admin = psycopg.connect(self.url("postgres", driver=False), autocommit=True)

    def _run(self, *args: str) -> None:
        subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            check=True,
            capture_output=True,
            cwd=self.root,
            user=self.user,
            timeout=patience.START + 60,  # above pg_ctl's own -t
        )

    def start(self) -> PostgresCluster:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        settings = ["-c listen_addresses=127.0.0.1", f"-k {self.root}", "-c max_connections=400"]
        if self.durable:
            settings += ["-c shared_buffers=512MB", "-c max_wal_size=4GB"]
        else:
            settings += [
                "-c shared_buffers=64MB",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
            ]
        options = " ".join(settings)
        for _ in range(3):  # a free port can be taken between choosing and binding it
            self.port = free_port()
            try:
                self._run(
                    "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t",
                    str(int(patience.START)),
                    "-o", f"-p {self.port} {options}", "start",
                )  # fmt: skip
                break
            except subprocess.CalledProcessError:
                continue
        else:
            raise RuntimeError(f"PostgreSQL did not start: {self.log.read_text()[-2000:]}")
        self._connect_admin()
        self._admin.execute(f"CREATE DATABASE {self.TEMPLATE}")
        from openruns.server.store import Store

        Store.open(self.url(self.TEMPLATE)).close()
        return self

    def url(self, database: str, driver: bool = True) -> str:
        scheme = "postgresql+psycopg" if driver else "postgresql"
        return f"{scheme}://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self, migrated: bool = True) -> str:
        """A fresh database: a copy of the migrated template (one given back, emptied, when
        there is one), or empty (template0)."""
        if migrated and (reused := self._emptied()):
            return reused

        url = self._create(migrated)
        if migrated and self._pristine is None:
            self._pristine = _Pristine.read(url)
        return url

    def give_back(self, url: str) -> None:
        """A migrated database its test is done with, to be emptied and handed out again."""
        self._returned.append(url)

    def _emptied(self) -> str | None:
        """A database given back with no connection left to it, emptied to the template's
        state; one in use (a server still closing) waits for a later call, and one whose
        schema a test changed, or that no longer opens, is not used again.

        Creating a database costs the machine ~165 ms of CPU (a copy of the template's 9 MB,
        either strategy). An in-thread server writing a little on a new copy cost 0.82 CPU-s
        in all, on an emptied one 0.50 (TRUNCATE only the tables with rows: ~5 ms each)."""
        import psycopg

        assert self._pristine is not None or not self._returned
        for url in list(self._returned):
            name = url.rsplit("/", 1)[1]
            busy = self._admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
            ).fetchone()[0]
            if busy:
                continue
            self._returned.remove(url)
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    if self._pristine.restore(conn):  # type: ignore[union-attr]
                        return url
            except psycopg.Error:
                continue
        return None

    def _create(self, migrated: bool) -> str:
        import psycopg

        name = f"t{os.getpid()}_{next(_DATABASE_NAMES)}"  # workers share the cluster
        template = self.TEMPLATE if migrated else "template0"
        for attempt in range(50):
            try:
                self._admin.execute(
                    f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY"
                )  # noqa: E501
                break
            except psycopg.errors.ObjectInUse:  # another worker is copying the same template
                if attempt == 49:
                    raise
                time.sleep(0.1)
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
        if not self.attached:
            self.stop_described(self.describe())

    @staticmethod
    def stop_described(described: dict[str, Any]) -> None:
        root = Path(described["root"])
        if (root / "data").exists():
            subprocess.run(
                [str(Path(described["bindir"]) / "pg_ctl"), "-D", str(root / "data"), "-m",
                 "immediate", "stop"],
                capture_output=True,
                cwd=root,
                user=described["user"],
                timeout=60,
            )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


class _Pristine:
    """What a migrated database holds before any test writes to it, read from a fresh copy of
    the template: the schema's fingerprint, the rows the migrations wrote, each sequence's
    state. `restore` brings a used database back to it."""

    _SCHEMA = """
        SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace),
               (SELECT sum(hashtext(concat_ws(' ', c.relname, c.relkind, a.attname, a.atttypid)))
                  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
                 WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0
                   AND NOT a.attisdropped),
               (SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace),
               (SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                 WHERE c.relnamespace = 'public'::regnamespace)
    """
    _TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    # Tables whose files hold anything: rows, or the dead ones of rows deleted or rolled back.
    _USED = """
        SELECT c.relname FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
           AND pg_relation_size(c.oid) > 0
    """
    _SEQUENCES = """
        SELECT sequencename, coalesce(last_value, start_value), last_value IS NOT NULL
          FROM pg_sequences WHERE schemaname = 'public'
    """

    def __init__(self, schema: tuple[Any, ...], rows: dict[str, list[tuple[Any, ...]]],
                 sequences: list[tuple[Any, ...]]) -> None:  # fmt: skip
        self.schema, self.rows, self.sequences = schema, rows, sequences

    @classmethod
    def read(cls, url: str) -> _Pristine:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            rows = {}
            for (table,) in conn.execute(cls._TABLES).fetchall():
                if found := conn.execute(f'SELECT * FROM "{table}"').fetchall():
                    rows[table] = found
            schema = conn.execute(cls._SCHEMA).fetchone()
            return cls(schema, rows, conn.execute(cls._SEQUENCES).fetchall())

    def restore(self, conn: Any) -> bool:
        """Empty `conn`'s database back to this state; False if its schema is not this one."""
        if conn.execute(self._SCHEMA).fetchone() != self.schema:
            return False
        used = [t for (t,) in conn.execute(self._USED).fetchall()]
        with conn.transaction():
            if used:  # TRUNCATE, not DELETE: the planner sees empty tables, as in a new copy
                conn.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in used))
            for table in used:
                if rows := self.rows.get(table):
                    marks = ", ".join(["%s"] * len(rows[0]))
                    with conn.cursor() as cursor:
                        cursor.executemany(f'INSERT INTO "{table}" VALUES ({marks})', rows)
            for name, value, called in self.sequences:
                conn.execute("SELECT setval(%s::regclass, %s, %s)", (f'"{name}"', value, called))
        return True


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# -- S3 ----------------------------------------------------------------------------------------


class S3Endpoint:
    """moto's S3 server on 127.0.0.1 in a subprocess; `new_bucket()` is a fresh s3:// URL."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="openruns-s3-"))
        self.log = self.root / "moto.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._names = itertools.count()
        self.client: Any = None

    def start(self) -> S3Endpoint:
        for _ in range(3):
            port = free_port()
            with self.log.open("ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            self.url = f"http://127.0.0.1:{port}"
            try:
                _wait(self._answers, patience.START, "moto's S3 server", self.log)
                break
            except RuntimeError:
                slow = self.proc.poll() is None
                self.proc.kill()
                self.proc.wait(10)
                if slow:  # not a port taken meanwhile: starting another would be slower still
                    raise
        else:
            raise RuntimeError(f"moto did not start: {self.log.read_text()[-2000:]}")
        import boto3

        self.client = boto3.client("s3", endpoint_url=self.url)
        return self

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"moto exited: {self.log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", int(self.url.rsplit(":", 1)[1])), 1):
                return True
        except OSError:
            return False

    def new_bucket(self) -> str:
        name = f"openruns-{os.getpid()}-{next(self._names)}"
        self.client.create_bucket(Bucket=name)
        return f"s3://{name}/blobs"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)


# Credentials and region for moto (it accepts any); set for the whole session, since the
# server under test (in this process or a child) reads them through boto3's standard chain.
_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "openruns-test",
    "AWS_SECRET_ACCESS_KEY": "openruns-test",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


# -- Stores ------------------------------------------------------------------------------------


@dataclass
class Stores:
    """Where one deployment keeps its data: ServerSettings fields for both stores."""

    kind: str
    settings: dict[str, Any] = field(default_factory=dict)

    def cli_args(self) -> list[str]:
        """The same, as `openruns server` / `openruns keys` flags."""
        names = {
            "data_dir": "--data-dir",
            "database_url": "--db",
            "blobs": "--blobs",
            "s3_endpoint_url": "--s3-endpoint-url",
        }
        return [arg for k, v in self.settings.items() for arg in (names[k], str(v))]

    def db_args(self) -> list[str]:
        """Only the database's flags (`openruns keys` takes no blob store)."""
        if "database_url" in self.settings:
            return ["--db", self.settings["database_url"]]
        return ["--data-dir", str(self.settings["data_dir"])]

    def database_url(self) -> str:
        from openruns.server.config import ServerSettings

        return ServerSettings(**self.settings).sqlalchemy_url()

    def open_store(self) -> Any:
        from openruns.server.store import Store

        return Store.open(self.database_url())

    def open_blobs(self) -> Any:
        from openruns.server.config import ServerSettings
        from openruns.server.store import open_blobs

        settings = ServerSettings(**self.settings)
        return open_blobs(settings.blob_location(), settings.s3_endpoint_url)


class StoresFactory:
    """Fresh stores of either kind; the services start on first use."""

    def __init__(self) -> None:
        self._postgres: PostgresCluster | None = None
        self._s3: S3Endpoint | None = None
        self._sqlite_template: Path | None = None
        self._saved_env: dict[str, str | None] = {}

    def postgres(self) -> PostgresCluster:
        if self._postgres is None:
            bindir = postgres_bin()
            if bindir is None:
                _unavailable(
                    "PostgreSQL is not installed (apt-get install postgresql): the tests of "
                    "the PostgreSQL store need its initdb and pg_ctl"
                )
            assert bindir is not None
            with _shared("postgres") as described:
                if described.exists():
                    self._postgres = PostgresCluster.attach(json.loads(described.read_text()))
                else:
                    self._postgres = PostgresCluster(bindir).start()
                    self._postgres.attached = True  # the run's owner stops it at the end
                    described.write_text(json.dumps(self._postgres.describe()))
        return self._postgres

    def s3(self) -> S3Endpoint:
        if self._s3 is None:
            for name, value in _AWS_ENV.items():
                self._saved_env[name] = os.environ.get(name)
                os.environ[name] = value
            self._s3 = S3Endpoint().start()  # one per worker: moto serves on one core
        return self._s3

    def sqlite_template(self) -> Path:
        """A SQLite database migrated once a worker, copied into each new data directory, as
        PostgreSQL's databases are made from a migrated template: running every migration
        again cost each new store ~0.17 s of CPU (tests of an empty database's migration use
        their own path: tests/server/test_store.py)."""
        if self._sqlite_template is None:
            from openruns.server.store import Store

            path = Path(tempfile.mkdtemp(prefix="openruns-sqlite-template-")) / "openruns.db"
            Store.open(f"sqlite:///{path}").close()
            self._sqlite_template = path
        return self._sqlite_template

    def new(self, kind: str, tmp: Path | None = None) -> Stores:
        """Fresh stores: a data directory `tmp` (sqlite), or a database and a bucket."""
        if kind == "sqlite":
            assert tmp is not None, "SQLite stores need a directory"
            tmp.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.sqlite_template(), tmp / "openruns.db")
            return Stores(kind, {"data_dir": tmp})
        s3 = self.s3()
        return Stores(
            kind,
            {
                "database_url": self.postgres().new_database(),
                "blobs": s3.new_bucket(),
                "s3_endpoint_url": s3.url,
            },
        )

    def release(self, stores: Stores) -> None:
        """Stores a test is done with (its servers stopped): their PostgreSQL database is
        emptied and handed to a later test (`new`). Stores never released are left as they are."""
        if stores.kind == "postgres" and self._postgres is not None:
            self._postgres.give_back(stores.settings["database_url"])

    def close(self) -> None:
        if self._postgres is not None:
            self._postgres.stop()
        if self._s3 is not None:
            self._s3.stop()
        if self._sqlite_template is not None:
            shutil.rmtree(self._sqlite_template.parent, ignore_errors=True)
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def stores_factory() -> Iterator[StoresFactory]:
    factory = StoresFactory()
    yield factory
    factory.close()

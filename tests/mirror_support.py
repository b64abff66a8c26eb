"""The mirror's databases: SQLite files in a temporary folder, and a real
PostgreSQL server from Debian's ``postgresql`` package, started for the
session in a throwaway cluster (``initdb``, ``pg_ctl``; run as the
``postgres`` user when the tests run as root: PostgreSQL refuses root) on a
Unix socket in a temporary folder, and removed after. Where no PostgreSQL
binaries are installed, the PostgreSQL cases are skipped, the reason shown
in the summary."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

#: tests/ on the path: the reconcile client's helpers (the demo on loopback).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PG_MISSING = "no PostgreSQL binaries (initdb, pg_ctl, postgres): install Debian's 'postgresql' package"


def postgres_bindir() -> Path | None:
    """The folder of initdb, pg_ctl and postgres: on the PATH, else Debian's newest."""
    candidates = []
    found = shutil.which("pg_ctl")
    if found:
        candidates.append(Path(os.path.realpath(found)).parent)
    candidates += [Path(path) for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for folder in candidates:
        if all((folder / name).exists() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


class Cluster:
    """A throwaway PostgreSQL cluster listening on a Unix socket only."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="mirror-pg-"))
        self.data = self.base / "data"
        self.user: str | None = None
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no 'postgres' user to run PostgreSQL as") from None
            self.user = "postgres"
            os.chown(self.base, account.pw_uid, account.pw_gid)
        self.port = 5432

    def run(self, *argv: str) -> None:
        subprocess.run(
            [str(self.bindir / argv[0]), *argv[1:]],
            check=True,
            capture_output=True,
            user=self.user,
            cwd=self.base,
            timeout=120,
        )

    def start(self) -> None:
        self.run("initdb", "-D", str(self.data), "-A", "trust", "-U", "mirror", "-E", "UTF8", "--no-sync")
        options = f"-k {self.base} -c listen_addresses='' -p {self.port} -F -c max_connections=50"
        self.run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.base / "log"), "-w", "-t", "60", "start")

    def stop(self) -> None:
        try:
            self.run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.base, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://mirror@/{database}?host={self.base}&port={self.port}"


@pytest.fixture(scope="session")
def postgresql_cluster() -> Iterator[Cluster]:
    """The session's PostgreSQL (skips where no binaries are installed)."""
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip(PG_MISSING)
    cluster = Cluster(bindir)
    try:
        cluster.start()
    except BaseException:
        log = cluster.base / "log"
        detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        cluster.stop()
        raise RuntimeError(f"the PostgreSQL cluster did not start: {detail}") from None
    yield cluster
    cluster.stop()


@pytest.fixture
def postgresql_url(postgresql_cluster: Cluster) -> Iterator[str]:
    """A fresh database of the session's cluster, dropped after the test."""
    import psycopg

    name = "mirror_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgresql_cluster.url(), autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    yield postgresql_cluster.url(name)
    with psycopg.connect(postgresql_cluster.url(), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of each dialect: an SQLite file, a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mirror.db'}"
    return str(request.getfixturevalue("postgresql_url"))


@pytest.fixture
def sql(database_url: str) -> Iterator[Callable[..., list[Any]]]:
    """Run SQL on the test's database straight, as a user would (rows back)."""
    from sqlalchemy import text

    from openprocurement_feed.client.mirror import MirrorStore

    store = MirrorStore.open(database_url)

    def execute(statement: str, **params: Any) -> list[Any]:
        with store.engine.begin() as connection:
            result = connection.execute(text(statement), params)
            return list(result) if result.returns_rows else []

    yield execute
    store.close()

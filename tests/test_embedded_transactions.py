"""The development launcher ``ops/secantusd_lifetime.py`` makes the embedded
server abort a transaction its killed client left open within the given
lifetime, not after ``secantusd-py``'s own 60 s; ``EmbeddedServer(launcher=...)``
starts the server through it."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from openprocurement_feed.embedded import server as embedded_server
from openprocurement_feed.embedded.server import EmbeddedServer

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

#: The launcher, a development tool outside the package (which never imports SecantusDB).
LAUNCHER = Path(__file__).resolve().parent.parent / "ops" / "secantusd_lifetime.py"


def load_launcher() -> ModuleType:
    """The launcher as a module, loaded by path (it is not part of the package)."""
    spec = importlib.util.spec_from_file_location("secantusd_lifetime", LAUNCHER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The child: opens a transaction, writes in it, says so, then waits to be killed.
ABANDONING_CLIENT = textwrap.dedent(
    """
    import sys, time
    from pymongo import MongoClient
    client = MongoClient(sys.argv[1])
    session = client.start_session()
    session.start_transaction()
    before = time.time()
    client.db.docs.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=session)
    print("open", before, flush=True)
    time.sleep(600)
    """
)


def abandon_a_transaction(uri: str) -> float:
    """Run a client that writes doc 1 in a transaction, then kill -9 it;
    when (wall clock) it sent its write: the transaction's last activity
    was no earlier."""
    child = subprocess.Popen([sys.executable, "-c", ABANDONING_CLIENT, uri], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        said, sent = child.stdout.readline().split()
        assert said == b"open"
        return float(sent)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def write_in_transaction(client: MongoClient[Any]) -> bool:
    """Add 10 to doc 1 in a transaction; False on a write conflict."""
    try:
        with client.start_session() as session, session.start_transaction():
            client.db.docs.update_one({"_id": 1}, {"$inc": {"n": 10}}, session=session)
    except OperationFailure as error:
        assert error.has_error_label("TransientTransactionError"), error
        return False
    return True


def test_a_killed_clients_transaction_is_aborted_within_the_lifetime() -> None:
    lifetime = 2.0
    with EmbeddedServer(launcher=(sys.executable, str(LAUNCHER), str(lifetime))) as server:
        client: MongoClient[Any] = MongoClient(server.uri)
        try:
            client.db.docs.insert_one({"_id": 1, "n": 0})
            sent = abandon_a_transaction(server.uri)
            killed = time.monotonic()
            # the abandoned transaction still holds the document: a conflict
            assert not write_in_transaction(client)
            while not write_in_transaction(client):
                # bounds a hang: without the launcher's lifetime the server waits 60 s
                assert time.monotonic() - killed < lifetime + 20, "the abandoned transaction was not aborted"
                time.sleep(0.1)
            # not before its lifetime, counted from its last statement (sent
            # no later than the server took it: a loaded machine's delays
            # between the statement and the kill do not count)
            waited = time.time() - sent
            assert waited >= lifetime, f"aborted {waited:.2f} s after its last statement"
            # its write was rolled back: only ours is there
            assert client.db.docs.find_one({"_id": 1}) == {"_id": 1, "n": 10}
        finally:
            client.close()


def test_the_server_command_is_the_launcher_when_given() -> None:
    launcher = (sys.executable, str(LAUNCHER), "7.5")
    assert EmbeddedServer(launcher=launcher)._server_command("/bin/secantusd-py") == list(launcher)
    # without one, the package's launcher (which mends the binding's leak)
    assert EmbeddedServer()._server_command("/bin/secantusd-py")[:2] == [sys.executable, embedded_server.LAUNCHER]


@pytest.mark.parametrize("argv", [[], ["soon"], ["0"], ["-3"]])
def test_the_launcher_refuses_a_bad_lifetime(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert load_launcher().main(argv) == 2
    assert "usage: secantusd_lifetime.py SECONDS" in capsys.readouterr().err

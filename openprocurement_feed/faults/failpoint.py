"""Arming and clearing the database's ``failCommand`` fail point.

The server must run with test commands (``secantusd-py
--enable-test-commands``; a MongoDB ``mongod --setParameter
enableTestCommands=1``). The fail point is set by a client of its own,
named :data:`ADMIN_APP_NAME`, which no cell aims at.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pymongo import MongoClient
from pymongo.errors import OperationFailure

#: The ``appName`` of the client that arms the fail point.
ADMIN_APP_NAME = "openprocurement-feed-faults"
FAIL_POINT = "failCommand"


class FailPointError(RuntimeError):
    """The database does not accept ``configureFailPoint``."""


class FailPoint:
    """The ``failCommand`` fail point of the server at ``uri``."""

    def __init__(self, uri: str) -> None:
        self.client: MongoClient[Any] = MongoClient(uri, appname=ADMIN_APP_NAME, serverSelectionTimeoutMS=10_000)

    def arm(self, command: Mapping[str, Any]) -> None:
        """Arm it with ``{"mode": ..., "data": ...}``
        (:meth:`~.cells.Cell.fail_point`)."""
        try:
            self.client.admin.command("configureFailPoint", FAIL_POINT, **command)
        except OperationFailure as error:
            raise FailPointError(
                f"the database refused configureFailPoint ({error}): start it with test commands enabled"
            ) from None

    def clear(self) -> None:
        """Switch it off."""
        self.client.admin.command("configureFailPoint", FAIL_POINT, mode="off")

    @contextmanager
    def armed(self, command: Mapping[str, Any]) -> Iterator[None]:
        """Armed inside the block, off after it whatever happens."""
        self.arm(command)
        try:
            yield
        finally:
            self.clear()

    def close(self) -> None:
        """Clear the fail point and close the client."""
        try:
            self.clear()
        finally:
            self.client.close()

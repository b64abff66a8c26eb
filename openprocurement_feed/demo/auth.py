"""The demo's users and access tokens, as upstream's.

Users come from an auth file in ini format (``demo.auth_file``): each
section is a group (``[brokers]``, ``[admins]``…), each line a user::

    [brokers]
    broker = broker-key,1234
    broker_r = broker-r-key,1234r

``name = key[,accreditations]``: the key is what the client sends, either as
``Authorization: Bearer <key>`` or as the user name of HTTP Basic
(``Authorization: Basic base64("<key>:")``); the accreditations are letters
and digits (``r`` lets a broker see restricted objects in full). A line
without a comma gets no accreditation.

Creating an object issues its owner's token once (``"access": {"token":
…}`` in the reply); only the token's SHA-512 hex digest is stored (the
``owner_token`` field). A change carries the token as ``?acc_token=``, the
``X-Access-Token`` header or ``access.token`` in the JSON body.
"""

from __future__ import annotations

import binascii
import configparser
import hashlib
import hmac
import importlib.resources
import os
import re
import secrets
from base64 import b64decode
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyramid.exceptions import ConfigurationError
from pyramid.request import Request

#: The stored field holding the SHA-512 hex digest of the owner's token.
TOKEN_FIELD = "owner_token"
#: The accreditation that shows restricted objects in full.
ACCR_RESTRICTED = "r"
#: The group whose users are brokers (the writers' group).
BROKERS = "brokers"
#: The auth file shipped with the package (``openprocurement-feed run``,
#: ``examples/demo.ini``), as a package resource.
PACKAGED_AUTH_FILE = "openprocurement_feed.demo:auth.ini"
ACCREDITATIONS_RE = re.compile(r"[0-9a-z]*", re.ASCII)
#: An asset spec ``package.module:path`` (a Windows drive ``C:`` is a path).
ASSET_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[A-Za-z_][A-Za-z0-9_]{2,}):(.+)")


@dataclass(frozen=True)
class User:
    """One user of the auth file."""

    name: str
    group: str
    accreditations: str = ""

    def accredited(self, level: str) -> bool:
        """True when the user holds accreditation ``level``."""
        return level in self.accreditations


class AuthUsers:
    """The users of an auth file, by key (keys are compared in constant time)."""

    def __init__(self, users: Mapping[str, User], source: str = "") -> None:
        self._users = dict(users)
        self.source = source

    def __len__(self) -> int:
        return len(self._users)

    def __iter__(self) -> Iterator[tuple[str, User]]:
        return iter(self._users.items())

    def find(self, key: str | None) -> User | None:
        """The user whose key is ``key``, or None. Every key is compared, in
        constant time, so the time taken says nothing of the keys."""
        if not key:
            return None
        given = key.encode("utf-8", "surrogateescape")
        found = None
        for known, user in self._users.items():
            if hmac.compare_digest(known.encode("utf-8"), given):
                found = user
        return found

    def key_of(self, group: str = BROKERS, accreditation: str | None = None) -> str | None:
        """The key of the first user of ``group`` (holding ``accreditation``
        when given), in the file's order; None when there is none."""
        for key, user in self._users.items():
            if user.group == group and (accreditation is None or user.accredited(accreditation)):
                return key
        return None


def resolve_path(value: str) -> str:
    """A file path, or the path of a package resource given as
    ``package:path`` (``openprocurement_feed.demo:auth.ini``)."""
    match = ASSET_RE.fullmatch(value)
    if match is None or os.path.exists(value):
        return value
    package, name = match.groups()
    try:
        return str(importlib.resources.files(package).joinpath(name))
    except (ModuleNotFoundError, TypeError) as error:
        raise ConfigurationError(f"Invalid setting 'demo.auth_file': {value!r}: {error}") from None


def read_auth_file(value: str) -> AuthUsers:
    """The users of the auth file ``value`` (a path or a package resource);
    a missing, unreadable or malformed file is a :class:`ConfigurationError`
    naming the file and the line's user."""
    path = resolve_path(value)
    where = f"auth file {path!r} (setting 'demo.auth_file')"
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # user names keep their case
    try:
        with open(path, encoding="utf-8") as handle:
            parser.read_file(handle)
    except OSError as error:
        raise ConfigurationError(f"Cannot read the {where}: {error.strerror or error}") from None
    except (configparser.Error, UnicodeDecodeError) as error:
        message = str(error).splitlines()[0]
        raise ConfigurationError(f"Invalid {where}: {message}") from None
    users: dict[str, User] = {}
    for group in parser.sections():
        for name, value_ in parser.items(group):
            key, _, accreditations = value_.partition(",")
            key, accreditations = key.strip(), accreditations.strip()
            if not key:
                raise ConfigurationError(f"Invalid {where}: user {name!r} of [{group}] has no key")
            if not ACCREDITATIONS_RE.fullmatch(accreditations):
                raise ConfigurationError(
                    f"Invalid {where}: user {name!r} of [{group}]: accreditations {accreditations!r} "
                    "must be digits and lower-case letters, e.g. 1234r"
                )
            if key in users:
                raise ConfigurationError(
                    f"Invalid {where}: user {name!r} of [{group}] has the key of user {users[key].name!r}"
                )
            users[key] = User(name, group, accreditations)
    if not users:
        raise ConfigurationError(f"Invalid {where}: it names no user")
    return AuthUsers(users, path)


def credentials_key(request: Request) -> str | None:
    """The key of the ``Authorization`` header: ``Bearer <key>``, or the
    user name of ``Basic base64("<key>:")``; None when absent or malformed."""
    header = request.headers.get("Authorization")
    if not header:
        return None
    method, _, value = header.strip().partition(" ")
    value = value.strip()
    if method.lower() == "bearer":
        return value or None
    if method.lower() != "basic":
        return None
    try:
        decoded = b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        text = decoded.decode("latin-1")
    return text.split(":", 1)[0] or None


def access_token(request: Request) -> str | None:
    """The access token of a request: ``?acc_token=``, the
    ``X-Access-Token`` header, or ``access.token`` in a JSON body."""
    try:
        token = request.GET.get("acc_token") or request.headers.get("X-Access-Token")
    except UnicodeDecodeError:
        return None
    if token:
        return str(token)
    if request.method in ("POST", "PATCH", "PUT") and request.content_type == "application/json":
        try:
            body: Any = request.json_body
        except (ValueError, LookupError, RecursionError):
            return None
        access = body.get("access") if isinstance(body, dict) else None
        token = access.get("token") if isinstance(access, dict) else None
        if isinstance(token, str) and token:
            return token
    return None


def new_token() -> str:
    """A fresh random access token (32 hex digits, as upstream's)."""
    return secrets.token_hex(16)


def hash_token(token: str) -> str:
    """The SHA-512 hex digest of ``token``: what the database keeps."""
    return hashlib.sha512(token.encode("utf-8", "surrogateescape")).hexdigest()


def token_matches(token: str | None, stored: Any) -> bool:
    """True when ``token`` hashes to ``stored`` (compared in constant time)."""
    if not token or not isinstance(stored, str) or not stored:
        return False
    return hmac.compare_digest(hash_token(token), stored)

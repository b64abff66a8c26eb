"""Bring your own store: serve the feeds through the host application's store.

An openprocurement-style API already keeps one store object (upstream's
``MongodbStore``, ``registry.mongodb``) with one :class:`~pymongo.MongoClient`
and per-resource collection classes on top. It mixes
:class:`~.database.FeedStoreMixin` into that class and hands the object to
``config.set_feed_store(store, collection=...)``; the feeds then read through
it, on its client: the include creates no client of its own.

What the package needs, and checks when the configuration is committed:

* from the host store (the mixin provides all of it): the methods
  :data:`STORE_METHODS` and the numbers :data:`STORE_NUMBERS`;
* a collection accessor ``collection(store, name) -> pymongo Collection``
  giving the collection of a feed (``name`` is the feed's collection name:
  ``add_feed(collection=...)``, else the ``mongodb.<feed>_collection``
  setting, else the feed name); by default ``store.database[name]`` (or
  ``store.db[name]``);
* the database the sequencer and the health view write to: ``database=``,
  else the database of the feeds' collections.

:class:`HostStore` wraps the host store into the interface the views, the
index creation, the sequencer and the health view use
(:class:`FeedBackend`); :class:`~.database.FeedStore`, the ready-made store,
has that interface itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.read_preferences import ReadPreference
from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationError

from .orders import PUBLIC_MODIFIED, FeedOrder
from .state import feed_state

log = logging.getLogger("openprocurement_feed.stores")  # its name from before the package had subpackages

#: The methods the feeds call on a host store (all from FeedStoreMixin).
STORE_METHODS = ("feed_page", "feed_order", "ensure_feed_indexes")
#: The numbers the mixin reads on the store; set from the feed settings.
STORE_NUMBERS = ("watermark_seconds", "max_limit", "max_time_ms")
#: The discriminator of ``set_feed_store``: a second call is a conflict.
STORE_DISCRIMINATOR = ("openprocurement_feed.store",)

CollectionAccessor = Callable[[Any, str], Collection[Any]]


@runtime_checkable
class FeedBackend(Protocol):
    """What the state's ``store`` offers the package.

    ``feed_page``/``feed_order``/``ensure_feed_indexes`` come from the mixin;
    ``collection(name)`` is the collection of a feed for writes and index
    creation (primary reads), ``feed_collection(name)`` the one feed pages
    read, ``db`` the database of the positions and health collections.
    """

    db: Database[Any]

    def feed_page(self, collection: Collection[Any], fields: Iterable[str], **options: Any) -> list[dict[str, Any]]: ...

    def feed_order(self, name: str | None = None) -> FeedOrder: ...

    def ensure_feed_indexes(
        self, collection: Collection[Any], scope_fields: Iterable[str] = (), key: str = PUBLIC_MODIFIED
    ) -> list[str]: ...

    def collection(self, name: str) -> Collection[Any]: ...

    def feed_collection(self, name: str) -> Collection[Any]: ...

    def close(self) -> None: ...


def missing_interface(store: Any) -> list[str]:
    """The names of :data:`STORE_METHODS` and :data:`STORE_NUMBERS` that
    ``store`` lacks (or has with the wrong kind of value)."""
    missing = [name for name in STORE_METHODS if not callable(getattr(store, name, None))]
    for name in STORE_NUMBERS:
        value = getattr(store, name, None)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            missing.append(name)
    return missing


def check_store(store: Any) -> None:
    """Raise a :class:`ConfigurationError` naming what ``store`` lacks."""
    missing = missing_interface(store)
    if missing:
        kind = type(store).__name__
        raise ConfigurationError(
            f"set_feed_store: the store {kind} lacks {', '.join(missing)}; "
            f"mix openprocurement_feed.FeedStoreMixin into the class {kind} "
            "(class MongodbStore(FeedStoreMixin, ...))."
        )


def default_accessor(store: Any, name: str) -> Collection[Any]:
    """``store.database[name]`` or ``store.db[name]`` (upstream keeps the
    database as ``store.database``)."""
    database = _store_database(store)
    if database is None:
        raise ConfigurationError(
            f"set_feed_store: the store {type(store).__name__} has no 'database' or 'db' "
            "attribute; pass collection=lambda store, name: ... to set_feed_store."
        )
    return database.get_collection(name)


def _store_database(store: Any) -> Database[Any] | None:
    for attribute in ("database", "db"):
        value = getattr(store, attribute, None)
        if isinstance(value, Database):
            return value
    return None


class HostStore:
    """The host's store seen through :class:`FeedBackend`.

    :param store: the host's store object (its class has the mixin).
    :param accessor: ``collection(store, name) -> Collection``.
    :param database: the database of the positions and health collections
        (default: the store's ``database``/``db``).

    Closing is the host's business: :meth:`close` leaves its client open.
    """

    def __init__(
        self, store: Any, accessor: CollectionAccessor | None = None, database: Database[Any] | None = None
    ) -> None:
        check_store(store)
        self.store = store
        self.accessor: CollectionAccessor = accessor or default_accessor
        self._database = database if database is not None else _store_database(store)

    def __getattr__(self, name: str) -> Any:
        # save_data, list and the host's own helpers stay reachable.
        store = self.__dict__.get("store")
        if store is None:
            raise AttributeError(name)
        return getattr(store, name)

    def feed_page(self, collection: Collection[Any], fields: Iterable[str], **options: Any) -> list[dict[str, Any]]:
        """The host store's :meth:`~.database.FeedStoreMixin.feed_page`."""
        return self.store.feed_page(collection, fields, **options)  # type: ignore[no-any-return]

    def feed_order(self, name: str | None = None) -> FeedOrder:
        """The host store's :meth:`~.database.FeedStoreMixin.feed_order`."""
        return self.store.feed_order(name)  # type: ignore[no-any-return]

    def ensure_feed_indexes(
        self, collection: Collection[Any], scope_fields: Iterable[str] = (), key: str = PUBLIC_MODIFIED
    ) -> list[str]:
        """The host store's :meth:`~.database.FeedStoreMixin.ensure_feed_indexes`."""
        return self.store.ensure_feed_indexes(collection, scope_fields, key)  # type: ignore[no-any-return]

    def feed_collection(self, name: str) -> Collection[Any]:
        """The collection of ``name`` as the host configured it (its read
        preference and read concern)."""
        found = self.accessor(self.store, name)
        if not isinstance(found, Collection):
            raise ConfigurationError(
                f"set_feed_store: the collection accessor returned {type(found).__name__} "
                f"for {name!r}; expected a pymongo Collection."
            )
        if found.name != name:
            raise ConfigurationError(
                f"set_feed_store: the collection accessor returned the collection "
                f"{found.name!r} for {name!r}; it must return the collection of that name "
                "(the sequencer follows collections by name)."
            )
        return found

    def collection(self, name: str) -> Collection[Any]:
        """The collection of ``name`` with primary reads (writes, indexes)."""
        return self.feed_collection(name).with_options(read_preference=ReadPreference.PRIMARY)

    @property
    def db(self) -> Database[Any]:
        """The database of the positions and health collections."""
        if self._database is None:
            raise ConfigurationError(
                f"set_feed_store: the store {type(self.store).__name__} has no 'database' "
                "or 'db' attribute; pass database=... to set_feed_store."
            )
        return self._database

    @property
    def client(self) -> MongoClient[Any]:
        """The host's client (the one client of the application)."""
        return self.db.client

    def check_collection(self, name: str) -> None:
        """Check at configuration time that feed collection ``name`` is
        reachable through the accessor, on the store's client."""
        found = self.feed_collection(name)
        if self._database is not None and found.database.client is not self._database.client:
            raise ConfigurationError(
                f"set_feed_store: the collection {name!r} belongs to another MongoClient "
                "than the store's database; use one client for the whole application."
            )

    def close(self) -> None:
        """Nothing: the host owns its client and closes it."""


def apply_numbers(store: Any, settings: Any) -> None:
    """Set the mixin's numbers on ``store`` from the feed settings."""
    store.watermark_seconds = settings.watermark_seconds
    store.max_limit = settings.max_limit
    store.max_time_ms = settings.max_time_ms


def set_feed_store(
    config: Configurator,
    store: Any,
    collection: CollectionAccessor | None = None,
    database: Database[Any] | None = None,
) -> HostStore:
    """The ``config.set_feed_store`` directive: serve every feed through ``store``.

    ``store`` is checked at once (a :class:`ConfigurationError` names each
    missing method or number); its ``watermark_seconds``, ``max_limit`` and
    ``max_time_ms`` are set from the feed settings; each feed's collection
    is checked through ``collection`` when the configuration is committed.
    The include then creates no client, and starts no embedded server: it
    creates its own store only when the configuration is complete (at
    commit, or under ``Configurator(autocommit=True)`` when the application
    is created, :mod:`.startup`), so this directive may come anywhere before
    that, after the include included. Calling it twice is a configuration
    conflict (an error at once under autocommit); calling it after the
    package's own store was created is an error.
    """
    state = feed_state(config.registry)
    created = state.store
    if created is not None and not isinstance(created, HostStore):
        raise ConfigurationError(
            f"set_feed_store: the feed store was already created ({type(created).__name__}, when the "
            "configuration was committed); call config.set_feed_store before config.commit() "
            "and config.make_wsgi_app()."
        )
    if config.autocommit and state.host_store is not None:
        # a committing configuration reports this as a conflict at commit
        raise ConfigurationError("set_feed_store: called twice; hand the feeds one store.")
    backend = HostStore(store, collection, database)
    apply_numbers(store, state.settings)

    def register() -> None:
        state.store = backend

    config.action(STORE_DISCRIMINATOR, register, order=-20)
    state.host_store = backend
    return backend

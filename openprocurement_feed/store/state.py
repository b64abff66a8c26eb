"""The package's state on a host's registry: one typed object.

``config.include("openprocurement_feed")`` creates one :class:`FeedState`
and registers it as a utility of the registry; every part of the package
reads what the include set up through :func:`feed_state` (or
:func:`find_feed_state` where the include may not have been done).

The names documented before the state was one object
(``registry.feed_settings``, ``feed_definitions``, ``feed_store``, ``feed_embedded``,
``feed_sequencer``, ``feed_longpoll``, ``feed_metrics``) stay on the
registry as read-only aliases: the state writes them when its field
changes, the package never reads them. Assigning one of them changes
nothing, except ``registry.feed_store`` before the configuration is
committed, which hands the feeds the host's store (documented in
``docs/setup.rst``, read once by :func:`assigned_store`).

The state lives beside the store because the store is the lowest part of
the package that reads it; the objects of the parts above it (the
sequencer, the waiters' notifier, the metrics, the verdicts, the feed
definitions) are typed by what the package asks of them here, and by their
own classes where they are made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from pyramid.exceptions import ConfigurationError
from zope.interface import Interface

#: The name of the state's utility on the registry (provided as ``Interface``).
UTILITY_NAME = "openprocurement_feed.state"

if TYPE_CHECKING:
    from ..settings import FeedSettings

#: The registry attribute each documented field is aliased as.
ALIASES = {
    "settings": "feed_settings",
    "definitions": "feed_definitions",
    "store": "feed_store",
    "embedded": "feed_embedded",
    "sequencer": "feed_sequencer",
    "longpoll": "feed_longpoll",
    "metrics": "feed_metrics",
}


@dataclass(eq=False)
class FeedState:
    """What the include set up on one registry.

    ``settings`` is there from the include on; ``store`` (and ``embedded``)
    once the configuration is committed; ``sequencer`` while an in-process
    follower runs; ``longpoll`` once the configuration is committed;
    ``metrics`` with ``feed.metrics_path`` set. ``definitions`` holds every
    feed ``add_feed`` registered, by name.
    """

    settings: FeedSettings
    #: every feed registered (:class:`~openprocurement_feed.feed.views.FeedDefinition`), by name
    definitions: dict[str, Any] = field(default_factory=dict)
    #: the store the feeds read: a :class:`~.backend.FeedBackend` (the
    #: package's :class:`~.database.FeedStore`, or the host's behind a
    #: :class:`~.backend.HostStore`)
    store: Any = None
    #: the host's store given to ``config.set_feed_store`` (None: the package makes its own)
    host_store: Any = None
    #: the embedded database server (:class:`~openprocurement_feed.embedded.server.EmbeddedServer`)
    embedded: Any = None
    #: the in-process :class:`~openprocurement_feed.commit.sequencer.Sequencer`
    sequencer: Any = None
    #: the :class:`~openprocurement_feed.longpoll.notifier.LongPollNotifier`
    longpoll: Any = None
    #: the :class:`~openprocurement_feed.operations.metrics.FeedMetrics` (None: metrics off)
    metrics: Any = None
    #: the :class:`~openprocurement_feed.operations.health.VerdictLog` of the health view
    verdicts: Any = None
    #: the store of each role's client (:func:`role_store`), by application name
    role_stores: dict[str, Any] = field(default_factory=dict)
    #: the ``config.add_openapi_paths`` hooks, in the order given
    openapi_hooks: list[Callable[[Any], Mapping[str, Any]]] = field(default_factory=list)
    #: the threads of the server in front of the app, when it says (the long-poll cap's default)
    server_threads: int | None = None
    #: under an autocommitting configuration, the start-up work kept until
    #: the application is created (:mod:`~openprocurement_feed.feed.startup`):
    #: ``(order, sequence, callable, action info)``; None before any
    deferred: list[tuple[int, int, Callable[[], None], Any]] | None = None
    #: what ``add_feed`` registered (a feed's name, its path's shape) and
    #: where, to report a second claim as a conflict
    claims: dict[Any, Any] = field(default_factory=dict)
    #: the registry whose aliases this state writes (set by :func:`attach_feed_state`)
    registry: Any = field(default=None, repr=False)

    def require_store(self) -> Any:
        """The store; a :class:`ConfigurationError` before it is created
        (before the configuration is committed)."""
        if self.store is None:
            raise ConfigurationError(
                "the feed store is not created yet: it is, when the configuration is committed "
                "(config.commit() or config.make_wsgi_app())"
            )
        return self.store

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        alias = ALIASES.get(name)
        registry = self.__dict__.get("registry")
        if alias is not None and registry is not None:
            setattr(registry, alias, value)


def attach_feed_state(registry: Any, state: FeedState) -> FeedState:
    """Register ``state`` as ``registry``'s and write its aliases."""
    registry.registerUtility(state, Interface, name=UTILITY_NAME)
    state.registry = registry
    for item in fields(state):
        if item.name in ALIASES:
            setattr(registry, ALIASES[item.name], getattr(state, item.name))
    return state


def find_feed_state(registry: Any) -> FeedState | None:
    """The state of ``registry``, or None when the include was not done."""
    found: FeedState | None = registry.queryUtility(Interface, name=UTILITY_NAME)
    return found


def feed_state(registry: Any) -> FeedState:
    """The state of ``registry``; a :class:`ConfigurationError` when the
    include was not done."""
    found = find_feed_state(registry)
    if found is None:
        raise ConfigurationError(
            'openprocurement_feed is not included in this configuration: call config.include("openprocurement_feed")'
        )
    return found


def assigned_store(registry: Any, state: FeedState) -> Any:
    """The store the host assigned to ``registry.feed_store`` after the
    include (the documented alternative to ``config.set_feed_store``), or
    None."""
    given = vars(registry).get(ALIASES["store"])
    return None if given is state.store else given


def role_store(registry: Any, app_name: str) -> Any:
    """The store of one role's client, opened once per name and closed by
    :func:`openprocurement_feed.shutdown`: a store like the registry's on a
    client named ``app_name``; the registry's own store when it cannot open
    one (a host's store: its one client)."""
    state = feed_state(registry)
    stores = state.role_stores
    if app_name not in stores:
        store = state.store
        opener = getattr(store, "role_store", None)
        stores[app_name] = opener(app_name) if callable(opener) else store
    return stores[app_name]

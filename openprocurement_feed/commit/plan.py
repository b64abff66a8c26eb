"""The sequencer's plan: what it follows, derived once from the feeds.

The feeds registered on an application (``add_feed``) decide what a
sequencer does: it *sequences* the collections of the feeds whose order is
sequenced (:attr:`~openprocurement_feed.store.orders.FeedOrder.sequenced`,
the commit order), with the scope fields those feeds filter on and the
fields their entries carry (the listing); it *observes* the collections of
the other feeds, to measure the lag the watermark bets on; and, with
``feed.reconcile_aggregates`` on, it keeps the reconciliation aggregates of
every feed's collection. :func:`sequencer_plan` derives that, as a
:class:`SequencerPlan`, and :func:`feed_plan` for an application's
state: the in-process sequencer, the ``sequence`` command and the health
view all read that one plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ..store.listing import normalize
from ..store.orders import order_kind


def _frozen(mapping: Mapping[str, tuple[str, ...]]) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class SequencerPlan:
    """What one sequencer follows.

    ``collections``: each sequenced collection → the scope fields its feeds
    filter on. ``observed``: the collections followed observe-only (those
    also sequenced are sequenced, not observed twice). ``listings``: each
    sequenced collection → the fields its entries carry. ``aggregates``:
    each collection whose reconciliation aggregates are kept → the scope
    fields of its feeds (empty with ``feed.reconcile_aggregates`` off).
    """

    collections: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _frozen({}))
    observed: tuple[str, ...] = ()
    listings: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _frozen({}))
    aggregates: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _frozen({}))

    @property
    def empty(self) -> bool:
        """True when there is nothing to follow."""
        return not self.collections and not self.observed

    @property
    def followed(self) -> tuple[str, ...]:
        """Every collection followed, sequenced or observed, each once."""
        return tuple(dict.fromkeys((*self.collections, *self.observed)))

    def observing_only(self) -> SequencerPlan:
        """The plan of a follower that only observes (``feed.sequencer =
        observe``): nothing sequenced."""
        return replace(self, collections=_frozen({}), listings=_frozen({}))

    def sequencing_only(self) -> SequencerPlan:
        """The plan without the observed collections."""
        return replace(self, observed=())


def _add_scope(found: dict[str, tuple[str, ...]], feed: Any) -> None:
    scopes = found.get(feed.collection, ())
    if feed.filter_field and feed.filter_field not in scopes:
        scopes += (feed.filter_field,)
    found[feed.collection] = scopes


def sequencer_plan(feeds: Iterable[Any], reconcile_aggregates: bool = True) -> SequencerPlan:
    """The plan of the feeds ``feeds`` (each a
    :class:`~openprocurement_feed.feed.views.FeedDefinition`: its
    ``collection``, ``order``, ``filter_field``, ``policy`` and
    ``allowed_fields``), keeping the aggregates when
    ``reconcile_aggregates``."""
    collections: dict[str, tuple[str, ...]] = {}
    shown: dict[str, list[str]] = {}
    observed: list[str] = []
    aggregates: dict[str, tuple[str, ...]] = {}
    for feed in feeds:
        if order_kind(feed.order).sequenced:
            _add_scope(collections, feed)
            # every field a feed may show and the fields its restricted rule reads
            shown.setdefault(feed.collection, []).extend(feed.policy.projection(feed.allowed_fields))
        else:
            observed.append(feed.collection)
        if reconcile_aggregates:
            _add_scope(aggregates, feed)
    return SequencerPlan(
        collections=_frozen(collections),
        observed=tuple(dict.fromkeys(observed)),
        listings=_frozen({name: normalize(fields) for name, fields in shown.items()}),
        aggregates=_frozen(aggregates),
    )


def feed_plan(state: Any) -> SequencerPlan:
    """The plan of an application's feeds: those of its
    :class:`~openprocurement_feed.store.state.FeedState` ``state``, with the
    aggregates its ``feed.reconcile_aggregates`` asks for (empty for None:
    the include was not done)."""
    if state is None:
        return SequencerPlan()
    return sequencer_plan(state.definitions.values(), state.settings.reconcile_aggregates)

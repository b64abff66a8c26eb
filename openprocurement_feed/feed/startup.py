"""The include's start-up work, run once the whole configuration is known.

Some of what the include does needs the host's whole configuration: the
store (the package's own, with the embedded server for ``embedded://``,
unless the host hands its own to ``config.set_feed_store``), each feed's
route place among the host's routes and its indexes, the in-process
sequencer (which follows every feed's collection). A committing
``Configurator`` (the default) runs configuration actions in order when it
commits: this work is registered as ordered actions. A
``Configurator(autocommit=True)`` (upstream openprocurement.api) runs each
action at once, in the middle of the host's configuration: the include would
create its own ``MongoClient`` (and start an embedded server) before the
host's next line could call ``set_feed_store``. :func:`defer` therefore
keeps the work in the state's ``deferred`` under autocommit, and
:func:`run_deferred` runs it, in the same order as a commit would, when the
application is created (``config.make_wsgi_app()`` sends
:class:`~pyramid.events.ApplicationCreated`). Nothing is created before
then, so a host store set at any point of the configuration wins.

Why not let ``set_feed_store`` close and replace a store the include made:
a ``MongoClient`` starts its monitor threads and connects when it is
created, and the embedded server is a process of its own; replacing them
means a second client and a throwaway server (and their connections) that
the host said it did not want. Deferring creates nothing that is not used.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from pyramid.config import Configurator
from pyramid.events import ApplicationCreated
from pyramid.exceptions import ConfigurationExecutionError

from ..store.state import feed_state, find_feed_state


def defer(config: Configurator, callable: Callable[[], None], order: int, discriminator: Any = None) -> None:
    """Run ``callable`` when the configuration is complete, after the
    deferred work of a lower ``order``: a configuration action of that order
    in a committing configuration; under autocommit, when the application is
    created (:func:`run_deferred`)."""
    if not config.autocommit:
        config.action(discriminator, callable, order=order)
        return
    state = feed_state(config.registry)
    if state.deferred is None:
        state.deferred = []
        config.add_subscriber(lambda event: run_deferred(event.app.registry), ApplicationCreated)
    pending = state.deferred
    pending.append((order, len(pending), callable, config.action_info))


def run_deferred(registry: Any) -> None:
    """Run the work :func:`defer` kept (under autocommit), lowest order
    first, each once. An error stops start-up as a commit would: a
    :class:`~pyramid.exceptions.ConfigurationExecutionError` pointing at the
    line that asked for the work."""
    state = find_feed_state(registry)
    pending = (state.deferred if state is not None else None) or []
    while pending:
        pending.sort(key=lambda entry: entry[:2])
        _, _, callable, info = pending.pop(0)
        try:
            callable()
        except ConfigurationExecutionError:
            raise
        except Exception as error:
            raise ConfigurationExecutionError(type(error), error, info).with_traceback(sys.exc_info()[2]) from None

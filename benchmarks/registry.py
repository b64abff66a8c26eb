"""The benchmarks ``python -m benchmarks`` knows: one :class:`Part` per
name, each with its module under ``benchmarks/`` and how that module is run
with the parsed options (:mod:`benchmarks.options`).

Registering a benchmark is one entry of :data:`PARTS`; its options, if it
has any, are a group of :func:`benchmarks.options.build_parser`."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Part:
    """One benchmark: its name on the command line, its module under
    ``benchmarks/``, and ``run(module, args)``, which runs it with the
    parsed options.

    ``in_all``: run by ``python -m benchmarks`` without a part (``make
    bench``); such a part is printed under a ``== name ==`` heading with
    its duration after it, also when it is run on its own. ``exits``: what
    ``run`` returns is the exit status (otherwise the status is 0)."""

    name: str
    module: str
    run: Callable[[ModuleType, argparse.Namespace], Any]
    in_all: bool = False
    exits: bool = False

    def load(self) -> ModuleType:
        """The part's module, imported now (each imports what it measures)."""
        return importlib.import_module(f"{__package__}.{self.module}")


def run_reconcile(module: ModuleType, args: argparse.Namespace) -> None:
    """The endpoint's side, then the k-differences table of
    ``reconcile-client`` at the largest size (``--table-orders``)."""
    module.run(args.reconcile_sizes, args.keeper_seconds, args.keeper_rounds, keeper=args.keeper_rounds > 0)
    if args.table_orders:
        from . import reconcile_client

        print()
        reconcile_client.run(tenders=max(args.reconcile_sizes), orders=args.table_orders, scenario=False)


#: Every benchmark, in the order of ``--help`` (and of a run without a part).
PARTS: tuple[Part, ...] = (
    Part(
        "cost",
        "feed_cost",
        lambda m, a: m.run(docs=a.docs, repeat=a.repeat, profile=a.profile, iterations=a.iterations, rounds=a.rounds),
        in_all=True,
    ),
    Part("plans", "plans", lambda m, a: m.run(docs=a.docs), in_all=True),
    Part("codec", "codec", lambda m, a: m.run(), in_all=True),
    Part("sync", "sync", lambda m, a: m.run(tenders=a.docs), in_all=True),
    Part(
        "sequencer",
        "sequencer",
        lambda m, a: m.run(
            seconds=a.write_seconds, catch_up_count=a.catch_up, rate=a.delay_rate, docs=a.docs, repeat=a.repeat
        ),
        in_all=True,
    ),
    Part("metrics", "metrics_cost", lambda m, a: m.run(docs=a.docs, repeat=a.repeat), in_all=True),
    Part(
        "orders",
        "orders",
        lambda m, a: m.run(
            seconds=a.order_seconds,
            rounds=a.order_rounds,
            hot_rounds=0 if a.no_hot else a.hot_rounds,
            docs=a.docs,
            plot=a.plot,
        ),
        in_all=True,
    ),
    Part("host", "host_listing", lambda m, a: m.run(docs=a.docs), in_all=True),
    Part("load", "load", lambda m, a: m.run(a.duration, a.crawlers, a.writers, a.tenders, a.write_rate), exits=True),
    Part("demo-rate", "demo_rate", lambda m, a: m.run(rate=a.patch_rate, seconds=a.write_seconds)),
    Part("restricted", "restricted_cost", lambda m, a: m.run()),
    Part("longpoll", "longpoll", lambda m, a: m.run(changes=a.changes, wait_seconds=a.wait_seconds)),
    Part("save", "save", lambda m, a: m.run()),
    Part("roles", "roles", lambda m, a: m.run(rounds=a.rounds + 1)),
    Part("recovery", "recovery", lambda m, a: m.run(rounds=a.recovery_rounds, hold=a.recovery_hold)),
    Part(
        "reconcile-client",
        "reconcile_client",
        lambda m, a: m.run(
            tenders=a.reconcile_tenders,
            orders=a.reconcile_orders,
            scenario=not a.no_scenario,
            plot=a.plot,
            save=a.reconcile_save,
            load=a.reconcile_load,
            aggregates=not a.reconcile_no_aggregates,
        ),
    ),
    Part("reconcile", "reconcile", run_reconcile),
    Part("embedded-leak", "embedded_leak", lambda m, a: m.run()),
    Part("mirror", "mirror", lambda m, a: m.run(a.mirror_sizes, bad=a.bad_rows, bad_only=a.bad_rows_only)),
    Part("soak", "soak", lambda m, a: m.run(a), exits=True),
    Part("scale", "scale.run", lambda m, a: m.from_args(a)),
)


def part(name: str) -> Part:
    """The benchmark called ``name``; KeyError when there is none."""
    for one in PARTS:
        if one.name == name:
            return one
    raise KeyError(name)

"""The plain-text report of a feed's query plans (``openprocurement-feed explain``)."""

from __future__ import annotations

from ..store.orders import COMMITTED_TS
from .query_plans import Analysis


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _bound_note(analysis: Analysis) -> str:
    """How the shapes of ``analysis`` are bounded, for the report's first line."""
    if not analysis.sequenced:
        return "watermark $expr left out: it is a residual filter"
    if analysis.checkpoint is None:
        return (
            "commit order; NO CHECKPOINT YET: the feed answers 503 until its sequencer "
            "runs; bounded here by the newest position"
        )
    stamp = analysis.checkpoint
    return f"commit order, bounded by the checkpoint Timestamp({stamp.time}, {stamp.inc})"


def format_analysis(analysis: Analysis) -> str:
    """A plain-text report of an :class:`Analysis`, with what it means."""
    lines = [
        f"Feed query plans of {analysis.namespace}: {analysis.documents} documents, "
        f"server {analysis.server_version}, {len(analysis.reports)} shapes "
        f"in {analysis.seconds:.1f} s ({_bound_note(analysis)}).",
    ]
    if analysis.missing_indexes:
        create = "FeedStoreMixin.ensure_feed_indexes" + (
            f"(positions, scope_fields, key={COMMITTED_TS!r})" if analysis.sequenced else ""
        )
        lines.append(f"Missing feed indexes (create them with {create}):")
        for spec in analysis.missing_indexes:
            keys = ", ".join(f"{name}: {direction}" for name, direction in spec["keys"])
            lines.append(f"  {spec['name']}: {{{keys}}}")
    else:
        lines.append("Feed indexes: all present.")
    width = max((len(r.shape.name) for r in analysis.reports), default=10)
    lines.append("")
    lines.append(
        f"{'shape':<{width}}  {'plan (top first)':<42} {'index used':<18} {'expected':<18} "
        f"{'keys/doc':>8} {'docs/doc':>8} {'returned':>8}"
    )
    for report in analysis.reports:
        plan = " > ".join(report.stages)
        flag = "" if report.served else "  <-- " + ("collection scan" if report.collection_scan else "in-memory sort")
        lines.append(
            f"{report.shape.name:<{width}}  {plan:<42} {', '.join(report.indexes) or '-':<18} "
            f"{report.shape.expected_index:<18} {_ratio(report.per_returned(report.keys_examined)):>8} "
            f"{_ratio(report.per_returned(report.docs_examined)):>8} {report.returned:>8}{flag}"
        )
    lines.append("")
    problems = analysis.problems
    if not problems and not analysis.missing_indexes:
        lines.append("Every shape is served by an index, in index order: no collection scan, no in-memory sort.")
        return "\n".join(lines)
    if problems:
        scans = sum(report.collection_scan for report in problems)
        sorts = sum(report.in_memory_sort for report in problems)
        lines.append(
            f"{len(problems)} of {len(analysis.reports)} shapes are not served by an index "
            f"({scans} collection scans, {sorts} in-memory sorts). A feed page then costs "
            "time in proportion to the whole collection, not to the page."
        )
    if analysis.development_server:
        lines.append(
            "Note: this is the embedded development server. Its planner sorts in memory even "
            "when an index matches the sort, and often scans the collection, so these plans "
            "cannot judge the indexes; run this command against MongoDB to do that."
        )
    elif problems and not analysis.missing_indexes:
        lines.append(
            "The feed indexes exist but are not used for these shapes: check that their "
            f"keys start with the equality fields, then ({analysis.key}, _id), and that "
            "queries and indexes agree on the partial filter {is_public: true}."
        )
    return "\n".join(lines)

"""Restricted objects: what a feed item shows, and to whom.

Upstream listings hide restricted objects (defence procurement): an object
whose ``config.restricted`` is true shows only its ``id``,
``"restricted": true`` and a few safe fields (``dateModified``) to everyone
but its owner, whatever ``opt_fields`` ask for. The owner (the request's
authenticated user id equals one of the object's owner fields) sees the item
as anyone sees an unrestricted one.

An :class:`ItemPolicy` is built once per feed by ``add_feed(...,
restricted=True, owner_fields=..., safe_fields=..., masks=...,
item_view=...)``. The view calls :meth:`ItemPolicy.renderer` once per page
and the renderer once per row. The fields the rule reads
(:attr:`ItemPolicy.rule_fields`) are projected from the database but never
shown unless the client asked for them and may see them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pyramid.exceptions import ConfigurationError
from pyramid.request import Request

#: The document field that marks a restricted object.
RESTRICTED_FIELD = "config.restricted"

ItemView = Callable[[Request, dict[str, Any], Sequence[str]], dict[str, Any]]
RowRenderer = Callable[[dict[str, Any], Sequence[str]], dict[str, Any]]


def lookup(row: Mapping[str, Any], path: str | tuple[str, ...]) -> Any:
    """The value at ``path`` in ``row`` (dotted, or split in parts; None
    when absent). Rows are the database's dicts."""
    value: Any = row
    for part in path.split(".") if isinstance(path, str) else path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


@dataclass(frozen=True, eq=False)
class ItemPolicy:
    """How one feed renders its items.

    :param restricted: honour ``config.restricted`` on the documents.
    :param owner_fields: document fields (dotted paths allowed) holding the
        owner's user id; a request whose ``authenticated_userid`` equals one
        of them sees the whole item.
    :param safe_fields: fields a restricted item still shows to everyone
        (when the page asks for them, as ``dateModified`` always is).
    :param masks: field → the value a restricted item shows instead of the
        real one to everyone but its owner (when the page asks for it).
    :param item_view: ``item_view(request, row, fields) -> dict``, the
        host's own rendering of the items a client may see in full; the
        default shows ``id`` and the requested fields. A restricted
        item seen by someone else than its owner never reaches it.
    """

    restricted: bool = False
    owner_fields: tuple[str, ...] = ("owner",)
    safe_fields: tuple[str, ...] = ("dateModified",)
    masks: Mapping[str, Any] = field(default_factory=dict)
    item_view: ItemView | None = None
    #: the owner fields split into their parts (derived)
    owner_paths: tuple[tuple[str, ...], ...] = field(init=False, repr=False, default=())

    def __post_init__(self) -> None:
        for name in ("owner_fields", "safe_fields"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise ConfigurationError(f"{name} must be a sequence of field names, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "owner_paths", tuple(tuple(f.split(".")) for f in self.owner_fields))
        if self.restricted and not self.owner_fields:
            raise ConfigurationError("a restricted feed needs at least one owner field")
        if self.item_view is not None and not callable(self.item_view):
            raise ConfigurationError(f"item_view must be callable, got {self.item_view!r}")
        object.__setattr__(self, "masks", MappingProxyType(dict(self.masks)))

    @classmethod
    def build(
        cls,
        restricted: bool,
        owner_fields: Sequence[str],
        safe_fields: Sequence[str],
        masks: Mapping[str, Any] | None,
        item_view: ItemView | None,
    ) -> ItemPolicy:
        """The policy of ``add_feed``'s arguments, checked: field lists must
        be sequences of names (a bare string is refused, not split)."""
        for name, value in (("owner_fields", owner_fields), ("safe_fields", safe_fields)):
            if isinstance(value, str):
                raise ConfigurationError(f"{name} must be a sequence of field names, got the string {value!r}")
        return cls(bool(restricted), tuple(owner_fields), tuple(safe_fields), dict(masks or {}), item_view)

    @property
    def active(self) -> bool:
        """True when the policy changes anything over the plain rendering."""
        return self.restricted or self.item_view is not None

    @property
    def rule_fields(self) -> tuple[str, ...]:
        """The database fields the rule reads (projected, not shown)."""
        if not self.restricted:
            return ()
        return (RESTRICTED_FIELD, *self.owner_fields)

    def projection(self, fields: Sequence[str]) -> tuple[str, ...]:
        """``fields`` and the rule's fields, without a path and its parent
        both (the database refuses such a projection)."""
        wanted = list(fields)
        for name in self.rule_fields:
            parents = [name.split(".")[0]] if "." in name else []
            if name not in wanted and not any(parent in wanted for parent in parents):
                wanted.append(name)
        return tuple(wanted)

    def is_owner(self, row: Mapping[str, Any], user: Any) -> bool:
        """True when ``user`` owns the document of ``row``."""
        return user is not None and any(lookup(row, path) == user for path in self.owner_paths)

    def restricted_item(self, row: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
        """What everyone but the owner sees of a restricted row."""
        item: dict[str, Any] = {"id": row["_id"], "restricted": True}
        for name in fields:
            if name in self.masks:
                item[name] = self.masks[name]
            elif name in self.safe_fields and name in row:
                item[name] = row[name]
        return item

    def renderer(self, request: Request, default: RowRenderer) -> RowRenderer:
        """The renderer of one page's rows for ``request``; ``default``
        renders the items shown in full when there is no ``item_view``."""
        show: RowRenderer = default
        if self.item_view is not None:
            item_view = self.item_view

            def show(row: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
                return item_view(request, row, fields)

        if not self.restricted:
            return show
        user = request.authenticated_userid

        def render(row: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
            config = row.get("config")
            if isinstance(config, dict) and config.get("restricted") and not self.is_owner(row, user):
                return self.restricted_item(row, fields)
            return show(row, fields)

        return render

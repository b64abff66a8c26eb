"""Restricted objects: what a feed item shows, and to whom.

Upstream listings hide restricted objects (defence procurement): an object
whose ``config.restricted`` is true shows only its ``id``,
``"restricted": true``, a few safe fields (``dateModified``) and the
placeholders of its masked fields to everyone but its owner, whatever
``opt_fields`` ask for. The owner (the request's authenticated user id
equals one of the object's owner fields) sees the item as anyone sees an
unrestricted one, and so does a request granted the feed's
``restricted_permission`` by the host's security policy (upstream: brokers
accredited ``r``).

An :class:`ItemPolicy` is built once per feed by ``add_feed(...,
restricted=True, owner_fields=..., safe_fields=..., masks=...,
item_view=..., restricted_permission=...)``. The view calls
:meth:`ItemPolicy.renderer` once per page and the renderer once per row.
The fields the rule reads (:attr:`ItemPolicy.rule_fields`) are projected
from the database but never shown unless the client asked for them and may
see them.

The same rule covers a host's object views: :func:`mask_object` gives a
restricted object with its masked fields (``masks``, dotted paths through
objects and lists) replaced by placeholders such as :data:`MASK_STRING`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from pyramid.exceptions import ConfigurationError
from pyramid.interfaces import ISecurityPolicy
from pyramid.request import Request

from .state import find_feed_state

#: The document field that marks a restricted object.
RESTRICTED_FIELD = "config.restricted"
#: The conventional permission that shows restricted objects in full
#: (``add_feed(..., restricted_permission=RESTRICTED_PERMISSION)``).
RESTRICTED_PERMISSION = "view_restricted"

# Placeholders of masked fields, as upstream's (``openprocurement.api.mask``):
#: a masked text
MASK_STRING = "Приховано"
#: a masked English text (``*_en`` fields)
MASK_STRING_EN = "Hidden"
#: a masked amount or quantity
MASK_NUMBER = 0.0
#: a masked count
MASK_INTEGER = 0
#: a masked date (the epoch, in Kyiv's offset as upstream writes it)
MASK_DATE = "1970-01-01T03:00:00+03:00"
#: a masked identifier (32 zeros, the shape of an object id)
MASK_ID = "0" * 32

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
    :param restricted_permission: a Pyramid permission; a request the
        host's security policy grants it (``request.has_permission``) sees
        restricted objects in full, as their owners do. None (the default):
        owners only. Without a security policy no request holds it.

    ``masks`` keys are field names or dotted paths (``procuringEntity``,
    ``items.description``); a path goes through objects and through every
    element of a list. The feed shows a mask when a page asks for that field
    (``opt_fields``); :func:`mask_object` replaces each path of a whole
    object.
    """

    restricted: bool = False
    owner_fields: tuple[str, ...] = ("owner",)
    safe_fields: tuple[str, ...] = ("dateModified",)
    masks: Mapping[str, Any] = field(default_factory=dict)
    item_view: ItemView | None = None
    restricted_permission: str | None = None
    #: the document field(s) whose true value marks a restricted object
    #: (``config.restricted``; with upstream's older masking also ``is_masked``)
    restricted_field: str | tuple[str, ...] = "config.restricted"
    #: the owner fields split into their parts (derived)
    owner_paths: tuple[tuple[str, ...], ...] = field(init=False, repr=False, default=())

    def __post_init__(self) -> None:
        for name in ("owner_fields", "safe_fields"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise ConfigurationError(f"{name} must be a sequence of field names, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "owner_paths", tuple(tuple(f.split(".")) for f in self.owner_fields))
        if self.restricted and not self.owner_fields and self.restricted_permission is None:
            # without either, nobody could ever see a restricted item in full
            raise ConfigurationError("a restricted feed needs at least one owner field or a restricted_permission")
        if self.item_view is not None and not callable(self.item_view):
            raise ConfigurationError(f"item_view must be callable, got {self.item_view!r}")
        masks = {}
        for path, value in self.masks.items():
            masks[mask_key(path)] = value
        object.__setattr__(self, "masks", masks)
        names = (self.restricted_field,) if isinstance(self.restricted_field, str) else self.restricted_field
        if (
            not isinstance(names, tuple)
            or not names
            or not all(isinstance(name, str) and all(name.split(".")) for name in names)
        ):
            raise ConfigurationError(
                f"restricted_field must be a field name, a dotted path or a tuple of them, "
                f"got {self.restricted_field!r}"
            )
        object.__setattr__(self, "restricted_field", names[0] if len(names) == 1 else names)
        if self.restricted_permission is not None and (
            not isinstance(self.restricted_permission, str) or not self.restricted_permission
        ):
            raise ConfigurationError(
                f"restricted_permission must be a permission name, got {self.restricted_permission!r}"
            )
        object.__setattr__(self, "masks", MappingProxyType(dict(self.masks)))

    @classmethod
    def build(
        cls,
        restricted: bool,
        owner_fields: Sequence[str],
        safe_fields: Sequence[str],
        masks: Mapping[str, Any] | None,
        item_view: ItemView | None,
        restricted_permission: str | None = None,
        restricted_field: str | tuple[str, ...] = "config.restricted",
    ) -> ItemPolicy:
        """The policy of ``add_feed``'s arguments, checked: field lists must
        be sequences of names (a bare string is refused, not split)."""
        for name, value in (("owner_fields", owner_fields), ("safe_fields", safe_fields)):
            if isinstance(value, str):
                raise ConfigurationError(f"{name} must be a sequence of field names, got the string {value!r}")
        if masks is not None and not isinstance(masks, Mapping):
            raise ConfigurationError(f"masks must be a mapping of field → placeholder, got {masks!r}")
        return cls(
            bool(restricted),
            tuple(owner_fields),
            tuple(safe_fields),
            dict(masks or {}),
            item_view,
            restricted_permission,
            restricted_field,
        )

    @property
    def active(self) -> bool:
        """True when the policy changes anything over the plain rendering."""
        return self.restricted or self.item_view is not None

    @property
    def rule_fields(self) -> tuple[str, ...]:
        """The database fields the rule reads (projected, not shown)."""
        if not self.restricted:
            return ()
        return (*self.restricted_fields, *self.owner_fields)

    def projection(self, fields: Sequence[str]) -> tuple[str, ...]:
        """``fields`` and the rule's fields, without a path and its parent
        both (the database refuses such a projection)."""
        wanted = list(fields)
        for name in self.rule_fields:
            parents = [name.split(".")[0]] if "." in name else []
            if name not in wanted and not any(parent in wanted for parent in parents):
                wanted.append(name)
        return tuple(wanted)

    @property
    def restricted_fields(self) -> tuple[str, ...]:
        """The fields of ``restricted_field``, as a tuple."""
        names = self.restricted_field
        return (names,) if isinstance(names, str) else names

    def is_restricted(self, doc: Mapping[str, Any]) -> bool:
        """True when one of ``doc``'s ``restricted_field`` is true."""
        if self.restricted_field == RESTRICTED_FIELD:
            return is_restricted(doc)
        return any(
            is_restricted(doc) if name == RESTRICTED_FIELD else lookup(doc, name) is True
            for name in self.restricted_fields
        )

    def is_owner(self, row: Mapping[str, Any], user: Any) -> bool:
        """True when ``user`` owns the document of ``row``."""
        return user is not None and any(lookup(row, path) == user for path in self.owner_paths)

    def sees_everything(self, request: Request) -> bool:
        """True when ``request`` holds the feed's ``restricted_permission``
        (never without a security policy: Pyramid would grant it to all)."""
        if self.restricted_permission is None:
            return False
        if request.registry.queryUtility(ISecurityPolicy) is None:
            return False
        return bool(request.has_permission(self.restricted_permission))

    def may_see(self, request: Request, doc: Mapping[str, Any]) -> bool:
        """True when ``request`` may see ``doc`` in full: it is not
        restricted (or the policy does not restrict), the request's user
        owns it, or the request holds ``restricted_permission``."""
        if not self.restricted or not self.is_restricted(doc):
            return True
        return self.is_owner(doc, request.authenticated_userid) or self.sees_everything(request)

    def mask(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of the restricted ``doc`` as everyone but its owner sees
        it: each path of ``masks`` replaced by its placeholder. A policy
        without masks shows the object as its feed item: ``id``,
        ``restricted`` and the safe fields only."""
        if not self.masks:
            item: dict[str, Any] = {"id": doc.get("_id", doc.get("id")), "restricted": True}
            item.update((name, doc[name]) for name in self.safe_fields if name in doc)
            return item
        masked = copy.deepcopy(dict(doc))
        for path, value in self.masks.items():
            mask_path(masked, path.split("."), value)
        return masked

    def restricted_item(self, row: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
        """What everyone but the owner sees of a restricted row: its ``id``,
        ``restricted``, the placeholders of the asked fields that ``masks``
        names, and the asked safe fields with the ``masks`` paths under them
        replaced (``contracts.suppliers.name`` inside a safe ``contracts``).
        With ``safe_fields=("*",)`` every asked field is shown so, as
        upstream's restricted listings show it."""
        item: dict[str, Any] = {"id": row["_id"], "restricted": True}
        every = ALL_FIELDS in self.safe_fields
        for name in fields:
            if name in self.masks:
                item[name] = self.masks[name]
            elif (every or name in self.safe_fields) and name in row:
                value = row[name]
                nested = self.nested_masks.get(name)
                if nested:
                    value = copy.deepcopy(value)
                    for parts, placeholder in nested:
                        mask_path(value, parts, placeholder)
                item[name] = value
        return item

    @cached_property
    def nested_masks(self) -> dict[str, list[tuple[list[str], Any]]]:
        """The ``masks`` paths below a top-level field, by that field."""
        found: dict[str, list[tuple[list[str], Any]]] = {}
        for path, value in self.masks.items():
            head, _, rest = path.partition(".")
            if rest:
                found.setdefault(head, []).append((rest.split("."), value))
        return found

    def render_rows(
        self,
        request: Request,
        rows: Sequence[dict[str, Any]],
        fields: Sequence[str],
        default: RowRenderer,
        plain: Callable[[Sequence[dict[str, Any]], Sequence[str]], list[dict[str, Any]]] | None = None,
    ) -> list[dict[str, Any]]:
        """The items of one page's ``rows`` for ``request``: what
        :meth:`renderer` gives row by row, in order, asking the request the
        same questions (its permission, then its user) once per page.

        ``plain(rows, fields)``, when given, renders every row as ``default``
        does in one call (the feed's loop without a Python call per row):
        without an ``item_view``, the rows shown in full are rendered by it
        and only the restricted rows are rendered again, masked.
        """
        if plain is None or self.item_view is not None or not self.restricted:
            render = self.renderer(request, default)
            return [render(row, fields) for row in rows]
        if self.sees_everything(request):
            return plain(rows, fields)
        user = request.authenticated_userid
        items = plain(rows, fields)
        if self.restricted_field == RESTRICTED_FIELD:
            for index, row in enumerate(rows):
                if "config" not in row:  # is_restricted(row), written out
                    continue
                config = row["config"]
                if isinstance(config, dict) and config.get("restricted") and not self.is_owner(row, user):
                    items[index] = self.restricted_item(row, fields)
        else:
            for index, row in enumerate(rows):
                if self.is_restricted(row) and not self.is_owner(row, user):
                    items[index] = self.restricted_item(row, fields)
        return items

    def renderer(self, request: Request, default: RowRenderer) -> RowRenderer:
        """The renderer of one page's rows for ``request``; ``default``
        renders the items shown in full when there is no ``item_view``."""
        show: RowRenderer = default
        if self.item_view is not None:
            item_view = self.item_view

            def show(row: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
                return item_view(request, row, fields)

        if not self.restricted or self.sees_everything(request):
            return show
        user = request.authenticated_userid

        def render(row: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
            if self.is_restricted(row) and not self.is_owner(row, user):
                return self.restricted_item(row, fields)
            return show(row, fields)

        return render


#: ``safe_fields=(ALL_FIELDS,)``: a restricted item shows every asked field,
#: masked (upstream's restricted listings).
ALL_FIELDS = "*"
#: An upstream mask path (JSONPath): ``$.`` and ``[*]`` are dropped. A name
#: may carry several ``[*]`` (``$.changes[*].documents[*][*].title``, which
#: upstream's contract mapping holds): as in jsonpath-ng, a ``[*]`` applied
#: to an element that is not a list is that element, and lists of lists are
#: walked through (:func:`mask_path`), so repeated ones mean one.
JSONPATH_RE = re.compile(r"^(\$\.)?[A-Za-z_][A-Za-z0-9_]*(\[\*\])*(\.[A-Za-z_][A-Za-z0-9_]*(\[\*\])*)*$")


def mask_key(path: Any) -> str:
    """A ``masks`` key as a dotted path: a field name, a dotted path
    (``contracts.suppliers.name``, through objects and every element of a
    list), or upstream's JSONPath form of one (``$.contracts[*].suppliers[*].name``).

    :raises ConfigurationError: for anything else (JSONPath filters,
        indexes, recursive descent).
    """
    if not isinstance(path, str) or not JSONPATH_RE.match(path):
        raise ConfigurationError(
            f"masks: {path!r} is not a field name, a dotted path or a JSONPath such as "
            "'$.contracts[*].suppliers[*].name' (only '$.', names and '[*]')"
        )
    return path.removeprefix("$.").replace("[*]", "")


def is_restricted(doc: Mapping[str, Any]) -> bool:
    """True when ``doc``'s ``config.restricted`` is set."""
    config = doc.get("config")
    return isinstance(config, dict) and bool(config.get("restricted"))


def mask_path(node: Any, parts: Sequence[str], value: Any) -> None:
    """Replace the value at ``parts`` under ``node`` by (a copy of)
    ``value``, through objects and every element of a list; absent paths
    are left alone."""
    if isinstance(node, list):
        for element in node:
            mask_path(element, parts, value)
        return
    if not isinstance(node, dict) or parts[0] not in node:
        return
    if len(parts) == 1:
        node[parts[0]] = copy.deepcopy(value)
    else:
        mask_path(node[parts[0]], parts[1:], value)


def feed_policy(request: Request, feed: str | ItemPolicy | Any) -> ItemPolicy:
    """The item policy of ``feed``: a feed's name (its ``add_feed``
    registration), a :class:`~openprocurement_feed.feed.views.FeedDefinition`
    or an :class:`ItemPolicy`."""
    if isinstance(feed, ItemPolicy):
        return feed
    if isinstance(feed, str):
        state = find_feed_state(request.registry)
        definitions = state.definitions if state is not None else {}
        if feed not in definitions:
            raise LookupError(f"no feed named {feed!r} is registered (add_feed)")
        found: ItemPolicy = definitions[feed].policy
        return found
    policy = getattr(feed, "policy", None)
    if not isinstance(policy, ItemPolicy):
        raise TypeError(f"expected a feed name, a feed definition or an ItemPolicy, got {feed!r}")
    return policy


def mask_object(request: Request, feed: str | ItemPolicy | Any, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as ``request`` may see it, by the restricted rule of ``feed``
    (its name, its definition or its :class:`ItemPolicy`).

    For a host's own object view (``GET /tenders/{id}``): pass the stored
    document (the rule reads its owner fields and ``config.restricted``).
    The owner, a request holding the feed's ``restricted_permission`` and
    everyone for an unrestricted object get ``doc`` itself; everyone else a
    copy with the feed's ``masks`` applied (:meth:`ItemPolicy.mask`).
    """
    policy = feed_policy(request, feed)
    if policy.may_see(request, doc):
        return doc
    return policy.mask(doc)

"""The demo API's resources: tenders, plans and contracts.

Each :class:`Resource` says what the demo serves for one kind of object:
its path and collection, its generated public identifier (``tenderID``,
``planID``, ``contractID``), the status vocabulary of openprocurement
objects of that kind, and the fields its feed lets clients ask for with
``opt_fields`` — upstream's listing fields, so a crawler written for the
public API runs unchanged against the demo.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Fields every object's owner is the server: ignored in a request body (the
#: server's values win), as upstream's create and edit roles drop them.
SERVER_FIELDS = frozenset({"id", "dateModified", "dateCreated"})
#: Storage fields no client may send: a body holding one is refused (422).
#: ``owner`` is the authenticated user that created the object (a
#: restricted tender is shown in full to it), ``owner_token`` the hash of
#: its access token.
INTERNAL_FIELDS = frozenset(
    {"_id", "_rev", "public_modified", "public_ts", "is_public", "is_test", "owner", "owner_token"}
)


@dataclass(frozen=True)
class Resource:
    """One kind of object of the demo API.

    :param name: the path under the route prefix, the feed's name and the
        collection's (``tenders``).
    :param singular: names the route parameter (``{singular}_id``) and the
        routes (``demo.{singular}``).
    :param id_field: the generated public identifier (``tenderID``).
    :param id_prefix: how that identifier starts (``UA``, ``UA-P``).
    :param id_suffix: how it ends after the day's counter and ``-a``.
    :param statuses: the statuses a body may set.
    :param default_status: the status of an object created without one.
    :param feed_fields: the fields the feed allows in ``opt_fields``.
    """

    name: str
    singular: str
    id_field: str
    id_prefix: str
    statuses: tuple[str, ...]
    default_status: str
    feed_fields: tuple[str, ...]
    id_suffix: str = ""

    @property
    def key(self) -> str:
        """The route parameter holding the object's ``id``."""
        return f"{self.singular}_id"

    @property
    def server_fields(self) -> frozenset[str]:
        """The fields of this resource a request body cannot set."""
        return SERVER_FIELDS | {self.id_field}


#: Statuses of tenders across procedures (open, EU, competitive dialogue,
#: reporting and negotiation); ``draft`` hides a tender from the feed.
TENDER_STATUSES = (
    "draft",
    "draft.pending",
    "draft.stage2",
    "active.enquiries",
    "active.tendering",
    "active.pre-qualification",
    "active.pre-qualification.stand-still",
    "active.stage2.pending",
    "active.stage2.waiting",
    "active.auction",
    "active.qualification",
    "active.qualification.stand-still",
    "active.awarded",
    "active",
    "complete",
    "cancelled",
    "unsuccessful",
)
PLAN_STATUSES = ("draft", "scheduled", "cancelled", "complete")
CONTRACT_STATUSES = ("pending", "pending.winner-signing", "active", "terminated", "cancelled")

TENDERS = Resource(
    name="tenders",
    singular="tender",
    id_field="tenderID",
    id_prefix="UA",
    statuses=TENDER_STATUSES,
    default_status="active.enquiries",
    feed_fields=(
        "dateCreated",
        "dateModified",
        "qualificationPeriod",
        "auctionPeriod",
        "awardPeriod",
        "status",
        "tenderID",
        "lots",
        "contracts",
        "agreements",
        "procuringEntity",
        "procurementMethodType",
        "procurementMethod",
        "next_check",
        "mode",
        "stage2TenderID",
    ),
)
PLANS = Resource(
    name="plans",
    singular="plan",
    id_field="planID",
    id_prefix="UA-P",
    statuses=PLAN_STATUSES,
    default_status="scheduled",
    feed_fields=("dateCreated", "planID", "dateModified"),
)
CONTRACTS = Resource(
    name="contracts",
    singular="contract",
    id_field="contractID",
    id_prefix="UA",
    statuses=CONTRACT_STATUSES,
    default_status="active",
    feed_fields=("dateCreated", "contractID", "dateModified", "status"),
    id_suffix="-c1",
)
#: Every resource of the demo, in the order the docs and ``run`` list them.
RESOURCES = (TENDERS, PLANS, CONTRACTS)

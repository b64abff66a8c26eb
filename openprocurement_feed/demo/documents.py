"""Real-shaped tenders, plans and contracts for the demo, generated from a seed.

The shapes follow openprocurement objects as crawlers receive them: a
procuring entity with an ``UA-EDR`` identifier, an address with a region
and a contact point; items with a ``ДК021`` classification, a unit, a
quantity, a delivery address and dates; a value with VAT; the periods of the
procedure; lots with their own values. Statuses are consistent with the
procedure type. Sizes vary as real ones do: most objects hold a few items
(a few KB), some dozens, a few hundreds (a few hundred KB).

Everything is drawn from the ``random.Random`` passed in, so one seed gives
the same documents every time. Server-owned fields (``id``, ``tenderID``,
``dateModified``…) are left out: the API sets them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

#: Regions of Ukraine as ``address.region`` spells them.
REGIONS = (
    "м. Київ",
    "Київська область",
    "Львівська область",
    "Одеська область",
    "Харківська область",
    "Дніпропетровська область",
    "Вінницька область",
    "Полтавська область",
    "Черкаська область",
    "Житомирська область",
    "Закарпатська область",
    "Волинська область",
    "Рівненська область",
    "Чернігівська область",
    "Сумська область",
    "Запорізька область",
)
LOCALITIES = ("Київ", "Львів", "Одеса", "Харків", "Дніпро", "Вінниця", "Полтава", "Черкаси")
#: ``ДК021`` codes with their descriptions.
CLASSIFICATIONS = (
    ("33190000-8", "Медичне обладнання та вироби медичного призначення різні"),
    ("09130000-9", "Нафта і дистиляти"),
    ("45230000-8", "Будівництво трубопроводів, ліній зв’язку та електропередач"),
    ("30230000-0", "Комп’ютерне обладнання"),
    ("39130000-2", "Офісні меблі"),
    ("15810000-9", "Хлібопродукти, свіжовипечені хлібобулочні та кондитерські вироби"),
    ("90910000-9", "Послуги з прибирання"),
    ("50110000-9", "Послуги з ремонту і технічного обслуговування мототранспортних засобів"),
    ("22810000-1", "Паперові чи картонні реєстраційні журнали"),
    ("09310000-5", "Електрична енергія"),
)
UNITS = (
    ("H87", "штуки"),
    ("KGM", "кілограми"),
    ("LTR", "літр"),
    ("E48", "послуга"),
    ("MTK", "метри квадратні"),
    ("KWH", "кіловат-година"),
    ("PK", "упаковка"),
)
WORDS = [
    "закупівля",
    "постачання",
    "ремонт",
    "капітальний",
    "поточний",
    "обладнання",
    "медичного",
    "призначення",
    "послуги",
    "з",
    "прибирання",
    "приміщень",
    "будівництво",
    "реконструкція",
    "шкільних",
    "закладів",
    "програмне",
    "забезпечення",
    "паливо",
    "дизельне",
    "бензин",
    "електрична",
    "енергія",
    "харчування",
    "лабораторні",
    "реагенти",
    "транспортні",
    "засоби",
    "технічне",
    "обслуговування",
    "папір",
    "офісний",
    "меблі",
    "охорона",
    "об'єктів",
]
#: Procedure types with the statuses their tenders pass through.
PROCEDURES = (
    (
        "belowThreshold",
        "open",
        (
            "active.enquiries",
            "active.tendering",
            "active.auction",
            "active.qualification",
            "active.awarded",
            "complete",
            "cancelled",
            "unsuccessful",
        ),
    ),
    (
        "aboveThresholdUA",
        "open",
        (
            "active.tendering",
            "active.auction",
            "active.qualification",
            "active.awarded",
            "complete",
            "cancelled",
            "unsuccessful",
        ),
    ),
    (
        "aboveThresholdEU",
        "open",
        (
            "active.tendering",
            "active.pre-qualification",
            "active.pre-qualification.stand-still",
            "active.auction",
            "active.qualification",
            "active.awarded",
            "complete",
            "unsuccessful",
        ),
    ),
    ("reporting", "limited", ("active", "complete", "cancelled")),
    ("negotiation", "limited", ("active", "complete", "cancelled", "unsuccessful")),
)
DOCUMENT_TYPES = (
    "tenderNotice",
    "technicalSpecifications",
    "biddingDocuments",
    "evaluationCriteria",
    "contractProforma",
    "eligibilityCriteria",
)


def words(rng: random.Random, count: int) -> str:
    """``count`` words of procurement vocabulary."""
    return " ".join(rng.choice(WORDS) for _ in range(count))


def hex_id(rng: random.Random) -> str:
    """A 32-digit hex identifier (nested objects' ``id``)."""
    return f"{rng.getrandbits(128):032x}"


def iso(moment: datetime) -> str:
    """``moment`` as upstream writes dates (Kyiv offset, microseconds)."""
    return moment.astimezone(timezone(timedelta(hours=2))).isoformat()


def item_count(rng: random.Random) -> int:
    """How many items an object holds: mostly a few, sometimes dozens,
    rarely hundreds (the long tail that makes real objects big)."""
    draw = rng.random()
    if draw < 0.80:
        return rng.randint(1, 5)
    if draw < 0.98:
        return rng.randint(10, 40)
    return rng.randint(100, 300)


def address(rng: random.Random) -> dict[str, Any]:
    return {
        "countryName": "Україна",
        "region": rng.choice(REGIONS),
        "locality": rng.choice(LOCALITIES),
        "postalCode": f"{rng.randint(1000, 99999):05d}",
        "streetAddress": f"вул. {rng.choice(WORDS).capitalize()}, {rng.randint(1, 200)}",
    }


def organization(rng: random.Random, kind: bool = True) -> dict[str, Any]:
    """A procuring entity (or supplier, ``kind=False``) with identifier,
    address and contact point."""
    name = f"{words(rng, 3).capitalize()} {rng.choice(('КП', 'ТОВ', 'ДП', 'КНП'))}"
    org: dict[str, Any] = {
        "name": name,
        "identifier": {"scheme": "UA-EDR", "id": f"{rng.randint(0, 99_999_999):08d}", "legalName": name},
        "address": address(rng),
        "contactPoint": {
            "name": f"{rng.choice(('Іван', 'Олена', 'Петро', 'Марія'))} {rng.choice(('Коваль', 'Шевченко', 'Бондар'))}",
            "email": f"zakupivli{rng.randint(1, 999)}@example.com",
            "telephone": f"+380{rng.randint(100_000_000, 999_999_999)}",
        },
    }
    if kind:
        org["kind"] = rng.choice(("general", "authority", "central", "special", "other"))
    return org


def value(rng: random.Random, amount: float) -> dict[str, Any]:
    return {"amount": round(amount, 2), "currency": "UAH", "valueAddedTaxIncluded": rng.random() < 0.8}


def period(start: datetime, days: float) -> dict[str, str]:
    return {"startDate": iso(start), "endDate": iso(start + timedelta(days=days))}


def item(rng: random.Random, start: datetime, lot_id: str | None) -> dict[str, Any]:
    code, description = rng.choice(CLASSIFICATIONS)
    unit_code, unit_name = rng.choice(UNITS)
    data: dict[str, Any] = {
        "id": hex_id(rng),
        "description": words(rng, rng.randint(4, 14)),
        "classification": {"scheme": "ДК021", "id": code, "description": description},
        "additionalClassifications": [
            {
                "scheme": "ДКПП",
                "id": f"{rng.randint(10, 99)}.{rng.randint(10, 99)}.{rng.randint(10, 99)}",
                "description": words(rng, 3),
            }
        ],
        "unit": {"code": unit_code, "name": unit_name, "value": value(rng, rng.uniform(1, 5000))},
        "quantity": rng.randint(1, 1000),
        "deliveryDate": period(start + timedelta(days=30), rng.randint(30, 300)),
        "deliveryAddress": address(rng),
    }
    if lot_id:
        data["relatedLot"] = lot_id
    return data


def documents(rng: random.Random, start: datetime, count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": hex_id(rng),
            "documentType": rng.choice(DOCUMENT_TYPES),
            "title": f"{words(rng, 2)}.pdf",
            "format": "application/pdf",
            "url": f"https://public-docs.example.com/get/{hex_id(rng)}?KeyID=a8968c46",
            "hash": f"md5:{hex_id(rng)}",
            "datePublished": iso(start),
            "dateModified": iso(start),
        }
        for _ in range(count)
    ]


def _started(rng: random.Random) -> datetime:
    return datetime(2025, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=rng.randint(0, 365 * 86400))


def tender(rng: random.Random, mode: str | None = None) -> dict[str, Any]:
    """A tender of a random procedure type, in one of its statuses."""
    method_type, method, statuses = rng.choice(PROCEDURES)
    status = rng.choice(statuses)
    start = _started(rng)
    count = item_count(rng)
    lots: list[dict[str, Any]] = []
    if method == "open" and count > 1 and rng.random() < 0.4:
        lots = [
            {
                "id": hex_id(rng),
                "title": words(rng, 4),
                "description": words(rng, 10),
                "status": "active",
                "value": value(rng, rng.uniform(10_000, 2_000_000)),
                "minimalStep": value(rng, rng.uniform(100, 10_000)),
            }
            for _ in range(rng.randint(2, min(10, count)))
        ]
    items = [item(rng, start, rng.choice(lots)["id"] if lots else None) for _ in range(count)]
    total = sum(lot["value"]["amount"] for lot in lots) if lots else rng.uniform(5_000, 20_000_000)
    data: dict[str, Any] = {
        "title": words(rng, rng.randint(3, 8)).capitalize(),
        "description": words(rng, rng.randint(10, 40)),
        "status": status,
        "procurementMethod": method,
        "procurementMethodType": method_type,
        "submissionMethod": "electronicAuction",
        "awardCriteria": "lowestCost",
        "procuringEntity": organization(rng),
        "value": value(rng, total),
        "items": items,
        "documents": documents(rng, start, rng.randint(1, 8)),
    }
    if method == "open":
        data["minimalStep"] = value(rng, total * 0.01)
        data["enquiryPeriod"] = period(start, 7)
        data["tenderPeriod"] = period(start + timedelta(days=7), 8)
        if status not in ("active.enquiries", "active.tendering"):
            data["auctionPeriod"] = period(start + timedelta(days=16), 0.1)
            data["awardPeriod"] = {"startDate": iso(start + timedelta(days=16, hours=3))}
            data["next_check"] = iso(start + timedelta(days=20))
        if method_type == "aboveThresholdEU" and status != "active.tendering":
            data["qualificationPeriod"] = period(start + timedelta(days=15), 5)
    if lots:
        data["lots"] = lots
    if status in ("active.awarded", "complete"):
        data["contracts"] = [
            {"id": hex_id(rng), "status": "active" if status == "complete" else "pending", "awardID": hex_id(rng)}
        ]
    if mode:
        data["mode"] = mode
    return data


def plan(rng: random.Random, mode: str | None = None) -> dict[str, Any]:
    """A procurement plan with its budget and items."""
    start = _started(rng)
    code, description = rng.choice(CLASSIFICATIONS)
    amount = rng.uniform(5_000, 50_000_000)
    entity = organization(rng)
    data: dict[str, Any] = {
        "status": rng.choice(("scheduled", "scheduled", "scheduled", "complete", "cancelled")),
        "procuringEntity": entity,
        "buyers": [{key: entity[key] for key in ("name", "identifier", "address")}],
        "classification": {"scheme": "ДК021", "id": code, "description": description},
        "budget": {
            "id": f"{rng.randint(1, 9999)}",
            "description": words(rng, rng.randint(4, 12)),
            "amount": round(amount, 2),
            "amountNet": round(amount / 1.2, 2),
            "currency": "UAH",
            "year": start.year,
            "period": period(start, 365),
            "breakdown": [
                {
                    "id": hex_id(rng),
                    "title": rng.choice(("state", "local", "own")),
                    "description": words(rng, 4),
                    "value": value(rng, amount / 2),
                }
            ],
        },
        "tender": {
            "procurementMethod": "open",
            "procurementMethodType": rng.choice(("belowThreshold", "aboveThresholdUA")),
            "tenderPeriod": {"startDate": iso(start + timedelta(days=30))},
        },
        "items": [item(rng, start, None) for _ in range(item_count(rng))],
        "documents": documents(rng, start, rng.randint(0, 3)),
    }
    if mode:
        data["mode"] = mode
    return data


def contract(rng: random.Random, tender_id: str | None = None, mode: str | None = None) -> dict[str, Any]:
    """A contract of a tender (``tender_id``) with its supplier and items."""
    start = _started(rng)
    amount = rng.uniform(5_000, 20_000_000)
    data: dict[str, Any] = {
        "status": rng.choice(("active", "active", "active", "terminated", "pending")),
        "title": words(rng, rng.randint(3, 8)).capitalize(),
        "description": words(rng, rng.randint(10, 30)),
        "contractNumber": f"{rng.randint(1, 999)}/{start.year}",
        "tender_id": tender_id or hex_id(rng),
        "awardID": hex_id(rng),
        "dateSigned": iso(start),
        "period": period(start, rng.randint(30, 365)),
        "value": dict(value(rng, amount), amountNet=round(amount / 1.2, 2)),
        "procuringEntity": organization(rng),
        "suppliers": [organization(rng, kind=False)],
        "items": [item(rng, start, None) for _ in range(item_count(rng))],
        "documents": documents(rng, start, rng.randint(1, 4)),
    }
    if mode:
        data["mode"] = mode
    return data


def patch(resource: str, rng: random.Random) -> dict[str, Any]:
    """A change a broker would make to an object of ``resource``: new texts
    and, per kind, a new value, budget or period (status kept)."""
    start = _started(rng)
    if resource == "plans":
        amount = rng.uniform(5_000, 50_000_000)
        return {
            "budget": {
                "id": f"{rng.randint(1, 9999)}",
                "description": words(rng, 6),
                "amount": round(amount, 2),
                "amountNet": round(amount / 1.2, 2),
                "currency": "UAH",
                "year": start.year,
                "period": period(start, 365),
            }
        }
    changed: dict[str, Any] = {"description": words(rng, rng.randint(10, 30))}
    if resource == "contracts":
        changed["period"] = period(start, rng.randint(30, 365))
    else:
        changed["title"] = words(rng, rng.randint(3, 8)).capitalize()
    return changed


#: The generator of each resource's documents (the demo's collections).
GENERATORS: dict[str, Callable[..., dict[str, Any]]] = {
    "tenders": tender,
    "plans": plan,
    "contracts": contract,
}

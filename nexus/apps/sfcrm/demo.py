"""A lived-in sample data set for the sfcrm App (`nexus demo load`): Accounts, Contacts and
Opportunities with plausible names, industries, stages, amounts and dates.

Deterministic for a seed. Produces neutral record operations only; the caller runs them
through Runtime's record operations (permissions, validation rules and flows apply). Every
record carries a stable `External_Id__c` (`demo-account-0007`, `demo-contact-0007-1`, ...):
the loader creates only the records whose external id is not there yet, so loading again
adds nothing.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import date, timedelta

from nexus.contracts.records import MAX_BATCH, MutateItem

Build = Callable[[dict[str, list[str]]], list[MutateItem]]
#: the field that makes each sample record findable again (so a second load adds nothing)
DEMO_KEY = "External_Id__c"

_PREFIXES = (
    "Acme", "Globex", "Initech", "Umbrella", "Stark", "Wayne", "Wonka", "Cyberdyne", "Soylent",
    "Hooli", "Vandelay", "Gringotts", "Tyrell", "Aperture", "Monarch", "Oscorp", "Nakatomi",
    "Pied Piper", "Blue Sun", "Massive Dynamic",
)  # fmt: skip
_SUFFIXES = (
    "Industries", "Labs", "Holdings", "Systems", "Logistics", "Foods", "Energy", "Health",
    "Media", "Partners", "Robotics", "Analytics", "Outfitters", "Capital", "Works",
)  # fmt: skip
_INDUSTRIES = ("Technology", "Manufacturing", "Retail", "Healthcare", "Finance", "Energy",
               "Media", "Education", "Transportation", "Hospitality")  # fmt: skip
_CITIES = (("Berlin", "Germany"), ("Lyon", "France"), ("Austin", "United States"),
           ("Toronto", "Canada"), ("Osaka", "Japan"), ("Leeds", "United Kingdom"),
           ("Porto", "Portugal"), ("Denver", "United States"),
           ("Melbourne", "Australia"))  # fmt: skip
_FIRST = ("Ada", "Grace", "Alan", "Linus", "Margaret", "Ken", "Barbara", "Dennis", "Frances",
          "Edsger", "Radia", "Tim", "Katherine", "John", "Hedy", "Niklaus", "Sophie",
          "Yukihiro")  # fmt: skip
_LAST = ("Lovelace", "Hopper", "Turing", "Torvalds", "Hamilton", "Thompson", "Liskov",
         "Ritchie", "Allen", "Dijkstra", "Perlman", "Berners-Lee", "Johnson", "McCarthy",
         "Lamarr", "Wirth", "Wilson", "Matsumoto")  # fmt: skip
_TITLES = ("CEO", "CTO", "VP Sales", "Head of Operations", "Procurement Manager", "Engineer",
           "Director of IT", "CFO", "Office Manager")  # fmt: skip
_STAGES = (("Prospecting", 3), ("Qualification", 3), ("Needs Analysis", 2),
           ("Value Proposition", 2), ("Proposal/Price Quote", 2), ("Negotiation/Review", 1),
           ("Closed Won", 2), ("Closed Lost", 1))  # fmt: skip
_PRODUCTS = ("Platform Licence", "Support Renewal", "Expansion", "Pilot", "Services Bundle",
             "Enterprise Upgrade")  # fmt: skip


def demo_batches(accounts: int, *, seed: int = 7) -> Iterator[tuple[str, Build]]:
    """(object, build) in dependency order; `build(ids)` sees the ids created so far."""
    rng = random.Random(seed)  # noqa: S311 - sample data, not security
    today = date.today()
    account_rows = [_account(rng, i) for i in range(accounts)]
    for start in range(0, accounts, MAX_BATCH):
        yield "Account", _fixed(account_rows[start : start + MAX_BATCH])
    contacts = [
        (i, _contact(rng, f"demo-contact-{i:04d}-{k}"))
        for i in range(accounts)
        for k in range(rng.randint(1, 3))
    ]
    for start in range(0, len(contacts), MAX_BATCH):
        yield "Contact", _of_accounts(contacts[start : start + MAX_BATCH])
    opportunities = [
        (i, _opportunity(rng, account_rows[i], today, f"demo-opportunity-{i:04d}-{k}"))
        for i in range(accounts)
        for k in range(rng.randint(0, 3))
    ]
    for start in range(0, len(opportunities), MAX_BATCH):
        yield "Opportunity", _of_accounts(opportunities[start : start + MAX_BATCH])


def _fixed(items: list[MutateItem]) -> Build:
    def build(_ids: dict[str, list[str]]) -> list[MutateItem]:
        return items

    return build


def _of_accounts(rows: list[tuple[int, MutateItem]]) -> Build:
    """Items whose AccountId is the id of the account created at that index."""

    def build(ids: dict[str, list[str]]) -> list[MutateItem]:
        return [_with(item, ids, i) for i, item in rows]

    return build


def _with(item: MutateItem, ids: dict[str, list[str]], account_index: int) -> MutateItem:
    return item.model_copy(
        update={"fields": {**item.fields, "AccountId": ids["Account"][account_index]}}
    )


def _account(rng: random.Random, i: int) -> MutateItem:
    name = f"{rng.choice(_PREFIXES)} {rng.choice(_SUFFIXES)}"
    if i >= len(_PREFIXES) * len(_SUFFIXES) // 3:
        name += f" {i}"
    city, country = rng.choice(_CITIES)
    employees = rng.choice((12, 45, 120, 480, 1500, 9000, 42000))
    return MutateItem(
        op="create",
        object="Account",
        fields={
            DEMO_KEY: f"demo-account-{i:04d}",
            "Name": name,
            "Type": rng.choice(("Prospect", "Customer - Direct", "Customer - Channel")),
            "Industry": rng.choice(_INDUSTRIES),
            "Rating": rng.choice(("Hot", "Warm", "Warm", "Cold")),
            "AnnualRevenue": employees * rng.randint(80, 260) * 1000,
            "NumberOfEmployees": employees,
            "Phone": f"+1 555 {rng.randint(100, 999)} {rng.randint(1000, 9999)}",
            "Website": f"https://www.{name.split()[0].lower()}.example",
            "BillingCity": city,
            "BillingCountry": country,
        },
    )


def _contact(rng: random.Random, external_id: str) -> MutateItem:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    return MutateItem(
        op="create",
        object="Contact",
        fields={
            DEMO_KEY: external_id,
            "FirstName": first,
            "LastName": last,
            "Name": f"{first} {last}",
            "Title": rng.choice(_TITLES),
            "Email": f"{first}.{last}{rng.randint(1, 999)}@example.com".lower(),
            "LeadSource": rng.choice(("Web", "Phone Inquiry", "Partner Referral", "Trade Show")),
        },
    )


def _opportunity(
    rng: random.Random, account: MutateItem, today: date, external_id: str
) -> MutateItem:
    stages = [s for s, weight in _STAGES for _ in range(weight)]
    stage = rng.choice(stages)
    closed = stage.startswith("Closed")
    offset = -rng.randint(1, 120) if closed else rng.randint(5, 180)
    return MutateItem(
        op="create",
        object="Opportunity",
        fields={
            DEMO_KEY: external_id,
            "Name": f"{account.fields['Name']} - {rng.choice(_PRODUCTS)}",
            "StageName": stage,
            "Amount": rng.randint(5, 400) * 500,
            "CloseDate": (today + timedelta(days=offset)).isoformat(),
            "Type": rng.choice(("New Business", "Existing Business - Upgrade")),
        },
    )

"""Queue service properties (Get/Set Queue Service Properties: Logging, HourMetrics,
MinuteMetrics, Cors), Get Queue Service Stats, and CORS as Azure enforces it from the stored rules.

The properties are the server's (leaseq has one namespace of queues, so one set of properties,
whatever the account): kept server-wide (`QueueCore.settings`, namespace "azure.properties"),
so every replica and worker answers the same and they survive restarts. Set replaces the
sections its body holds and keeps the others, as Azure does. leaseq stores Logging and Metrics
and returns them (tools read them); it writes no Azure-format logs or metrics tables: its access
log and Prometheus metrics are where that is (README).

CORS (Azure's "CORS support for the Azure Storage services"): up to 5 rules; a request with an
Origin matches the first rule whose AllowedOrigins holds the origin (or "*") and whose
AllowedMethods holds the method (for a preflight: Access-Control-Request-Method, and each of
Access-Control-Request-Headers must be allowed by AllowedHeaders: a name, a prefix ending in "*",
or "*")."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass

from ...auth import Principal
from ...core import QueueCore
from . import xml_bodies

NAMESPACE = "azure.properties"
MAX_RULES = 5
MAX_LIST = 64  # origins, headers of one rule
MAX_ITEM = 256  # characters of one origin or header
MAX_CORS_CHARS = 2048  # all rules' values together, without the XML (Azure's limit)
METHODS = ("DELETE", "GET", "HEAD", "MERGE", "POST", "OPTIONS", "PUT", "PATCH")
_DEFAULT_RETENTION = {"Enabled": False, "Days": None}
DEFAULTS: dict[str, dict[str, object]] = {
    "Logging": {
        "Version": "1.0",
        "Delete": False,
        "Read": False,
        "Write": False,
        "RetentionPolicy": _DEFAULT_RETENTION,
    },
    "HourMetrics": {
        "Version": "1.0",
        "Enabled": False,
        "IncludeAPIs": None,
        "RetentionPolicy": _DEFAULT_RETENTION,
    },
    "MinuteMetrics": {
        "Version": "1.0",
        "Enabled": False,
        "IncludeAPIs": None,
        "RetentionPolicy": _DEFAULT_RETENTION,
    },
}


@dataclass(frozen=True)
class CorsRule:
    origins: tuple[str, ...]
    methods: tuple[str, ...]
    max_age: int
    exposed: tuple[str, ...]
    allowed: tuple[str, ...]

    def allows_origin(self, origin: str) -> bool:
        return "*" in self.origins or origin.lower() in (o.lower() for o in self.origins)

    def allows_header(self, header: str) -> bool:
        name = header.strip().lower()
        for allowed in self.allowed:
            allowed = allowed.lower()
            if allowed == "*" or allowed == name:
                return True
            if allowed.endswith("*") and name.startswith(allowed[:-1]):
                return True
        return False


# --- parsing a Set body -------------------------------------------------------------------------


def _bool(element: ET.Element, name: str, required: bool = True) -> bool | None:
    text = element.findtext(name)
    if text is None:
        if required:
            raise xml_bodies.invalid_xml(f"{element.tag}/{name} is required")
        return None
    if text.strip().lower() not in ("true", "false"):
        raise xml_bodies.invalid_xml(f"{element.tag}/{name} is true or false")
    return text.strip().lower() == "true"


def _retention(element: ET.Element) -> dict[str, object]:
    policy = element.find("RetentionPolicy")
    if policy is None:
        return dict(_DEFAULT_RETENTION)
    enabled = _bool(policy, "Enabled")
    days_text = policy.findtext("Days")
    days = None
    if enabled:
        if days_text is None or not days_text.strip().isdigit() or not 1 <= int(days_text) <= 365:
            raise xml_bodies.invalid_xml("RetentionPolicy/Days is 1 .. 365 when enabled")
        days = int(days_text)
    return {"Enabled": enabled, "Days": days}


def _section(element: ET.Element) -> dict[str, object]:
    version = (element.findtext("Version") or "1.0").strip()[:16]
    if element.tag == "Logging":
        return {
            "Version": version,
            "Delete": _bool(element, "Delete"),
            "Read": _bool(element, "Read"),
            "Write": _bool(element, "Write"),
            "RetentionPolicy": _retention(element),
        }
    enabled = _bool(element, "Enabled")
    include = _bool(element, "IncludeAPIs", required=bool(enabled))
    return {
        "Version": version,
        "Enabled": enabled,
        "IncludeAPIs": include if enabled else None,
        "RetentionPolicy": _retention(element),
    }


def _items(rule: ET.Element, name: str, required: bool) -> list[str]:
    text = (rule.findtext(name) or "").strip()
    if not text:
        if required:
            raise xml_bodies.invalid_xml(f"CorsRule/{name} is required")
        return []
    items = [item.strip() for item in text.split(",") if item.strip()]
    if len(items) > MAX_LIST or any(len(item) > MAX_ITEM for item in items):
        raise xml_bodies.invalid_xml(
            f"CorsRule/{name}: at most {MAX_LIST} items of at most {MAX_ITEM} characters"
        )
    return items


def _cors(element: ET.Element) -> list[dict[str, object]]:
    rules = []
    size = 0
    for rule in element:
        if rule.tag != "CorsRule":
            raise xml_bodies.invalid_xml(f"Unexpected element Cors/{rule.tag[:64]}")
        methods = [m.upper() for m in _items(rule, "AllowedMethods", True)]
        if any(m not in METHODS for m in methods):
            raise xml_bodies.invalid_xml(f"CorsRule/AllowedMethods are of {', '.join(METHODS)}")
        age = (rule.findtext("MaxAgeInSeconds") or "0").strip()
        if not age.isdigit() or int(age) > 2**31 - 1:
            raise xml_bodies.invalid_xml("CorsRule/MaxAgeInSeconds is a non-negative integer")
        origins = _items(rule, "AllowedOrigins", True)
        exposed = _items(rule, "ExposedHeaders", False)
        allowed = _items(rule, "AllowedHeaders", False)
        size += sum(len(",".join(items)) for items in (origins, methods, exposed, allowed))
        rules.append(
            {
                "AllowedOrigins": origins,
                "AllowedMethods": methods,
                "MaxAgeInSeconds": int(age),
                "ExposedHeaders": exposed,
                "AllowedHeaders": allowed,
            }
        )
    if len(rules) > MAX_RULES:
        raise xml_bodies.invalid_xml(f"At most {MAX_RULES} CORS rules")
    if size > MAX_CORS_CHARS:
        raise xml_bodies.invalid_xml(
            f"The CORS rules hold {size} characters, over Azure's {MAX_CORS_CHARS}"
        )
    return rules


def parse(body: bytes) -> dict[str, str]:
    """The sections a Set body holds, each as the JSON the settings keep."""
    root = xml_bodies.parse(body)
    if root.tag != "StorageServiceProperties":
        raise xml_bodies.invalid_xml("The root element must be StorageServiceProperties")
    changes: dict[str, str] = {}
    for element in root:
        if element.tag in DEFAULTS:
            changes[element.tag] = json.dumps(_section(element))
        elif element.tag == "Cors":
            changes["Cors"] = json.dumps(_cors(element))
        else:
            raise xml_bodies.invalid_xml(f"Unexpected element {element.tag[:64]}")
    return changes


# --- answers ------------------------------------------------------------------------------------


def _fields(values: Mapping[str, object]) -> str:
    out = []
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, dict):
            out.append(f"<{name}>{_fields(value)}</{name}>")
        else:
            shown = ("true" if value else "false") if isinstance(value, bool) else value
            out.append(xml_bodies.element(name, shown))
    return "".join(out)


def document(stored: Mapping[str, str]) -> bytes:
    parts = ["<StorageServiceProperties>"]
    for name, default in DEFAULTS.items():
        values = json.loads(stored[name]) if name in stored else default
        parts.append(f"<{name}>{_fields(values)}</{name}>")
    parts.append("<Cors>")
    for rule in json.loads(stored.get("Cors", "[]")):
        parts.append("<CorsRule>")
        for name in ("AllowedOrigins", "AllowedMethods", "ExposedHeaders", "AllowedHeaders"):
            parts.append(xml_bodies.element(name, ",".join(rule[name])))
        parts.append(xml_bodies.element("MaxAgeInSeconds", rule["MaxAgeInSeconds"]))
        parts.append("</CorsRule>")
    parts.append("</Cors></StorageServiceProperties>")
    return xml_bodies.document("".join(parts))


def stats_document(last_sync: str) -> bytes:
    """Get Queue Service Stats: the secondary is this same store, so always live and in sync."""
    return xml_bodies.document(
        "<StorageServiceStats><GeoReplication>"
        + xml_bodies.element("Status", "live")
        + xml_bodies.element("LastSyncTime", last_sync)
        + "</GeoReplication></StorageServiceStats>"
    )


# --- storage and CORS ---------------------------------------------------------------------------


async def load(core: QueueCore, principal: Principal | None) -> dict[str, str]:
    return await core.settings(principal, NAMESPACE)


async def save(core: QueueCore, principal: Principal | None, changes: dict[str, str]) -> None:
    await core.update_settings(principal, NAMESPACE, dict(changes))


async def cors_rules(core: QueueCore) -> list[CorsRule]:
    """The stored rules, read by the server for a request that names an Origin."""
    stored = await core.settings(None, NAMESPACE)
    return [
        CorsRule(
            tuple(rule["AllowedOrigins"]),
            tuple(rule["AllowedMethods"]),
            int(rule["MaxAgeInSeconds"]),
            tuple(rule["ExposedHeaders"]),
            tuple(rule["AllowedHeaders"]),
        )
        for rule in json.loads(stored.get("Cors", "[]"))
    ]


def match(
    rules: list[CorsRule], origin: str, method: str, headers: list[str] | None = None
) -> CorsRule | None:
    """The first rule that allows this origin and method (and, for a preflight, headers)."""
    for rule in rules:
        if not rule.allows_origin(origin) or method.upper() not in rule.methods:
            continue
        if headers is not None and not all(rule.allows_header(h) for h in headers if h.strip()):
            continue
        return rule
    return None


def answer_headers(rule: CorsRule, origin: str) -> dict[str, str]:
    """What an actual request's answer carries when a rule matched its Origin."""
    headers = {
        "Access-Control-Allow-Origin": "*" if "*" in rule.origins else origin,
        "Vary": "Origin",
    }
    if "*" not in rule.origins:
        headers["Access-Control-Allow-Credentials"] = "true"
    if rule.exposed:
        headers["Access-Control-Expose-Headers"] = ",".join(rule.exposed)
    return headers


def preflight_headers(rule: CorsRule, origin: str, method: str, requested: str) -> dict[str, str]:
    headers = answer_headers(rule, origin)
    headers.pop("Access-Control-Expose-Headers", None)
    headers["Access-Control-Allow-Methods"] = method.upper()
    if requested:
        headers["Access-Control-Allow-Headers"] = requested
    headers["Access-Control-Max-Age"] = str(rule.max_age)
    return headers

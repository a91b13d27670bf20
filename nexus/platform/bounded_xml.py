"""XML from the outside, read safely: no DTDs, no entity declarations, bounded elements and depth.

Python's expat parser does not fetch external entities, but it expands internal ones (the
"billion laughs" document) and accepts any nesting; both the partner SOAP login and the Bulk
API 1.0 take XML from unauthenticated or ordinary callers, so the parser refuses a DTD or an
entity declaration outright and stops at an element or depth bound. Names are expat's
namespace-qualified ones split into `namespace` and `name`; attributes keep their qualified
`"<namespace> <name>"` keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from xml.parsers import expat


class UnsafeXml(ValueError):
    """The document is not well-formed, declares a DTD or an entity, or passes a bound; the
    message says which (and never quotes the document)."""


@dataclass
class XmlElement:
    namespace: str
    name: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[XmlElement] = field(default_factory=list)
    chunks: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def child(self, namespace: str, name: str) -> XmlElement | None:
        return next((c for c in self.children if c.namespace == namespace and c.name == name), None)


def _refuse(*_: Any) -> None:
    raise UnsafeXml("DTDs and entity declarations are not accepted")


def parse_bounded(body: bytes, *, max_elements: int, max_depth: int) -> XmlElement:
    """The document's root element, or UnsafeXml."""
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = _refuse
    parser.EntityDeclHandler = _refuse
    parser.UnparsedEntityDeclHandler = _refuse
    parser.ExternalEntityRefHandler = _refuse  # type: ignore[assignment]  # raises instead
    stack: list[XmlElement] = []
    roots: list[XmlElement] = []
    count = 0

    def start(name: str, attrs: dict[str, str]) -> None:
        nonlocal count
        count += 1
        if count > max_elements or len(stack) >= max_depth:
            raise UnsafeXml("the document has too many elements")
        namespace, _, local = name.rpartition(" ")
        element = XmlElement(namespace, local, attrs)
        (stack[-1].children if stack else roots).append(element)
        stack.append(element)

    def end(_name: str) -> None:
        stack.pop()

    def chars(data: str) -> None:
        if stack:
            stack[-1].chunks.append(data)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = chars
    try:
        parser.Parse(body, True)
    except expat.ExpatError as exc:
        raise UnsafeXml(f"the document is not well-formed XML ({exc.code})") from None
    if not roots:
        raise UnsafeXml("the document has no element")
    return roots[0]

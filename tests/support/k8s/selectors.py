"""Label and field selectors as the Kubernetes API server parses and applies them.

Label selectors (``k8s.io/apimachinery/pkg/labels``): comma-separated requirements, each one of
``key`` (exists), ``!key`` (does not exist), ``key=v`` / ``key==v``, ``key!=v`` (also true when the
key is absent), ``key in (a,b)``, ``key notin (a,b)`` (also true when absent), ``key>n`` / ``key<n``
(integers). Field selectors (``k8s.io/apimachinery/pkg/fields``): ``path=v`` / ``path==v`` /
``path!=v`` with backslash escapes; a missing field reads as ``""`` (so ``spec.nodeName=`` selects
unbound pods). :func:`label_selector_from_object` turns a structured ``LabelSelector``
(``matchLabels`` / ``matchExpressions``, as in PodDisruptionBudgets and Jobs) into requirements.

Parse errors raise :class:`SelectorError`; the API server answers them with 400 Bad Request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FieldRequirement",
    "LabelRequirement",
    "SelectorError",
    "field_value",
    "label_selector_from_object",
    "match_fields",
    "match_labels",
    "parse_field_selector",
    "parse_label_selector",
]

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class SelectorError(ValueError):
    """A selector that the API server would reject (400 Bad Request)."""


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case "exists":
                return present
            case "!":
                return not present
            case "=" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return not present or value not in self.values
            case "gt" | "lt":
                if not present or value is None:
                    return False
                try:
                    number = int(value)
                except ValueError:
                    return False
                bound = int(self.values[0])
                return number > bound if self.operator == "gt" else number < bound
        raise AssertionError(self.operator)  # pragma: no cover


@dataclass(frozen=True)
class FieldRequirement:
    path: str  # the object's field (the selector's label may differ: jobs' status.successful → status.succeeded)
    operator: str  # "=" or "!="
    value: str
    default: str = ""  # what an absent field reads as

    def matches(self, obj: Mapping[str, Any]) -> bool:
        actual = field_value(obj, self.path, self.default)
        return actual == self.value if self.operator == "=" else actual != self.value


def _check_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        raise SelectorError(f"invalid label key {key!r}: name part must be a qualified name of at most 63 characters")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise SelectorError(f"invalid label key {key!r}: prefix part must be a DNS subdomain")
    return key


def _check_value(value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise SelectorError(
            f"invalid label value {value!r}: at most 63 characters of [A-Za-z0-9_.-], alphanumeric ends"
        )
    return value


_TOKEN = re.compile(r"\s*(?:(!=|==|=|!|\(|\)|,|<|>)|([^\s!=(),<>]+))")


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:  # pragma: no cover - the pattern accepts every non-space character
            raise SelectorError(f"unable to parse selector {text!r} at {position}")
        tokens.append(match.group(1) or match.group(2))
        position = match.end()
    return tokens


def parse_label_selector(text: str | None) -> list[LabelRequirement]:
    """Parse a label selector string; an empty one selects everything."""
    if not text or not text.strip():
        return []
    tokens = _tokenize(text)
    requirements: list[LabelRequirement] = []
    i = 0

    def peek(offset: int = 0) -> str | None:
        return tokens[i + offset] if i + offset < len(tokens) else None

    while i < len(tokens):
        if tokens[i] == "!":
            key = peek(1)
            if key is None or key in "!=(),<>":
                raise SelectorError(f"expected a label key after '!' in {text!r}")
            requirements.append(LabelRequirement(_check_key(key), "!"))
            i += 2
        else:
            key = tokens[i]
            if key in {"=", "==", "!=", "(", ")", ",", "<", ">"}:
                raise SelectorError(f"expected a label key, found {key!r} in {text!r}")
            _check_key(key)
            op = peek(1)
            if op is None or op == ",":
                requirements.append(LabelRequirement(key, "exists"))
                i += 1
            elif op in {"=", "==", "!="}:
                value = peek(2)
                if value is None or value == ",":  # "key=" selects the empty value
                    requirements.append(LabelRequirement(key, "!=" if op == "!=" else "=", ("",)))
                    i += 2
                elif value in {"=", "==", "!=", "(", ")", "!", "<", ">"}:
                    raise SelectorError(f"expected a label value after {key}{op} in {text!r}")
                else:
                    requirements.append(LabelRequirement(key, "!=" if op == "!=" else "=", (_check_value(value),)))
                    i += 3
            elif op in {"in", "notin"}:
                if peek(2) != "(":
                    raise SelectorError(f"expected '(' after {key} {op} in {text!r}")
                i += 3
                values: list[str] = []
                expect_value = True
                while True:
                    token = peek()
                    if token is None:
                        raise SelectorError(f"unterminated value set in {text!r}")
                    i += 1
                    if token == ")":
                        if expect_value and values:  # "(a,)": a trailing comma means an empty value
                            values.append("")
                        break
                    if token == ",":
                        if expect_value:
                            values.append("")
                        expect_value = True
                        continue
                    if not expect_value:
                        raise SelectorError(f"expected ',' or ')' in the value set of {text!r}")
                    values.append(_check_value(token))
                    expect_value = False
                if not values:
                    raise SelectorError(f"for 'in' and 'notin' operators, the value set must be non-empty: {text!r}")
                requirements.append(LabelRequirement(key, op, tuple(values)))
            elif op in {"<", ">"}:
                value = peek(2)
                if value is None or not re.fullmatch(r"-?\d+", value):
                    raise SelectorError(f"for '<' and '>' operators, the value must be an integer: {text!r}")
                requirements.append(LabelRequirement(key, "gt" if op == ">" else "lt", (value,)))
                i += 3
            else:
                raise SelectorError(f"unexpected {op!r} after label key {key!r} in {text!r}")
        if i < len(tokens):
            if tokens[i] != ",":
                raise SelectorError(f"expected ',' between requirements, found {tokens[i]!r} in {text!r}")
            i += 1
            if i == len(tokens):
                raise SelectorError(f"trailing ',' in {text!r}")
    return requirements


def label_selector_from_object(selector: Mapping[str, Any] | None) -> list[LabelRequirement] | None:
    """A structured ``LabelSelector``; ``None`` (no selector) selects nothing, ``{}`` everything."""
    if selector is None:
        return None
    requirements = [
        LabelRequirement(key, "=", (str(value),)) for key, value in (selector.get("matchLabels") or {}).items()
    ]
    operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expression in selector.get("matchExpressions") or []:
        operator = operators.get(expression.get("operator", ""))
        if operator is None:
            raise SelectorError(f"invalid label selector operator {expression.get('operator')!r}")
        requirements.append(LabelRequirement(expression["key"], operator, tuple(expression.get("values") or ())))
    return requirements


def match_labels(requirements: list[LabelRequirement], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(requirement.matches(labels) for requirement in requirements)


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if escaped:
        raise SelectorError(f"invalid field selector {text!r}: trailing backslash")
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            following = next(chars, "")
            if following not in {"\\", ",", "="}:
                raise SelectorError(f"invalid field selector escape: \\{following}")
            out.append(following)
        else:
            out.append(char)
    return "".join(out)


def parse_field_selector(text: str | None) -> list[FieldRequirement]:
    """Parse a field selector string; an empty one selects everything."""
    if not text or not text.strip():
        return []
    requirements: list[FieldRequirement] = []
    for term in _split_unescaped(text, ","):
        if not term:
            raise SelectorError(f"invalid field selector {text!r}: empty term")
        for op in ("!=", "==", "="):
            index = _find_unescaped(term, op)
            if index >= 0:
                path = _unescape(term[:index]).strip()
                value = _unescape(term[index + len(op) :])
                if not path:
                    raise SelectorError(f"invalid field selector term {term!r}: no field")
                requirements.append(FieldRequirement(path, "!=" if op == "!=" else "=", value))
                break
        else:
            raise SelectorError(f"invalid field selector term {term!r}: expected =, == or !=")
    return requirements


def _find_unescaped(text: str, needle: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(needle, i):
            return i
        i += 1
    return -1


def field_value(obj: Mapping[str, Any], path: str, default: str = "") -> str:
    """The string form of a dotted field as field selectors compare it (``default`` when absent)."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return default
        current = current[part]
    if current is None:
        return default
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def match_fields(requirements: list[FieldRequirement], obj: Mapping[str, Any]) -> bool:
    return all(requirement.matches(obj) for requirement in requirements)

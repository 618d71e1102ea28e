"""Option parsing shared by the source and the sink.

Options are read case-insensitively, as Spark's own options are; users write them in
camelCase (``maxMessagesPerTrigger``). Each role declares its options as a tuple of
:class:`OptionSpec`; :func:`parse_options` validates a raw mapping against it and
returns a dict keyed by the canonical camelCase name, which each role turns into its typed,
frozen object (``SourceOptions``, ``SinkOptions``, ``ConnectionSettings``: the option's name in
snake_case is its attribute, :func:`field_name`). Each option is declared once, as a field of that
object (:func:`option`); the role's table is derived from the fields (:func:`option_specs`). Unknown
names are errors that suggest the closest valid name; a bad value names the option, quotes the value
and says what is accepted. Code inside the library builds those objects directly and reads them by
attribute; :func:`spark_options` renders one back to strings where Spark needs them (a query's ``.options(...)``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from safebunny.errors import SafeBunnyOptionError
from safebunny.uri import redact

__all__ = [
    "OptionSpec",
    "parse_options",
    "parse_bool",
    "parse_int",
    "parse_choice",
    "parse_str",
    "duration_ms",
    "options_table",
    "option",
    "option_specs",
    "field_name",
    "typed",
    "spark_options",
]

Parser = Callable[[str, str], Any]


@dataclass(frozen=True)
class OptionSpec:
    """One option: its camelCase name, parser, default and documentation."""

    name: str
    parser: Parser
    default: Any = None
    required: bool = False
    doc: str = ""
    values: str = ""


def _shown(raw: str) -> str:
    return repr(redact(raw)) if isinstance(raw, str) else repr(raw)


def parse_str(name: str, raw: str) -> str:
    """Any non-empty string."""
    if not isinstance(raw, str) or raw == "":
        raise SafeBunnyOptionError(f"Option '{name}' must be a non-empty string, but got {raw!r}.", name)
    return raw


def parse_bool(name: str, raw: str) -> bool:
    """``true`` or ``false``, in any case."""
    value = str(raw).strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise SafeBunnyOptionError(
        f"Option '{name}' must be 'true' or 'false', but got {_shown(raw)}.", name
    )


def parse_int(minimum: int | None = None, maximum: int | None = None) -> Parser:
    """A parser for integers within ``[minimum, maximum]``."""

    def parse(name: str, raw: str) -> int:
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise SafeBunnyOptionError(
                f"Option '{name}' must be an integer, but got {_shown(raw)}.", name
            ) from None
        if minimum is not None and value < minimum:
            raise SafeBunnyOptionError(
                f"Option '{name}' must be at least {minimum}, but got {value}.", name
            )
        if maximum is not None and value > maximum:
            raise SafeBunnyOptionError(
                f"Option '{name}' must be at most {maximum}, but got {value}.", name
            )
        return value

    return parse


def parse_choice(*choices: str) -> Parser:
    """A parser for one of ``choices``, compared case-insensitively."""

    def parse(name: str, raw: str) -> str:
        value = str(raw).strip()
        for choice in choices:
            if value.lower() == choice.lower():
                return choice
        allowed = ", ".join(repr(c) for c in choices)
        raise SafeBunnyOptionError(
            f"Option '{name}' must be one of {allowed}, but got {_shown(raw)}.", name
        )

    return parse


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?|d|days?)\s*$", re.I)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> float | None:
    """``text`` as milliseconds: a number and a unit, ``ms``, ``s``, ``m``, ``h``, ``d`` or their words
    (``"250ms"``, ``"10s"``, ``"1 second"``, ``"2 hours"``), or None when it is not a duration. The one duration
    parser: a saga's trigger intervals and retry delays."""
    match = _DURATION.match(text)
    if not match:
        return None
    unit = match[2].lower()
    return float(match[1]) * _UNIT_MS["ms" if unit.startswith(("ms", "milli")) else unit[0]]


def parse_options(
    raw: Mapping[str, str],
    specs: Iterable[OptionSpec],
    *,
    role: str,
    passthrough: Iterable[str] = ("path", "checkpointlocation"),
) -> dict[str, Any]:
    """Validate ``raw`` against ``specs`` and return values keyed by canonical name.

    ``role`` names the side in error messages (``"source"``, ``"sink"``). Keys listed in
    ``passthrough`` (lower-case) are Spark's own and ignored.
    """
    specs = tuple(specs)
    by_lower = {spec.name.lower(): spec for spec in specs}
    skip = {p.lower() for p in passthrough}
    result: dict[str, Any] = {}
    for key, value in raw.items():
        lower = key.lower()
        if lower in skip:
            continue
        spec = by_lower.get(lower)
        if spec is None:
            close = difflib.get_close_matches(lower, by_lower, n=1, cutoff=0.5)  # option names are case-insensitive
            hint = f" Did you mean '{by_lower[close[0]].name}'?" if close else ""
            # Spark hands a Python data source its option names in lower case: say so, or the name looks mangled
            typed = " (Spark passes option names in lower case)" if key == lower and close else ""
            raise SafeBunnyOptionError(
                f"Unknown option '{key}'{typed} for the safebunny {role}.{hint} "
                f"Valid options: {', '.join(sorted(spec.name for spec in specs))}.",
                key,
            )
        result[spec.name] = spec.parser(spec.name, value)
    for spec in specs:
        if spec.name not in result:
            if spec.required:
                raise SafeBunnyOptionError(
                    f"Option '{spec.name}' is required for the safebunny {role}: {spec.doc}", spec.name
                )
            result[spec.name] = spec.default
    return result


def options_table(specs: Iterable[OptionSpec]) -> str:
    """Render ``specs`` as a Markdown table (option, values, default, meaning)."""
    lines = ["| option | values | default | meaning |", "| --- | --- | --- | --- |"]
    for spec in specs:
        if spec.required:
            default = "(required)"
        elif spec.default is None:
            default = "none"
        elif spec.default == "":
            default = '`""`'
        else:
            default = f"`{spec.default}`"
        lines.append(f"| `{spec.name}` | {spec.values} | {default} | {spec.doc} |")
    return "\n".join(lines)


def field_name(option: str) -> str:
    """The attribute of option ``option`` on its role's typed object: ``maxInFlight`` -> ``max_in_flight``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", option).lower()


def option(parser: Parser, default: Any = MISSING, *, values: str = "", doc: str = "", repr: bool = True) -> Any:  # noqa: A002
    """A dataclass field that is an option: its camelCase name is the field's (:func:`field_name` reversed), a
    field without ``default`` is a required option; :func:`option_specs` reads them back as the role's table."""
    return field(default=default, repr=repr, metadata={"option": (parser, values, doc)})


def option_specs(cls: type[Any]) -> tuple[OptionSpec, ...]:
    """The options declared on ``cls``'s fields (:func:`option`), in field order."""
    specs = []
    for f in fields(cls):
        if "option" in f.metadata:
            parser, values, doc = f.metadata["option"]
            name = re.sub(r"_([a-z])", lambda m: m[1].upper(), f.name)
            required = f.default is MISSING
            specs.append(OptionSpec(name, parser, None if required else f.default, required, doc, values))
    return tuple(specs)


def typed(cls: type[Any], parsed: Mapping[str, Any], **extra: Any) -> Any:
    """``cls`` (a frozen dataclass) from the values :func:`parse_options` returned, each under its
    :func:`field_name`; ``extra`` gives the fields no option names (a nested ``connection``)."""
    names = {f.name for f in fields(cls)}
    return cls(**{field_name(k): v for k, v in parsed.items() if field_name(k) in names}, **extra)


def _rendered(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):  # startingOffsets' {"timestamp": ms}
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return str(value)


def spark_options(specs: Iterable[OptionSpec], *objects: Any) -> dict[str, str]:
    """The options of ``specs`` that ``objects`` (typed option objects) set to other than their defaults, as
    the strings Spark passes and :func:`parse_options` reads back: the one place typed settings become strings."""
    found: dict[str, str] = {}
    for spec in specs:
        attr = field_name(spec.name)
        for obj in objects:
            if hasattr(obj, attr):
                value = getattr(obj, attr)
                if value is not None and (spec.required or value != spec.default):
                    found[spec.name] = _rendered(value)
                break
    return found

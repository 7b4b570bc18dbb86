"""One run option: its name, type, default and help text, and how a value from outside becomes one."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from collections.abc import Callable, Iterable
from typing import Any


@dataclass(frozen=True)
class Option:
    """A run option (``name`` with underscores; ``--name-with-hyphens`` on the command line)."""

    name: str
    """The option's name, with underscores: its run-config key and its keyword in ``ldpfed.simulate``."""
    kind: type
    """Its type: ``int``, ``float``, ``str`` or ``bool``."""
    default: Any
    """Its value when not given (an axis's option: a value at which the axis's ``parse`` returns None)."""
    help: str
    """Its help text (``ldpfed simulate --help``)."""
    file: bool = False
    """Whether a value may name a file that a simulation's server reads (``ldpfed simulate`` makes it absolute)."""
    parse: Callable[[Any], Any] | None = None
    """Parses a value from outside where the type alone does not (``--dim auto``); None: ``kind(value)``."""
    show: Callable[[Any], Any] | None = None
    """The value as written in a run config (the inverse of ``parse``); None: the value itself."""

    @property
    def flag(self) -> str:
        """The option's command-line flag."""
        return flag(self.name)

    def coerce(self, value: Any, key: str) -> Any:
        """``value`` (from a run config, a flag or a file) as this option's type; ValueError naming ``key``."""
        kind = self.kind
        if self.parse is not None:
            return self.parse(value)
        try:
            if kind is bool and isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                return value.lower() in ("true", "1")
            if kind is int and isinstance(value, float) and not value.is_integer():
                raise ValueError
            return kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"run option {key!r} must be of type {kind.__name__}, got {value!r}") from None


    def to_config(self, value: Any) -> Any:
        """``value`` as written in a run config (config.json, --run-config)."""
        return value if self.show is None else self.show(value)


def flag(name: str) -> str:
    """``"train_limit"`` -> ``"--train-limit"``."""
    return "--" + name.replace("_", "-")


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """`` (did you mean 'NAME'?)`` for the one of ``names`` closest to a mistyped ``word`` (difflib); empty if none is."""
    close = difflib.get_close_matches(word, list(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_option(key: str, names: Iterable[str], where: str = "") -> str:
    """The error text for a run option ``key`` (given ``where``, e.g. a study's table) that is none of ``names``
    (underscored), suggesting the closest in the key's spelling (hyphens unless it has underscores)."""
    spelled = [name if "_" in key else name.replace("_", "-") for name in names]
    return f"unknown run option {key!r}" + (f" in {where}" if where else "") + did_you_mean(key, spelled)

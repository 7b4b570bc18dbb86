"""A message's content as plain data: named records of numpy arrays, of config values or of metrics.

Every builder of fed.protocol returns a :class:`Content`; an app hands it to its message framework
with :class:`Records` (Flower: ``Records(RecordDict, ArrayRecord, ConfigRecord, MetricRecord, Array)``),
so fed builds no framework object itself. Every reader takes a :class:`Content` or anything read the
same way (:class:`Readable`, e.g. Flower's RecordDict, whose arrays are read with ``.numpy()``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ldpfed.fed.runtime.requests import RequestRefused


class Arrays(dict[str, Any]):
    """An array record: numpy arrays by key."""


class Config(dict[str, Any]):
    """A config record: strings, numbers, booleans and lists of them, by key."""


class Metrics(dict[str, Any]):
    """A metric record: numbers and lists of numbers, by key."""


Record = Arrays | Config | Metrics


class Content(dict[str, Record]):
    """Records by name, with the views a reader takes (those of Flower's RecordDict)."""

    @property
    def array_records(self) -> dict[str, Arrays]:
        """The array records by name."""
        return {name: record for name, record in self.items() if isinstance(record, Arrays)}

    @property
    def config_records(self) -> dict[str, Config]:
        """The config records by name."""
        return {name: record for name, record in self.items() if isinstance(record, Config)}

    @property
    def metric_records(self) -> dict[str, Metrics]:
        """The metric records by name."""
        return {name: record for name, record in self.items() if isinstance(record, Metrics)}


class Readable(Protocol):
    """What a reader takes: records by name, and the views of the array, config and metric records (an array
    record's values are numpy arrays, or objects with ``.shape`` and ``.numpy()``)."""

    def __getitem__(self, name: str) -> Mapping[str, Any]: ...

    @property
    def array_records(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def config_records(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def metric_records(self) -> Mapping[str, Mapping[str, Any]]: ...


@dataclass(frozen=True)
class Records:
    """A message framework's classes for content, the three kinds of record and an array, handed in by the
    app that speaks through it."""

    content: Callable[[dict[str, Any]], Any]
    arrays: Callable[[dict[str, Any]], Any]
    config: Callable[[dict[str, Any]], Any]
    metrics: Callable[[dict[str, Any]], Any]
    array: Callable[[np.ndarray], Any]

    def record(self, record: Record) -> Any:
        """One plain record as the framework's."""
        if isinstance(record, Arrays):
            return self.arrays({key: self.array(value) for key, value in record.items()})
        if isinstance(record, Config):
            return self.config(dict(record))
        if isinstance(record, Metrics):
            return self.metrics(dict(record))
        raise TypeError(f"expected a plain record (Arrays, Config or Metrics), got {type(record).__name__}")

    def __call__(self, content: Mapping[str, Record]) -> Any:
        """Plain content as the framework's."""
        return self.content({name: self.record(record) for name, record in content.items()})


def value(item: Any) -> np.ndarray:
    """An array record's value as a numpy array (a framework's array is read with ``.numpy()``)."""
    return item if isinstance(item, np.ndarray) else item.numpy()


def numpy(record: Mapping[str, Any], key: str, prefix: str = "") -> np.ndarray:
    """The numpy array under ``key``; RequestRefused naming it when its bytes are not a readable numpy array."""
    try:
        return value(record[key])
    except Exception as error:  # noqa: BLE001 - any bytes may arrive, and np.load raises many kinds of errors on them
        raise RequestRefused(f"'{prefix}{key}' is not a readable numpy array ({type(error).__name__}: {error})"[:300]) from None


def array(content: Readable, record: str, key: str) -> np.ndarray:
    """The numpy array ``record.key`` of a request; RequestRefused when it is missing or unreadable."""
    if record not in content.array_records or key not in content.array_records[record]:
        raise RequestRefused(f"the request needs '{record}.{key}'")
    return numpy(content.array_records[record], key, f"{record}.")

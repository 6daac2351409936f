"""A class whose base is imported on first use: how `Bundle` takes in its maintenance.

`JoinsOnFirstUse` is the metaclass of a class declared over a light base (for type
checkers, over its full one) with a `_joined_base` attribute: a function that imports
and returns the full base, a subclass of the light one. The first time a name the class
lacks is read, on the class (`Bundle.integrity`) or on an instance (`bundle.integrity()`),
that function runs and its class becomes the class's base, as declared: every name is the
class's again, and a process that reads none (one that only serves) never imports it.
A dunder name never joins (copy, pickle and the like probe those). It owns no state but
the bases of the classes it makes, and never prints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class JoinsOnFirstUse(type):
    """See the module doc."""

    _joined_base: Callable[[], type]

    def __new__(
        mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]
    ) -> JoinsOnFirstUse:
        namespace.setdefault("__getattr__", _instance_getattr)
        return super().__new__(mcls, name, bases, namespace)

    def _join(cls) -> None:
        base = cls._joined_base()
        if cls.__bases__ != (base,):
            cls.__bases__ = (base,)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        cls._join()
        return type.__getattribute__(cls, name)


def _instance_getattr(self: Any, name: str) -> Any:
    """A name the instance lacks: perhaps the joined base's."""
    if name.startswith("__"):
        raise AttributeError(name)
    type(self)._join()
    return object.__getattribute__(self, name)

"""`once`: `functools.cached_property` without its lock, for a value a fork may interrupt.

Python 3.10 and 3.11's `cached_property` holds one lock per property, for every instance of
the class, while it computes a first value: a process forked while another thread computed
one (a compiled group's digest, a device's fingerprint) left that lock held in the child,
whose own first read of that property, on any instance, then waited for ever. `once`
computes a pure value (at most a few times over, when threads race) and keeps it in the
instance's dict. This module owns no state, imports nothing of warm's and never forks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typed as what it does; at run time a plain class (no `Generic` made)
    from functools import cached_property as once
else:

    class once:  # a decorator, named as `functools.cached_property` is
        """A pure value computed on first read, kept in the instance's dict (no lock)."""

        def __init__(self, compute: Callable[[Any], Any]) -> None:
            self.compute, self.name = compute, compute.__name__
            self.__doc__ = compute.__doc__

        def __get__(self, instance: object, owner: type | None = None) -> Any:
            if instance is None:
                return self
            return instance.__dict__.setdefault(self.name, self.compute(instance))


__all__ = ["once"]

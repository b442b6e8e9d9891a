"""Backplane's numerics policy, the same rule as include/backplane/numerics.hpp.

A floating-point output ``got`` matches its reference ``ref`` when::

    max|got - ref| <= RELATIVE * max|ref| + ABSOLUTE

over the whole tensor; NaN must meet NaN and an infinity the same infinity.
Integer and boolean outputs must be equal; shapes and dtypes must be equal.
docs/numerics.md explains the rule and which fast paths state a bound of
their own.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RELATIVE = 1e-4
ABSOLUTE = 1e-6


@dataclass
class Comparison:
    """What comparing two arrays found (``within`` is the verdict)."""

    comparable: bool
    reason: str
    max_abs_error: float
    max_abs_ref: float
    worst_index: tuple
    exact: bool

    @property
    def bound(self) -> float:
        return 0.0 if self.exact else RELATIVE * self.max_abs_ref + ABSOLUTE

    @property
    def within(self) -> bool:
        return self.comparable and self.max_abs_error <= self.bound

    def describe(self) -> str:
        if not self.comparable:
            return self.reason
        return (f"max|got-ref| {self.max_abs_error:.3e} at {list(self.worst_index)}, "
                f"bound {self.bound:.2e}")


def compare(got, ref) -> Comparison:
    """Compares ``got`` with ``ref`` (array-likes) under the policy."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    if got.dtype != ref.dtype:
        return Comparison(False, f"dtype {got.dtype}, reference {ref.dtype}", np.inf, 0.0, (), False)
    if got.shape != ref.shape:
        return Comparison(False, f"shape {list(got.shape)}, reference {list(ref.shape)}",
                          np.inf, 0.0, (), False)
    exact = not np.issubdtype(ref.dtype, np.floating)
    if ref.size == 0:
        return Comparison(True, "", 0.0, 0.0, (), exact)
    if exact:
        diff = got != ref
        if not diff.any():
            return Comparison(True, "", 0.0, 0.0, (), True)
        at = np.unravel_index(int(np.argmax(diff)), ref.shape)
        return Comparison(True, "", np.inf, 0.0, tuple(int(i) for i in at), True)
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    finite = np.isfinite(r)
    max_ref = float(np.abs(r[finite]).max()) if finite.any() else 0.0
    with np.errstate(invalid="ignore"):
        err = np.abs(g - r)
    both_nan = np.isnan(g) & np.isnan(r)
    same_inf = np.isinf(g) & np.isinf(r) & (g == r)
    err = np.where(both_nan | same_inf, 0.0, err)
    err = np.where(np.isnan(err), np.inf, err)
    i = int(np.argmax(err))
    at = np.unravel_index(i, ref.shape)
    return Comparison(True, "", float(err.flat[i]), max_ref, tuple(int(k) for k in at), False)


def within(got, ref) -> bool:
    """True when ``got`` matches ``ref`` under the policy."""
    return compare(got, ref).within

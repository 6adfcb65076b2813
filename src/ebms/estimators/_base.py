"""Result objects shared by estimators: an estimate always comes with its uncertainty."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Estimate"]


@dataclass(frozen=True)
class Estimate:
    """A number about a fixed model, with its uncertainty and the settings used.

    Attributes:
        estimate: the point estimate.
        stderr: its standard error (0 for exact computations; ``nan`` never; nor in the other fields).
        lower, upper: a bracket when the method gives one (e.g. AIS/RAISE, or
            ``estimate ± 2 stderr`` is *not* implied); ``None`` otherwise.
        ess: effective sample size behind the estimate (> 0), when meaningful.
        exact: ``True`` when the value is computed exactly (no sampling).
        settings: the parameters used (grid size, chains, temperatures, ...).
    """

    estimate: float
    stderr: float = 0.0
    lower: float | None = None
    upper: float | None = None
    ess: float | None = None
    exact: bool = False
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not math.isfinite(self.estimate):
            raise ValueError(f"estimate: expected a finite number; got {self.estimate!r}")
        if not (self.stderr >= 0 and math.isfinite(self.stderr)):
            raise ValueError(f"stderr: expected a finite number >= 0; got {self.stderr!r}")
        for name, v in (("lower", self.lower), ("upper", self.upper)):
            if v is not None and math.isnan(v):
                raise ValueError(f"{name}: expected a number or None; got nan")
        if self.lower is not None and self.upper is not None and not self.lower <= self.upper:
            raise ValueError(f"lower, upper: expected lower <= upper; got {self.lower!r} > {self.upper!r}")
        if self.ess is not None and not self.ess > 0:
            raise ValueError(f"ess: expected a number > 0 or None; got {self.ess!r}")

    def __str__(self) -> str:
        s = f"{self.estimate:.4f}"
        if self.exact:
            return s + " (exact)"
        s += f" ± {self.stderr:.4f}"
        if self.lower is not None and self.upper is not None:
            s += f" in [{self.lower:.4f}, {self.upper:.4f}]"
        return s

"""The errors ebms raises for things a *user* got wrong, as opposed to bugs.

The command line turns every :class:`InputError` (and a few anticipated
operating-system failures, see :mod:`ebms.cli.main`) into one line on stderr
and exit status 2::

    ebms train: error: train.log_every: expected an integer >= 1; got 0

Anything else is a bug and keeps its traceback (``ebms --debug ...`` shows the
traceback for every error).

A message names the key, argument or file, says what was expected and what was
found, and, where there is one, what to do. Every class here subclasses
``ValueError``, so library code that catches ``ValueError`` keeps working.

Hierarchy::

    ValueError
    └── InputError            anything the user can fix by changing what they gave
        ├── ConfigError       a configuration key or value (ebms.cli.config)
        ├── CheckpointError   a checkpoint that is missing, damaged, altered or from another run
        ├── DataError         a data file that cannot be read as what it claims to be
        │   ├── LimitExceeded a file or request larger than a limit the user can raise
        │   └── DiscountError a corpus whose counts cannot give Kneser-Ney discounts
        └── RunFolderError    a run folder that cannot be used as asked (exists, not writable, ...)
"""

from __future__ import annotations

__all__ = ["CheckpointError", "DataError", "DiscountError", "InputError", "LimitExceeded", "RunFolderError"]


class InputError(ValueError):
    """Something the user gave (a setting, a file, a folder) is wrong; the message says what to do."""


class CheckpointError(InputError):
    """A checkpoint that cannot be used: missing, truncated, altered, or written by another run."""


class DataError(InputError):
    """A data file that is missing, malformed, or not what its name or header claims."""


class LimitExceeded(DataError):
    """A file or request beyond a resource limit; the message names the limit and how to raise it."""


class DiscountError(DataError):
    """Kneser-Ney discounts that cannot be estimated from a corpus's counts-of-counts.

    Attributes:
        orders: the n-gram orders that failed (1 = unigrams), increasing.
        reasons: one sentence per failed order, in the same order.
    """

    def __init__(self, message: str, *, orders: list[int], reasons: list[str]) -> None:
        super().__init__(message)
        self.orders, self.reasons = list(orders), list(reasons)


class RunFolderError(InputError):
    """A run folder that cannot be used as asked (already holds a run, not writable, outside ``out_dir``)."""

"""Data: seeded 2-D toy distributions and the location of real data sets.

* :class:`ToyDataset` / :func:`get_toy` — seven 2-D toy sets; ``sample(n,
  generator=g) -> (n, 2)`` float32, ``bounds`` (a square holding essentially
  all the mass) and, for ``checkerboard``, ``eight_gaussians`` and ``rings``,
  the exact ``log_prob(x) -> (n,)``.
* :func:`data_root` / :func:`data_path` — where vendored data sets live
  (``$EBMS_DATA``, else ``../shared/data`` beside the checkout, else ``./data``).

Randomness comes only from the ``generator`` argument.
"""

from ebms.data.paths import DATA_ENV_VAR, data_path, data_root
from ebms.data.points import POINT_SUFFIXES, PointCloud, load_points, read_points
from ebms.data.toy import TOY_NAMES, ToyDataset, get_toy

__all__ = [
    "DATA_ENV_VAR",
    "POINT_SUFFIXES",
    "TOY_NAMES",
    "PointCloud",
    "ToyDataset",
    "data_path",
    "data_root",
    "get_toy",
    "load_points",
    "read_points",
]

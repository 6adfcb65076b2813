"""Test-wide settings.

Tests use tiny tensors, for which torch's intra-op threads cost more than they
save (and oversubscribe CI's 2 cores when pytest runs beside other work), so
the suite runs single-threaded. Benchmarks, the demo and user code keep
torch's default.
"""

import torch

torch.set_num_threads(1)

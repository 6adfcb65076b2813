"""Named models: compositions of energies, spaces and conditionals that users ask for by name.

* :class:`IsingModel` — spins ``{-1, +1}`` on a lattice (periodic or free, per-edge couplings) or
  with any symmetric coupling matrix; field; temperature. Closed-form conditionals, block colouring.
* :class:`PottsModel` — the ``K``-state generalisation on one-hot sites.
* :class:`BernoulliRBM`, :class:`GaussianBernoulliRBM`, :class:`CategoricalRBM` — restricted
  Boltzmann machines as free energies of the visible units, with layer conditionals (block
  Gibbs), exact log Z over the smaller layer and the Salakhutdinov–Murray AIS path.
* :class:`RBMEstimator` — a scikit-learn-style RBM (``fit``/``transform``/``score_samples`` with
  real log-likelihoods), trained by fast analytic CD-k / PCD (:func:`cd_update`).
"""

from ebms.models.ising import IsingModel
from ebms.models.potts import PottsModel
from ebms.models.rbm import BernoulliRBM, CategoricalRBM, GaussianBernoulliRBM, RBMBase
from ebms.models.rbm_estimator import CDState, RBMEstimator, cd_update

__all__ = [
    "BernoulliRBM",
    "CDState",
    "CategoricalRBM",
    "GaussianBernoulliRBM",
    "IsingModel",
    "PottsModel",
    "RBMBase",
    "RBMEstimator",
    "cd_update",
]

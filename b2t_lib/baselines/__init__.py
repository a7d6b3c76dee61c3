r"""The five baselines of Tables 1 and 3, each a variant in the one registry (:data:`b2t_lib.VARIANTS`).

==============  ==========================================================================  ===========
name            one sub-layer (or stack) in short                                           module
==============  ==========================================================================  ===========
``dlcl``        Post-LN layers; layer k+1 reads :math:`\mathrm{LN}_k(\sum_{j\le k} W_{k,j} y_j)`  :mod:`.dlcl`
``admin``       :math:`\mathrm{LN}(\omega\odot x + \mathcal{F}(x))`, :math:`\omega` profiled        :mod:`.admin`
``tfixup``      :math:`x + \mathcal{F}(x)`, no LayerNorm, depth-scaled init, no warmup          :mod:`.tfixup`
``realformer``  Post-LN, attention scores :math:`S_l = QK^\top/\sqrt{d_h} + S_{l-1}`          :mod:`.realformer`
``deepnet``     :math:`\mathrm{LN}(\alpha x + \mathcal{F}(x))`, :math:`\beta`-scaled init          :mod:`.deepnet`
==============  ==========================================================================  ===========

Importing this package registers them; ``import b2t_lib`` does so. Each method lives whole in its
own module and only overrides the :class:`~b2t_lib.variants.Variant` hooks it needs, so the other
variants pay nothing for them. DLCL and RealFormer derive from Post-LN; T-Fixup shares B2T w/o LN's
LayerNorm-free residual loop (:func:`b2t_lib.variants.residual_sublayers`).
"""

from . import admin, deepnet, dlcl, realformer, tfixup  # noqa: F401  (each module registers its variant)
from .admin import Admin, AdminProfiler, ShortcutWeights
from .deepnet import DeepNet, deepnet_constants
from .dlcl import DLCL, combine, dlcl_average_weights
from .realformer import RealFormer, RealFormerAttention
from .tfixup import TFixup, tfixup_embedding_factor, tfixup_layer_factor

BASELINES = ("dlcl", "admin", "tfixup", "realformer", "deepnet")  # Table 1's order

__all__ = [
    "BASELINES",
    "Admin",
    "AdminProfiler",
    "ShortcutWeights",
    "DeepNet",
    "deepnet_constants",
    "DLCL",
    "combine",
    "dlcl_average_weights",
    "RealFormer",
    "RealFormerAttention",
    "TFixup",
    "tfixup_embedding_factor",
    "tfixup_layer_factor",
]

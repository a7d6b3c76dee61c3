r"""The methods after B2T (2023-2025): other answers to where the LayerNorm goes, each a variant in the one registry.

* ``resi_dual`` (:mod:`.resi_dual`): a Post-LN stream :math:`x \leftarrow \mathrm{LN}(x + \mathcal F(x))` beside
  an un-normalized dual stream :math:`d \leftarrow d + \mathcal F(x)`; the stack returns :math:`x_N + \mathrm{LN}(d_N)`;
* ``mix_ln`` (:mod:`.mix_ln`): Post-LN in the first :math:`\lfloor \alpha L \rfloor` layers, Pre-LN above;
* ``ln_scaling`` (:mod:`.ln_scaling`): Pre-LN, each LayerNorm's output times :math:`1/\sqrt{l}` in layer :math:`l`;
* ``sandwich_ln`` (:mod:`.sandwich_ln`): :math:`x \leftarrow x + \mathrm{LN}_{out}(\mathcal F(\mathrm{LN}_{in}(x)))`;
* ``peri_ln`` (:mod:`.sandwich_ln`): Sandwich-LN's layer and a LayerNorm on the embedding output;
* ``dyt`` (:mod:`.dyt`): Pre-LN with every LayerNorm replaced by :math:`\gamma \odot \tanh(\alpha x) + \beta`;
* ``b2t_dyt`` (:mod:`.dyt`): the B2T connection with DyT in place of its LayerNorms.

Importing this package registers them; ``import b2t_lib`` does so. Each method lives whole in its own module and
overrides only the :class:`~b2t_lib.variants.Variant` hooks it needs. Their sources, and what could not be checked
against a public implementation, are in docs/methods.md §6.
"""

from . import dyt, ln_scaling, mix_ln, resi_dual, sandwich_ln  # noqa: F401  (each module registers its variants)
from .dyt import B2TDyT, DyT, DynamicTanh
from .ln_scaling import LayerNormScaling
from .mix_ln import MixLN, post_ln_layers
from .resi_dual import ResiDual
from .sandwich_ln import PeriLN, SandwichLN

# in the order of docs/methods.md §6
AFTER_B2T = ("resi_dual", "mix_ln", "ln_scaling", "sandwich_ln", "peri_ln", "dyt", "b2t_dyt")

__all__ = [
    "AFTER_B2T",
    "B2TDyT",
    "DyT",
    "DynamicTanh",
    "LayerNormScaling",
    "MixLN",
    "PeriLN",
    "ResiDual",
    "SandwichLN",
    "post_ln_layers",
]

"""Measurements behind the paper's analysis figures, as plain data for plots and asserts.

* :mod:`.layer_gradients` - gradient norm per layer (Figure 3)
* :mod:`.residual_path`   - gradient norm at each point inside one layer (Figures 4 and 7)
* :mod:`.similarity`      - cosine similarity between layer outputs (Figure 5)
* :mod:`.activations`     - the stream's size per layer, and the cosine of each layer's input and output
* :mod:`.jacobians`       - LayerNorm Jacobian in closed form; Eq. 3, 4 and 8 against autograd
* :mod:`.gradient_paths`  - the identity, inner-LayerNorm and FFN paths of Eq. 8 measured inside a real layer
* :mod:`.no_ln_scales`    - B2T w/o LN (Eq. 9-11): identity and branch terms per layer, the critical width
* :mod:`.profiles`, :mod:`.batches` - fresh models and the fixed random batch they are measured on
"""

from .activations import LayerActivations, layer_activations
from .batches import random_translation_batch
from .forward import model_loss
from .jacobians import (
    FinalSumJacobians,
    final_sum_jacobians,
    jacobian,
    layer_norm_jacobian,
    layer_norm_std,
    module_layer_norm_jacobian,
    post_ln_jacobian,
    pre_ln_jacobian,
)
from .gradient_paths import GradientPaths, gradient_paths
from .layer_gradients import LayerGradientNorms, layer_gradient_norms
from .no_ln_scales import NoLNBackwardTerms, b2t_no_ln_backward_terms, b2t_no_ln_critical_width, b2t_no_ln_layer_factor
from .profiles import DEFAULT_BATCH, default_batch, init_gradient_profile, init_model
from .residual_path import ResidualPathGradients, residual_path_gradients
from .similarity import LayerSimilarity, cosine_similarity_matrix, layer_output_similarity

__all__ = [
    "LayerActivations",
    "layer_activations",
    "random_translation_batch",
    "model_loss",
    "FinalSumJacobians",
    "final_sum_jacobians",
    "jacobian",
    "layer_norm_jacobian",
    "layer_norm_std",
    "module_layer_norm_jacobian",
    "post_ln_jacobian",
    "pre_ln_jacobian",
    "GradientPaths",
    "gradient_paths",
    "LayerGradientNorms",
    "layer_gradient_norms",
    "NoLNBackwardTerms",
    "b2t_no_ln_backward_terms",
    "b2t_no_ln_critical_width",
    "b2t_no_ln_layer_factor",
    "DEFAULT_BATCH",
    "default_batch",
    "init_gradient_profile",
    "init_model",
    "ResidualPathGradients",
    "residual_path_gradients",
    "LayerSimilarity",
    "cosine_similarity_matrix",
    "layer_output_similarity",
]

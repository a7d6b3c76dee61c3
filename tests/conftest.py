"""Unit tests run PyTorch on one thread: their models are tiny, so a second thread only adds
synchronization, and on a busy 2-core machine two threads per process wait for each other.
Measured on the shared development machine (load about 6), four test files (core model,
diagnostics, core gradients, Jacobians): 81-109 s with torch's default two threads, 9-13 s with one."""

import torch

torch.set_num_threads(1)


# ---------------------------------------------------------------- helpers shared by the test files
import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]  # the repository


def load_script(path: Path):
    """The module of a command-line script (``data_scripts/prepare_*.py``), loaded from its file, so a test calls
    its ``main(argv)`` in this process."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def data_script(name: str):
    """The module of ``data_scripts/<name>.py``."""
    return load_script(ROOT / "data_scripts" / f"{name}.py")


def tiny_config(variant: str = "post_ln", **overrides):
    """The tests' smallest whole model: 2L-2L, d 16, 4 heads, FFN 32, a vocabulary of 40, no dropout."""
    from b2t_lib import ModelConfig

    values = dict(
        vocab_size=40, d_model=16, n_heads=4, d_ff=32, encoder_layers=2, decoder_layers=2, variant=variant, dropout=0.0
    )
    values.update(overrides)
    return ModelConfig(**values)

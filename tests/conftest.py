"""Unit tests run PyTorch on one thread: their models are tiny, so a second thread only adds
synchronization, and on a shared or busy 2-core machine two threads per process make the suite
several times slower (measured: `make unit-tests` 36 s with one thread, 125 s with two, same load)."""
import torch

torch.set_num_threads(1)

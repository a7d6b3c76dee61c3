"""Unit tests run PyTorch on one thread: their models are tiny, so a second thread only adds
synchronization, and on a busy 2-core machine two threads per process wait for each other.
Measured on the shared development machine (load about 6), four test files (core model,
diagnostics, core gradients, Jacobians): 81-109 s with torch's default two threads, 9-13 s with one."""
import torch

torch.set_num_threads(1)

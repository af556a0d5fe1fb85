"""Models for `opbench shapes --torch examples/models.py:FACTORY` (README: the shapes your model runs).
Built from torch's own layers; no weights are downloaded (the shapes do not depend on them)."""

from __future__ import annotations

from torch import Tensor, nn


def bert_base() -> nn.Module:
    """A BERT-base-like encoder: 12 layers of width 768, 12 heads, a 3072-wide feed-forward block, as
    `nn.TransformerEncoderLayer` builds them (inputs: batch x sequence x 768 embeddings)."""
    layer = nn.TransformerEncoderLayer(768, 12, 3072, activation="gelu", batch_first=True)
    return nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)


class _Bottleneck(nn.Module):
    """ResNet v1.5's bottleneck: 1x1 reduce, 3x3 (stride here), 1x1 expand, and a 1x1 projection where the
    shape changes."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.reduce = nn.Conv2d(cin, width, 1, bias=False)
        self.conv = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.expand = nn.Conv2d(width, cout, 1, bias=False)
        self.bn = nn.ModuleList(nn.BatchNorm2d(c) for c in (width, width, cout))
        self.project = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: Tensor) -> Tensor:
        y = self.bn[0](self.reduce(x)).relu()
        y = self.bn[1](self.conv(y)).relu()
        y = self.bn[2](self.expand(y))
        return (y + self.project(x)).relu()


def resnet50() -> nn.Module:
    """ResNet-50 v1.5 (the stride in the 3x3 convolutions), as torchvision builds it, without its weights:
    stages of 3, 4, 6 and 3 bottlenecks (inputs: batch x 3 x 224 x 224 images)."""
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
    ]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(_Bottleneck(cin, width, stride if b == 0 else 1))
            cin = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)

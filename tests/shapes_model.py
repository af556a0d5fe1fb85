"""The model tests/test_shapes.py reads the shapes of: every layer kind `opbench shapes` lists (convs 2-D
and 1-D, strided, grouped, dilated and depthwise; linear layers, one called twice; LSTM, GRU and ReLU RNN
layers, stacked and bidirectional; a transformer layer's attention; functional einsum and mv) and one it
does not run (a transposed conv). Small enough to run in milliseconds; nothing is downloaded."""

from __future__ import annotations

import torch
from torch import nn


class EveryLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, bias=False)
        self.dw = nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16)
        self.up = nn.ConvTranspose2d(16, 4, 2)
        self.c1d = nn.Conv1d(5, 7, 3)
        self.fc = nn.Linear(16 * 6 * 6, 32)
        self.fc2 = nn.Linear(32, 32)
        self.lstm = nn.LSTM(32, 20, num_layers=2, batch_first=True)
        self.gru = nn.GRU(20, 12, bidirectional=True)
        self.rnn = nn.RNN(24, 6, nonlinearity="relu", batch_first=True)
        self.enc = nn.TransformerEncoderLayer(24, 4, 40, dropout=0.0, batch_first=True)
        self.w = nn.Parameter(torch.randn(9, 6))

    def forward(self, image: torch.Tensor, signal: torch.Tensor) -> torch.Tensor:
        y = self.dw(self.c2(self.c1(image)))
        self.up(y)
        self.c1d(signal)
        z = self.fc2(self.fc2(self.fc(y.flatten(1))))
        seq = z.unsqueeze(1).expand(2, 7, 32).contiguous()
        out, _ = self.lstm(seq)
        both, _ = self.gru(out.transpose(0, 1))
        h = self.enc(both.transpose(0, 1))
        scores = torch.einsum("btc,bsc->bts", h, h)
        r, _ = self.rnn(h)
        return scores.sum() + torch.mv(self.w, r[0, 0]).sum()


def every_layer() -> nn.Module:
    return EveryLayer()


def not_a_module() -> int:
    return 3


def broken() -> nn.Module:
    raise RuntimeError("the factory broke")

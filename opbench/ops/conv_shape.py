"""The shape of a conv2d (ops/conv.py): NCHW input, KCRS weights, stride, padding per side, dilation and
groups, with the output size and label that follow from them."""

from __future__ import annotations

from dataclasses import dataclass

SHAPE_FIELDS = (
    "n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "groups",
    "pad_h_end", "pad_w_end",
)  # fmt: skip


@dataclass(frozen=True, order=True)
class ConvShape:
    n: int  # batch
    c: int  # input channels
    h: int  # input height
    w: int  # input width
    k: int  # output channels
    r: int  # filter height
    s: int  # filter width
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1
    groups: int = 1
    # pad_h / pad_w pad the top and the left; the bottom and the right by pad_h_end / pad_w_end, which are
    # pad_h / pad_w unless given (benchdnn's padding_r, implied by an output size)
    pad_h_end: int = -1
    pad_w_end: int = -1

    def __post_init__(self) -> None:
        if self.pad_h_end < 0:
            object.__setattr__(self, "pad_h_end", self.pad_h)
        if self.pad_w_end < 0:
            object.__setattr__(self, "pad_w_end", self.pad_w)

    @property
    def symmetric(self) -> bool:
        return (self.pad_h, self.pad_w) == (self.pad_h_end, self.pad_w_end)

    @property
    def padding(self) -> tuple[int, int, int, int]:
        """(top, bottom, left, right)."""
        return self.pad_h, self.pad_h_end, self.pad_w, self.pad_w_end

    @property
    def padded_h(self) -> int:
        return self.h + self.pad_h + self.pad_h_end

    @property
    def padded_w(self) -> int:
        return self.w + self.pad_w + self.pad_w_end

    @property
    def out_h(self) -> int:
        return (self.padded_h - self.dil_h * (self.r - 1) - 1) // self.stride_h + 1

    @property
    def out_w(self) -> int:
        return (self.padded_w - self.dil_w * (self.s - 1) - 1) // self.stride_w + 1

    def label(self) -> str:
        def pair(a: int, b: int) -> str:
            return str(a) if a == b else f"{a}x{b}"

        text = f"N{self.n} C{self.c} {pair(self.h, self.w)} K{self.k} f{pair(self.r, self.s)}"
        if (self.stride_h, self.stride_w) != (1, 1):
            text += f" s{pair(self.stride_h, self.stride_w)}"
        if not self.symmetric:
            text += f" p{self.pad_h},{self.pad_h_end},{self.pad_w},{self.pad_w_end}"
        elif (self.pad_h, self.pad_w) != (0, 0):
            text += f" p{pair(self.pad_h, self.pad_w)}"
        if (self.dil_h, self.dil_w) != (1, 1):
            text += f" d{pair(self.dil_h, self.dil_w)}"
        if self.groups != 1:
            text += f" g{self.groups}"
        return text

    def to_dict(self) -> dict[str, int]:
        """Every field; the padding's far sides only where they differ (records of symmetric shapes are as
        they were before padding per side)."""
        out = {f: getattr(self, f) for f in SHAPE_FIELDS}
        if out["pad_h_end"] == self.pad_h:
            del out["pad_h_end"]
        if out["pad_w_end"] == self.pad_w:
            del out["pad_w_end"]
        return out

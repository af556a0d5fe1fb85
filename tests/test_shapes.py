"""`opbench shapes`: the shapes a torch model runs, read off its aten calls, as a batch file with counts that
reads back (batchfiles.py) into the same problems; bad input is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbench import cli
from opbench.batchfiles import read_batch
from opbench.errors import UsageError
from opbench.ops.conv_shape import ConvShape
from opbench.ops.gemm import GemmShape
from opbench.ops.gru import GruShape
from opbench.ops.lstm import LstmShape
from opbench.ops.rnn import RnnShape

pytest.importorskip("torch")

MODEL = Path(__file__).parent / "shapes_model.py"

# (op, shape, name, count) of every problem tests/shapes_model.py runs, in the order first called
EXPECTED = [
    ("conv", ConvShape(2, 3, 12, 12, 8, 3, 3, 1, 1, 1, 1), "c1", 1),
    ("conv", ConvShape(2, 8, 12, 12, 16, 3, 3, 2, 2, 1, 1, groups=2), "c2", 1),
    ("conv", ConvShape(2, 16, 6, 6, 16, 3, 3, 1, 1, 2, 2, 2, 2, 16), "dw", 1),
    ("conv", ConvShape(2, 5, 1, 11, 7, 1, 3), "c1d", 1),
    ("gemm", GemmShape(2, 32, 576), "fc", 1),
    ("gemm", GemmShape(2, 32, 32), "fc2", 2),
    ("lstm", LstmShape(7, 2, 32, 20), "lstm:l0", 1),
    ("lstm", LstmShape(7, 2, 20, 20), "lstm:l1", 1),
    ("gru", GruShape(7, 2, 20, 12), "gru:l0", 2),  # both directions
    ("gemm", GemmShape(14, 72, 24), "enc.self_attn", 1),  # the packed q, k, v projection
    ("gemm", GemmShape(7, 7, 6, 8), "enc.self_attn:scores", 1),  # 2 images x 4 heads
    ("gemm", GemmShape(7, 6, 7, 8), "enc.self_attn:context", 1),
    ("gemm", GemmShape(14, 24, 24), "enc.self_attn", 1),  # out_proj, called functionally
    ("gemm", GemmShape(14, 40, 24), "enc.linear1", 1),
    ("gemm", GemmShape(14, 24, 40), "enc.linear2", 1),
    ("gemm", GemmShape(7, 7, 24, 2), "model", 1),  # the einsum
    ("rnn", RnnShape(7, 2, 24, 6, relu=1), "rnn:l0", 1),
    ("gemm", GemmShape(9, 1, 6), "model", 1),  # the mv
]


def _shapes(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "model.batch"
    argv = ["shapes", "--torch", f"{MODEL}:every_layer", "--input", "2x3x12x12", "--input", "2x5x11"]
    assert cli.main([*argv, "--out", str(out), *extra]) == 0
    return out


def test_every_layer_shape_is_listed_exactly_with_its_count(tmp_path: Path) -> None:
    batch = read_batch(_shapes(tmp_path))
    got = [(p.op.name, p.shape, p.name, p.count) for p in batch.problems]
    assert got == EXPECTED
    assert not batch.skipped
    assert "20 calls" in batch.description
    assert "up: a transposed conv is not an opbench op (1 call)" in batch.description


def test_the_dtype_is_the_batch_files_cfg(tmp_path: Path) -> None:
    batch = read_batch(_shapes(tmp_path, "--dtype", "bf16"))
    assert {p.dtypes for p in batch.problems} == {("bf16",)}
    assert "--cfg=bf16" in (tmp_path / "model.batch").read_text()


def test_the_batch_file_runs_in_a_sweep(tmp_path: Path) -> None:
    """The file opbench shapes writes is one `sweep --batch-file` measures (its GEMMs, here on numpy)."""
    batch = _shapes(tmp_path)
    argv = ["sweep", "gemm", "--batch-file", str(batch), "--backend", "numpy", "--rounds", "1",
            "--max-time-s", "0.01", "--min-sample-ms", "1", "--quiet",
            "--out", str(tmp_path / "out")]  # fmt: skip
    assert cli.main(argv) == 0


def test_counts_are_read_from_a_lines_comment(tmp_path: Path) -> None:
    path = tmp_path / "c.batch"
    path.write_text('--matmul\n8x8:8x8 # count=3; linear\n4x4:4x4n"a#b" 2x2:2x2 #count=2\n5x5:5x5 # none\n')
    counts = [(p.shape.m, p.count) for p in read_batch(path).problems]
    assert counts == [(8, 3), (4, 2), (2, 2), (5, 1)]
    for bad in ("0", "x", "-2", "2.5"):
        path.write_text(f"--matmul\n8x8:8x8 # count={bad}\n")
        with pytest.raises(UsageError, match=f"c.batch:2: count={bad}: expected a positive integer"):
            read_batch(path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--torch", "nowhere.py:model", "--input", "2x4"], "--torch: no such file 'nowhere.py'"),
        (["--torch", f"{MODEL}:not_a_module", "--input", "2x4"], "returned a int, not a torch.nn.Module"),
        (["--torch", f"{MODEL}:broken", "--input", "2x4"], "the factory raised RuntimeError: the factory"),
        (["--torch", f"{MODEL}:absent", "--input", "2x4"], "the module has no function 'absent'"),
        (["--torch", f"{MODEL}:every_layer", "--input", "2x3x12x12"], "the model failed on --input"),
        (["--torch", f"{MODEL}:every_layer", "--input", "2x3xq"], "expected sizes like 1x3x224x224"),
        (["--torch", f"{MODEL}:every_layer", "--input", "2x3:int8"], "unknown dtype 'int8'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["shapes", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_an_existing_out_file_is_kept_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model.batch"
    out.write_text("mine\n")
    argv = ["shapes", "--torch", f"{MODEL}:every_layer", "--input", "2x3x12x12", "--out", str(out)]
    assert cli.main(argv) == 2
    assert out.read_text() == "mine\n"
    assert "exists (--force replaces it)" in capsys.readouterr().err

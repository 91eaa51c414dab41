"""--tensorboard (orchestration/curves.py): every logged step's numbers and every dev check reach the writer at
their step, under train/ and dev/; off by default; without the package, one line naming what to install."""

import sys
import types

import pytest

from helpers import cfg_for, train_smoke
from method import checkpoint, training
from orchestration import curves, provenance


class FakeWriter:
    made = []

    def __init__(self, log_dir):
        self.log_dir, self.scalars, self.closed = log_dir, [], False
        FakeWriter.made.append(self)

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def flush(self):
        pass

    def close(self):
        self.closed = True


@pytest.fixture
def fake_tensorboard(monkeypatch):
    FakeWriter.made = []
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=FakeWriter))
    return FakeWriter


def test_every_step_and_dev_check_reaches_the_writer(fitted_dir, smoke_cfg, tmp_path, monkeypatch, fake_tensorboard):
    cfg = cfg_for(smoke_cfg, **{"train.dev_every": 2, "train.dev_problems": 2, "train.dev_samples": 2})
    real = training.train
    monkeypatch.setattr(training, "train", lambda *a, **k: real(*a, **k, tensorboard=True))
    out = train_smoke(cfg, fitted_dir, tmp_path / "run", steps=3)
    (w,) = fake_tensorboard.made
    assert w.log_dir == str(out / "tensorboard") and w.closed
    log = checkpoint.read_log(out / "train_log.csv")
    got = {(tag, step): value for tag, value, step in w.scalars}
    for row in log:
        assert got[("train/reward_mean", row["step"])] == pytest.approx(row["reward_mean"])
        assert got[("train/len_mean", row["step"])] == pytest.approx(row["len_mean"])
    dev = provenance.read_csv_rows(out / "train_eval.csv")
    assert sorted(s for t, s in got if t == "dev/loose_pass1") == [int(r["step"]) for r in dev] == [0, 2]


def test_off_by_default_and_a_missing_package_is_one_line(
    fitted_dir, smoke_cfg, tmp_path, monkeypatch, fake_tensorboard
):
    train_smoke(cfg_for(smoke_cfg, **{"train.dev_every": 0}), fitted_dir, tmp_path / "run", steps=1)
    assert fake_tensorboard.made == []
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    with pytest.raises(ImportError, match="pip install tensorboard"):
        curves.writer_class()

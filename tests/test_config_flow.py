"""One source of configuration: a model option is one ModelConfig field, and from there it reaches the
command line, presets, the task's model, checkpoints and result.json with nothing copied by hand.

The slow test adds two fields to ModelConfig (a subclass stands for the edit of b2t_lib/config.py) and
follows them through a real run of ``python -m b2t_lib train``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
import torch

from b2t_lib import ModelConfig
from b2t_lib.config import MODEL, option
from b2t_lib.train import TrainConfig, load_checkpoint
from b2t_lib.train import options as options_module
from b2t_lib.train.options import option_fields, option_names, train_fields
from b2t_lib.train.task import Task


def test_every_settable_model_field_is_an_option_once_and_round_trips():
    names = option_names()
    assert len(names) == len(set(names)), "an option declared twice"
    settable = [f.name for f in ModelConfig.settable_fields()]
    assert set(settable) <= set(names)
    assert not set(ModelConfig.data_fields()) & set(names), "vocab_size and the special ids come from the data"
    assert not {f.name for f in train_fields()} & set(settable), "TrainConfig redeclares a model field"
    assert "deepnet_encoder_beta_factor" in names and "realformer_running_mean" in names
    for f in option_fields():
        assert f.metadata["help"] and f.metadata["group"], f.name
    cfg = TrainConfig.from_preset("mt", "tiny", variant="deepnet", deepnet_encoder_beta_factor=1.15, d_model=32)
    assert cfg.model.deepnet_encoder_beta_factor == 1.15 and cfg.model.d_model == 32
    flat = cfg.to_dict()
    assert set(flat) == set(names) and flat["deepnet_encoder_beta_factor"] == 1.15
    assert TrainConfig.from_dict(json.loads(json.dumps(flat))) == cfg  # what result.json holds rebuilds it
    assert cfg.replace(n_heads=2, lr=1e-4).model.n_heads == 2


class _ToyTask(Task):
    """The least a task writes: it never names a model option."""

    name = "toy"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.dictionary = ["w"] * 57  # stands for the task's dictionary

    def load_datasets(self): ...
    def train_batches(self, epoch, rank, world_size):
        return []

    def valid_batches(self):
        return []

    def collate(self, split, indices):
        return {}

    def build_model(self): ...
    def evaluate(self, model, device):
        return {}


def test_a_new_task_gets_the_whole_model_config_and_adds_only_the_data():
    cfg = TrainConfig.from_preset(
        "mt", "tiny", variant="realformer", realformer_running_mean=True, d_ff=96, word_dropout=0.05
    )
    model_cfg = _ToyTask(cfg).model_config()
    assert model_cfg == cfg.model.replace(vocab_size=57)  # every user option, plus the data's vocabulary


@dataclass
class _Extended(ModelConfig):
    """ModelConfig with two more fields, as if they had been added to b2t_lib/config.py."""

    demo_gain: float = option(1.0, group=MODEL, help="a model option added by the test")
    demo_cutoffs: tuple[int, ...] = option((3, 5), group=MODEL, help="a tuple-valued model option")


@pytest.mark.slow
def test_a_new_model_field_reaches_help_presets_model_checkpoints_and_result(tmp_path, monkeypatch, capsys):
    from b2t_lib.cli import build_train_parser, main
    from b2t_lib.data import prepare_synthetic_mt
    from b2t_lib.train import load_trained_model

    monkeypatch.setattr(options_module, "ModelConfig", _Extended)  # the one edit: a field in ModelConfig
    text = build_train_parser("mt", "tiny").format_help()
    assert re.search(r"--demo-gain FLOAT\s+a model option added by the test \(default: 1\.0\)", text)
    assert "--demo-cutoffs INT,..." in text and "(default: (3, 5))" in text
    assert TrainConfig.from_preset("mt", "tiny", demo_gain=0.25).model.demo_gain == 0.25

    data = prepare_synthetic_mt(tmp_path / "data", n_train=120, n_valid=10, n_test=10, bpe_vocab_size=200, workers=1)
    run = tmp_path / "run"
    argv = [
        "train",
        "--data",
        str(data),
        "--save-dir",
        str(run),
        "--d-model",
        "16",
        "--n-heads",
        "2",
        "--d-ff",
        "32",
        "--encoder-layers",
        "1",
        "--decoder-layers",
        "1",
        "--max-tokens",
        "256",
        "--threads",
        "1",
        "--no-progress-bar",
        "--max-update",
        "2",
        "--warmup-updates",
        "1",
        "--save-interval",
        "2",
        "--no-eval-at-end",
        "--demo-gain",
        "0.5",
        "--demo-cutoffs",
        "2,4,8",
    ]
    assert main(argv) == 0
    capsys.readouterr()

    state = load_checkpoint(run / "checkpoint_last.pt")
    record = json.loads((run / "result.json").read_text())
    for stored in (state["train_config"], state["model_config"], record["config"], record["model_config"]):
        assert stored["demo_gain"] == 0.5 and list(stored["demo_cutoffs"]) == [2, 4, 8]
        for f in _Extended.settable_fields():  # and so is every other model option
            assert f.name in stored, f.name
    assert record["model_config"]["vocab_size"] == state["model_config"]["vocab_size"] > 4  # from the data

    model, _ = load_trained_model(run)  # rebuilt from the checkpoint with the new field
    assert model.cfg.demo_gain == 0.5 and model.cfg.demo_cutoffs == (2, 4, 8)
    assert model.encoder.stack.options["demo_gain"] == 0.5  # what a variant reads in its hooks
    assert all(torch.equal(v, state["model"][k]) for k, v in model.state_dict().items())

    # resuming with another value is refused, by name
    assert main(argv + ["--resume", "--demo-gain", "0.75", "--max-update", "4"]) == 2
    assert "--demo-gain: checkpoint has 0.5, this run asks for 0.75" in capsys.readouterr().err

"""A fairseq checkpoint evaluated with its own dictionaries and BPE codes (``python -m b2t_lib evaluate
--fairseq-checkpoint``, :mod:`b2t_lib.train.fairseq_eval`) gives the hypotheses and BLEU that the same weights give
as a run of the course: the path the authors' trained models take, tested on a checkpoint written in fairseq's format
whose dictionary numbers the pieces in another order than the course's."""

import random
import subprocess
import sys

import pytest
import torch

from b2t_lib.data import load_translation_split, prepare_synthetic_mt, test_split_names
from b2t_lib.data.dictionary import Dictionary
from b2t_lib.fairseq_compat import to_fairseq_checkpoint
from b2t_lib.train import TrainConfig, train
from b2t_lib.train.evaluate import load_trained_model
from b2t_lib.train.fairseq_eval import evaluate_fairseq_checkpoint
from b2t_lib.train.mt_task import lenpen_for
from b2t_lib.train.registry import build_task

pytestmark = pytest.mark.slow  # trains a model

DECODING = dict(beam=3, lenpen=0.6, lenpen_other=1.0, max_len_a=1.2, max_len_b=10, eval_batch_size=8)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A briefly trained 2L-2L B2T run (its hypotheses are not all the same string), and its data."""
    where = tmp_path_factory.mktemp("fairseq_eval")
    data = prepare_synthetic_mt(where / "data", n_train=300, n_valid=20, n_test=24, bpe_vocab_size=300, workers=1)
    cfg = TrainConfig.from_preset(
        "mt", "tiny", variant="b2t", data=str(data), save_dir=str(where / "run"), d_model=32, n_heads=2, d_ff=64,
        encoder_layers=2, decoder_layers=2, max_update=200, warmup_updates=20, lr=5e-3, valid_interval=200,
        save_interval=200,
        eval_at_end=False, progress_bar=False,
    )  # fmt: skip
    train(cfg)
    model, task = load_trained_model(where / "run")
    return where, data, model, task


def course_hypotheses(model, task, data) -> dict[str, list[str]]:
    """What the course's own evaluation decodes (:meth:`MTTask.translate`) with :data:`DECODING`."""
    decoder = build_task(task.cfg.replace(**DECODING))
    return {
        split: decoder.translate(model, load_translation_split(data, split), torch.device("cpu"),
                                 lenpen_for(split, DECODING["lenpen"], DECODING["lenpen_other"]))
        for split in test_split_names(data)
    }  # fmt: skip


def write_fairseq_model(model, data, out, permute: bool = True, permute_weights: bool = True):
    """The run as fairseq would ship it: ``checkpoint.pt`` (its args and weights), ``dict.en.txt``, ``dict.de.txt``
    and the BPE codes. With ``permute`` the dictionary numbers the pieces in a shuffled order and the embedding rows
    move with them (``permute_weights=False`` leaves them: a checkpoint read with the wrong dictionary)."""
    out.mkdir()
    ours = Dictionary.load(data / "dict.txt")
    order = list(range(ours.nspecial, len(ours)))
    if permute:
        random.Random(0).shuffle(order)
    new_ids = list(range(ours.nspecial)) + order  # new id i holds our piece new_ids[i]
    text = "".join(f"{ours.symbols[i]} {ours.counts[i]}\n" for i in new_ids[ours.nspecial :])
    for lang in ("en", "de"):
        (out / f"dict.{lang}.txt").write_text(text, encoding="utf-8")
    (out / "bpe.codes").write_bytes((data / "bpe.codes").read_bytes())
    checkpoint = to_fairseq_checkpoint(model)
    if permute_weights:
        for key, tensor in checkpoint["model"].items():
            if tensor.dim() == 2 and tensor.shape[0] == len(ours) and "embed" in key:
                checkpoint["model"][key] = tensor[torch.tensor(new_ids)]
    torch.save(checkpoint, out / "checkpoint.pt")
    return out


def test_a_fairseq_checkpoint_with_its_own_dictionary_decodes_as_the_run_does(trained):
    where, data, model, task = trained
    ours = course_hypotheses(model, task, data)
    assert len({h for hyps in ours.values() for h in hyps}) > 3, "a trained model writes different sentences"
    shipped = write_fairseq_model(model, data, where / "fairseq")
    shipped_dict, course_dict = Dictionary.load(shipped / "dict.de.txt"), Dictionary.load(data / "dict.txt")
    assert shipped_dict.symbols != course_dict.symbols and sorted(shipped_dict.symbols) == sorted(course_dict.symbols)
    metrics = evaluate_fairseq_checkpoint(
        shipped / "checkpoint.pt", shipped, shipped / "bpe.codes", data, device="cpu", **DECODING
    )
    assert metrics["hypotheses"] == ours
    course = {s: task.score(h, load_translation_split(data, s).references()) for s, h in ours.items()}
    assert metrics["bleu"] == course
    assert metrics["eval_options"]["beam"] == 3

    # the same weights read with a dictionary that does not match them: other sentences
    wrong = write_fairseq_model(model, data, where / "fairseq_wrong", permute_weights=False)
    mismatched = evaluate_fairseq_checkpoint(
        wrong / "checkpoint.pt", wrong, wrong / "bpe.codes", data, device="cpu", **DECODING
    )
    assert mismatched["hypotheses"] != ours


def test_the_command_prints_the_row_beside_the_readme_and_the_paper_and_refuses_in_one_line(trained):
    where, data, _, _ = trained
    shipped = where / "fairseq"
    if not shipped.is_dir():
        write_fairseq_model(trained[2], data, shipped)
    command = [sys.executable, "-m", "b2t_lib", "evaluate", "--fairseq-checkpoint", str(shipped / "checkpoint.pt"),
               "--fairseq-dict", str(shipped), "--bpe-codes", str(shipped / "bpe.codes"), "--data", str(data),
               "--beam", "2", "--max-len-b", "8", "--device", "cpu"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:2] == ["SacreBLEU", "2010"]
    assert lines[1].startswith("this checkpoint") and lines[2].startswith("README 2023-05, B2T 18L-18L")
    assert lines[2].split()[-1] == "27.52" and lines[3].split()[-1] == "27.30"  # the README's and Table 1's averages

    for change, named in (
        (["--bpe-codes", str(where / "missing.codes")], "missing.codes"),
        (["--save-dir", str(where / "run")], "drop --save-dir"),
    ):
        bad = command + change
        done = subprocess.run(bad, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and named in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    done = subprocess.run(command[:6] + ["--data", str(data)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--fairseq-dict, --bpe-codes" in done.stderr

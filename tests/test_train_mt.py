"""Machine translation end to end on the synthetic pair: train, average checkpoints, beam-search,
detokenize, SacreBLEU; the result record and the Table-1 layout built from it."""

import json

import pytest
import sacrebleu

from b2t_lib.data import load_translation_split, prepare_synthetic_mt
from b2t_lib.paper_tables import collect_mt_results, render_table
from b2t_lib.train import (
    TrainConfig,
    Trainer,
    average_checkpoints,
    evaluate_run,
    list_checkpoints,
    load_checkpoint,
    read_log,
)

pytestmark = pytest.mark.slow  # trains a model


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return prepare_synthetic_mt(
        tmp_path_factory.mktemp("data") / "synthetic", n_train=200, n_valid=20, n_test=20, bpe_vocab_size=300, workers=1
    )


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("run") / "b2t"
    cfg = TrainConfig.from_preset(
        "mt",
        "tiny",
        data=str(data_dir),
        save_dir=str(save_dir),
        variant="b2t",
        d_model=32,
        n_heads=2,
        d_ff=64,
        encoder_layers=1,
        decoder_layers=2,
        max_tokens=512,
        max_update=24,
        warmup_updates=4,
        lr=5e-3,
        threads=1,
        progress_bar=False,
        log_interval=4,
        valid_interval=8,
        save_interval=8,
        keep_last=3,
        average_last=2,
        beam=2,
        max_len_b=5,
    )
    return save_dir, Trainer(cfg).train()


def test_training_lowers_the_loss_and_writes_a_complete_record(trained):
    save_dir, record = trained
    log = read_log(save_dir, "train")
    assert record["status"] == "completed" and record["metrics"]["num_updates"] == 24
    assert log[-1]["loss"] < 0.9 * log[0]["loss"]
    stored = json.loads((save_dir / "result.json").read_text())
    for key in ("config", "git_revision", "metrics", "status", "wall_time_s", "tokens_per_s", "environment"):
        assert key in stored, key
    assert stored["config"]["variant"] == "b2t" and stored["tokens_per_s"] > 0
    assert [p.name for p in list_checkpoints(save_dir)] == [f"checkpoint_{u}.pt" for u in (8, 16, 24)]
    assert stored["metrics"]["averaged_checkpoints"] == ["checkpoint_16.pt", "checkpoint_24.pt"]


def test_bleu_is_sacrebleu_of_the_detokenized_beam_output(trained, data_dir):
    save_dir, record = trained
    metrics = record["metrics"]
    assert set(metrics["bleu"]) == {"test"} and metrics["bleu_avg"] == metrics["bleu"]["test"]
    # Recompute by hand from the averaged model: the same hypotheses give the same corpus BLEU.
    from b2t_lib.generate import beam_search
    from b2t_lib.train import build_task
    from b2t_lib.train.options import TrainConfig as C

    cfg = C.from_dict(record["config"])
    task = build_task(cfg)
    task.load_datasets()
    model = task.build_model()
    model.load_state_dict(average_checkpoints(list_checkpoints(save_dir)[-2:]))
    test = load_translation_split(data_dir, "test")
    batch = test.collate(list(range(len(test))))
    hyps = beam_search(model, batch["src_tokens"], beam_size=2, len_penalty=0.6, max_len_a=1.2, max_len_b=5)
    texts = [test.decode(h) for h in hyps]
    expected = round(sacrebleu.corpus_bleu(texts, [test.references()]).score, 2)
    assert metrics["bleu"]["test"] == pytest.approx(expected, abs=0.01)
    assert metrics["samples"]["test"]["reference"] == test.references()[0]


def test_evaluate_run_reuses_the_runs_settings_and_merges_into_the_record(trained):
    save_dir, record = trained
    again = evaluate_run(save_dir, device="cpu")
    assert again["bleu"] == record["metrics"]["bleu"]
    single = evaluate_run(save_dir, checkpoint=save_dir / "checkpoint_8.pt", beam=1, write=False)
    assert single["averaged_checkpoints"] == ["checkpoint_8.pt"] and single["eval_options"]["beam"] == 1
    with pytest.raises(ValueError, match="cannot change"):
        evaluate_run(save_dir, lr=1.0)
    assert json.loads((save_dir / "eval.json").read_text())["bleu"] == record["metrics"]["bleu"]


def test_table1_layout_shows_our_row_beside_the_papers(trained, tmp_path):
    save_dir, record = trained
    failed = tmp_path / "failed" / "result.json"
    failed.parent.mkdir()
    failed.write_text(
        json.dumps({"status": "diverged", "variant": "post_ln", "config": {"encoder_layers": 1, "decoder_layers": 2}})
    )
    ours = collect_mt_results([save_dir, failed.parent, tmp_path / "missing"])
    assert ours["1L-2L"]["post_ln"].kind == "diverged"
    assert ours["1L-2L"]["b2t"][-1] == record["metrics"]["bleu_avg"]
    text = render_table(1, ours)
    assert "B2T connection (paper)       24.12" in text and "Post-LN (ours)              Training failed" in text


def test_run_many_with_two_workers_gives_what_one_worker_gives(data_dir, tmp_path):
    from b2t_lib.runs.sweep import run_many

    def configs(folder):
        return [
            TrainConfig.from_preset(
                "mt",
                "tiny",
                data=str(data_dir),
                save_dir=str(tmp_path / folder / v),
                variant=v,
                d_model=16,
                n_heads=2,
                d_ff=32,
                encoder_layers=1,
                decoder_layers=1,
                max_tokens=256,
                max_update=4,
                warmup_updates=2,
                threads=1,
                progress_bar=False,
                eval_at_end=False,
                log_interval=1,
                valid_interval=4,
                save_interval=4,
                keep_last=1,
            )
            for v in ("post_ln", "b2t")
        ]

    parallel = run_many(configs("parallel"), workers=2)  # two spawned processes
    serial = run_many(configs("serial"), workers=1)  # one after the other, in this process
    assert [r["variant"] for r in parallel] == ["post_ln", "b2t"]  # results in the order of the configs
    for p, s in zip(parallel, serial):
        assert p["status"] == s["status"] == "completed"
        assert p["metrics"]["valid_nll"] == s["metrics"]["valid_nll"]
    for v in ("post_ln", "b2t"):  # the same trajectory (only the measured speed differs)
        losses = [
            [(e["loss"], e["gnorm"]) for e in read_log(tmp_path / folder / v, "train")]
            for folder in ("parallel", "serial")
        ]
        assert losses[0] == losses[1] and len(losses[0]) == 4


def test_saving_by_epoch_numbers_epoch_ends_and_averages_only_them(data_dir, tmp_path):
    """The full preset's recipe (docs/methods.md §1.8): a checkpoint at every epoch end, the final mid-epoch
    state in checkpoint_last.pt only, and decoding averages the last epoch checkpoints."""

    def config(**extra):
        values = dict(
            data=str(data_dir),
            save_dir=str(tmp_path / "run"),
            d_model=16,
            n_heads=2,
            d_ff=32,
            encoder_layers=1,
            decoder_layers=1,
            max_tokens=256,
            warmup_updates=2,
            threads=1,
            progress_bar=False,
            eval_at_end=False,
            log_interval=1,
            valid_interval=1000,
            save_interval=0,
            save_interval_epochs=1,
            keep_last=10,
            average_last=2,
        )
        return TrainConfig.from_preset("mt", "tiny", **{**values, **extra})

    probe = Trainer(config(max_update=1))
    per_epoch = len(probe.task.train_batches(0, 0, 1))  # updates per epoch (update_freq 1)
    max_update = 2 * per_epoch + per_epoch // 2  # two epochs and a half
    record = Trainer(config(max_update=max_update)).train()
    run = tmp_path / "run"
    assert [int(p.stem.split("_")[1]) for p in list_checkpoints(run)] == [per_epoch, 2 * per_epoch]
    last = load_checkpoint(run / "checkpoint_last.pt")["trainer"]
    assert last["num_updates"] == max_update and last["epoch"] == 2
    assert load_checkpoint(run / f"checkpoint_{per_epoch}.pt")["trainer"]["epoch"] == 1  # the next epoch's start
    assert record["status"] == "completed"
    result = evaluate_run(run, device="cpu", beam=1, max_len_b=3, write=False)
    assert result["averaged_checkpoints"] == [f"checkpoint_{per_epoch}.pt", f"checkpoint_{2 * per_epoch}.pt"]
    resumed = Trainer(config(max_update=max_update + 2, resume=True)).train()  # resumes from the last state
    assert resumed["metrics"]["num_updates"] == max_update + 2


@pytest.mark.parametrize("clip_norm", [0.0, 0.05])
def test_an_update_is_adamw_on_the_per_token_mean_gradient_clipped_only_when_asked(data_dir, tmp_path, clip_norm):
    """Three updates of the trainer against the same steps written out by hand: the summed loss's gradient divided
    by the target tokens, its norm (the log's gnorm), scaled to clip_norm only when clip_norm > 0 and the norm
    exceeds it, then torch's AdamW with the schedule's learning rate. Dropout is off, so both see the same model."""
    import copy

    import torch

    cfg = TrainConfig.from_preset(
        "mt", "tiny", data=str(data_dir), save_dir=str(tmp_path / "run"), variant="b2t", d_model=32, n_heads=2,
        d_ff=64, encoder_layers=2, decoder_layers=2, max_tokens=256, tokens_per_update=512, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, clip_norm=clip_norm, threads=1, progress_bar=False,
    )  # fmt: skip
    trainer = Trainer(cfg)
    reference = copy.deepcopy(trainer.model)
    params = list(reference.parameters())
    optimizer = torch.optim.AdamW(params, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, weight_decay=0.0)
    clipped = []
    for group in trainer._epoch_updates()[:3]:
        stats = trainer.train_step(group)
        ntokens = 0
        for indices in group:
            out = trainer.task.loss(reference, trainer.task.collate("train", indices))
            out.loss.backward()
            ntokens += int(out.ntokens)
        grads = [p.grad for p in params]
        for g in grads:
            g /= ntokens
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        assert stats["gnorm"] == pytest.approx(norm, rel=1e-5)
        clipped.append(clip_norm > 0 and norm > clip_norm)
        if clipped[-1]:
            for g in grads:
                g *= clip_norm / (norm + 1e-6)
        optimizer.param_groups[0]["lr"] = trainer.optimizer.param_groups[0]["lr"]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        # Adam's step hardly depends on the gradient's scale; its moments do, so they are compared too
        for mine, theirs in zip(trainer.model.parameters(), params):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
            for moment in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(
                    trainer.optimizer.state[mine][moment], optimizer.state[theirs][moment], rtol=1e-4, atol=1e-9
                )
    assert all(clipped) == (clip_norm > 0)  # 0.05 is below every norm here, so each update was clipped


@pytest.mark.parametrize("clip_norm", [0.0, 0.05])
def test_a_one_process_run_trains_to_the_same_bits_with_its_parameters_in_the_slab(data_dir, tmp_path, monkeypatch,
                                                                                    clip_norm):  # fmt: skip
    """The trainer puts a one-process run's parameters into one buffer (FusedAdamW's slab): its losses, weights and
    moments are those of the same run with every parameter stepped on its own, to the bit; so is the gradient norm
    that clipping uses (the one only logged is summed in another order)."""
    import torch

    import b2t_lib.train.trainer as trainer_module
    from b2t_lib.train.optimizer import FusedAdamW

    class EachAlone(FusedAdamW):
        def __init__(self, *args, slab=False, **kwargs):
            super().__init__(*args, slab=False, **kwargs)

    runs = {}
    for name in ("slab", "alone"):
        if name == "alone":
            monkeypatch.setattr(trainer_module, "FusedAdamW", EachAlone)
        cfg = TrainConfig.from_preset(
            "mt",
            "tiny",
            data=str(data_dir),
            save_dir=str(tmp_path / name),
            variant="dyt",
            d_model=32,
            n_heads=2,
            d_ff=64,
            encoder_layers=2,
            decoder_layers=2,
            max_tokens=256,
            warmup_updates=4,
            max_update=6,
            clip_norm=clip_norm,
            threads=1,
            progress_bar=False,
            stall_deadline=0,
        )  # fmt: skip  (DyT: its scalar alphas stay outside the slab, stepped alone beside it)
        trainer = Trainer(cfg)
        assert (trainer.optimizer.slab is not None) == (name == "slab")
        stats = [trainer.train_step(group) for group in trainer._epoch_updates()[:6]]
        state = trainer.optimizer.state
        runs[name] = stats, [(p.detach(), state[p]["exp_avg"], state[p]["exp_avg_sq"]) for p in trainer.params]
    (slab_stats, slab_tensors), (alone_stats, alone_tensors) = runs["slab"], runs["alone"]
    if clip_norm == 0:  # the norm is only logged then, summed over the slab at once: its last digits differ
        for mine, theirs in zip(slab_stats, alone_stats):
            assert mine.pop("gnorm") == pytest.approx(theirs.pop("gnorm"), rel=1e-5)
    assert slab_stats == alone_stats  # loss, nll, tokens, learning rate (and, clipped, gradient norm) of every update
    assert all(torch.equal(a, b) for mine, theirs in zip(slab_tensors, alone_tensors) for a, b in zip(mine, theirs))
    assert any(p.numel() == 1 for p in trainer.params), "a parameter outside the slab took part"

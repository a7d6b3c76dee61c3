"""The beam-search benchmark's helpers: a search timed by part (every part timed, the model left as it was) and a
search split over threads (the same hypotheses, in the batch's order)."""

import importlib.util
from pathlib import Path

import torch

from b2t_lib import EncoderDecoder, ModelConfig, seed_everything
from b2t_lib.generate import beam_search_hypotheses
from b2t_lib.special_tokens import EOS

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _bench_decode(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # it imports gemm_floor beside it
    spec = importlib.util.spec_from_file_location("bench_decode", BENCHMARKS / "bench_decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tiny_model_and_source(sentences: int, length: int) -> tuple[EncoderDecoder, torch.Tensor]:
    """A seeded 2L-2L model (d 16, vocabulary 40) in eval mode and a batch of random words, each ending in EOS."""
    seed_everything(0)
    cfg = ModelConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2, dropout=0.0)
    model = EncoderDecoder(cfg).eval()
    src = torch.randint(4, 40, (sentences, length))
    src[:, -1] = EOS
    return model, src


def test_time_parts_times_every_part_and_leaves_the_model_unchanged(monkeypatch):
    bench = _bench_decode(monkeypatch)
    model, src = _tiny_model_and_source(sentences=3, length=6)

    def search():
        return beam_search_hypotheses(model, src, beam_size=3, max_len_b=5)

    expected = search()
    found = []
    parts = bench.time_parts(model, lambda: found.append(search()))
    assert set(parts) == {"encoder", "encoder keys", "decoder layers", "output layer", "search", "total"}
    for label in ("encoder", "encoder keys", "decoder layers", "output layer"):
        assert parts[label] > 0, label  # its method ran through the timer
    assert parts["search"] >= 0
    assert abs(sum(v for k, v in parts.items() if k != "total") - parts["total"]) < 1e-9
    # the timers are gone: the modules call their class's methods again, and the search found the same hypotheses
    assert "forward" not in vars(model.encoder)
    assert not {"extract_features", "output_layer", "cache_encoder_keys"} & set(vars(model.decoder))
    assert [[(h.tokens.tolist(), h.score) for h in hs] for hs in found[0]] == [
        [(h.tokens.tolist(), h.score) for h in hs] for hs in expected
    ]


def test_time_parts_skips_a_part_the_model_lacks(monkeypatch):
    bench = _bench_decode(monkeypatch)

    class Stub(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Identity()
            self.decoder = torch.nn.Module()

    stub = Stub()
    parts = bench.time_parts(stub, lambda: stub.encoder(torch.zeros(1)))
    assert set(parts) == {"encoder", "search", "total"} and parts["encoder"] > 0


def test_split_search_finds_what_one_search_finds_in_the_batch_order(monkeypatch):
    bench = _bench_decode(monkeypatch)
    model, src = _tiny_model_and_source(sentences=5, length=7)

    def search(batch):
        return beam_search_hypotheses(model, batch, beam_size=3, max_len_b=6)

    def listed(found):
        return [[(h.tokens.tolist(), h.score) for h in hs] for hs in found]

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        expected = listed(search(src))
        assert listed(bench.split_search(search, src, 1)) == expected  # one share: the same search, to the bit
        # shares of two or three sentences, or of one: the BLAS may pick another kernel for fewer rows, which can
        # round the products differently (1 ulp of a score, seen with MKL on an AMD EPYC), so the hypotheses must
        # be the same and the scores within rounding
        for n in (2, 5):
            found = listed(bench.split_search(search, src, n))
            assert [[h[0] for h in hs] for hs in found] == [[h[0] for h in hs] for hs in expected], n
            gaps = [abs(a[1] - b[1]) for hs, ref in zip(found, expected) for a, b in zip(hs, ref)]
            assert len(gaps) == 15 and max(gaps) < 1e-5, n
    finally:
        torch.set_num_threads(threads)


def test_split_search_raises_a_thread_s_error_in_the_caller(monkeypatch):
    bench = _bench_decode(monkeypatch)

    def search(batch):
        raise ValueError("no search")

    try:
        bench.split_search(search, torch.zeros(4, 2), 2)
    except ValueError as error:
        assert str(error) == "no search"
    else:
        raise AssertionError("the worker's error was lost")

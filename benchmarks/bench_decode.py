r"""Beam search speed: this checkout's search against an earlier commit's, on the same weights and the same batch.

Each implementation runs in its own process (the earlier one from ``git archive`` of ``--baseline``), alternately,
``--rounds`` times; the table gives the median sentences per second of each and their ratio, and checks that both
found the same hypotheses (every sentence's whole n-best list, tokens and scores). ``--profile`` adds where one
search spends its time: the model's matrix products (projections, FFN, output layer: the work no search can
avoid), the attention kernel, and everything else (the search itself, cache copies, masks, log-softmax, top-k).
``--parts`` splits one search's wall time by part of the model (encoder, decoder layers, output layer) and the
search itself, timed around each call without the profiler, so at the thread count asked for.

The model is an untrained Transformer (every weight random, seeded). An untrained model almost never ends a
sentence, so the search would always run to its length limit with every sentence in the batch; ``--eos-boost``
scales the EOS embedding row (which is also its output row: embeddings are shared) so that hypotheses end at
varied lengths, as a trained model's do. Settings: ``base`` is Transformer-base 6L-6L with WMT's joint
vocabulary (32768), ``tiny`` the course's tiny MT model (d 64, 6L-6L, a vocabulary of 1000)::

    python benchmarks/bench_decode.py                     # base, 32 sentences, beam 4, against BASELINE
    python benchmarks/bench_decode.py --setting tiny
    python benchmarks/bench_decode.py --profile --rounds 1
    python benchmarks/bench_decode.py --parts             # wall time by part, at the benchmark's thread count
    python benchmarks/bench_decode.py --baseline HEAD~3   # any commit whose b2t_lib has the same ModelConfig fields
    python benchmarks/bench_decode.py --split 2           # this tree's search as 2 threads of 1 torch thread each

``--split N`` runs this tree's search as N Python threads, each searching every N-th sentence with ``threads / N``
torch threads (the baseline runs as before): a measured alternative to one search whose operators use every core.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from b2t_lib.errors import ArgumentParser, UserError, run_command
from gemm_floor import ATTENTION_OPS, GEMM_OPS, profile_products, replay_products

REPO = Path(__file__).resolve().parents[1]
BASELINE = "fe5ca9c"  # the previous search: its history concatenated, then gathered, every step (RESULTS.md §12)
# eos_boost: the smallest scale of the EOS row at which this untrained model ends some hypotheses early and lets
# others run to the limit (below it none ends, above it every hypothesis ends within a few tokens)
SETTINGS = {
    "base": dict(d_model=512, n_heads=8, d_ff=2048, layers=6, vocab=32768, eos_boost=4.0),
    "tiny": dict(d_model=64, n_heads=4, d_ff=256, layers=6, vocab=1000, eos_boost=3.0),
}


def build_inputs(setting: dict, sentences: int, min_len: int, max_len: int, eos_boost: float, out: Path) -> dict:
    """Seeded weights and a right-padded source batch (lengths uniform in [min_len, max_len], then EOS)."""
    from b2t_lib import EncoderDecoder, ModelConfig, seed_everything
    from b2t_lib.special_tokens import EOS, PAD

    seed_everything(0)
    config = dict(
        vocab_size=setting["vocab"],
        d_model=setting["d_model"],
        n_heads=setting["n_heads"],
        d_ff=setting["d_ff"],
        encoder_layers=setting["layers"],
        decoder_layers=setting["layers"],
        variant="b2t",
        dropout=0.0,
    )
    model = EncoderDecoder(ModelConfig(**config))
    with torch.no_grad():
        model.decoder.embed_tokens.weight[EOS] *= eos_boost
    torch.save(model.state_dict(), out / "weights.pt")
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(min_len, max_len + 1, (sentences,), generator=generator)
    src = torch.full((sentences, int(lengths.max()) + 1), PAD)
    for row, n in enumerate(lengths.tolist()):
        src[row, :n] = torch.randint(4, setting["vocab"], (n,), generator=generator)
        src[row, n] = EOS
    torch.save(src, out / "source.pt")
    return config


def baseline_tree(commit: str, out: Path) -> Path:
    """``b2t_lib`` of ``commit``, extracted under ``out`` (the folder to put first on PYTHONPATH)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "b2t_lib"], capture_output=True)
    if archive.returncode != 0:
        raise UserError(
            f"git archive {commit} failed: {archive.stderr.decode().strip()}",
            todo="give --baseline a commit of this repository's history (a shallow clone may lack it)",
        )
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def run_child(tree: Path, spec: dict, out: Path) -> dict:
    """One implementation's measurements, in a fresh process that imports ``b2t_lib`` from ``tree``."""
    spec_file = out / "spec.json"
    spec_file.write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, __file__, "--child", str(spec_file)], env=env, capture_output=True)
    if done.returncode != 0:
        raise UserError(f"the search of {tree} failed: {done.stderr.decode().strip().splitlines()[-1]}")
    return json.loads((out / "result.json").read_text())


def child(spec_file: str) -> None:
    """Inside the child process: load the model, warm up, time ``repeats`` searches, maybe profile one."""
    import b2t_lib
    from b2t_lib import EncoderDecoder, ModelConfig
    from b2t_lib.generate import beam_search_hypotheses

    spec = json.loads(Path(spec_file).read_text())
    torch.set_num_threads(max(1, spec["threads"] // spec.get("split", 1)))
    model = EncoderDecoder(ModelConfig(**spec["config"]))
    model.load_state_dict(torch.load(spec["weights"]))
    model.eval()
    src = torch.load(spec["source"])
    options = spec["search"]

    def search(batch):
        return split_search(lambda part: beam_search_hypotheses(model, part, **options), batch, spec.get("split", 1))

    search(src[:4])  # warm-up: allocations, lazy initialization
    wall, cpu = [], []
    for _ in range(spec["repeats"]):
        w, c = time.perf_counter(), time.process_time()
        found = search(src)
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    result = dict(
        wall=wall,
        cpu=cpu,
        library=str(Path(b2t_lib.__file__).parent),
        hypotheses=[[(h.tokens.tolist(), h.score) for h in hypotheses] for hypotheses in found],
    )
    if spec["profile"]:
        result["profile"] = profile_search(lambda: search(src))
    if spec["parts"]:
        result["parts"] = time_parts(model, lambda: search(src))
    Path(spec_file).with_name("result.json").write_text(json.dumps(result))


def split_search(search, batch: torch.Tensor, n: int) -> list:
    """``search(batch)`` as ``n`` threads, each searching every ``n``-th sentence (torch's operators release the GIL
    while they compute); the results in the batch's order. ``n = 1``: one plain call."""
    if n == 1:
        return search(batch)
    shares = [list(range(i, batch.shape[0], n)) for i in range(n)]
    found: list = [None] * batch.shape[0]
    failures: list[BaseException] = []

    def work(share):
        try:
            for row, result in zip(share, search(batch[share])):
                found[row] = result
        except BaseException as error:  # re-raised in the calling thread
            failures.append(error)

    workers = [threading.Thread(target=work, args=(share,)) for share in shares]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return found


def profile_search(search) -> dict:
    """Where one search's time goes: the profiler's self time by kind of operator, and the floor that no search
    can go below, its matrix products alone: every product of the search (shapes from the profiler) timed again on
    its own, one after another, outside the search (``gemm_floor``, seconds)."""
    self_s, products, wall = profile_products(search)
    gemm = sum(t for key, t in self_s.items() if key in GEMM_OPS)
    attention = sum(t for key, t in self_s.items() if key in ATTENTION_OPS)
    top = sorted(self_s.items(), key=lambda kv: -kv[1])[:10]
    return dict(wall=wall, gemm=gemm, attention=attention, other_ops=sum(self_s.values()) - gemm - attention,
                top=top, gemm_floor=replay_products(products))  # fmt: skip


# the parts of a search timed by --parts: label -> (the model's submodule, its method that the search calls)
PARTS = {
    "encoder": ("encoder", "forward"),
    "encoder keys": ("decoder", "cache_encoder_keys"),  # cross-attention keys and values, once per sentence
    "decoder layers": ("decoder", "extract_features"),
    "output layer": ("decoder", "output_layer"),
}


def time_parts(model, search) -> dict:
    """Wall seconds of one ``search()`` by part: each of :data:`PARTS` timed around every call of its method (no
    profiler, so operators run at their normal speed and thread count), and ``search``, the rest: the search itself
    (log-softmax, top-k, finishing hypotheses, reordering the caches, Python). A part the model lacks is absent."""
    spent: dict[str, float] = {}

    def timed(label, method):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - start

        return call

    patched = []
    for label, (module_name, method_name) in PARTS.items():
        module = getattr(model, module_name)
        if hasattr(module, method_name):
            spent[label] = 0.0
            setattr(module, method_name, timed(label, getattr(module, method_name)))  # an instance attribute
            patched.append((module, method_name))
    try:
        start = time.perf_counter()
        search()
        total = time.perf_counter() - start
    finally:
        for module, method_name in patched:
            delattr(module, method_name)  # the class's method again
    return dict(spent, search=total - sum(spent.values()), total=total)


def print_parts(name: str, parts: dict) -> None:
    total = parts["total"]
    shares = ", ".join(f"{k} {v:.2f} s ({v / total:.0%})" for k, v in parts.items() if k != "total")
    print(f"  {name:9s} {total:6.2f} s: {shares}")


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def compare(a: list, b: list) -> tuple[bool, float, int]:
    """(identical token lists in every n-best, the largest score difference, sentences whose lists differ)."""
    differ = sum(1 for x, y in zip(a, b) if [t for t, _ in x] != [t for t, _ in y])
    gaps = [abs(s - r) for x, y in zip(a, b) for (_, s), (_, r) in zip(x, y)]
    return differ == 0 and len(a) == len(b), max(gaps, default=0.0), differ


def print_profile(name: str, p: dict, wall: float) -> None:
    rest = p["wall"] - p["gemm"] - p["attention"] - p["other_ops"]
    share = {key: value / p["wall"] for key, value in dict(p, rest=rest).items() if key not in ("wall", "top")}
    print(
        f"  {name:9s} wall {p['wall']:6.2f} s: matrix products {share['gemm']:5.1%}, attention kernel "
        f"{share['attention']:5.1%}, other operators {share['other_ops']:5.1%}, Python {share['rest']:5.1%}"
    )
    print(
        f"            its matrix products alone: {p['gemm_floor']:.2f} s ({p['gemm_floor'] / wall:.0%} of its search)"
    )
    print("            " + ", ".join(f"{k.replace('aten::', '')} {t:.2f}" for k, t in p["top"]))


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="base", help="model size (default base)")
    parser.add_argument("--baseline", default=BASELINE, help=f"the commit to compare with (default {BASELINE})")
    parser.add_argument("--sentences", type=int, default=32, help="sentences in the batch (default 32)")
    parser.add_argument("--beam", type=int, default=4, help="beam size (default 4, the paper's translation beam)")
    parser.add_argument("--lenpen", type=float, default=0.6, help="length penalty (default 0.6)")
    parser.add_argument("--lengths", type=int, nargs=2, default=(15, 35), help="source lengths, min and max")
    parser.add_argument("--eos-boost", type=float, help="scale of the EOS embedding row (default: the setting's)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads per process")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds, one timed search each")
    parser.add_argument("--profile", action="store_true", help="also profile one search of each")
    parser.add_argument("--parts", action="store_true", help="also time one search of each by part (no profiler)")
    parser.add_argument("--split", type=int, default=1, help="this tree's search as N threads (default 1: one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: run one implementation's measurements
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    if args.rounds < 1 or args.sentences < 1:
        raise UserError("--rounds and --sentences must be at least 1")
    if not 1 <= args.split <= args.sentences:
        raise UserError(f"--split must be between 1 and --sentences ({args.sentences}), got {args.split}")
    if args.split > 1 and (args.profile or args.parts):
        raise UserError("--split times whole searches only", todo="leave out --profile and --parts with --split")

    with tempfile.TemporaryDirectory(prefix="bench_decode_") as scratch:
        scratch = Path(scratch)
        (scratch / "old").mkdir()
        old_tree = baseline_tree(args.baseline, scratch / "old")
        eos_boost = args.eos_boost if args.eos_boost is not None else SETTINGS[args.setting]["eos_boost"]
        config = build_inputs(SETTINGS[args.setting], args.sentences, *args.lengths, eos_boost, scratch)
        spec = dict(
            config=config,
            weights=str(scratch / "weights.pt"),
            source=str(scratch / "source.pt"),
            threads=args.threads,
            repeats=1,
            profile=False,
            parts=False,
            search=dict(beam_size=args.beam, len_penalty=args.lenpen, max_len_a=1.2, max_len_b=10),
        )
        trees = {"baseline": old_tree, "this tree": REPO}
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                last = round_ == args.rounds - 1
                split = args.split if name == "this tree" else 1
                one = dict(spec, profile=args.profile and last, parts=args.parts and last, split=split)
                runs[name].append(run_child(tree, one, scratch))

    load = os.getloadavg()[0]
    print(
        f"# {datetime.date.today()}  torch {torch.__version__}  {platform.machine()}, {os.cpu_count()} cores, "
        f"{args.threads} threads, load average {load:.1f}"
        + (f"; this tree's search split over {args.split} threads" if args.split > 1 else "")
    )
    s = SETTINGS[args.setting]
    print(
        f"# {args.setting}: {s['layers']}L-{s['layers']}L d={s['d_model']} ffn={s['d_ff']} vocab={s['vocab']}, "
        f"{args.sentences} sentences of {args.lengths[0]}-{args.lengths[1]} tokens, beam {args.beam}, lenpen "
        f"{args.lenpen}, max_len 1.2 * src_len + 10, EOS boost {eos_boost}; median of {args.rounds} rounds"
    )
    speed = {}
    for name in trees:
        wall = median([r["wall"][0] for r in runs[name]])
        cpu = median([r["cpu"][0] for r in runs[name]])
        speed[name] = args.sentences / wall
        print(f"{name:10s} {wall:7.2f} s wall {cpu:7.2f} s CPU {speed[name]:8.2f} sentences/s")
    print(f"ratio (this tree / baseline, sentences per second): {speed['this tree'] / speed['baseline']:.2f}")
    same, gap, differ = compare(runs["baseline"][-1]["hypotheses"], runs["this tree"][-1]["hypotheses"])
    lengths = [len(h[0][0]) for h in runs["this tree"][-1]["hypotheses"] if h]
    print(
        f"hypotheses: {'identical' if same else f'{differ} sentences differ'} (every n-best list; largest score "
        f"difference {gap:.1e}); best hypotheses {min(lengths)}-{max(lengths)} tokens"
    )
    if args.parts:
        print("one more search of each, timed by part (search: the rest, the search's own work):")
        for name in trees:
            print_parts(name, runs[name][-1]["parts"])
    if args.profile:
        print("where one search's time goes (profiled, so slower than above):")
        for name in trees:
            print_profile(name, runs[name][-1]["profile"], median([r["wall"][0] for r in runs[name]]))


if __name__ == "__main__":
    raise SystemExit(run_command(main))

"""The WMT download code with a stand-in for ``datasets.load_dataset`` (no network here):
the files it writes, the line-count checks and the fallback from one source to the next."""

from __future__ import annotations

import pytest

datasets = pytest.importorskip("datasets")

from b2t_lib.data import wmt  # noqa: E402


def _fake_hub(counts: dict, calls: list):
    """A load_dataset that serves ``counts[(repo, config, split)]`` rows, or fails for unknown ids."""

    def load_dataset(repo, config, split, cache_dir=None):
        calls.append((repo, config, split))
        if (repo, config, split) not in counts:
            raise ConnectionError(f"{repo} is not reachable")
        n = counts[(repo, config, split)]
        rows = [{"de": f"{repo} {config} {split} Satz {i}\nzweite Zeile", "en": f"sentence {i}"} for i in range(n)]
        return datasets.Dataset.from_dict({"translation": rows})

    return load_dataset


def test_download_writes_raw_files_checks_counts_and_falls_back(tmp_path, monkeypatch):
    lighteval = {(wmt.LIGHTEVAL, f"wmt{y % 100}_en-de", "test"): n for y, n in wmt.NEWSTEST_LINES.items()}
    lighteval[(wmt.LIGHTEVAL, "wmt14_en-de", "test")] = 2737  # the filtered 2014 set
    counts = {
        ("wmt/wmt14", "de-en", "train"): 50,
        ("wmt/wmt14", "de-en", "validation"): 3000,
        # wmt/wmt14 test unreachable: 2014 must fail (lighteval has the wrong size)
        ("wmt/wmt16", "de-en", "validation"): 2169,
        ("wmt/wmt16", "de-en", "test"): 2999,
        **lighteval,
    }
    calls: list = []
    monkeypatch.setattr(datasets, "load_dataset", _fake_hub(counts, calls))
    monkeypatch.setattr(wmt, "TRAIN_MIN_PAIRS", 10)
    monkeypatch.setattr(
        "sacrebleu.utils.get_source_file",
        lambda *a: (_ for _ in ()).throw(ConnectionError("statmt.org is not reachable")),
    )
    with pytest.raises(RuntimeError, match=r"newstest2014 with 3003 lines(.|\n)*2737 lines(.|\n)*--from-files"):
        wmt.download_wmt14_en_de(tmp_path)
    # The train file and the years before 2014 are complete and recorded; the next run skips them.
    train_en = (tmp_path / "train.en").read_text().splitlines()
    train_de = (tmp_path / "train.de").read_text().splitlines()
    assert len(train_en) == len(train_de) == 50  # inner newline joined away
    assert train_en[3] == "sentence 3" and train_de[3].endswith("Satz 3 zweite Zeile")
    assert len((tmp_path / "newstest2013.de").read_text().splitlines()) == 3000
    assert (tmp_path / "newstest2013.de").read_text().startswith("wmt/wmt14 de-en validation")

    counts[("wmt/wmt14", "de-en", "test")] = 3003  # the Hub is back
    calls.clear()
    raw = wmt.download_wmt14_en_de(tmp_path)
    assert calls == [
        ("wmt/wmt14", "de-en", "test"),
        ("wmt/wmt16", "de-en", "validation"),
        ("wmt/wmt16", "de-en", "test"),
    ]  # finished files were not fetched again
    names = sorted(p.name for p in raw.iterdir() if not p.name.startswith("."))
    assert names == sorted(
        [f"{s}.{l}" for s in ["train", "valid"] + [f"newstest{y}" for y in range(2010, 2017)] for l in ("en", "de")]
    )
    assert (raw / "valid.de").read_bytes() == (raw / "newstest2013.de").read_bytes()
    assert len((raw / "newstest2015.en").read_text().splitlines()) == 2169

"""Headline generation data (article -> headline): checks of user files and the shared pipeline.

The paper's headline task (Section 6.2.1) uses the Gigaword pairs of Rush et al. (2015), processed
like the MT data: a joint BPE with 32K merges shared by article and headline, the same dictionary
and memory-mapped binarization (:func:`.translation.prepare_translation_data`). Only three things
differ from MT, and they are options of that one pipeline:

* no Moses step: Gigaword is already tokenized, lower-cased and digit-normalized
  (``tokenizer="none"``); raw text of your own gets the same normalization
  (``tokenizer="rush"``, :func:`.text.rush_normalize`);
* no length-ratio filter (a headline is meant to be much shorter than its article) and, by
  default, no length limit: every training pair with a non-empty article and headline is kept;
* the references kept for scoring are the tokenized headlines, and decoding removes BPE
  without Moses detokenization, because ROUGE compares tokenized text
  (:meth:`.translation_dataset.TranslationDataset.decode` reads the choice from the manifest).

Files: ``<split>.article`` and ``<split>.headline``, one example per line, for ``train``,
``valid`` and one or more test splits (every other pair of files is a test split).
"""

from __future__ import annotations

from pathlib import Path

from .translation import prepare_translation_data
from ..errors import UserError
from .inputs import strip_bom

ARTICLE, HEADLINE = "article", "headline"  # file suffixes (the "languages" of the pair)
MAX_REPORTED = 20  # problems listed in one error message


class HeadlineFileError(UserError, ValueError):
    """Input files that cannot be prepared; the message lists every problem found."""


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def _check_text_file(path: Path, problems: list[str]) -> int | None:
    """Number of lines of ``path``, or ``None`` after recording why it cannot be used.

    Reads bytes and splits on ``\\n`` only (as the pipeline does), so the line numbers in the
    messages are the ones an editor shows.
    """
    data = path.read_bytes()
    if not data.strip():
        problems.append(f"{path} is empty: every split needs at least one example (one per line)")
        return None
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    ok = True
    for number, line in enumerate(lines, start=1):
        try:
            text = strip_bom(line.decode("utf-8"))  # the pipeline removes a byte-order mark too
        except UnicodeDecodeError as error:
            problems.append(
                f"{path}, line {number}: not UTF-8 (byte 0x{line[error.start]:02x} at column "
                f"{error.start + 1}); convert the file, e.g. `iconv -f latin1 -t utf-8`"
            )
            return None
        if ok and not text.strip():
            what = "article" if path.suffix == f".{ARTICLE}" else "headline"
            problems.append(
                f"{path}, line {number} is blank: every line must hold one {what} "
                f"(a blank line usually means the two files are out of step)"
            )
            ok = False
    return len(lines) if ok else None


def check_headline_files(folder: str | Path) -> list[str]:
    """Check ``folder`` for headline pairs; return the splits ``['train', 'valid', <tests>]``.

    Raises :class:`HeadlineFileError` (a ``ValueError``) naming each problem with its file and
    line: a missing ``train``/``valid``/test split, a file without its partner, an empty file,
    a blank line, bytes that are not UTF-8, files of one split with different line counts.
    Nothing is written, so a run that fails here leaves a prepared data set untouched.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise HeadlineFileError(
            f"{folder} is not a folder; --from-files needs a folder with "
            f"train/valid/<test>.{{{ARTICLE},{HEADLINE}}} files"
        )
    names = {
        side: {p.name[: -len(side) - 1] for p in folder.glob(f"*.{side}") if p.is_file()}
        for side in (ARTICLE, HEADLINE)
    }
    problems: list[str] = []
    for side, other in ((ARTICLE, HEADLINE), (HEADLINE, ARTICLE)):
        for name in sorted(names[side] - names[other]):
            problems.append(f"{folder / f'{name}.{side}'} has no partner {folder / f'{name}.{other}'}")
    paired = names[ARTICLE] & names[HEADLINE]
    for required in ("train", "valid"):
        if required not in paired:
            problems.append(
                f"{folder} has no {required} split: add {required}.{ARTICLE} and "
                f"{required}.{HEADLINE} (one example per line)"
            )
    tests = sorted(paired - {"train", "valid"})
    if not tests:
        problems.append(
            f"{folder} has no test split: add at least one more pair, e.g. test.{ARTICLE} and test.{HEADLINE}"
        )
    for split in sorted(paired):
        article, headline = folder / f"{split}.{ARTICLE}", folder / f"{split}.{HEADLINE}"
        n_article = _check_text_file(article, problems)
        n_headline = _check_text_file(headline, problems)
        if n_article is not None and n_headline is not None and n_article != n_headline:
            longer = article if n_article > n_headline else headline
            problems.append(
                f"{article} has {_lines(n_article)} but {headline} has {_lines(n_headline)}: the files "
                f"must be aligned line by line (line {min(n_article, n_headline) + 1} of "
                f"{longer} has no partner)"
            )
    if problems:
        shown = problems[:MAX_REPORTED]
        more = f"\n  ... and {len(problems) - MAX_REPORTED} more" if len(problems) > MAX_REPORTED else ""
        raise HeadlineFileError(f"cannot prepare headline data from {folder}:\n  - " + "\n  - ".join(shown) + more)
    return ["train", "valid", *tests]


def prepare_summarization_data(
    raw_dir: str | Path,
    out_dir: str | Path,
    *,
    tokenizer: str = "none",
    bpe_merges: int | None = 32000,
    bpe_vocab_size: int | None = None,
    max_pairs: int | None = None,
    seed: int = 0,
    max_len: int | None = None,
    workers: int | None = None,
    check_files: bool = True,
) -> Path:
    """Prepare ``raw_dir/<split>.{article,headline}`` into ``out_dir`` with the MT pipeline.

    ``tokenizer``: ``"none"`` for already normalized text (Gigaword), ``"rush"`` to normalize raw
    text first (lower case, digits -> ``#``, Penn Treebank tokens). BPE: ``bpe_merges`` joint merges
    (default 32000, the paper's Section 6.2.1), or ``bpe_vocab_size`` symbols instead when it is
    given. ``max_pairs`` keeps a seeded random subset of the training pairs; ``max_len`` drops
    training pairs with a longer article or headline (in tokens; default: no limit). The files
    are checked first (:func:`check_headline_files`) unless ``check_files=False`` (the Gigaword
    download checks its own). Returns ``out_dir``, ready for
    :func:`.translation_dataset.load_translation_split`.
    """
    if tokenizer not in ("none", "rush"):
        raise ValueError(f"headline data is tokenized with 'none' (already normalized) or 'rush'; got {tokenizer!r}")
    splits = check_headline_files(raw_dir) if check_files else None
    if bpe_vocab_size is not None:
        bpe_merges = None
    return prepare_translation_data(
        raw_dir,
        out_dir,
        src_lang=ARTICLE,
        tgt_lang=HEADLINE,
        tokenizer=tokenizer,
        splits=splits,
        bpe_merges=bpe_merges,
        bpe_vocab_size=bpe_vocab_size,
        max_pairs=max_pairs,
        seed=seed,
        min_len=1,
        max_len=max_len,
        max_ratio=None,
        workers=workers,
    )

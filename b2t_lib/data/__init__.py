"""Sequence-to-sequence data: WMT'14 En-De, Gigaword headlines and synthetic tasks, one pipeline.

raw text -> tokenization (Moses for MT; none or Rush et al.'s normalization for headlines) ->
cleaning -> joint BPE -> fairseq dictionary -> memory-mapped ids, plus batching, collation and
decoding (Moses-detokenized for SacreBLEU, tokenized for ROUGE).
"""

from .batching import BatchSizeError, token_batches
from .bpe import BPE, learn_bpe, remove_bpe
from .translation_dataset import TranslationDataset, load_translation_split, test_split_names
from .dictionary import Dictionary
from .gigaword import download_gigaword, extract_gigaword
from .translation import prepare_translation_data
from .summarization import HeadlineFileError, check_headline_files, prepare_summarization_data
from .synthetic import SyntheticLanguagePair, generate_synthetic_pairs, prepare_synthetic_mt
from .synthetic_headlines import HeadlineTask, generate_headline_pairs, prepare_synthetic_summarization
from .text import moses_detokenize, moses_tokenize, rush_normalize
from .wmt import download_wmt14_en_de, prepare_wmt14_en_de

__all__ = [
    "BPE",
    "BatchSizeError",
    "Dictionary",
    "HeadlineFileError",
    "HeadlineTask",
    "SyntheticLanguagePair",
    "TranslationDataset",
    "check_headline_files",
    "download_gigaword",
    "download_wmt14_en_de",
    "extract_gigaword",
    "generate_headline_pairs",
    "generate_synthetic_pairs",
    "learn_bpe",
    "load_translation_split",
    "moses_detokenize",
    "moses_tokenize",
    "prepare_summarization_data",
    "prepare_synthetic_mt",
    "prepare_synthetic_summarization",
    "prepare_translation_data",
    "prepare_wmt14_en_de",
    "remove_bpe",
    "rush_normalize",
    "test_split_names",
    "token_batches",
]

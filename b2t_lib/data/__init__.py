"""Machine-translation data: WMT'14 En-De and a synthetic task, through one pipeline.

raw text -> Moses normalization/tokenization -> cleaning -> joint BPE -> fairseq dictionary ->
memory-mapped ids, plus batching, collation and detokenization for SacreBLEU.
"""
from .batching import BatchSizeError, token_batches
from .bpe import BPE, learn_bpe, remove_bpe
from .dataset import TranslationDataset, load_translation_split, test_split_names
from .dictionary import Dictionary
from .prepare import prepare_translation_data
from .synthetic import SyntheticLanguagePair, generate_synthetic_pairs, prepare_synthetic_mt
from .text import moses_detokenize, moses_tokenize
from .wmt import download_wmt14_en_de

__all__ = [
    "BPE", "BatchSizeError", "Dictionary", "SyntheticLanguagePair", "TranslationDataset",
    "download_wmt14_en_de", "generate_synthetic_pairs", "learn_bpe", "load_translation_split",
    "moses_detokenize", "moses_tokenize", "prepare_synthetic_mt", "prepare_translation_data",
    "remove_bpe", "test_split_names", "token_batches",
]

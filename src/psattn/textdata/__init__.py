"""Real text as data: the corpora (the shipped ones in ``corpora/``), the byte and BPE tokenizers, and the
cached token streams. Imports neither models nor training (tasks read it); language-model evaluation lives
beside the models, in ``psattn.models.lm_eval``."""

from psattn.textdata.corpus import load_documents
from psattn.textdata.tokenizer import BPETokenizer, ByteTokenizer, load_tokenizer
from psattn.textdata.tokens import tokenize_corpus

__all__ = ["BPETokenizer", "ByteTokenizer", "load_documents", "load_tokenizer", "tokenize_corpus"]

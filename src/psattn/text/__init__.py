"""Real text: corpora, tokenizers, the cached token streams, language-model metrics, generation."""

from psattn.text.corpus import load_documents
from psattn.text.metrics import icl_score, text_metrics
from psattn.text.tokenizer import BPETokenizer, ByteTokenizer, load_tokenizer
from psattn.text.tokens import tokenize_corpus

__all__ = ["BPETokenizer", "ByteTokenizer", "icl_score", "load_documents", "load_tokenizer", "text_metrics",
           "tokenize_corpus"]

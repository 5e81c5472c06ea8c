"""Language models on real text: their metrics (bits per byte, the ICL score, copy gains, head scores)
and generation. The corpora, tokenizers and token streams are ``psattn.textdata``."""

from psattn.text.metrics import icl_score, text_metrics

__all__ = ["icl_score", "text_metrics"]

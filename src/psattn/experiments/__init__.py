"""Declared experiments: each is a function returning the list of run configs it trains (``declared``,
the studies' modules), the summaries and tables read from their saved results, and the reproduction
report with its figures (``reproduce``). ``psattn sweep NAME`` and ``psattn reproduce`` run them."""

"""Declared experiments and what runs and reports them: the studies, one module each in ``studies``
and listed in ``declared``; the summaries and tables read from their saved results; the sweep runner
(``sweep``); and the reproduction report with its figures (``reproduce``). ``psattn sweep NAME`` and
``psattn reproduce`` run them."""

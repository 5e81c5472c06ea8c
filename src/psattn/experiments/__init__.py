"""Declared studies and what runs and reports them. Every study is one ``study.Study`` (its plans, its
table, its verdict), declared in its module of ``studies`` and listed by name in ``declared``; apart from
them sit the sweep runner (``sweep``), the grouped summaries the tables read (``summaries``) and the
reproduction report with its figures (``reproduce``). ``psattn sweep NAME`` and ``psattn reproduce`` run
them."""

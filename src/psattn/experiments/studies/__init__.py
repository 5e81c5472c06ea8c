"""The declared studies, one module each (the induction studies of the reproduction share one, ``induction``):
what runs each trains for a plan, and what it reads off their saved results. The registry of them all is
``psattn.experiments.declared``."""

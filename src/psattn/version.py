"""The library's version, in a module of its own so that any layer can read it."""

__version__ = "0.1.0"

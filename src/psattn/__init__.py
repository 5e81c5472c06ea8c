"""psattn: Phase Space Attention and mean-field attention dynamics with auxiliary variables."""

__version__ = "0.1.0"

"""Command-line entry points that join several layers (a theory report that needs a trained model),
kept out of the packages they drive so that those stay leaves (see docs/architecture.md)."""

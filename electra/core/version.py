"""The version, in one place: `electra --version`, the model cards and the package metadata (pyproject) read it."""

__version__ = "0.1.0"

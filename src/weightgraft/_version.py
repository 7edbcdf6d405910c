"""The package version, in a module of its own so that weightgraft's modules read it without
going through the public facade (`weightgraft/__init__.py`). Keep it equal to `pyproject.toml`."""

__version__ = "0.1.0"

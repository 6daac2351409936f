"""The package version, in one place (the bundle manifest records it)."""

__version__ = "0.1.0"

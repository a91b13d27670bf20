"""Nexus: an open, self-hostable, metadata-driven CRM platform."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nexus-crm")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

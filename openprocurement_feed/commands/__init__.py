"""Subcommands of ``openprocurement-feed``: one module each, see :mod:`..cli`."""

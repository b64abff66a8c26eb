"""Sphinx configuration of the openprocurement_feed documentation."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "openprocurement_feed"
copyright = "2026, the openprocurement_feed authors"
release = "0.1.0.dev0"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False
suppress_warnings = ["autodoc.import_object"]

"""Sphinx configuration of the openprocurement_feed documentation."""

import os
import sys
import warnings

sys.path.insert(0, os.path.abspath(".."))
# Pyramid imports the deprecated pkg_resources; autodoc's imports of it
# would print that warning into every build.
warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)

project = "openprocurement_feed"
copyright = "2026, the openprocurement_feed authors"
release = "0.1.0.dev0"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False

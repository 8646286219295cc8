"""Sphinx configuration for arrayport's documentation site (build: scripts/build-docs).

Why Sphinx (with MyST for Markdown and the Furo theme) rather than MkDocs Material: the
core is a compiled Cython module, and Sphinx's autodoc documents it from the module itself
(docstrings and signatures, which Cython 3 makes introspectable), with napoleon reading the
numpydoc sections that NumPy's and SciPy's users know. MkDocs' API plugin reads source
files and would see none of the compiled core. The pages stay plain Markdown in docs/,
readable on GitHub as they are.
"""

import arrayport

project = "arrayport"
author = "the arrayport authors"
copyright = "2026, the arrayport authors"
release = version = arrayport.__version__

extensions = [
    "myst_parser",            # the pages are Markdown (docs/*.md)
    "sphinx.ext.autodoc",     # the API reference, from the installed package
    "sphinx.ext.napoleon",    # numpydoc sections (Parameters, Returns, Raises, Examples)
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False

html_theme = "furo"
html_title = f"arrayport {release}"
html_static_path = ["_static"]
html_show_sourcelink = False

"""The version, written once: packaging reads it here, and so does the code that shows it.

Apart from ``x402srv/__init__.py`` so that a module inside the package can show
the version without importing the package's own ``__init__`` (which imports, for
the type checkers, the modules that would then import it back).
"""

__version__ = "0.1.0"

"""The package's version, alone in a leaf module: the CLI, the wire's User-Agent and the
server's /health read it without importing the package face (which imports nearly
everything)."""

__version__ = "0.1.0"

"""cone: how the geometry of an embedding space decides whether semantic search works."""

__version__ = "0.1.0"

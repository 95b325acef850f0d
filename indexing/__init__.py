"""Corpus -> vectors -> FAISS (or BM25) index folders with validated manifests."""

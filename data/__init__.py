"""Benchmark datasets: BEIR retrieval sets and STS pairs, loaded by path, never committed."""

from cone.data.loaders import Corpus, RetrievalDataset, StsPairs, data_dir, doc_text, load_beir, load_sts

__all__ = ["Corpus", "RetrievalDataset", "StsPairs", "data_dir", "doc_text", "load_beir", "load_sts"]

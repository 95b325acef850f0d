"""The eval harness: retrieval, STS, similarity spread, hubness and geometry for every model."""

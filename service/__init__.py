"""The search service: every index behind one FastAPI app, and a page that shows them side by side."""

"""The two reference language models (baseline: --reg-cos 0; regularized), shipped as package data of
``cone.checkpoints`` so that every install has them; ``cone.models.checkpoint.checkpoints_dir`` finds them."""

"""Every model behind one interface: text in, (N, d) float32 vectors out."""

from cone.encoders.base import Encoder
from cone.encoders.registry import ENCODER_NAMES, LM_MODELS, load_encoder, missing

__all__ = ["Encoder", "LM_MODELS", "ENCODER_NAMES", "load_encoder", "missing"]

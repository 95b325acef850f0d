"""Every model behind one interface: text in, (N, d) float32 vectors out."""

from encoders.base import Encoder, ModelUnavailable
from encoders.registry import MODEL_NAMES, load_encoder

__all__ = ["Encoder", "MODEL_NAMES", "ModelUnavailable", "load_encoder"]

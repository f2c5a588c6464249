"""multihead: the shared code of the course on multi-head attention."""

from multihead.attention import HookPoint, MultiHeadAttention, run_with_cache
from multihead.config import ModelConfig, TrainConfig
from multihead.runtime import device, is_fast, pick, seed_everything

__all__ = [
    "HookPoint",
    "ModelConfig",
    "MultiHeadAttention",
    "TrainConfig",
    "device",
    "is_fast",
    "pick",
    "run_with_cache",
    "seed_everything",
]
__version__ = "0.1.0"

"""multihead: the shared code of the course on multi-head attention."""

from multihead.core.attention import HookPoint, MultiHeadAttention, run_with_cache
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.runtime import device, is_fast, pick, seed_everything

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

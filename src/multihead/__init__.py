"""multihead: the shared code of the course on multi-head attention.

The package is in layers, each a subpackage with one role; a module imports only from its
own layer and the layers before it (``tests/test_layers.py`` checks this):

========================  ==============================================================
``multihead._checks``     every argument check (and the mask polarities, written once)
``multihead.timing``      fair wall-clock comparisons (imports ``_checks``)
``multihead.core``        the model: attention, hook points, layers, configs, training
``multihead.tasks``       data with known answers (imports ``core``)
``multihead.analysis``    pure functions of tensors (imports nothing of the package but
                          ``_checks``)
``multihead.interventions``  changing what heads do (imports ``core`` and ``analysis``;
                          task code comes in as callables)
``multihead.pretrained``  the packaged MiniLM and SmolLM2, and their analyses (imports the
                          layers above)
``multihead.viz``         figures and explorers (imports ``core`` and ``analysis``)
``multihead.exercises``   the exercise checkers (may import anything)
========================  ==============================================================

The repository's own tools (the notebook runner, the seed sweep, the diagram generator) live
in ``tools/`` at the repository root, outside the package.

``CHAPTERS`` says which modules each chapter's notebook uses.
"""

from multihead.core.attention import MultiHeadAttention
from multihead.core.config import ModelConfig, TrainConfig
from multihead.core.hooks import HookPoint, run_with_cache, run_with_hooks
from multihead.core.runtime import device, is_fast, pick, seed_everything

# chapter -> the package modules its notebook imports (checked by tests/test_layers.py)
CHAPTERS: dict[str, tuple[str, ...]] = {
    "01_mha_from_scratch": (
        "core.attention", "core.config", "core.convert", "core.hooks", "core.model",
        "core.runtime", "core.train", "tasks.synthetic", "analysis.cost", "analysis.metrics",
        "analysis.verdict", "viz.glue", "viz.claims", "viz.headview", "viz.plotting",
        "viz.widgets", "exercises",
    ),
    "02_symmetry": (
        "core.attention", "core.config", "core.hooks", "core.model", "core.runtime",
        "core.train", "tasks.synthetic", "analysis.verdict",
        "interventions.symmetry", "viz.claims", "viz.glue", "exercises",
    ),
    "03_low_rank_bottleneck": (
        "core.attention", "core.config", "core.hooks", "core.model", "core.progress",
        "core.runtime", "core.train", "tasks.synthetic",
        "analysis.cost", "analysis.lowrank", "analysis.verdict", "viz.claims", "viz.glue",
        "viz.widgets", "exercises",
    ),
    "04_talking_heads": (
        "core.attention", "core.config", "core.hooks", "core.runtime", "core.talking_heads",
        "tasks.classification", "tasks.seed_scores", "tasks.synthetic", "analysis.lowrank",
        "analysis.patternfit", "analysis.probing", "analysis.verdict", "viz.claims", "viz.glue",
        "exercises",
    ),
    "04b_transformer_primer": (
        "core.config", "core.hooks", "core.model", "core.positions", "core.runtime",
        "core.train", "tasks.corpus", "tasks.translation", "exercises", "viz.glue",
    ),
    "05_head_roles": (
        "core.model", "core.runtime", "tasks.corpus", "tasks.translation", "analysis.metrics",
        "tasks.coreference", "analysis.coreference", "analysis.replicates", "analysis.verdict",
        "analysis.probing", "analysis.roles", "interventions.ablation", "interventions.pruning",
        "interventions.relevance", "viz.claims", "viz.glue", "exercises", "viz.headview",
        "viz.plotting", "viz.roles", "viz.widgets",
    ),
    "06_head_diversity": (
        "core.config", "core.hooks", "core.model", "core.runtime", "tasks.corpus",
        "tasks.tagging", "tasks.translation", "analysis.diversity", "analysis.metrics",
        "analysis.probing", "analysis.roles", "analysis.verdict", "interventions.ablation",
        "interventions.gradients", "viz.claims",
        "viz.glue", "exercises",
    ),
    "07_pruning": (
        "core.config", "core.model", "core.runtime", "tasks.corpus", "tasks.translation",
        "analysis.metrics", "analysis.probing", "analysis.roles", "analysis.verdict",
        "interventions.ablation", "interventions.gates",
        "interventions.pruning", "viz.claims", "viz.glue", "viz.plotting", "viz.roles",
        "timing", "exercises",
    ),
    "08_drophead": (
        "core.model", "core.progress", "core.runtime", "tasks.corpus", "tasks.translation",
        "analysis.baselines", "analysis.diversity", "analysis.metrics", "analysis.verdict",
        "interventions.ablation",
        "interventions.drophead", "interventions.pruning", "viz.claims", "viz.glue", "exercises",
    ),
    "09_pretrained_heads": (
        "core.runtime", "tasks.corpus", "analysis.metrics", "analysis.roles", "analysis.sinks",
        "pretrained.analysis", "pretrained.load", "pretrained.rarity", "pretrained.sinks",
        "pretrained.syntax", "viz.claims", "viz.glue", "viz.headview", "viz.plotting",
        "tasks.coreference", "analysis.coreference", "analysis.verdict",
        "pretrained.coreference", "exercises",
    ),
    "10_kv_sharing": (
        "core.attention", "core.config", "core.convert", "core.decoder", "core.latent",
        "core.model", "core.runtime", "core.tiles", "core.train", "tasks.recall",
        "analysis.cost", "analysis.verdict", "viz.claims", "viz.glue", "exercises",
    ),
    "11_circuits": (
        "core.config", "core.decoder", "core.hooks", "core.positions", "core.rotary",
        "core.runtime", "core.train", "tasks.repeats", "analysis.circuits", "analysis.metrics",
        "analysis.verdict", "interventions.patching", "viz.claims", "viz.glue", "viz.headview",
        "exercises",
    ),
    "12_decoder_heads": (
        "core.convert", "core.runtime", "analysis.circuits", "analysis.cost",
        "analysis.diversity", "analysis.headrank", "analysis.metrics", "analysis.verdict",
        "interventions.patching", "interventions.pruning", "pretrained.smollm",
        "pretrained.smollm_heads", "viz.claims", "viz.glue", "exercises",
    ),
}  # fmt: skip

__all__ = [
    "CHAPTERS",
    "HookPoint",
    "ModelConfig",
    "MultiHeadAttention",
    "TrainConfig",
    "device",
    "is_fast",
    "pick",
    "run_with_cache",
    "run_with_hooks",
    "seed_everything",
]
__version__ = "0.1.0"

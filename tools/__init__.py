"""Repository-only tools, run from the repository root (they need a checkout; the wheel
leaves them out):

    python -m tools.nbtools sync|run [NB ...]   the notebooks' setup cell, full-mode runs
    python -m tools.seedcheck --offsets ...     sweep the notebooks' asserts over other seeds
    python -m tools.diagrams [OUTDIR]           regenerate the book's SVG diagrams
"""

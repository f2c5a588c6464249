"""``{{ repository_url }}`` in a page: the repository URL of ``_config.yml``.

``repository.url`` in ``_config.yml`` is the one place the URL is kept (the book's buttons,
the ``{colab}`` role and the notebooks' setup cell read it too). In prose,
``{{ repository_url }}`` is a MyST substitution; MyST leaves code blocks alone, so this
extension fills the same placeholder into them too, and a page can show a clone command
that a reader copies as it is (the intro's "How to run it").
"""

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

PLACEHOLDER = "{{ repository_url }}"


def repository_url(config) -> str:
    """The URL Jupyter Book passes on from ``repository.url`` (in the theme's options)."""
    theme = config.html_theme_options or {}
    return theme.get("repository_url", "").rstrip("/")


def fill(text: str, url: str) -> str:
    """``text`` with every ``{{ repository_url }}`` replaced by ``url``."""
    return text.replace(PLACEHOLDER, url)


def add_substitution(app, config):
    if not repository_url(config):
        return  # no repository configured: a page that uses the placeholder fails to build
    subs = dict(getattr(config, "myst_substitutions", None) or {})
    subs["repository_url"] = repository_url(config)
    config.myst_substitutions = subs


def fill_code_blocks(app, doctree, docname):
    url = repository_url(app.config)
    for block in doctree.findall(nodes.literal_block):
        text = block.astext()
        if PLACEHOLDER not in text:
            continue
        if not url:
            logger.warning(f"{PLACEHOLDER} needs repository.url in _config.yml", location=block)
            continue
        # rawsource too: Sphinx highlights a block only when it equals the text
        block.rawsource = fill(block.rawsource, url)
        block[:] = [nodes.Text(fill(text, url))]


def setup(app):
    app.connect("config-inited", add_substitution)
    # at write time, so a changed URL reaches pages whose doctrees are cached
    app.connect("doctree-resolved", fill_code_blocks)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}

"""A ``{colab}`` role: a link that opens a course notebook in Colab.

``{colab}`notebooks/01_mha_from_scratch.ipynb``` becomes a link built from the repository URL
in ``_config.yml`` (the one place it is kept), so chapter pages need no hard-coded URLs.
"""

from docutils import nodes


def colab_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    config = inliner.document.settings.env.config
    theme = config.html_theme_options or {}
    repo = theme.get("repository_url", "").rstrip("/")
    branch = theme.get("repository_branch", "main")
    if not repo.startswith("https://github.com/"):
        msg = inliner.reporter.error(f"colab role: repository_url {repo!r} is not a GitHub URL")
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    path = text.strip().lstrip("/")
    url = f"https://colab.research.google.com/github/{repo.removeprefix('https://github.com/')}/blob/{branch}/{path}"
    node = nodes.reference(rawtext, "Open the notebook in Colab", refuri=url)
    return [node], []


def setup(app):
    app.add_role("colab", colab_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}

"""An offline head viewer: one self-contained HTML + JavaScript output, no library, no CDN.

``head_view(attention, tokens)`` returns a ``HeadView``: Jupyter, Colab and the built book
display its ``_repr_html_``; ``.html`` is the same string, to save or embed. The page shows

* the selected head as two columns of tokens joined by lines whose opacity is the weight
  (hover a token on the left to see where it attends, click to pin it; gold arcs dashed);
* a small-multiples grid of every head of every layer (click one to select it);
* optionally, the heads as points in the plane (a head-distance / MDS picture).

The weights are quantised to multiples of 1/255 and sent as base64 bytes, so a viewer of a
6 x 12-head model on a short sentence stays a few tens of kB. The JavaScript is ours and
plain; several viewers can sit on one page (each has its own DOM id).

Shapes: attention (layers, heads, query, key) or a list of per-layer (heads, query, key)
[a leading batch dimension of size 1 is dropped]; tokens (query,); coords (layers, heads, 2).
"""

from __future__ import annotations

import base64
import html as html_lib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["HeadView", "head_view", "head_views", "quantise"]

LEVELS = 255  # weights are sent as round(w * 255): finer than the eye can see in a line


@dataclass(frozen=True)
class HeadView:
    """A rendered viewer: display it in a notebook, or write ``.html`` to a file."""

    html: str
    dom_id: str
    n_bytes: int

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"HeadView(id={self.dom_id!r}, {self.n_bytes} bytes of HTML)"


def quantise(weights: np.ndarray) -> np.ndarray:
    """Round weights in [0, 1] to the nearest multiple of 1/255, as uint8 in 0..255.

    Shapes: any -> same.
    """
    w = np.asarray(weights, dtype=np.float64)
    return np.clip(np.rint(w * LEVELS), 0, LEVELS).astype(np.uint8)


def _to_numpy(name: str, value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, on any device
        if not value.is_floating_point():
            raise TypeError(f"{name} must hold floats (attention weights), got {value.dtype}")
        value = value.detach().float().cpu().numpy()
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a torch tensor or NumPy array, got {type(value).__name__}")
    if not np.issubdtype(value.dtype, np.floating):
        raise TypeError(f"{name} must hold floats (attention weights), got dtype {value.dtype}")
    return value


def _layers(attention: Any) -> list[np.ndarray]:
    """Per-layer arrays (heads, query, key) from a 4-D tensor or a list of layers."""
    if isinstance(attention, (list, tuple)):
        if not attention:
            raise ValueError("attention is an empty list; give at least one layer")
        layers = [_to_numpy(f"attention[{i}]", a) for i, a in enumerate(attention)]
        for i, a in enumerate(layers):
            if a.ndim == 4 and a.shape[0] == 1:
                layers[i] = a[0]  # drop a batch dimension of one (e.g. Hugging Face output)
            elif a.ndim != 3:
                raise ValueError(
                    f"attention[{i}] has shape {a.shape}; each layer must be "
                    "(heads, query, key) or (1, heads, query, key)"
                )
        return layers
    a = _to_numpy("attention", attention)
    if a.ndim == 3:
        return [a]  # a single layer
    if a.ndim != 4:
        raise ValueError(
            f"attention has shape {a.shape}; expected (layers, heads, query, key), "
            "(heads, query, key) or a list of per-layer (heads, query, key)"
        )
    return list(a)


def _example(attention: Any, tokens: Any, arcs: Any) -> tuple[dict, list[int]]:
    layers = _layers(attention)
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"tokens must be a list of strings, got {type(tokens).__name__}")
    if not all(isinstance(t, str) for t in tokens):
        raise TypeError("tokens must be a list of strings (use str(t) for token ids)")
    n = len(tokens)
    if n == 0:
        raise ValueError("tokens is empty")
    for i, a in enumerate(layers):
        if a.shape[1:] != (n, n):
            raise ValueError(
                f"layer {i} of attention has (query, key) = {a.shape[1:]}, but there are "
                f"{n} tokens; self-attention over the tokens needs ({n}, {n})"
            )
        if not np.isfinite(a).all():
            raise ValueError(f"layer {i} of attention has NaN or infinite weights")
        if a.min() < -1e-6 or a.max() > 1 + 1e-6:
            raise ValueError(f"layer {i} of attention has weights outside [0, 1]; pass softmax")
    pairs = []
    for arc in arcs if arcs is not None else []:
        if len(arc) != 2:
            raise ValueError(f"arcs must be (query, key) pairs, got {arc!r}")
        q, k = (int(v) for v in arc)
        if not (0 <= q < n and 0 <= k < n):
            raise ValueError(f"arc {arc!r} points outside the {n} tokens")
        pairs.append([q, k])
    raw = b"".join(quantise(a).tobytes() for a in layers)  # layer, head, query, key order
    example = {"tokens": list(tokens), "w": base64.b64encode(raw).decode("ascii"), "arcs": pairs}
    return example, [int(a.shape[0]) for a in layers]


def _coords(coords: Any, heads: list[int]) -> list[list[float]] | None:
    if coords is None:
        return None
    c = _to_numpy("coords", coords)
    total, shape = sum(heads), tuple(c.shape)
    if c.ndim == 3:
        c = c.reshape(-1, c.shape[-1])  # (layers * heads, 2)
    if c.shape != (total, 2):
        raise ValueError(
            f"coords has shape {shape}; expected one 2-D point per head: "
            f"({len(heads)}, {heads[0]}, 2) or ({total}, 2)"
        )
    return np.round(c.astype(np.float64), 4).tolist()


def head_views(
    examples: Sequence[tuple],
    *,
    names: Sequence[str] | None = None,
    coords: Any = None,
    title: str = "",
    coords_title: str = "heads in the plane (MDS of head distances)",
) -> HeadView:
    """A viewer over several examples, each ``(attention, tokens)`` or ``(attention, tokens,
    arcs)``; a menu picks the example. Every example must have the same layers and heads.

    Shapes: each attention (layers, heads, n, n) with its own n; coords (layers, heads, 2).
    """
    if isinstance(examples, (str, bytes)) or not isinstance(examples, Sequence) or not examples:
        raise TypeError("examples must be a non-empty list of (attention, tokens[, arcs]) tuples")
    items, heads = [], None
    for i, ex in enumerate(examples):
        if not isinstance(ex, tuple) or len(ex) not in (2, 3):
            raise TypeError(
                f"examples[{i}] must be (attention, tokens) or (attention, tokens, arcs)"
            )
        item, h = _example(ex[0], ex[1], ex[2] if len(ex) == 3 else None)
        if heads is not None and h != heads:
            raise ValueError(f"examples[{i}] has heads per layer {h}, the first has {heads}")
        heads = h
        items.append(item)
    if names is None:
        names = [" ".join(item["tokens"])[:60] for item in items]
    if len(names) != len(items):
        raise ValueError(f"names has {len(names)} entries for {len(items)} examples")
    for item, name in zip(items, names, strict=True):
        item["name"] = str(name)
    data = {
        "heads": heads,
        "examples": items,
        "coords": _coords(coords, heads),
        "title": str(title),
        "coordsTitle": str(coords_title),
    }
    return _render(data)


def head_view(
    attention: Any,
    tokens: Sequence[str],
    *,
    arcs: Sequence[tuple[int, int]] | None = None,
    coords: Any = None,
    title: str = "",
    coords_title: str = "heads in the plane (MDS of head distances)",
) -> HeadView:
    """A viewer of every head of every layer on one token sequence.

    ``arcs``: optional gold (query, key) pairs, drawn dashed (e.g. dependent -> its head).
    ``coords``: optional 2-D position of every head (e.g. classical MDS of head distances).

    Shapes: attention (layers, heads, n, n) or list of (heads, n, n); tokens (n,);
    coords (layers, heads, 2) or (layers * heads, 2).
    """
    return head_views(
        [(attention, tokens, arcs)], names=[""], coords=coords, title=title,
        coords_title=coords_title,
    )  # fmt: skip


def _render(data: dict) -> HeadView:
    dom_id = f"mhv-{uuid.uuid4().hex[:12]}"
    # Inside <script>, "</" could close the tag early: escape it (JSON allows "\/").
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    page = (
        f'<div id="{dom_id}" class="mhv">'
        f"<style>{_CSS.replace('#ID', '#' + dom_id)}</style>"
        f'<script type="application/json" class="mhv-data">{payload}</script>'
        '<noscript>The head viewer needs JavaScript.</noscript>'
        f"</div><script>{_JS.replace('__ID__', html_lib.escape(dom_id))}</script>"
    )  # fmt: skip
    return HeadView(html=page, dom_id=dom_id, n_bytes=len(page.encode("utf-8")))


_CSS = """
#ID{font:13px/1.35 system-ui,sans-serif;color:#222;margin:.5em 0;max-width:100%}
#ID .mhv-bar{display:flex;flex-wrap:wrap;gap:.6em;align-items:center;margin-bottom:.4em}
#ID .mhv-bar select{font:inherit}
#ID .mhv-row{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}
#ID .mhv-panel{border:1px solid #ddd;border-radius:4px;padding:4px;background:#fff}
#ID .mhv-tok{cursor:pointer;font-family:ui-monospace,monospace;font-size:12px}
#ID .mhv-tok.on{font-weight:bold}
#ID .mhv-grid{display:grid;gap:3px;align-items:center}
#ID .mhv-grid canvas{width:44px;height:44px;image-rendering:pixelated;cursor:pointer;
 border:2px solid transparent}
#ID .mhv-grid canvas.sel{border-color:#d62728}
#ID .mhv-lab{font-size:11px;color:#666;text-align:center}
#ID .mhv-status{min-height:1.4em;color:#444;margin-top:.3em}
#ID circle{cursor:pointer}
"""

_JS = r"""
(function () {
  var root = document.getElementById("__ID__");
  if (!root || root.getAttribute("data-ready")) { return; }
  root.setAttribute("data-ready", "1");
  var D = JSON.parse(root.querySelector("script.mhv-data").textContent);
  var SVG = "http://www.w3.org/2000/svg";
  var L = D.heads.length, colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
    "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#d62728", "#393b79", "#637939"];
  var offsets = [0];
  var st = {ex: 0, layer: 0, head: 0, pinned: null, hover: null};
  var bytes = D.examples.map(function (e) {
    var s = atob(e.w), b = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) { b[i] = s.charCodeAt(i); }
    return b;
  });
  function el(tag, attrs, parent, ns) {
    var node = ns ? document.createElementNS(SVG, tag) : document.createElement(tag);
    for (var a in attrs) { node.setAttribute(a, attrs[a]); }
    if (parent) { parent.appendChild(node); }
    return node;
  }
  function n() { return D.examples[st.ex].tokens.length; }
  function w(l, h, q, k) {  // weight of query q on key k, back in [0, 1]
    var m = n(), off = 0;
    for (var i = 0; i < l; i++) { off += D.heads[i] * m * m; }
    return bytes[st.ex][off + (h * m + q) * m + k] / 255;
  }
  function flat(l, h) { var f = h; for (var i = 0; i < l; i++) { f += D.heads[i]; } return f; }
  // Controls.
  var bar = el("div", {"class": "mhv-bar"}, root);
  if (D.title) { el("b", {}, bar).textContent = D.title; }
  function menu(label, count, names, onchange) {
    var lab = el("label", {}, bar); lab.textContent = label + " ";
    var s = el("select", {}, lab);
    for (var i = 0; i < count; i++) { el("option", {value: i}, s).textContent = names(i); }
    s.addEventListener("change", function () { onchange(+s.value); });
    return s;
  }
  if (D.examples.length > 1) {
    menu("example", D.examples.length, function (i) { return D.examples[i].name; },
      function (v) { st.ex = v; st.pinned = null; draw(); });
  }
  var layerSel = menu("layer", L, function (i) { return String(i); },
    function (v) { st.layer = v; st.head = Math.min(st.head, D.heads[v] - 1); draw(); });
  var headSel = menu("head", Math.max.apply(null, D.heads), function (i) { return String(i); },
    function (v) { st.head = Math.min(v, D.heads[st.layer] - 1); draw(); });
  var row = el("div", {"class": "mhv-row"}, root);
  var main = el("div", {"class": "mhv-panel"}, row);
  var side = el("div", {"class": "mhv-panel"}, row);
  var mds = D.coords ? el("div", {"class": "mhv-panel"}, row) : null;
  var status = el("div", {"class": "mhv-status"}, root);

  var geo = {rowH: 18, top: 20, lx: 110, rx: 220};
  function drawMain() {  // rebuilt when the example, layer or head changes
    main.innerHTML = "";
    var toks = D.examples[st.ex].tokens, g = geo;
    var svg = el("svg", {width: 330, height: g.top + toks.length * g.rowH + 6}, main, true);
    el("text", {x: g.lx, y: 12, "text-anchor": "end", fill: "#888", "font-size": 11}, svg, true)
      .textContent = "query";
    el("text", {x: g.rx, y: 12, fill: "#888", "font-size": 11}, svg, true).textContent = "key";
    geo.lines = el("g", {}, svg, true);
    geo.left = []; geo.right = [];
    toks.forEach(function (t, i) {
      var left = el("text", {x: g.lx, y: g.top + i * g.rowH + 4, "text-anchor": "end",
        "class": "mhv-tok", "data-q": i}, svg, true);
      left.textContent = t;
      left.addEventListener("mouseenter", function () { st.hover = i; drawLines(); });
      left.addEventListener("mouseleave", function () { st.hover = null; drawLines(); });
      left.addEventListener("click", function () {
        st.pinned = st.pinned === i ? null : i; drawLines();
      });
      var right = el("text", {x: g.rx, y: g.top + i * g.rowH + 4, "class": "mhv-tok"}, svg, true);
      right.textContent = t;
      geo.left.push(left); geo.right.push(right);
    });
    drawLines();
  }

  function drawLines() {  // only the lines, the token styles and the status line
    var m = n(), toks = D.examples[st.ex].tokens, g = geo, lines = geo.lines;
    var colour = colours[st.head % colours.length];
    var q0 = st.pinned !== null ? st.pinned : st.hover;
    while (lines.firstChild) { lines.removeChild(lines.firstChild); }
    for (var q = 0; q < m; q++) {
      if (q0 !== null && q !== q0) { continue; }
      var top = 0;  // one query's lines are scaled to its largest weight, to stay visible
      for (var k0 = 0; k0 < m; k0++) { top = Math.max(top, w(st.layer, st.head, q, k0)); }
      for (var k = 0; k < m; k++) {
        var v = w(st.layer, st.head, q, k) / (q0 === null ? 1 : top || 1);
        if (v < 0.02) { continue; }
        el("line", {x1: g.lx + 4, y1: g.top + q * g.rowH, x2: g.rx - 4, y2: g.top + k * g.rowH,
          stroke: colour, "stroke-width": q0 === null ? 2 : 3,
          "stroke-opacity": v}, lines, true);
      }
    }
    D.examples[st.ex].arcs.forEach(function (a) {
      if (q0 !== null && a[0] !== q0) { return; }
      el("line", {x1: g.lx + 4, y1: g.top + a[0] * g.rowH, x2: g.rx - 4,
        y2: g.top + a[1] * g.rowH, stroke: "#000", "stroke-width": 1.2,
        "stroke-dasharray": "4 3", "class": "mhv-arc"}, lines, true);
    });
    for (var i = 0; i < m; i++) {
      var shade = q0 === null ? 0 : w(st.layer, st.head, q0, i);
      geo.left[i].setAttribute("class", "mhv-tok" + (i === q0 ? " on" : ""));
      geo.right[i].setAttribute("fill", shade > 0.5 ? colour : "#222");
      geo.right[i].setAttribute("font-weight", shade > 0.3 ? "bold" : "normal");
    }
    var msg = "layer " + st.layer + ", head " + st.head + ": ";
    if (q0 === null) {
      msg += "hover a query token to see where it attends; click to pin it.";
    } else {
      var best = 0;
      for (var j = 1; j < m; j++) {
        if (w(st.layer, st.head, q0, j) > w(st.layer, st.head, q0, best)) { best = j; }
      }
      msg += "\u201c" + toks[q0] + "\u201d (" + q0 + ") attends most to \u201c" + toks[best] +
        "\u201d (" + best + ") with weight " + w(st.layer, st.head, q0, best).toFixed(2) +
        (st.pinned !== null ? " [pinned: click again to release]" : "");
    }
    status.textContent = msg;
    root.setAttribute("data-state", [st.ex, st.layer, st.head, st.pinned].join(","));
  }

  function drawGrid() {
    side.innerHTML = "";
    var H = Math.max.apply(null, D.heads), m = n();
    el("div", {"class": "mhv-lab"}, side).textContent = "every head (rows: layers)";
    var grid = el("div", {"class": "mhv-grid"}, side);
    grid.style.gridTemplateColumns = "1.5em repeat(" + H + ", 48px)";
    el("div", {}, grid);
    for (var h = 0; h < H; h++) { el("div", {"class": "mhv-lab"}, grid).textContent = h; }
    for (var l = 0; l < L; l++) {
      el("div", {"class": "mhv-lab"}, grid).textContent = l;
      for (var h2 = 0; h2 < H; h2++) {
        if (h2 >= D.heads[l]) { el("div", {}, grid); continue; }
        var c = el("canvas", {width: m, height: m, title: "layer " + l + ", head " + h2,
          "class": l === st.layer && h2 === st.head ? "sel" : ""}, grid);
        var ctx = c.getContext("2d"), img = ctx.createImageData(m, m);
        for (var q = 0; q < m; q++) {
          for (var k = 0; k < m; k++) {
            var v = w(l, h2, q, k), p = 4 * (q * m + k);
            img.data[p] = 255 - 230 * v; img.data[p + 1] = 255 - 180 * v;
            img.data[p + 2] = 255 - 80 * v; img.data[p + 3] = 255;
          }
        }
        ctx.putImageData(img, 0, 0);
        c.addEventListener("click", select.bind(null, l, h2));
      }
    }
  }

  function drawMds() {
    if (!mds) { return; }
    mds.innerHTML = "";
    el("div", {"class": "mhv-lab"}, mds).textContent = D.coordsTitle;
    var size = 220, pad = 14, xs = D.coords.map(function (p) { return p[0]; }),
      ys = D.coords.map(function (p) { return p[1]; });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs),
      y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    var span = Math.max(x1 - x0, y1 - y0) || 1;
    var svg = el("svg", {width: size, height: size}, mds, true);
    for (var l = 0; l < L; l++) {
      for (var h = 0; h < D.heads[l]; h++) {
        var p = D.coords[flat(l, h)], on = l === st.layer && h === st.head;
        var dot = el("circle", {cx: pad + (p[0] - x0) / span * (size - 2 * pad),
          cy: size - pad - (p[1] - y0) / span * (size - 2 * pad), r: on ? 6 : 4,
          fill: colours[l % colours.length], stroke: on ? "#000" : "none",
          "stroke-width": 2}, svg, true);
        el("title", {}, dot, true).textContent = "layer " + l + ", head " + h;
        dot.addEventListener("click", select.bind(null, l, h));
      }
    }
    el("div", {"class": "mhv-lab"}, mds).textContent = "colour: layer; click a head";
  }

  function select(l, h) { st.layer = l; st.head = h; draw(); }
  function draw() {
    layerSel.value = st.layer; headSel.value = st.head;
    drawMain(); drawGrid(); drawMds();
  }
  draw();
})();
"""

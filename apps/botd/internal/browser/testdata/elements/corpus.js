// corpus.js: every corpus page and frame loads it. It records which
// element (data-k) got each pointerdown (and whether the element the test
// clicked is the one that received it), and keeps clicks from changing
// the page (no navigation, no toggles, no focus moves). The "truth" it
// posts is what a person sees: every data-k element whose visible part's
// centre hits it (elementFromPoint, through open shadow roots).
(function () {
  function post(kind, o) {
    o = Object.assign({ kind: kind, frame: location.href, dpr: devicePixelRatio }, o || {});
    fetch("/log", { method: "POST", body: JSON.stringify(o), keepalive: true }).catch(function () {});
  }
  function keyOf(path) {
    for (var i = 0; i < path.length; i++) {
      var n = path[i];
      if (n && n.getAttribute && n.getAttribute("data-k")) return n.getAttribute("data-k");
    }
    return "";
  }
  // Precision (the test marks, through DevTools, every element the
  // observation listed, then before each click the one it clicks, with a
  // token): a click counts for the clicked element only when the innermost
  // listed element on the event's path is that very element, not an
  // ancestor or a neighbour. tok is the token then, else "".
  window.__corpusListed = new Set();
  window.__corpusExpect = null;
  function receiver(path) {
    for (var i = 0; i < path.length; i++) if (window.__corpusListed.has(path[i])) return path[i];
    return null;
  }
  ["pointerdown", "mousedown", "pointerup", "mouseup", "click", "dblclick", "auxclick", "contextmenu"].forEach(function (t) {
    window.addEventListener(t, function (e) {
      if (t === "pointerdown") {
        var path = e.composedPath(), ex = window.__corpusExpect, own = ex && receiver(path) === ex.el;
        post("hit", { k: keyOf(path), tok: own ? ex.tok : "", ek: own ? (ex.el.getAttribute("data-k") || "") : "" });
      }
      e.preventDefault();
      if (t !== "pointerdown") e.stopPropagation();
    }, true);
  });
  function all(root, out) {
    root.querySelectorAll("*").forEach(function (el) {
      if (el.hasAttribute("data-k")) out.push(el);
      if (el.shadowRoot) all(el.shadowRoot, out);
    });
    return out;
  }
  function deepHit(x, y) {
    var r = document, e = null;
    for (;;) {
      var h = r.elementFromPoint(x, y);
      if (!h || h === e) return e;
      e = h;
      if (h.shadowRoot) r = h.shadowRoot; else return h;
    }
  }
  function inside(h, el) {
    for (var n = h; n; n = n.parentNode || n.host) if (n === el) return true;
    return false;
  }
  function truth() {
    var vw = document.documentElement.clientWidth, vh = document.documentElement.clientHeight;
    var keys = [];
    all(document, []).forEach(function (el) {
      var r = el.getBoundingClientRect();
      var x0 = Math.max(0, r.left), y0 = Math.max(0, r.top), x1 = Math.min(vw, r.right), y1 = Math.min(vh, r.bottom);
      if (x1 - x0 < 2 || y1 - y0 < 2) return;
      var h = deepHit((x0 + x1) / 2, (y0 + y1) / 2);
      if (h && inside(h, el)) keys.push(el.getAttribute("data-k"));
    });
    post("truth", { keys: keys });
  }
  window.corpusTruth = truth;
  window.addEventListener("load", function () {
    if (window.corpusSetup) window.corpusSetup();
    requestAnimationFrame(function () { requestAnimationFrame(function () { setTimeout(truth, 100); }); });
  });
  window.addEventListener("resize", function () { setTimeout(truth, 100); });
})();

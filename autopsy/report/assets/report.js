/* autopsy report: hover tooltip (step and value) over the inline SVG charts.
   Reads the display points from the JSON block beside each chart. No network, no libraries;
   the charts are complete without this script. */
(function () {
  "use strict";
  var tip = document.getElementById("tip");
  if (!tip) { return; }
  function fmt(v, kind) {
    if (typeof v === "string") { return v; }
    if (kind === "bytes") {
      // the same decimal units as every other report (autopsy.units.fmt_bytes)
      var u = ["B", "KB", "MB", "GB", "TB"], i = 0, x = Math.abs(v);
      while (x >= 1000 && i < u.length - 1) { x /= 1000; i++; }
      return (v < 0 ? "-" : "") + (i === 0 ? x.toFixed(0) : x.toFixed(1)) + " " + u[i];
    }
    var a = Math.abs(v);
    if (Number.isInteger(v) && a < 1e15) { return v.toLocaleString("en-US"); }
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) { return v.toExponential(3); }
    return String(Number(v.toPrecision(5)));
  }
  function nearest(arr, x) {
    var lo = 0, hi = arr.length - 1;
    if (hi < 0) { return -1; }
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (arr[mid] < x) { lo = mid + 1; } else { hi = mid; }
    }
    if (lo > 0 && Math.abs(arr[lo - 1] - x) <= Math.abs(arr[lo] - x)) { lo -= 1; }
    return lo;
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }  /* textContent: labels from logs stay text */
    return e;
  }
  function attach(fig) {
    var blob = fig.querySelector("script.chart-data");
    if (!blob) { return; }
    var data;
    try { data = JSON.parse(blob.textContent); } catch (e) { return; }
    /* a line counts while it is shown: no toggle for it, or its checkbox is ticked */
    function shown(i) {
      var box = fig.querySelector("input.tg.t" + i);
      return !box || box.checked;
    }
    /* each drawing (wide, narrow) has its own plot box; the data points are shared */
    Array.prototype.forEach.call(fig.querySelectorAll("svg[data-plot]"), function (svg) {
      attachSvg(svg, data, shown);
    });
  }
  function attachSvg(svg, data, shown) {
    var plot = svg.getAttribute("data-plot").split(" ").map(Number), cursor = svg.querySelector(".cursor");
    var pxPerStep = plot[2] / ((data.x[1] - data.x[0]) || 1);
    function hide() { tip.hidden = true; cursor.setAttribute("visibility", "hidden"); }
    svg.addEventListener("mousemove", function (ev) {
      var pt = svg.createSVGPoint();
      pt.x = ev.clientX; pt.y = ev.clientY;
      var ctm = svg.getScreenCTM();
      if (!ctm) { return; }
      var p = pt.matrixTransform(ctm.inverse());
      if (p.x < plot[0] || p.x > plot[0] + plot[2] || p.y < plot[1] - 4 || p.y > plot[1] + plot[3]) { hide(); return; }
      var step = data.x[0] + (p.x - plot[0]) / plot[2] * (data.x[1] - data.x[0]);
      var best = null;
      data.lines.forEach(function (ln, li) {
        if (!shown(li)) { return; }
        var i = nearest(ln.s, step);
        if (i >= 0 && (best === null || Math.abs(ln.s[i] - step) < Math.abs(best - step))) { best = ln.s[i]; }
        ln.bad.forEach(function (b) { if (best === null || Math.abs(b[0] - step) < Math.abs(best - step)) { best = b[0]; } });
      });
      if (best === null || Math.abs(best - step) * pxPerStep > 40) { hide(); return; }
      tip.textContent = "";
      tip.appendChild(el("b", "", "step " + fmt(best)));
      data.lines.forEach(function (ln, li) {
        if (!shown(li)) { return; }
        var i = nearest(ln.s, best), val = null;
        if (i >= 0 && ln.s[i] === best) { val = ln.v[i]; }
        ln.bad.forEach(function (b) { if (b[0] === best) { val = b[1]; } });
        if (val === null) { return; }
        var row = el("div", "row");
        row.appendChild(el("span", "sw " + ln.css));
        row.appendChild(el("span", "", fmt(val, data.fmt)));
        row.appendChild(el("span", "lbl", ln.label));
        tip.appendChild(row);
      });
      var x = plot[0] + (best - data.x[0]) * pxPerStep;
      cursor.setAttribute("x1", x); cursor.setAttribute("x2", x); cursor.setAttribute("visibility", "visible");
      tip.hidden = false;
      var left = ev.clientX + 14, top = ev.clientY + 14, w = tip.offsetWidth, h = tip.offsetHeight;
      if (left + w > window.innerWidth - 8) { left = ev.clientX - w - 14; }
      if (top + h > window.innerHeight - 8) { top = ev.clientY - h - 14; }
      tip.style.left = Math.max(4, left) + "px"; tip.style.top = top + "px";
    });
    svg.addEventListener("mouseleave", hide);
  }
  Array.prototype.forEach.call(document.querySelectorAll("figure.chart"), attach);
})();

// Small canvas charts for the live view: time series, stacked or not, with
// axes in real units, a legend and a tooltip with exact values. No
// dependencies, so the binary builds without a JavaScript toolchain.
(function (root) {
  "use strict";

  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

  /** 1536 → "1.5 KiB". */
  function formatBytes(n) {
    if (!Number.isFinite(n)) return "–";
    let i = 0;
    let v = Math.abs(n);
    while (v >= 1024 && i < UNITS.length - 1) {
      v /= 1024;
      i += 1;
    }
    const digits = v >= 100 || i === 0 ? 0 : v >= 10 ? 1 : 2;
    return (n < 0 ? "-" : "") + v.toFixed(digits) + " " + UNITS[i];
  }

  /** A value in a chart's unit, for axes and tooltips. */
  function formatValue(v, unit) {
    if (unit === "bytes") return formatBytes(v);
    if (!Number.isFinite(v)) return "–";
    const s = Number.isInteger(v) ? String(v) : v.toFixed(v >= 10 ? 1 : 2);
    return unit ? s + " " + unit : s;
  }

  /** Seconds-ago label for the time axis: "-5:00", "now". */
  function formatAgo(seconds) {
    if (seconds < 1) return "now";
    const m = Math.floor(seconds / 60);
    const s = Math.round(seconds % 60);
    return "-" + m + ":" + String(s).padStart(2, "0");
  }

  /** Round tick values covering [0, max]: 1, 2 or 5 × 10^k apart (powers of two for bytes). */
  function niceTicks(max, count, unit) {
    if (!(max > 0)) return [0, 1];
    let step;
    if (unit === "bytes") {
      step = Math.pow(2, Math.ceil(Math.log2(max / count)));
    } else {
      const raw = max / count;
      const mag = Math.pow(10, Math.floor(Math.log10(raw)));
      const f = raw / mag;
      step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
      if (unit === "" || unit === undefined) step = Math.max(step, 1);
    }
    const ticks = [];
    for (let v = 0; v <= max + step * 1e-9; v += step) ticks.push(v);
    if (ticks[ticks.length - 1] < max) ticks.push(ticks[ticks.length - 1] + step);
    return ticks;
  }

  /** Cumulative sums of series (for a stacked chart): out[s][i] = Σ_{k≤s} values[k][i]. */
  function stack(values) {
    const out = [];
    values.forEach((v, s) => {
      out.push(v.map((x, i) => (Number(x) || 0) + (s > 0 ? out[s - 1][i] : 0)));
    });
    return out;
  }

  /** Events per minute from a cumulative counter sampled at times t (ms), over a trailing window. */
  function ratePerMinute(times, counts, windowMs) {
    return times.map((t, i) => {
      let j = i;
      while (j > 0 && t - times[j - 1] <= windowMs) j -= 1;
      const dt = (t - times[j]) / 60000;
      return dt > 0 ? (counts[i] - counts[j]) / dt : 0;
    });
  }

  /** Index of the sample nearest to x among n samples laid out over [x0, x1]. */
  function nearestIndex(x, x0, x1, n) {
    if (n <= 1) return 0;
    const i = Math.round(((x - x0) / (x1 - x0)) * (n - 1));
    return Math.max(0, Math.min(n - 1, i));
  }

  function cssVar(el, name, fallback) {
    const v = root.getComputedStyle ? root.getComputedStyle(el).getPropertyValue(name).trim() : "";
    return v || fallback;
  }

  /**
   * A chart on a <canvas>. `spec`: { unit, stacked, series: [{name, color}],
   * lines: [{name, color, dashed, offScale}] } — `series` are filled (stacked
   * when asked), `lines` drawn on top; an `offScale` line does not set the
   * scale, and is a label instead when above it (its names in `offScaleNow`).
   * `update(times, seriesValues, lineValues)`.
   */
  class TimeChart {
    constructor(canvas, spec) {
      this.canvas = canvas;
      this.spec = spec;
      this.times = [];
      this.values = [];
      this.lineValues = [];
      this.offScaleNow = [];
      this.hover = null;
      this.drawnMax = 0;
      canvas.addEventListener("mousemove", (e) => {
        const r = canvas.getBoundingClientRect();
        this.hover = e.clientX - r.left;
        this.draw();
      });
      canvas.addEventListener("mouseleave", () => {
        this.hover = null;
        this.draw();
      });
      if (root.ResizeObserver) new root.ResizeObserver(() => this.draw()).observe(canvas);
    }

    update(times, values, lineValues) {
      this.times = times;
      this.values = values;
      this.lineValues = lineValues || [];
      this.draw();
    }

    draw() {
      const c = this.canvas;
      const dpr = root.devicePixelRatio || 1;
      const w = c.clientWidth;
      const h = c.clientHeight;
      if (!w || !h) return;
      if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
        c.width = Math.round(w * dpr);
        c.height = Math.round(h * dpr);
      }
      const g = c.getContext("2d");
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, w, h);
      const fg = cssVar(c, "--fg", "#222");
      const grid = cssVar(c, "--grid", "#ddd");
      const unit = this.spec.unit;
      const n = this.times.length;
      const tops = this.spec.stacked ? stack(this.values) : this.values;
      let max = 0;
      tops.forEach((v) => v.forEach((x) => (max = Math.max(max, x))));
      this.lineValues.forEach((v, k) => {
        if (!(this.spec.lines[k] && this.spec.lines[k].offScale)) v.forEach((x) => (max = Math.max(max, x)));
      });
      this.drawnMax = max;
      const ticks = niceTicks(max * 1.05, 4, unit);
      const top = ticks[ticks.length - 1] || 1;
      g.font = "11px system-ui, sans-serif";
      const labelW = Math.max(...ticks.map((t) => g.measureText(formatValue(t, unit)).width)) + 8;
      const x0 = labelW;
      const x1 = w - 8;
      const y0 = h - 20;
      const y1 = 8;
      const X = (i) => (n <= 1 ? x1 : x0 + ((x1 - x0) * i) / (n - 1));
      const Y = (v) => y0 - ((y0 - y1) * Math.min(v, top)) / top;
      // grid and y axis
      g.strokeStyle = grid;
      g.fillStyle = fg;
      g.lineWidth = 1;
      g.textAlign = "right";
      g.textBaseline = "middle";
      ticks.forEach((t) => {
        const y = Math.round(Y(t)) + 0.5;
        g.beginPath();
        g.moveTo(x0, y);
        g.lineTo(x1, y);
        g.stroke();
        g.fillText(formatValue(t, unit), x0 - 4, y);
      });
      // time axis: now at the right
      g.textAlign = "center";
      g.textBaseline = "top";
      if (n > 1) {
        const span = (this.times[n - 1] - this.times[0]) / 1000;
        for (let k = 0; k <= 4; k++) {
          const x = x0 + ((x1 - x0) * k) / 4;
          // The ends aligned inward, so that "now" at the right edge is not cut.
          g.textAlign = k === 0 ? "left" : k === 4 ? "right" : "center";
          g.fillText(formatAgo(span * (1 - k / 4)), x, y0 + 4);
        }
        g.textAlign = "center";
      }
      if (n === 0) {
        g.fillText("waiting for data…", (x0 + x1) / 2, (y0 + y1) / 2);
        return;
      }
      // filled series, top to bottom so lower layers stay visible
      for (let s = tops.length - 1; s >= 0; s--) {
        g.beginPath();
        g.moveTo(X(0), y0);
        tops[s].forEach((v, i) => g.lineTo(X(i), Y(v)));
        g.lineTo(X(n - 1), y0);
        g.closePath();
        g.fillStyle = this.spec.series[s].color;
        g.globalAlpha = this.spec.stacked ? 0.85 : 0.35;
        g.fill();
        g.globalAlpha = 1;
      }
      // lines; an off-scale line (a budget far above use) becomes a label
      this.offScaleNow = [];
      this.lineValues.forEach((v, k) => {
        const l = this.spec.lines[k];
        const last = v[v.length - 1];
        if (l.offScale && last > top) {
          this.offScaleNow.push(l.name);
          g.fillStyle = l.color;
          g.textAlign = "right";
          g.textBaseline = "top";
          g.fillText(l.name + " " + formatValue(last, unit) + " ↑ (off scale)", x1, y1);
          return;
        }
        g.strokeStyle = l.color;
        g.lineWidth = 2;
        g.setLineDash(l.dashed ? [6, 4] : []);
        g.beginPath();
        v.forEach((x, i) => (i ? g.lineTo(X(i), Y(x)) : g.moveTo(X(i), Y(x))));
        g.stroke();
        g.setLineDash([]);
      });
      // tooltip
      if (this.hover !== null && this.hover >= x0) {
        const i = nearestIndex(this.hover, x0, x1, n);
        const x = X(i);
        g.strokeStyle = fg;
        g.beginPath();
        g.moveTo(x, y1);
        g.lineTo(x, y0);
        g.stroke();
        const rows = [formatAgo((this.times[n - 1] - this.times[i]) / 1000)];
        this.spec.series.forEach((s, k) => rows.push(s.name + ": " + formatValue(this.values[k][i], unit)));
        this.spec.lines.forEach((l, k) => rows.push(l.name + ": " + formatValue(this.lineValues[k][i], unit)));
        const bw = Math.max(...rows.map((r) => g.measureText(r).width)) + 12;
        const bx = x + bw + 12 > x1 ? x - bw - 6 : x + 6;
        g.fillStyle = cssVar(c, "--tip-bg", "rgba(255,255,255,0.95)");
        g.fillRect(bx, y1, bw, rows.length * 15 + 6);
        g.fillStyle = fg;
        g.textAlign = "left";
        rows.forEach((r, k) => g.fillText(r, bx + 6, y1 + 4 + k * 15));
      }
    }
  }

  const api = { formatBytes, formatValue, formatAgo, niceTicks, stack, ratePerMinute, nearestIndex, TimeChart };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  else root.Charts = api;
})(typeof window !== "undefined" ? window : globalThis);

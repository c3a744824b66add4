// Unit tests of the chart helpers: `node --test dashboard/test/`.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const C = require("../charts.js");

test("formatBytes uses binary units", () => {
  assert.strictEqual(C.formatBytes(0), "0 B");
  assert.strictEqual(C.formatBytes(1536), "1.50 KiB");
  assert.strictEqual(C.formatBytes(16 * 2 ** 30), "16.0 GiB");
  assert.strictEqual(C.formatBytes(NaN), "–");
});

test("niceTicks cover the range with round steps", () => {
  assert.deepStrictEqual(C.niceTicks(7, 4, ""), [0, 2, 4, 6, 8]);
  assert.deepStrictEqual(C.niceTicks(0, 4, ""), [0, 1]);
  const b = C.niceTicks(3 * 2 ** 30, 4, "bytes");
  assert.strictEqual(b[1] - b[0], 2 ** 30);
  assert.ok(b[b.length - 1] >= 3 * 2 ** 30);
  const f = C.niceTicks(0.7, 4, "/min");
  assert.ok(f[f.length - 1] >= 0.7 && f[1] < 0.7);
});

test("stack sums layers in order", () => {
  assert.deepStrictEqual(C.stack([[1, 2], [3, 4], [0, 1]]), [[1, 2], [4, 6], [4, 7]]);
  assert.deepStrictEqual(C.stack([[1, null]]), [[1, 0]]);
});

test("ratePerMinute differentiates a counter over a trailing window", () => {
  const t = [0, 30000, 60000, 90000];
  const c = [0, 5, 10, 10];
  assert.deepStrictEqual(C.ratePerMinute(t, c, 60000), [0, 10, 10, 5]);
});

test("nearestIndex maps a pixel to a sample", () => {
  assert.strictEqual(C.nearestIndex(0, 0, 100, 11), 0);
  assert.strictEqual(C.nearestIndex(52, 0, 100, 11), 5);
  assert.strictEqual(C.nearestIndex(500, 0, 100, 11), 10);
  assert.strictEqual(C.nearestIndex(5, 0, 100, 1), 0);
});

test("formatAgo", () => {
  assert.strictEqual(C.formatAgo(0), "now");
  assert.strictEqual(C.formatAgo(300), "-5:00");
  assert.strictEqual(C.formatAgo(75), "-1:15");
});

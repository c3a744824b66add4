// Unit tests of the event-stream parser: `node --test dashboard/test/`.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const { parseSse } = require("../sse.js");

test("complete events are returned, the partial one kept", () => {
  const { events, rest } = parseSse('event: history\ndata: [1,2]\n\nevent: snapshot\ndata: {"a"');
  assert.deepStrictEqual(events, [{ event: "history", data: "[1,2]" }]);
  assert.strictEqual(rest, 'event: snapshot\ndata: {"a"');
  const next = parseSse(rest + ":1}\n\n");
  assert.deepStrictEqual(next.events, [{ event: "snapshot", data: '{"a":1}' }]);
  assert.strictEqual(next.rest, "");
});

test("multi-line data, comments, CRLF and the default event name", () => {
  const { events } = parseSse(": keep-alive\r\n\r\ndata: a\r\ndata: b\r\n\r\nid: 7\nevent: x\ndata:c\n\n");
  assert.deepStrictEqual(events, [
    { event: "message", data: "a\nb" },
    { event: "x", data: "c" },
  ]);
});

test("a block with no data is no event", () => {
  assert.deepStrictEqual(parseSse("event: lonely\n\n").events, []);
});

// Server-sent events read from a fetch() stream, so that requests can carry
// an Authorization header (a browser's EventSource cannot). Only the parser
// lives here; app.js owns the connection.
(function (root) {
  "use strict";

  /**
   * Splits `buffer` into complete events ({event, data}; data lines joined
   * with "\n"; comments and unknown fields skipped) and the incomplete rest.
   */
  function parseSse(buffer) {
    const text = buffer.replace(/\r\n?/g, "\n");
    const blocks = text.split("\n\n");
    const rest = blocks.pop();
    const events = [];
    for (const block of blocks) {
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line === "" || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
      }
      if (data.length) events.push({ event, data: data.join("\n") });
    }
    return { events, rest };
  }

  const api = { parseSse };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  else root.Sse = api;
})(typeof window !== "undefined" ? window : globalThis);

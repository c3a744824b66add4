// The live view: keeps the last ten minutes of snapshots from /v1/events
// (history on connect, one a second after) and draws them. The stream is read
// with fetch() so that it can carry a bearer token when the worker wants one
// (given as #token=… in the address, which never reaches the server, or typed
// into the prompt; kept for this tab only). The state is on window.provd for
// tests.
(function () {
  "use strict";
  const C = window.Charts;
  const KEEP = 600;
  const state = { samples: [], jobs: [], connected: false, updates: 0, needsToken: false };
  window.provd = state;
  const $ = (id) => document.getElementById(id);
  const color = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

  /** Partitions in each stage, from one snapshot's gauges. */
  function stages(s) {
    const st = s.stages || {};
    return { synth: st.synthesis || 0, queued: st.gpu_queue || 0, gpu: st.prove_start || 0, finish: st.prove_finish || 0 };
  }
  state.inFlight = (s) => Object.values(stages(s)).reduce((a, b) => a + b, 0);

  function legend(el, items) {
    $(el).innerHTML = items
      .map((i) => `<span><i class="${i.dashed ? "dashed" : ""}" style="${i.dashed ? "border-color" : "background"}:${i.color}"></i>${i.name}</span>`)
      .join("");
  }

  const charts = {};
  // What the worker proves on (from /v1/status): GPU wording only with a GPU.
  state.backend = { name: "", gpu: false, fallback: null, devices: [], out: [] };
  // Until /v1/status names the backend, the wording names none.
  const stageSeries = () => {
    const on = state.backend.gpu ? "GPU" : state.backend.name;
    const at = (what, where) => (where ? `${what} (${where})` : what);
    return [
      { name: "synthesis", color: color("--c-synth") },
      { name: on ? `synthesized, waiting for the ${on} worker` : "synthesized, waiting to be proved", color: color("--c-queue") },
      { name: at("prove_start", on), color: color("--c-gpu") },
      // prove_finish runs on the host: "CPU" beside a GPU, the backend's own name otherwise.
      { name: at("prove_finish", state.backend.gpu ? "CPU" : on), color: color("--c-finish") },
    ];
  };
  const queueWord = () =>
    state.backend.gpu ? "GPU queue" : state.backend.name ? `queue to the ${state.backend.name} worker` : "queue to the prover";

  function build() {
    charts.stages = new C.TimeChart($("c-stages"), { unit: "", stacked: true, series: stageSeries(), lines: [] });
    const mem = [
      { name: "keys", color: color("--c-keys") },
      { name: "a/b/c", color: color("--c-abc") },
      { name: "aux", color: color("--c-aux") },
      { name: "density", color: color("--c-density") },
    ];
    const memLines = [
      { name: "RSS", color: color("--c-rss") },
      { name: "reserved (keys + partitions)", color: color("--c-reserved") },
      // Off the scale when far above use: a chart scaled to a budget 50× the
      // RSS would draw every series flat at zero.
      { name: "budget", color: color("--c-budget"), dashed: true, offScale: true },
    ];
    charts.memory = new C.TimeChart($("c-memory"), { unit: "bytes", stacked: true, series: mem, lines: memLines });
    legend("l-memory", mem.concat(memLines));
    const classes = [
      { name: "synth", color: color("--c-synth") },
      { name: "a/b/c", color: color("--c-abc") },
      { name: "aux", color: color("--c-aux") },
      { name: "density", color: color("--c-density") },
      { name: "pending", color: color("--c-pending") },
    ];
    // Stacked: two classes at the same count would hide each other drawn apart.
    charts.buffers = new C.TimeChart($("c-buffers"), { unit: "", stacked: true, series: classes, lines: [] });
    legend("l-buffers", classes);
    const q = [{ name: "queued (in the channel)", color: color("--c-queue") }];
    const ql = [{ name: "capacity", color: color("--c-budget"), dashed: true }];
    charts.queue = new C.TimeChart($("c-queue"), { unit: "", stacked: false, series: q, lines: ql });
    legend("l-queue", q.concat(ql));
    const r = [{ name: "proofs / min", color: color("--c-finish") }];
    charts.rate = new C.TimeChart($("c-rate"), { unit: "/min", stacked: false, series: r, lines: [] });
    legend("l-rate", r);
    relabel();
    state.charts = charts;
  }

  /** Wording that depends on the backend, once /v1/status has said which. */
  function relabel() {
    const st = stageSeries();
    charts.stages.spec.series = st;
    legend("l-stages", st);
    $("queue-title").firstChild.textContent = (state.backend.gpu ? "GPU queue" : "Queue to the prover") + " ";
    $("k-queue-label").textContent = queueWord();
    $("gpu-panel").hidden = !state.backend.gpu;
    // One line per device.
    const palette = ["--c-gpu", "--c-synth", "--c-finish", "--c-queue", "--c-reserved", "--c-aux", "--c-keys", "--c-rss"];
    const series = state.backend.devices.map((d, i) => ({ name: d, color: color(palette[i % palette.length]) }));
    charts.gpu = new C.TimeChart($("c-gpu"), { unit: "%", stacked: false, series, lines: [] });
    legend("l-gpu", series);
  }

  /** Busy fraction of GPU `k` between consecutive snapshots, in %. */
  function gpuBusy(s, k) {
    return s.map((x, i) => {
      const g = (x.gpus || [])[k];
      const p = i > 0 ? (s[i - 1].gpus || [])[k] : null;
      if (!g || !p || x.t <= s[i - 1].t) return 0;
      return Math.min(100, (100 * (g.busy_seconds - p.busy_seconds) * 1000) / (x.t - s[i - 1].t));
    });
  }
  state.gpuBusy = gpuBusy;

  function render() {
    const s = state.samples;
    const t = s.map((x) => x.t);
    const st = s.map(stages);
    charts.stages.update(t, [st.map((x) => x.synth), st.map((x) => x.queued), st.map((x) => x.gpu), st.map((x) => x.finish)]);
    charts.memory.update(
      t,
      [s.map((x) => x.key_bytes || 0), s.map((x) => x.buffer_bytes.abc), s.map((x) => x.buffer_bytes.aux), s.map((x) => x.buffer_bytes.density)],
      [s.map((x) => x.rss_bytes), s.map((x) => x.reserved_bytes), s.map((x) => x.budget_bytes)]
    );
    const b = (k) => s.map((x) => x.buffers[k]);
    charts.buffers.update(t, [b("synth"), b("abc"), b("aux"), b("density"), b("pending")]);
    charts.queue.update(t, [s.map((x) => x.gpu_queue_depth)], [s.map((x) => x.gpu_queue_capacity)]);
    const rate = C.ratePerMinute(t, s.map((x) => x.partitions_completed), 60000);
    charts.rate.update(t, [rate]);
    if (state.backend.gpu) charts.gpu.update(t, state.backend.devices.map((_, k) => gpuBusy(s, k)));
    const last = s[s.length - 1];
    if (!last) return;
    $("k-inflight").textContent = state.inFlight(last);
    $("k-waiting").textContent = last.partitions_waiting;
    // Which classes wait, most urgent first (only those that do).
    const byClass = last.priorities || {};
    const waiting = ["critical", "high", "normal", "low"]
      .filter((p) => byClass[p] && byClass[p].queued + byClass[p].gpu_queue > 0)
      .map((p) => `${p} ${byClass[p].queued}+${byClass[p].gpu_queue}`);
    $("k-waiting-detail").textContent = waiting.length
      ? `waiting for admission + for ${state.backend.gpu ? "a GPU" : "the prover"}: ${waiting.join(" · ")}`
      : "partitions waiting for a permit and memory";
    $("k-rate").textContent = C.formatValue(rate[rate.length - 1], "");
    $("k-rss").textContent = C.formatBytes(last.rss_bytes);
    const over = last.rss_bytes > last.budget_bytes;
    $("k-rss").classList.toggle("over", over);
    $("k-rss").title = over ? "RSS is over the memory budget: memory the budget does not account for (see the runbook)" : "";
    $("k-reserved").textContent = `${over ? "RSS OVER BUDGET" : "RSS"} · reserved ${C.formatBytes(last.reserved_bytes)} (keys ${C.formatBytes(last.key_bytes || 0)}) of ${C.formatBytes(last.budget_bytes)}`;
    $("k-queue").textContent = `${last.gpu_queue_depth} / ${last.gpu_queue_capacity}`;
    $("k-done").textContent = last.partitions_completed;
    $("k-failed").textContent = `partitions · ${last.partitions_failed} failed · ${last.jobs_cancelled} jobs cancelled`;
    // Fleet mode: the shared queue beside this worker's own engine.
    const fleet = last.fleet;
    $("k-fleet-box").hidden = !fleet;
    if (fleet) {
      $("k-fleet").textContent = fleet.queued;
      $("k-fleet-detail").textContent = fleet.unready
        ? `queued · ${fleet.worker} is unready: ${fleet.unready}`
        : `queued · ${fleet.claimed} claimed (${fleet.claimed_here} here, ${fleet.worker}) · oldest ${fleet.oldest_queued_seconds.toFixed(0)} s`;
    }
    $("gpus").replaceChildren(
      ...(last.gpus || []).map((g) => {
        const p = document.createElement("p");
        const streamed = (g.streamed_keys || []).length
          ? ` · keys streamed from the host: ${g.streamed_keys.join(", ")}`
          : "";
        const onHost = (g.products_on_host || []).length
          ? ` · a, b, c on the host: ${g.products_on_host.join(", ")}`
          : "";
        p.textContent = `${g.device}: ${C.formatBytes(g.used_bytes)} of ${C.formatBytes(g.total_bytes)} in use${streamed}${onHost}`;
        return p;
      }),
    );
  }

  function cell(v, cls) {
    const td = document.createElement("td");
    td.textContent = v === null || v === undefined ? "" : v;
    if (cls) td.className = cls;
    return td;
  }

  function renderJobs() {
    const body = document.querySelector("#jobs tbody");
    body.replaceChildren(
      ...state.jobs.map((j) => {
        const tr = document.createElement("tr");
        const mean = (k) => {
          const v = j.partitions.map((p) => p.seconds[k]).filter((x) => typeof x === "number");
          return v.length ? (v.reduce((a, b) => a + b, 0) / v.length).toFixed(3) : "";
        };
        const done = j.partitions.filter((p) => p.stage === "done").length;
        tr.append(
          cell(j.id), cell(j.circuit), cell(j.priority, `priority-${j.priority}`), cell(j.door), cell(j.state, j.state), cell(`${done}/${j.partitions.length}`, "num"),
          cell(mean("synthesis"), "num"), cell(mean("gpu_queue"), "num"), cell(mean("prove_start"), "num"),
          cell(mean("prove_finish"), "num"), cell(j.elapsed_seconds.toFixed(2), "num"), cell(j.error, "failed")
        );
        return tr;
      })
    );
  }

  const TOKEN_KEY = "provd-token";
  const fragment = location.hash.match(/^#token=(.+)$/);
  if (fragment) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(fragment[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  const authHeaders = () => {
    const t = sessionStorage.getItem(TOKEN_KEY);
    return t ? { Authorization: "Bearer " + t } : {};
  };
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  function setConn(text, cls) {
    const conn = $("conn");
    conn.textContent = text;
    conn.className = "pill " + cls;
  }

  /** Shows the token prompt; resolves once a token has been entered. */
  function askToken(wrong) {
    const form = $("auth");
    form.hidden = false;
    $("auth-msg").textContent = wrong ? "That token was refused." : "This worker wants a bearer token.";
    state.needsToken = true;
    return new Promise((resolve) => {
      form.onsubmit = (e) => {
        e.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
        form.hidden = true;
        state.needsToken = false;
        resolve();
      };
    });
  }

  function handle(event, data) {
    if (event === "history") {
      state.samples = JSON.parse(data).slice(-KEEP);
      render();
    } else if (event === "snapshot") {
      const m = JSON.parse(data);
      state.samples.push(m.snapshot);
      if (state.samples.length > KEEP) state.samples.shift();
      state.jobs = m.jobs;
      state.updates += 1;
      render();
      renderJobs();
    }
  }

  /** Reads /v1/events for as long as the page lives, reconnecting after 2 s. */
  async function connect() {
    for (;;) {
      try {
        const r = await fetch("/v1/events", { headers: authHeaders() });
        if (r.status === 401) {
          state.connected = false;
          setConn("token needed", "down");
          await askToken(Object.keys(authHeaders()).length > 0);
          continue;
        }
        if (!r.ok) throw new Error("status " + r.status);
        loadBackend();
        state.connected = true;
        setConn("live", "live");
        const reader = r.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          const parsed = window.Sse.parseSse(buffer + decoder.decode(value, { stream: true }));
          buffer = parsed.rest;
          for (const e of parsed.events) handle(e.event, e.data);
        }
      } catch (e) {
        // network error or the server went away: retry below
      }
      state.connected = false;
      setConn("reconnecting…", "down");
      await sleep(2000);
    }
  }

  function loadBackend() {
    fetch("/v1/status", { headers: authHeaders() })
      .then((r) => r.json())
      .then((s) => {
        const all = s.backends || [];
        const names = all.map((b) => b.name);
        const gpu = names.some((n) => n.startsWith("cuda"));
        const fallback = (all[0] || {}).fallback || null;
        const out = all.filter((b) => !b.in_service).map((b) => `${b.name} out of service: ${b.out_of_service_reason}`);
        state.backend = { name: names.join(", "), gpu, fallback, devices: gpu ? names : [], out };
        $("backend").textContent =
          "backend: " + state.backend.name + (fallback ? ` (GPU unused: ${fallback})` : "") + (out.length ? " · " + out.join("; ") : "");
        relabel();
        render();
      })
      .catch(() => {});
  }

  build();
  connect();
  // Devices can leave service while the page is open: refresh their state.
  setInterval(() => state.connected && loadBackend(), 10000);
})();

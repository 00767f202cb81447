// The leaseq web console: one page, views rendered from the JSON API (/api/...).
// Plain DOM (no framework, nothing fetched from elsewhere). Every text from the server goes in
// through textContent, never innerHTML.
"use strict";

const main = document.getElementById("main");
let session = null;
let timer = null;
let clockSkew = 0; // server time - browser time, seconds

// --- helpers -----------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  for (const child of children) el.append(child);
  return el;
}

class ApiError extends Error {
  constructor(status, error) {
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code;
  }
}

async function api(method, path, body) {
  const headers = {};
  if (method !== "GET") {
    headers["X-CSRF-Token"] = session ? session.csrf : "";
    headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    if (response.status === 401 && path !== "/api/session") {
      await loadSession();
      route();
    }
    throw new ApiError(response.status, data.error || {});
  }
  return data;
}

function toast(text, isError) {
  const el = document.getElementById("toast");
  el.textContent = text;
  el.className = isError ? "error" : "";
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { el.hidden = true; }, 5000);
}

function confirmAction(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "cancel";
    dialog.showModal();
  });
}

async function act(promise, done) {
  try {
    const result = await promise;
    if (done) toast(typeof done === "function" ? done(result) : done);
    return result;
  } catch (error) {
    toast(error.message, true);
    return null;
  }
}

const nowServer = () => Date.now() / 1000 + clockSkew;
const fmtNumber = (n) => Number(n).toLocaleString("en-US");
const fmtRate = (n) => (n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1));

function fmtTime(t) {
  return new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function fmtIn(t) {
  const d = t - nowServer();
  const s = Math.abs(d);
  const text = s < 60 ? `${s.toFixed(0)}s` : s < 3600 ? `${(s / 60).toFixed(1)}m`
    : s < 86400 ? `${(s / 3600).toFixed(1)}h` : `${(s / 86400).toFixed(1)}d`;
  return d >= 0 ? `in ${text}` : `${text} ago`;
}

function fmtSeconds(s) {
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${+(s / 60).toFixed(2)}m`;
  if (s < 86400) return `${+(s / 3600).toFixed(2)}h`;
  return `${+(s / 86400).toFixed(2)}d`;
}

const qLink = (name) => `#/q/${encodeURIComponent(name)}`;

function mean(list, n) {
  const tail = list.slice(-n);
  return tail.length ? tail.reduce((a, b) => a + b, 0) / tail.length : 0;
}

// A small chart: depth (left scale) and send/ack rates (right scale) per second over the last
// minutes; the depth has gaps where no console page looked at the queue.
function chart(rates, width, height) {
  const n = Math.max(rates.sent.length, 2);
  const x = (i) => ((i / (n - 1)) * width).toFixed(1);
  const y = (v, max) => (height - 2 - (v / (max || 1)) * (height - 4)).toFixed(1);
  const lines = (values, max, cls) => {
    const runs = [[]];
    values.forEach((v, i) => {
      if (v === null) { if (runs[runs.length - 1].length) runs.push([]); return; }
      runs[runs.length - 1].push(`${x(i)},${y(v, max)}`);
    });
    // A lone sample is drawn as a short tick so that it shows.
    return runs.filter((r) => r.length).map((r) => svg("polyline", {
      class: cls, points: r.length > 1 ? r.join(" ") : `${r[0]} ${(+r[0].split(",")[0] + 2).toFixed(1)},${r[0].split(",")[1]}`,
    }));
  };
  const depths = rates.depth.filter((v) => v !== null);
  const rateMax = Math.max(1, ...rates.sent, ...rates.acked);
  const depthMax = Math.max(1, ...depths);
  const title = svg("title");
  title.textContent = `depth now ${depths.length ? depths[depths.length - 1] : "?"} (max ${depthMax}); ` +
    `rates: max ${rateMax}/s over ${rates.sent.length}s`;
  return svg("svg", { class: "chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" },
    title,
    svg("rect", { x: 0, y: 0, width, height, fill: "#f8fafc", stroke: "#e2e5ec" }),
    ...lines(rates.sent, rateMax, "sent"), ...lines(rates.acked, rateMax, "acked"),
    ...lines(rates.depth, depthMax, "depth"));
}

function legend() {
  return h("div", { class: "legend" }, h("span", { class: "l-depth" }, "— depth"),
    h("span", { class: "l-sent" }, "— sent/s"), h("span", { class: "l-acked" }, "— acked/s"));
}

// --- session -----------------------------------------------------------------------------------

async function loadSession() {
  session = await api("GET", "/api/session");
  const who = document.getElementById("who");
  who.replaceChildren();
  if (session.auth && session.signed_in) {
    who.append(`signed in as ${session.principal}`, h("button", {
      id: "sign-out",
      onclick: async () => { session = await api("DELETE", "/api/session"); await loadSession(); route(); },
    }, "Sign out"));
  } else if (!session.auth) {
    who.append("no auth policy: every action allowed");
  }
}

function signInView() {
  const input = h("input", { type: "password", id: "token", autocomplete: "off", size: 48 });
  const form = h("form", {
    class: "card", id: "sign-in",
    onsubmit: async (event) => {
      event.preventDefault();
      const result = await act(api("POST", "/api/session", { token: input.value }));
      if (result) { await loadSession(); route(); }
    },
  }, h("h1", {}, "Sign in"),
  h("p", { class: "muted" }, "This server checks tokens against its --auth-policy. " +
    "Your grants decide what you see and may change."),
  h("div", { class: "form-line" }, h("label", {}, "Token", input),
    h("button", { class: "primary", type: "submit" }, "Sign in")));
  main.replaceChildren(form);
  input.focus();
}

// --- overview ------------------------------------------------------------------------------------

async function overview(after) {
  setCrumbs([]);
  const table = h("table", { id: "queues" });
  const pager = h("div", { class: "pager" });
  const parts = [h("h1", {}, "Queues"),
    h("div", { class: "card" }, table, pager, h("p", { class: "muted" }, "Counts refresh every second; rates are the mean of the last 5 s; charts show the last minute (depth: as console pages saw it)."),
      legend())];
  if (session.may_create) parts.push(newQueueForm());
  main.replaceChildren(...parts);
  const refresh = async () => {
    const data = await api("GET", `/api/queues${after ? `?after=${encodeURIComponent(after)}` : ""}`);
    clockSkew = data.server_time - Date.now() / 1000;
    const head = h("tr", {}, ["Queue", "Visible", "Leased", "Delayed", "Total", "Dead-lettered",
      "Sent/s", "Acked/s", "Last minute"].map((t, i) => h("th", { class: i && i < 8 ? "num" : "" }, t)));
    const rows = data.queues.map((q) => {
      const cell = (key, value) => h("td", { class: "num", dataset: { q: q.name, k: key } }, value);
      return h("tr", {},
        h("td", {}, h("a", { href: qLink(q.name) }, q.name),
          q.dead_letter_queue ? h("div", { class: "muted" }, `DLQ: ${q.dead_letter_queue}`) : null),
        cell("visible", fmtNumber(q.stats.visible)), cell("leased", fmtNumber(q.stats.leased)),
        cell("delayed", fmtNumber(q.stats.delayed)), cell("total", fmtNumber(q.stats.total)),
        cell("dead_lettered", fmtNumber(q.stats.dead_lettered_total)),
        cell("sent_rate", fmtRate(mean(q.rates.sent, 5))), cell("acked_rate", fmtRate(mean(q.rates.acked, 5))),
        h("td", {}, chart(q.rates, 200, 34)));
    });
    if (!rows.length) rows.push(h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No queues yet.")));
    table.replaceChildren(h("thead", {}, head), h("tbody", {}, rows));
    pager.replaceChildren(
      after ? h("button", { onclick: () => { location.hash = "#/"; } }, "First page") : "",
      data.next_after ? h("button", { onclick: () => { location.hash = `#/?after=${encodeURIComponent(data.next_after)}`; } }, "Next page") : "");
  };
  await refresh();
  live(refresh);
}

function newQueueForm() {
  const name = h("input", { id: "new-queue-name", placeholder: "orders", size: 30 });
  const dlq = h("input", { id: "new-queue-dlq", placeholder: "(none)", size: 20 });
  const count = h("input", { id: "new-queue-max-delivery", type: "number", min: 1, max: 1000, placeholder: "5", size: 6 });
  return h("form", {
    class: "card", id: "new-queue",
    onsubmit: async (event) => {
      event.preventDefault();
      const config = {};
      if (dlq.value) { config.dead_letter_queue = dlq.value; config.max_delivery_count = Number(count.value || 5); }
      const done = await act(api("POST", "/api/queues", { name: name.value, config }), `Queue ${name.value} created`);
      if (done) location.hash = qLink(done.name);
    },
  }, h("h2", {}, "New queue"), h("div", { class: "form-line" },
    h("label", {}, "Name", name), h("label", {}, "Dead letter queue", dlq),
    h("label", {}, "Max delivery count", count), h("button", { class: "primary", type: "submit" }, "Create")));
}

// --- queue page ----------------------------------------------------------------------------------

const CONFIG_FIELDS = [
  ["visibility_timeout", "Visibility timeout (s)"], ["receive_wait_time", "Receive wait (s)"],
  ["message_retention", "Retention (s)"], ["default_delay", "Default delay (s)"],
  ["max_message_bytes", "Max message bytes"], ["dead_letter_queue", "Dead letter queue"],
  ["max_delivery_count", "Max delivery count"], ["max_in_flight", "Max in flight"],
  ["dedup_window", "Dedup window (s)"],
];

async function queuePage(name) {
  setCrumbs([[name, qLink(name)]]);
  let info = await api("GET", `/api/queues/${encodeURIComponent(name)}`);
  const { sources } = await api("GET", `/api/queues/${encodeURIComponent(name)}/sources`);
  const can = info.can;
  const counts = h("div", { class: "counts", id: "counts" });
  const chartBox = h("div");
  const channels = h("table", { id: "channels" });
  const list = { page: "", pages: [], channel: "", states: "all" };
  const messages = h("table", { id: "messages" });
  const pager = h("div", { class: "pager" });

  const header = h("div", {}, h("h1", {}, `Queue ${name}`),
    info.config.dead_letter_queue ? h("p", {}, "Dead letters go to ",
      h("a", { href: qLink(info.config.dead_letter_queue) }, info.config.dead_letter_queue),
      ` after ${info.config.max_delivery_count} deliveries.`) : null,
    sources.length ? h("p", {}, "Dead letter queue of ",
      sources.map((s, i) => [i ? ", " : "", h("a", { href: qLink(s) }, s)])) : null);

  const filter = h("input", { id: "channel-filter", placeholder: "channel or prefix*", size: 20 });
  const states = h("select", { id: "states" }, h("option", { value: "all" }, "visible, leased and delayed"),
    h("option", { value: "visible" }, "visible only"));
  const filterForm = h("form", {
    class: "form-line",
    onsubmit: (event) => {
      event.preventDefault();
      Object.assign(list, { page: "", pages: [], channel: filter.value, states: states.value });
      refreshMessages();
    },
  }, h("label", {}, "Channel", filter), h("label", {}, "States", states), h("button", { type: "submit" }, "Filter"));

  const parts = [header,
    h("div", { class: "row" },
      h("div", { class: "card" }, h("h2", {}, "Counts"), counts),
      h("div", { class: "card" }, h("h2", {}, "Depth and rates, last 5 minutes"), chartBox, legend())),
    h("div", { class: "row" }, configCard(name, info, can), h("div", { class: "card" }, h("h2", {}, "Channels"), channels)),
    h("div", { class: "card" }, h("h2", {}, "Messages"), filterForm, messages, pager)];
  if (can.send) parts.push(sendCard(name));
  if (can.redrive && sources.length) parts.push(redriveCard(name));
  if (can.admin) parts.push(dangerCard(name));
  main.replaceChildren(...parts);

  const refreshStats = async () => {
    info = await api("GET", `/api/queues/${encodeURIComponent(name)}`);
    clockSkew = info.server_time - Date.now() / 1000;
    const s = info.stats;
    const count = (key, label, value) => h("div", { class: "count" }, h("b", { id: `count-${key}` }, value), h("span", {}, label));
    counts.replaceChildren(count("visible", "visible", fmtNumber(s.visible)), count("leased", "leased", fmtNumber(s.leased)),
      count("delayed", "delayed", fmtNumber(s.delayed)), count("total", "total", fmtNumber(s.total)),
      count("dead_lettered", "dead-lettered (total)", fmtNumber(s.dead_lettered_total)),
      count("deleted", "acked (total)", fmtNumber(s.deleted_total)),
      count("expired", "expired (total)", fmtNumber(s.expired_total)),
      count("age", "oldest visible", fmtSeconds(Math.round(s.oldest_visible_age))),
      count("sent_rate", "sent/s", fmtRate(mean(info.rates.sent, 5))),
      count("acked_rate", "acked/s", fmtRate(mean(info.rates.acked, 5))));
    chartBox.replaceChildren(chart(info.rates, 560, 90));
    channels.replaceChildren(h("thead", {}, h("tr", {}, ["Channel", "Visible", "Leased", "Delayed", "Total"].map((t, i) => h("th", { class: i ? "num" : "" }, t)))),
      h("tbody", {}, s.channels.length ? s.channels.map((c) => h("tr", {},
        h("td", {}, c.channel === "" ? h("span", { class: "muted" }, "(default)") : c.channel),
        [c.visible, c.leased, c.delayed, c.total].map((v) => h("td", { class: "num" }, fmtNumber(v)))))
        : h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No messages."))));
  };

  const refreshMessages = async () => {
    const query = new URLSearchParams({ states: list.states, channel: list.channel, limit: "50" });
    if (list.page) query.set("page", list.page);
    const data = await api("GET", `/api/queues/${encodeURIComponent(name)}/messages?${query}`);
    messages.replaceChildren(h("thead", {}, h("tr", {}, ["Message", "State", "Channel", "Deliveries", "Lease end / visible at", "Enqueued", "Body", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, data.messages.length ? data.messages.map((m) => messageRow(name, m, can, refreshAll, info.config.dead_letter_queue))
        : h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No messages on this page."))));
    pager.replaceChildren(
      list.pages.length ? h("button", { onclick: () => { list.page = ""; list.pages = []; refreshMessages(); } }, "First page") : "",
      data.next_page ? h("button", { id: "next-page", onclick: () => { list.pages.push(list.page); list.page = data.next_page; refreshMessages(); } }, "Next page") : "",
      h("span", { class: "muted" }, list.pages.length ? `page ${list.pages.length + 1}` : "first page (refreshes every second)"));
  };

  const refreshAll = async () => { await refreshStats(); if (!list.pages.length) await refreshMessages(); };
  await refreshStats();
  await refreshMessages();
  live(refreshAll);
}

function messageRow(queue, m, can, after, dlq) {
  const when = m.state === "leased" ? h("span", { class: "lease-end", title: fmtTime(m.visible_at) }, `lease ends ${fmtIn(m.visible_at)}`)
    : m.state === "delayed" ? h("span", { title: fmtTime(m.visible_at) }, `visible ${fmtIn(m.visible_at)}`)
      : h("span", { class: "muted" }, "now");
  return h("tr", { dataset: { id: m.message_id, state: m.state } },
    h("td", { class: "mono" }, h("a", { href: `${qLink(queue)}/m/${m.handle}` }, m.message_id)),
    h("td", {}, h("span", { class: `state ${m.state}` }, m.state)),
    h("td", {}, m.channel || h("span", { class: "muted" }, "—"), m.group ? h("span", { class: "muted" }, ` · group ${m.group}`) : null),
    h("td", { class: "num" }, m.delivery_count), h("td", {}, when),
    h("td", { title: fmtTime(m.enqueued_at) }, fmtIn(m.enqueued_at)),
    h("td", { class: "mono" }, m.preview.length > 60 ? `${m.preview.slice(0, 60)}…` : m.preview),
    h("td", { class: "actions" }, can.admin ? messageActions(queue, m, after, dlq) : null));
}

function messageActions(queue, m, after, dlq) {
  const base = `/api/queues/${encodeURIComponent(queue)}/messages/${m.handle}`;
  return [
    m.state === "leased" ? h("button", {
      class: "release",
      onclick: async () => {
        if (await confirmAction(`Release message ${m.message_id}? Its consumer loses the lease; it becomes visible now.`)) {
          await act(api("POST", `${base}/release`, { reason: "released from the console" }), "Released");
          await after();
        }
      },
    }, "Release") : null,
    dlq ? h("button", {
      class: "dead-letter",
      onclick: async () => {
        if (await confirmAction(`Move message ${m.message_id} to the dead letter queue ${dlq} now? Its consumer loses it; it is not retried.`)) {
          await act(api("POST", `${base}/dead-letter`, { reason: "dead-lettered from the console" }), "Dead-lettered");
          await after();
        }
      },
    }, "Dead-letter") : null,
    h("button", {
      class: "delete",
      onclick: async () => {
        if (await confirmAction(`Delete message ${m.message_id}? This cannot be undone.`)) {
          await act(api("POST", `${base}/delete`, {}), "Deleted");
          await after();
        }
      },
    }, "Delete")];
}

function configCard(name, info, can) {
  const inputs = {};
  const rows = CONFIG_FIELDS.map(([key, label]) => {
    const value = info.config[key];
    const input = h("input", {
      name: key, value: value === null ? "" : value, size: 14, disabled: !can.admin,
      type: key === "dead_letter_queue" ? "text" : "number", step: "any",
    });
    inputs[key] = input;
    const readable = label.endsWith("(s)") && value >= 60 ? ` · ${fmtSeconds(value)}` : "";
    return h("label", {}, label + readable, input);
  });
  return h("form", {
    class: "card", id: "config",
    onsubmit: async (event) => {
      event.preventDefault();
      const config = {};
      for (const [key] of CONFIG_FIELDS) {
        const text = inputs[key].value.trim();
        if (key === "dead_letter_queue") config[key] = text || null;
        else if (key === "max_delivery_count") config[key] = text === "" ? null : Number(text);
        else config[key] = Number(text);
      }
      await act(api("PATCH", `/api/queues/${encodeURIComponent(name)}`, { config }), "Configuration saved");
    },
  }, h("h2", {}, "Configuration"), h("div", { class: "form-line" }, rows),
  can.admin ? h("button", { class: "primary", type: "submit", id: "save-config" }, "Save") : h("p", { class: "muted" }, "Read only: changing it needs admin."));
}

function sendCard(name) {
  const body = h("textarea", { id: "send-body", placeholder: '{"order": 42}' });
  const channel = h("input", { id: "send-channel", size: 16 });
  const delay = h("input", { id: "send-delay", type: "number", min: 0, step: "any", size: 8 });
  const attributes = h("input", { id: "send-attributes", placeholder: "key=value, key2=value2", size: 30 });
  return h("form", {
    class: "card", id: "send",
    onsubmit: async (event) => {
      event.preventDefault();
      const attrs = {};
      for (const pair of attributes.value.split(",").map((s) => s.trim()).filter(Boolean)) {
        const at = pair.indexOf("=");
        attrs[at < 0 ? pair : pair.slice(0, at)] = at < 0 ? "" : pair.slice(at + 1);
      }
      const message = { body: body.value, channel: channel.value, attributes: attrs };
      if (delay.value !== "") message.delay = Number(delay.value);
      await act(api("POST", `/api/queues/${encodeURIComponent(name)}/messages`, message), (r) => `Sent ${r.message_id}`);
    },
  }, h("h2", {}, "Send a message"), body, h("div", { class: "form-line" },
    h("label", {}, "Channel", channel), h("label", {}, "Delay (s)", delay), h("label", {}, "Attributes", attributes),
    h("button", { class: "primary", type: "submit", id: "send-button" }, "Send")));
}

function redriveCard(name) {
  const channel = h("input", { id: "redrive-channel", placeholder: "all channels", size: 16 });
  const count = h("input", { id: "redrive-count", type: "number", min: 0, placeholder: "all", size: 8 });
  const redrive = async (body, what) => {
    if (await confirmAction(`Move ${what} of ${name} back to the queues they came from?`)) {
      await act(api("POST", `/api/queues/${encodeURIComponent(name)}/redrive`, body), (r) => `Moved ${r.moved} messages`);
    }
  };
  return h("div", { class: "card", id: "redrive" }, h("h2", {}, "Redrive dead letters"),
    h("div", { class: "form-line" },
      h("button", { class: "primary", id: "redrive-all", onclick: () => redrive({}, "every visible message") }, "Redrive all"),
      h("label", {}, "Channel", channel), h("label", {}, "At most", count),
      h("button", {
        id: "redrive-some",
        onclick: () => redrive({ channel: channel.value, max_messages: Number(count.value || 0) },
          `${count.value ? `up to ${count.value}` : "every"} message${channel.value ? ` of channel ${channel.value}` : ""}`),
      }, "Redrive these")));
}

function dangerCard(name) {
  const enc = encodeURIComponent(name);
  return h("div", { class: "card", id: "danger" }, h("h2", {}, "Danger zone"), h("div", { class: "form-line" },
    h("button", {
      class: "danger", id: "purge",
      onclick: async () => {
        if (await confirmAction(`Purge ${name}? Every message (visible, leased, delayed) is deleted.`)) {
          await act(api("POST", `/api/queues/${enc}/purge`), (r) => `Purged ${r.purged} messages`);
        }
      },
    }, "Purge queue"),
    h("button", {
      class: "danger", id: "delete-queue",
      onclick: async () => {
        if (await confirmAction(`Delete queue ${name} and all its messages?`)) {
          if (await act(api("DELETE", `/api/queues/${enc}`), `Queue ${name} deleted`)) location.hash = "#/";
        }
      },
    }, "Delete queue")));
}

// --- message page --------------------------------------------------------------------------------

async function messagePage(queue, handle) {
  setCrumbs([[queue, qLink(queue)], ["message", null]]);
  let m;
  try {
    m = await api("GET", `/api/queues/${encodeURIComponent(queue)}/messages/${handle}`);
  } catch (error) {
    main.replaceChildren(h("div", { class: "card" }, h("h1", {}, "Message"), h("p", {}, error.message),
      h("a", { href: qLink(queue) }, `Back to ${queue}`)));
    return;
  }
  clockSkew = m.server_time - Date.now() / 1000;
  const info = await api("GET", `/api/queues/${encodeURIComponent(queue)}`);
  const bytes = Uint8Array.from(atob(m.body_base64), (c) => c.charCodeAt(0));
  const text = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  const views = {
    text: () => text,
    json: () => { try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return `(not JSON: ${e.message})`; } },
    hex: () => {
      const lines = [];
      for (let i = 0; i < bytes.length && i < 65536; i += 16) {
        const row = Array.from(bytes.slice(i, i + 16));
        lines.push(`${i.toString(16).padStart(8, "0")}  ${row.map((b) => b.toString(16).padStart(2, "0")).join(" ").padEnd(47)}  ${row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("")}`);
      }
      if (bytes.length > 65536) lines.push(`… ${bytes.length - 65536} more bytes`);
      return lines.join("\n");
    },
  };
  const pre = h("pre", { class: "body", id: "body" });
  const tabs = h("div", { class: "tabs" });
  const show = (kind) => {
    pre.textContent = views[kind]();
    for (const b of tabs.children) b.classList.toggle("active", b.value === kind);
  };
  tabs.append(...Object.keys(views).map((k) => h("button", { value: k, id: `view-${k}`, onclick: () => show(k) }, k.toUpperCase())));
  let initial = "text";
  try { JSON.parse(text); initial = "json"; } catch (e) { if (/[\u0000-\u0008\ufffd]/.test(text)) initial = "hex"; }
  const when = m.state === "leased" ? `lease ends ${fmtIn(m.visible_at)} (${fmtTime(m.visible_at)})`
    : m.state === "delayed" ? `visible ${fmtIn(m.visible_at)} (${fmtTime(m.visible_at)})` : "visible now";
  const attrs = Object.entries(m.attributes);
  main.replaceChildren(h("h1", {}, "Message ", h("span", { class: "mono" }, m.message_id)),
    h("div", { class: "row" },
      h("div", { class: "card" }, h("dl", { id: "message-fields" },
        h("dt", {}, "Queue"), h("dd", {}, h("a", { href: qLink(queue) }, queue)),
        h("dt", {}, "State"), h("dd", {}, h("span", { class: `state ${m.state}` }, m.state), " ", when),
        h("dt", {}, "Channel"), h("dd", {}, m.channel || "(default)"),
        h("dt", {}, "Group"), h("dd", {}, m.group ? `${m.group} (sequence ${m.sequence})` : h("span", { class: "muted" }, "none")),
        h("dt", {}, "Deliveries"), h("dd", {}, m.delivery_count),
        h("dt", {}, "Enqueued"), h("dd", {}, `${fmtTime(m.enqueued_at)} (${fmtIn(m.enqueued_at)})`),
        h("dt", {}, "Expires"), h("dd", {}, `${fmtTime(m.expires_at)} (${fmtIn(m.expires_at)})`),
        h("dt", {}, "Size"), h("dd", {}, `${fmtNumber(m.size)} bytes`),
        h("dt", {}, "Last error"), h("dd", {}, m.last_error || h("span", { class: "muted" }, "none")),
        m.source_queue ? [h("dt", {}, "Dead-lettered from"), h("dd", {}, h("a", { href: qLink(m.source_queue) }, m.source_queue))] : null),
      info.can.admin ? h("div", { class: "actions" }, messageActions(queue, m, async () => { location.hash = qLink(queue); }, info.config.dead_letter_queue)) : null),
      h("div", { class: "card" }, h("h2", {}, "Attributes"), attrs.length ? h("table", {}, h("tbody", {},
        attrs.map(([k, v]) => h("tr", {}, h("td", { class: "mono" }, k), h("td", { class: "mono" }, v))))) : h("p", { class: "muted" }, "none"))),
    h("div", { class: "card" }, h("h2", {}, "Body"), tabs, pre));
  show(initial);
}

// --- routing ---------------------------------------------------------------------------------------

function setCrumbs(items) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren(h("a", { href: "#/" }, "Queues"),
    ...items.flatMap(([label, href]) => [" / ", href ? h("a", { href }, label) : label]));
}

function live(refresh) {
  clearInterval(timer);
  let busy = false;
  timer = setInterval(async () => {
    if (busy || document.hidden) return;
    busy = true;
    try { await refresh(); } catch (error) { /* shown on the next user action */ } finally { busy = false; }
  }, 1000);
}

async function route() {
  clearInterval(timer);
  if (!session) await loadSession();
  if (session.auth && !session.signed_in) return signInView();
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, search] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === "q" && parts.length === 2) await queuePage(parts[1]);
    else if (parts[0] === "q" && parts[2] === "m" && parts.length === 4) await messagePage(parts[1], parts[3]);
    else await overview(new URLSearchParams(search || "").get("after"));
  } catch (error) {
    main.replaceChildren(h("div", { class: "card" }, h("h1", {}, "Error"), h("p", { id: "error" }, error.message),
      h("a", { href: "#/" }, "All queues")));
  }
}

window.addEventListener("hashchange", route);
route();

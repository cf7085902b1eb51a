// Helpers shared by the console's pages. Everything that comes from the bus is untrusted
// (model text, tool output, paths): it only ever reaches the page as text (textContent,
// attribute values), never as HTML.
"use strict";

const Jido = (() => {
  /** An element with attributes and children; strings become text nodes, never markup. */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  /**
   * Call the JSON API; an error answer becomes an Error whose message is the API's. A state
   * change always sends a JSON body (`{}` when there is none): the gateway serves a
   * cookie-authenticated POST only as a same-origin application/json request.
   */
  async function api(method, path, body) {
    const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
    if (body === undefined && method !== "GET" && method !== "HEAD") body = {};
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const text = await response.text();
    let value = null;
    try {
      value = text ? JSON.parse(text) : null;
    } catch {
      value = null;
    }
    if (!response.ok) {
      const error = value && value.error;
      throw new Error(error ? `${error.type}: ${error.message}` : `HTTP ${response.status}`);
    }
    return value;
  }

  /** Every CloudEvent type of the catalogue (the page renders it from the server's catalogue). */
  function eventTypes() {
    return JSON.parse(document.body.dataset.eventTypes || "[]");
  }

  /**
   * Open an EventSource and call handler(event) with each CloudEvent (parsed) of the listed
   * types. The SSE `event:` field is the CloudEvent type, so each type gets its listener.
   * The connection badge (#connection) shows whether the stream is live.
   */
  function stream(url, types, handler) {
    const source = new EventSource(url, { withCredentials: true });
    const badge = document.getElementById("connection");
    const show = (state) => {
      if (!badge) return;
      badge.textContent = state;
      badge.className = `badge ${state.split(" ")[0]}`;
    };
    source.addEventListener("open", () => show("live"));
    source.addEventListener("error", () => show(source.readyState === EventSource.CLOSED ? "closed" : "reconnecting"));
    const onMessage = (message) => {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch {
        return; // a connection error (no data), or not JSON: nothing to show
      }
      if (!event || !event.specversion) {
        // the gateway's last word before it closes the stream (a viewer too far behind the
        // bus): the browser reconnects by itself
        if (event && event.error) show(`reconnecting (${event.error.type})`);
        return;
      }
      handler(event);
    };
    for (const type of types) source.addEventListener(type, onMessage);
    return source;
  }

  /** JSON for display, cut at max characters with a marker saying how much was cut. */
  function preview(value, max = 4000) {
    const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    if (text === undefined) return "";
    return text.length > max ? `${text.slice(0, max)}\n… (${text.length - max} more characters)` : text;
  }

  function clock(iso) {
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? "" : date.toLocaleTimeString([], { hour12: false });
  }

  /** Show a failed action next to its form, and clear it on the next success. */
  function report(form, error) {
    const output = form.querySelector("output.error");
    if (output) output.textContent = error ? error.message : "";
  }

  const path = (...parts) => parts.map(encodeURIComponent).join("/");

  /** Dollars: `$0`, four decimals from a cent on, three significant digits below one
   * (jidocode.shared.cost.usd: the same float steps pick the same number of decimals). */
  function usd(amount) {
    if (amount <= 0) return "$0";
    if (amount >= 0.01) return `$${amount.toFixed(4)}`;
    let decimals = 5;
    let threshold = 0.001;
    while (amount < threshold && decimals < 10) {
      threshold /= 10;
      decimals += 1;
    }
    return `$${amount.toFixed(decimals)}`;
  }

  /**
   * What calls cost, by the rule of jidocode.shared.cost.cost_text (decision 0314): with any
   * unpriced call the total is unknown, never `$0`.
   */
  function costText(priced, unpriced) {
    if (unpriced <= 0) return usd(priced);
    const calls = `${unpriced} call${unpriced === 1 ? "" : "s"} unpriced`;
    return priced <= 0 ? `unknown (${calls})` : `unknown (${usd(priced)} + ${calls})`;
  }

  // -- markdown --------------------------------------------------------------------------

  /** The elements a markdown tree may hold (services/gateway/markdown.py TAGS). */
  const MARKDOWN_TAGS = new Set([
    "a", "blockquote", "br", "code", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li",
    "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
  ]);
  const LINK_PROTOCOLS = new Set(["http:", "https:", "mailto:"]);

  /** A link's address when it leads to a web page or a mail address, else null. */
  function safeHref(href) {
    try {
      return typeof href === "string" && LINK_PROTOCOLS.has(new URL(href).protocol) ? href : null;
    } catch {
      return null;
    }
  }

  /** One node of a markdown tree as DOM: text stays text; an element only of the allowed
   * tags, with no attribute but a checked link's href and a list's start. */
  function markdownNode(node) {
    if (typeof node === "string") return document.createTextNode(node);
    if (!Array.isArray(node)) return document.createTextNode("");
    const [tag, attrs, children] = node;
    const kids = Array.isArray(children) ? children.map(markdownNode) : [];
    const given = attrs && typeof attrs === "object" ? attrs : {};
    const safe = {};
    if (tag === "a") {
      safe.href = safeHref(given.href);
      safe.rel = "noopener noreferrer nofollow";
    }
    if (tag === "ol" && Number.isInteger(given.start)) safe.start = given.start;
    if (!MARKDOWN_TAGS.has(tag) || (tag === "a" && !safe.href)) {
      const fragment = document.createDocumentFragment();
      fragment.append(...kids);
      return fragment;
    }
    return el(tag, safe, ...kids);
  }

  /** The DOM nodes of a markdown tree the gateway parsed (decision 0314): never HTML. */
  const markdown = (tree) => (Array.isArray(tree) ? tree.map(markdownNode) : []);

  return { el, api, eventTypes, stream, preview, clock, report, path, costText, markdown };
})();

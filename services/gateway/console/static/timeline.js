// A conversation's timeline, live: its events replayed from the start, then as they happen
// (the gateway's SSE route; the browser's EventSource resumes from the last event id by itself).
"use strict";

(() => {
  const { el, api, preview, clock } = Jido;
  const project = document.body.dataset.project;
  const conversation = document.body.dataset.conversation;
  const base = `/api/projects/${Jido.path(project, "conversations", conversation)}`;
  const timeline = document.getElementById("timeline");

  const bubbles = new Map(); // LLM request id → the assistant message being streamed
  const tools = new Map(); // tool runner request id → the tool call's card
  const usage = { calls: 0, prompt: 0, completion: 0, cost: 0, unpriced: 0 };

  function add(node, event) {
    node.dataset.eventId = event.id;
    node.dataset.type = event.type;
    timeline.append(node);
    node.scrollIntoView({ block: "nearest" });
    return node;
  }

  function notice(kind, text, event) {
    return add(el("li", { class: `notice ${kind}` }, el("time", { datetime: event.time }, clock(event.time)), " ", text), event);
  }

  // -- messages ------------------------------------------------------------------------------

  function message(role, text, event) {
    const body = el("div", { class: "text" }, text);
    const node = add(el("li", { class: `message ${role}` }, el("span", { class: "who" }, role), body), event);
    return { node, body };
  }

  /** A user message, with its button to rewind to before it: the files, the conversation or
   * both (docs/rewind.md). */
  function userMessage(event) {
    const shown = message("user", event.data.text, event);
    const panel = el("div", { class: "rewind-panel", hidden: true });
    const button = el("button", { class: "rewind secondary", title: "go back to before this message" }, "Rewind to here…");
    button.addEventListener("click", () => rewindChoice(event.id, panel));
    shown.node.append(button, panel);
    return shown;
  }

  /** The choice: the conversation alone (asked at once), or the files (their diff first). */
  function rewindChoice(messageId, panel) {
    const choose = (label, what, title) =>
      el("button", { class: "secondary", title, onclick: () => (what === "conversation" ? rewindConversation(messageId, panel) : rewindPreview(messageId, what, panel)) }, label);
    panel.replaceChildren(
      el("span", {}, "Rewind: "),
      choose("Conversation", "conversation", "the model forgets this message and what came after"),
      " ",
      choose("Files", "files", "the files as they were before this message (the diff is shown first)"),
      " ",
      choose("Both", "both", "the files and the conversation (the diff is shown first)"),
      " ",
      el("button", { class: "secondary", onclick: () => (panel.hidden = true) }, "Close"),
    );
    panel.hidden = false;
  }

  async function rewindConversation(messageId, panel) {
    if (!window.confirm("Rewind the conversation to before this message? The model forgets it and what came after; the journal keeps everything. Files are not changed.")) return;
    await rewindCall(panel, async () => {
      const done = await api("POST", `${base}/rewind`, { message_id: messageId });
      panel.replaceChildren(el("span", {}, `conversation rewound (${done.dropped} context messages dropped)`));
    });
  }

  /** The files' diff, each path as text; the user's own changes are listed and kept unless ticked. */
  async function rewindPreview(messageId, what, panel) {
    await rewindCall(panel, async () => {
      const preview = await api("GET", `${base}/rewind/preview?message_id=${encodeURIComponent(messageId)}`);
      const diff = preview.diff || { added: [], modified: [], deleted: [], changed_by_user: [] };
      const mine = new Set(diff.changed_by_user);
      const rows = [];
      for (const [label, paths] of [["restore", diff.modified], ["bring back", diff.added], ["delete", diff.deleted]]) {
        for (const path of paths) {
          rows.push(el("li", { class: mine.has(path) ? "changed-by-user" : null }, `${label} `, el("code", {}, path), mine.has(path) ? " (changed since by you: kept)" : ""));
        }
      }
      if (!rows.length && what === "files") {
        panel.replaceChildren(el("span", {}, "no file to restore: no turn since this message changed files"));
        return;
      }
      const overwrite = el("input", { type: "checkbox", class: "overwrite" });
      const confirm = el("button", { class: "confirm" }, what === "both" ? "Restore and rewind" : "Restore the files");
      confirm.addEventListener("click", () => rewindRestore(messageId, what, overwrite.checked, panel));
      panel.replaceChildren(
        el("div", {}, rows.length ? "Restoring the files changes:" : "No file to restore; the conversation is rewound."),
        el("ul", { class: "rewind-diff" }, ...rows),
        mine.size ? el("div", {}, el("label", {}, overwrite, " overwrite the files changed since by you too")) : "",
        confirm,
        " ",
        el("button", { class: "secondary", onclick: () => (panel.hidden = true) }, "Cancel"),
      );
    });
  }

  async function rewindRestore(messageId, what, overwrite, panel) {
    await rewindCall(panel, async () => {
      const done = await api("POST", `${base}/rewind/restore`, { message_id: messageId, what, overwrite_user_changes: overwrite });
      const files = done.files;
      const lines = [];
      if (files) lines.push(`files: ${files.restored.length} restored`);
      if (files && files.kept.length) lines.push(`kept, changed since by you: ${files.kept.join(", ")}`);
      if (done.conversation) lines.push(`conversation rewound (${done.conversation.dropped} context messages dropped)`);
      panel.replaceChildren(...lines.map((line) => el("div", {}, line)));
    });
  }

  /** Runs one step of the rewind; an error is shown in the panel. */
  async function rewindCall(panel, step) {
    for (const button of panel.querySelectorAll("button")) button.disabled = true;
    try {
      await step();
    } catch (error) {
      panel.append(el("div", { class: "error" }, error.message));
      for (const button of panel.querySelectorAll("button")) button.disabled = false;
    }
  }

  /** The conversation went back before a message: it and what followed are marked as left behind. */
  function rewound(event) {
    let behind = false;
    for (const node of timeline.children) {
      if (node.dataset.eventId === event.data.message_id) behind = true;
      if (behind) node.classList.add("rewound");
    }
    return notice("info", `rewound to before a message (${event.data.dropped} context messages dropped)`, event);
  }

  function bubble(requestId, event) {
    const key = requestId || "live";
    let found = bubbles.get(key) || (requestId ? bubbles.get("live") : undefined);
    if (!found) {
      found = message("assistant", "", event);
      found.node.classList.add("streaming");
    }
    bubbles.delete("live");
    bubbles.set(key, found);
    return found;
  }

  // -- tool calls ----------------------------------------------------------------------------

  function card(requestId, event) {
    let found = tools.get(requestId);
    if (found) return found;
    const parts = {
      name: el("span", { class: "name" }),
      status: el("span", { class: "badge running" }, "requested"),
      decision: el("span", { class: "decision" }),
      duration: el("span", { class: "duration" }),
      args: el("pre", { class: "args" }),
      approval: el("div", { class: "approval", hidden: true }),
      result: el("pre", { class: "result" }),
      outcome: el("details", { class: "outcome", open: true, hidden: true }),
      startedAt: event.time,
    };
    parts.node = add(
      el(
        "li",
        { class: "tool", "data-request-id": requestId },
        el("div", { class: "head" }, "tool ", parts.name, " ", parts.status, " ", parts.decision, " ", parts.duration),
        el("details", { open: true }, el("summary", {}, "arguments"), parts.args),
        parts.approval,
        parts.outcome,
      ),
      event,
    );
    tools.set(requestId, parts);
    return parts;
  }

  function finish(parts, event, status, text) {
    parts.status.textContent = status;
    parts.status.className = `badge ${status}`;
    parts.outcome.replaceChildren(el("summary", {}, status === "failed" ? "error" : "result"), parts.result);
    parts.outcome.hidden = false;
    parts.result.textContent = text;
    parts.approval.hidden = true;
    if (!parts.decision.textContent) parts.decision.textContent = "allowed by policy";
    // from the request (or the approval, when one was asked) to the result, as the
    // conversation journaled them: the stream of one page, no second one for the runner's signals
    const ms = new Date(event.time) - new Date(parts.startedAt);
    if (Number.isFinite(ms)) parts.duration.textContent = `${Math.max(ms, 0)} ms`;
  }

  /** An elicitation's form (an MCP server asks while its tool runs): one input per field, typed
   * as the form says; the server's titles and choices reach the page as text only. */
  function formOf(form, parts, requestId) {
    const inputs = [];
    const rows = Object.entries(form.properties || {}).map(([name, spec]) => {
      const required = (form.required || []).includes(name);
      const input = fieldInput(spec || {}, required);
      inputs.push([name, spec || {}, input]);
      const label = spec && spec.title ? `${spec.title} (${name})` : name;
      return el("label", { class: "field" }, label, required ? " *" : "", " ", input, spec && spec.description ? el("small", {}, ` ${spec.description}`) : null);
    });
    const node = el("form", { class: "elicitation" }, ...rows);
    node.addEventListener("submit", (submitted) => {
      submitted.preventDefault();
      answer(parts, requestId, "approve_once", formContent(inputs));
    });
    node.append(el("button", { type: "submit", class: "allow" }, "Send"), " ",
      el("button", { type: "button", class: "deny secondary", onclick: () => answer(parts, requestId, "deny") }, "Decline"));
    return node;
  }

  function fieldInput(spec, required) {
    const choices = spec.enum || (spec.oneOf || []).map((option) => option && option.const);
    if (spec.type === "string" && choices.length) {
      return el("select", { required }, ...(required ? [] : [el("option", { value: "" }, "")]), ...choices.map((c) => el("option", { value: c }, c)));
    }
    if (spec.type === "boolean") return el("input", { type: "checkbox", checked: spec.default === true });
    if (spec.type === "integer" || spec.type === "number") {
      return el("input", { type: "number", required, min: spec.minimum, max: spec.maximum, step: spec.type === "integer" ? 1 : "any" });
    }
    const types = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };
    return el("input", { type: types[spec.format] || "text", required, maxlength: spec.maxLength || 4096, minlength: spec.minLength });
  }

  /** The typed values of the form's inputs (an empty optional field is left out). */
  function formContent(inputs) {
    const content = {};
    for (const [name, spec, input] of inputs) {
      if (spec.type === "boolean") content[name] = input.checked;
      else if (input.value === "") continue;
      else if (spec.type === "integer" || spec.type === "number") content[name] = Number(input.value);
      else content[name] = input.value;
    }
    return content;
  }

  async function answer(parts, requestId, decision, content) {
    // shown before the request: the conversation's approval.response may arrive on the
    // stream before the request's own answer does, and it has the last word
    const asked = parts.decision.textContent;
    parts.decision.textContent = decision === "deny" ? "denying…" : "allowing…";
    for (const button of parts.approval.querySelectorAll("button")) button.disabled = true;
    try {
      // a server's question during a call is "<request id>/<question id>": two path segments
      await api("POST", `${base}/approvals/${Jido.path(...requestId.split("/"))}`, content ? { decision, content } : { decision });
    } catch (error) {
      parts.decision.textContent = asked;
      parts.approval.append(el("span", { class: "error" }, error.message));
      for (const button of parts.approval.querySelectorAll("button")) button.disabled = false;
    }
  }

  const DECISIONS = {
    approve_once: "approved by you (once)",
    approve_session: "approved by you (this session)",
    deny: "denied by you",
  };

  // -- usage ---------------------------------------------------------------------------------

  function showUsage(model) {
    document.getElementById("usage-calls").textContent = usage.calls;
    document.getElementById("usage-prompt").textContent = usage.prompt.toLocaleString();
    document.getElementById("usage-completion").textContent = usage.completion.toLocaleString();
    document.getElementById("usage-cost").textContent = Jido.costText(usage.cost, usage.unpriced);
    if (model) document.getElementById("usage-model").textContent = `model ${model}`;
  }

  // -- the events ----------------------------------------------------------------------------

  /** A model call that ended without text (tool calls only, or failed) leaves no empty bubble. */
  function dropEmpty(requestId) {
    const found = bubbles.get(requestId);
    if (found && !found.body.textContent) {
      found.node.remove();
      bubbles.delete(requestId);
    }
  }

  const handlers = {
    "conversation.user.message": userMessage,
    "conversation.rewound": rewound,
    // the model is called: an empty bubble (a blinking cursor) until its text streams in
    "conversation.llm.requested": (event) => bubble(event.id, event),
    "conversation.assistant.delta": (event) => {
      bubble(event.data.request_id, event).body.append(event.data.text);
    },
    "conversation.assistant.message": (event) => {
      // a turn of tool calls alone has no text to show
      if (!event.data.text && !bubbles.has(event.data.request_id || "live")) return;
      const { node, body } = bubble(event.data.request_id, event);
      // the text as the gateway parsed it (markdown: elements of an allowed few, text as
      // text), else as sent
      const tree = Array.isArray(event.jidomarkdown) ? Jido.markdown(event.jidomarkdown) : null;
      if (tree) body.replaceChildren(...tree);
      else body.textContent = event.data.text;
      body.classList.toggle("markdown", Boolean(tree));
      node.classList.remove("streaming");
      node.dataset.complete = "true";
    },
    "conversation.llm.completed": (event) => {
      const u = event.data.usage || {};
      usage.calls += 1;
      usage.prompt += u.prompt_tokens || 0;
      usage.completion += u.completion_tokens || 0;
      if (typeof u.cost_usd === "number") usage.cost += u.cost_usd;
      else usage.unpriced += 1;
      showUsage(event.data.model);
      if (!event.data.content) dropEmpty(event.data.request_id);
    },
    "conversation.tool.requested": (event) => {
      const parts = card(event.id, event);
      parts.startedAt = event.time;
      parts.name.textContent = event.data.name;
      parts.args.textContent = preview(event.data.args);
    },
    "conversation.approval.requested": (event) => {
      const requestId = event.data.request_id;
      const parts = card(requestId, event);
      if (!parts.name.textContent) parts.name.textContent = event.data.tool;
      parts.status.textContent = "waiting for you";
      parts.status.className = "badge waiting";
      parts.decision.textContent = "asks for approval";
      if (event.data.form) {
        const reason = event.data.reason || `${event.data.tool} asks you to fill a form`;
        parts.approval.replaceChildren(el("span", {}, reason), formOf(event.data.form, parts, requestId));
        parts.approval.hidden = false;
        return;
      }
      parts.approval.replaceChildren(
        el("span", {}, event.data.reason || `${event.data.tool} needs your approval`),
        " ",
        el("button", { class: "allow", onclick: () => answer(parts, requestId, "allow") }, "Allow"),
        " ",
        el("button", { class: "session secondary", onclick: () => answer(parts, requestId, "approve_session") }, "Allow for this session"),
        " ",
        el("button", { class: "deny secondary", onclick: () => answer(parts, requestId, "deny") }, "Deny"),
      );
      parts.approval.hidden = false;
    },
    "conversation.approval.response": (event) => {
      const parts = card(event.data.request_id, event);
      parts.decision.textContent = DECISIONS[event.data.decision] || event.data.decision;
      parts.startedAt = event.time; // the call runs from the answer on
      parts.approval.hidden = true;
      if (parts.status.textContent === "waiting for you") {
        parts.status.textContent = event.data.decision === "deny" ? "denied" : "running";
        parts.status.className = `badge ${event.data.decision === "deny" ? "failed" : "running"}`;
      }
      // a server's question during a call (an elicitation) is done once answered: the call's own card runs on
      if (/\/elicitation-\d+$/.test(event.data.request_id) && event.data.decision !== "deny") {
        parts.status.textContent = "answered";
        parts.status.className = "badge completed";
      }
    },
    "conversation.tool.completed": (event) => {
      finish(card(event.data.request_id, event), event, "completed", preview(event.data.data));
    },
    "conversation.tool.failed": (event) => {
      const parts = card(event.data.request_id, event);
      if (event.data.error_type === "permission_denied" && !parts.decision.textContent.startsWith("denied by")) {
        parts.decision.textContent = "denied by policy";
      }
      finish(parts, event, "failed", `${event.data.error_type}: ${event.data.message}`);
    },
    "conversation.llm.failed": (event) => {
      dropEmpty(event.data.request_id);
      notice("error", `model call failed: ${event.data.error_type}: ${event.data.message}`, event);
    },
    "conversation.subagent.started": (event) => notice("info", `sub-agent ${event.data.name || event.data.subagent_id} started`, event),
    "conversation.subagent.completed": (event) =>
      notice("info", `sub-agent ${event.data.subagent_id} ${event.data.status}`, event),
    "conversation.error": (event) => notice("error", `${event.data.error_type}: ${event.data.message}`, event),
    "conversation.loop.stopped": (event) => notice("warning", `stopped after ${event.data.turns} turns (${event.data.reason})`, event),
    "conversation.queue.overflow": (event) => notice("warning", `input dropped: the queue is full (${event.data.max_queue})`, event),
    "conversation.cancel": (event) => notice("warning", `cancelled${event.data.reason ? `: ${event.data.reason}` : ""}`, event),
    "conversation.resume": (event) => notice("info", "resumed", event),
  };

  Jido.stream(`${base}/events`, Object.keys(handlers), (event) => handlers[event.type](event));

  // -- the composer --------------------------------------------------------------------------

  const composer = document.getElementById("composer");
  const send = async () => {
    const text = composer.elements.text.value;
    if (!text.trim()) return;
    composer.elements.text.disabled = true;
    try {
      await api("POST", `${base}/messages`, { text });
      composer.elements.text.value = "";
      Jido.report(composer, null);
    } catch (error) {
      Jido.report(composer, error);
    } finally {
      composer.elements.text.disabled = false;
      composer.elements.text.focus();
    }
  };
  composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  composer.elements.text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      send();
    }
  });
  const action = (id, verb, body) =>
    document.getElementById(id).addEventListener("click", async () => {
      try {
        await api("POST", `${base}/${verb}`, body);
        Jido.report(composer, null);
      } catch (error) {
        Jido.report(composer, error);
      }
    });
  action("cancel", "cancel", { reason: "cancelled from the console" });
  action("resume", "resume");
})();

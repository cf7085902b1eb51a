// A PRD's page: its loop's events live (the gateway's SSE route over the JIDO_PRD stream; the
// browser's EventSource resumes after the last event's seq by itself), the stories' and the
// loop's state as they change, the last checks, and run / pause / resume / stop.
// Every value from an event is shown as text (Jido.el), never as HTML.
"use strict";

(() => {
  const { el, api, preview } = Jido;
  const project = document.body.dataset.project;
  const prd = document.body.dataset.prd;
  const base = `/api/projects/${Jido.path(project, "prds", prd)}`;
  const list = document.getElementById("prd-events");
  const stateBadge = document.getElementById("loop-state");
  const storyLine = document.getElementById("loop-story");
  const checks = document.getElementById("checks");
  const controls = document.getElementById("loop-controls");
  const MAX_ITEMS = 2000; // the page keeps the newest events only
  let assistant = null; // the assistant text being streamed

  function add(node, event, kind) {
    node.dataset.seq = event.data.seq;
    node.dataset.type = event.type;
    if (kind) node.classList.add(kind);
    list.append(node);
    while (list.childElementCount > MAX_ITEMS) list.firstElementChild.remove();
    node.scrollIntoView({ block: "nearest" });
    return node;
  }

  function line(event, kind, ...parts) {
    assistant = null;
    return add(el("li", {}, ...parts), event, kind);
  }

  function setState(state) {
    stateBadge.textContent = state;
    stateBadge.className = `badge ${state}`;
  }

  function setStory(data) {
    storyLine.textContent = data.story_id ? `story ${data.story_id} · attempt ${data.attempt}` : "";
  }

  function setStoryState(id, state) {
    for (const item of document.querySelectorAll("#stories li[data-story-id]")) {
      if (item.dataset.storyId !== id) continue;
      item.className = `story ${state}`;
      const badge = item.querySelector(".badge");
      badge.textContent = state;
      badge.className = `badge ${state}`;
    }
  }

  function showChecks(data) {
    checks.replaceChildren(
      el("p", { class: data.ok ? "good" : "bad" }, `story ${data.story_id} attempt ${data.attempt}: checks ${data.ok ? "passed" : "failed"}`),
      ...data.checks.map((c) =>
        el(
          "div",
          {},
          `${c.ok ? "✓" : "✗"} ${c.command} (${c.timed_out ? "timed out" : `exit ${c.exit_code}`}, ${Number(c.duration_s).toFixed(1)}s)`,
          c.ok || !c.output ? null : el("pre", {}, preview(c.output, 4000)),
        ),
      ),
    );
  }

  /** A tool's input on one line: key=value, … (values cut by preview). */
  const args = (input) =>
    Object.entries(input || {})
      .map(([key, value]) => `${key}=${typeof value === "string" ? value : JSON.stringify(value)}`)
      .join(", ");

  const render = {
    "prd.loop.state_changed": (e, d) => {
      setState(d.to_state);
      if (["completed", "stopped", "error"].includes(d.to_state)) setStory({});
      line(e, d.to_state === "error" || d.to_state === "stopped" ? "bad" : "", `loop ${d.from_state} → ${d.to_state}${d.reason ? `: ${d.reason}` : ""}`);
    },
    "prd.story.state_changed": (e, d) => {
      setStoryState(d.story_id, d.to_state);
      line(e, d.to_state === "passed" ? "good" : "", `story ${d.story_id}: ${d.from_state} → ${d.to_state}`);
    },
    "prd.iteration_started": (e, d) => {
      setStory(d);
      line(e, "header", `story ${d.story_id} · attempt ${d.attempt}${d.provider ? ` · ${d.provider}` : ""}${d.model ? `/${d.model}` : ""}`);
    },
    "prd.assistant_text": (e, d) => {
      if (!assistant) assistant = add(el("li", { class: "assistant" }), e);
      assistant.append(document.createTextNode(d.text));
    },
    "prd.tool_started": (e, d) => line(e, "tool", `⏺ ${d.tool}(${preview(args(d.input), 200)})`),
    "prd.tool_finished": (e, d) => line(e, d.ok ? "tool" : "bad", `${d.ok ? "✓" : "✗"} ${d.tool}${d.output ? `: ${preview(d.output, 200)}` : ""}`),
    "prd.command_output": (e, d) =>
      line(e, "command", `${d.source === "check" ? "check" : "$"} ${d.command}${d.exit_code === null || d.exit_code === undefined ? "" : ` → exit ${d.exit_code}`}`, d.text ? el("pre", {}, preview(d.text, 4000)) : null),
    "prd.iteration_finished": (e, d) => line(e, d.ok ? "good" : "bad", `iteration ${d.ok ? "done" : "failed"} in ${Number(d.duration_s).toFixed(1)}s${d.summary ? `: ${d.summary}` : ""}`),
    "prd.quality.report": (e, d) => {
      showChecks(d);
      line(e, d.ok ? "good" : "bad", `checks ${d.ok ? "passed" : "failed"} (${d.checks.length})`);
    },
    "prd.git.committed": (e, d) => line(e, "good", `committed ${String(d.commit).slice(0, 12)}${d.branch ? ` on ${d.branch}` : ""}: ${String(d.message).split("\n")[0]}`),
    "prd.retry.scheduled": (e, d) => line(e, "", `retry in ${d.delay_s}s: ${d.reason}`),
    "prd.error": (e, d) => line(e, "bad", `error (${d.kind})${d.retryable ? " (will retry)" : ""}: ${d.message}`),
  };

  Jido.stream(`${base}/events`, Jido.eventTypes(), (event) => {
    const show = render[event.type];
    if (show && event.data) show(event, event.data);
  });

  for (const button of controls.querySelectorAll("button[data-verb]")) {
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        const loop = await api("POST", `${base}/${button.dataset.verb}`, {});
        setState(loop.state);
        Jido.report(controls, null);
      } catch (error) {
        Jido.report(controls, error);
      } finally {
        button.disabled = false;
      }
    });
  }
})();

// The bus view: every event as it happens (live only), filtered by project, conversation and
// type (the form reloads the page with the filter in the query; the gateway filters the stream).
"use strict";

(() => {
  const { el, preview, clock } = Jido;
  const MAX_ROWS = 500; // older rows are dropped so a busy bus never grows the page without bound
  const rows = document.getElementById("events");
  const count = document.getElementById("count");
  const pause = document.getElementById("pause");
  let seen = 0;

  // the one-line summary leaves out what the row's columns already say
  const SAID = new Set(["project_id", "conversation_id", "correlation_id"]);
  const brief = (data) =>
    data && typeof data === "object" && !Array.isArray(data)
      ? JSON.stringify(Object.fromEntries(Object.entries(data).filter(([key]) => !SAID.has(key))))
      : data;

  const filters = new URLSearchParams();
  for (const name of ["project", "conversation", "type"]) {
    const value = document.getElementById("filters").elements[name].value.trim();
    if (value) filters.set(name, value);
  }

  Jido.stream(`/api/events?${filters}`, Jido.eventTypes(), (event) => {
    if (pause.checked) return;
    seen += 1;
    count.textContent = seen;
    const data = preview(event.data, 4000);
    const summary = preview(brief(event.data), 160).split("\n").join(" ");
    const row = el(
      "tr",
      { "data-type": event.type, "data-event-id": event.id },
      el("td", {}, el("time", { datetime: event.time }, clock(event.time))),
      el("td", { class: "type" }, event.type),
      el("td", {}, event.projectid || (event.data && event.data.project_id) || ""),
      el("td", {}, event.conversationid || (event.data && event.data.conversation_id) || ""),
      el("td", {}, el("details", {}, el("summary", {}, summary), el("pre", {}, data))),
    );
    rows.prepend(row);
    while (rows.rows.length > MAX_ROWS) rows.deleteRow(-1);
  });

  document.getElementById("clear").addEventListener("click", () => {
    rows.replaceChildren();
    seen = 0;
    count.textContent = "0";
  });
})();

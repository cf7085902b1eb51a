// The projects page and a project's page: start and stop projects, start conversations.
"use strict";

(() => {
  const consoleBase = document.body.dataset.base;

  const startProject = document.getElementById("start-project");
  if (startProject) {
    startProject.addEventListener("submit", async (event) => {
      event.preventDefault();
      const root = startProject.elements.root.value.trim();
      try {
        const info = await Jido.api("POST", "/api/projects", { root });
        Jido.report(startProject, null);
        window.location.assign(`${consoleBase}/projects/${Jido.path(info.project_id)}`);
      } catch (error) {
        Jido.report(startProject, error);
      }
    });
  }

  for (const button of document.querySelectorAll("button.stop-project")) {
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        await Jido.api("POST", `/api/projects/${Jido.path(button.dataset.project)}/stop`);
        window.location.reload();
      } catch (error) {
        button.disabled = false;
        button.title = error.message;
      }
    });
  }

  const startConversation = document.getElementById("start-conversation");
  if (startConversation) {
    const project = document.body.dataset.project;
    startConversation.addEventListener("submit", async (event) => {
      event.preventDefault();
      const wanted = startConversation.elements.conversation_id.value.trim();
      try {
        const info = await Jido.api(
          "POST",
          `/api/projects/${Jido.path(project)}/conversations`,
          wanted ? { conversation_id: wanted } : {},
        );
        window.location.assign(
          `${consoleBase}/projects/${Jido.path(project, "conversations", info.conversation_id)}`,
        );
      } catch (error) {
        Jido.report(startConversation, error);
      }
    });
  }
})();

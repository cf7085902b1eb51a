"""JidoCode services: one package per process (engine, project, conversation, tool_runner, asset_loader)."""

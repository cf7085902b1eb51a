from jidocode.services.tool_runner.service import serve
from jidocode.shared.runner import run_service

run_service("tool_runner", serve)

from jidocode.services.engine.service import serve
from jidocode.shared.runner import run_service

run_service("engine", serve)

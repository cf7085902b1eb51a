from jidocode.services.gateway.service import serve
from jidocode.shared.runner import run_service

run_service("gateway", serve)

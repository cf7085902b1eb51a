from jidocode.services.project.service import serve
from jidocode.shared.runner import run_service

run_service("project", serve)

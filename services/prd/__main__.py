from jidocode.services.prd.service import serve
from jidocode.shared.runner import run_service

run_service("prd", serve)

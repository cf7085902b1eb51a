from jidocode.services.asset_loader.service import serve
from jidocode.shared.runner import run_service

run_service("asset_loader", serve)

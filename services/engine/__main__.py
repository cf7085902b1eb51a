from jidocode.cli.serve import run_service

run_service("engine")

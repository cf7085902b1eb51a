from jidocode.services.conversation.service import serve
from jidocode.shared.runner import run_service

run_service("conversation", serve)

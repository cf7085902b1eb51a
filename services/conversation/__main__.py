from jidocode.services.conversation.llm.adapter import load_litellm
from jidocode.services.conversation.service import serve
from jidocode.shared.runner import run_service

run_service("conversation", serve, warm=load_litellm)

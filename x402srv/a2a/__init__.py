"""A2A 0.3.0 JSON-RPC with the a2a-x402 extension: buying a plan over A2A.

An adapter, like the HTTP routes: it reads JSON-RPC, calls the same
``AccessPipeline.access`` the x402 route calls, and shows the pipeline's
answers as A2A tasks with x402 metadata. Modules, outside in:

    endpoint    HTTP <-> JSON-RPC (Sanic responses, extension header echo)
    jsonrpc     envelopes and error codes
    service     the methods: message/send, tasks/get, tasks/cancel
    intent      what a client's message asks for
    wire        the A2A params we read
    outcomes    THE table: pipeline answer -> task state and x402 metadata
    extension   the extension's keys, statuses and error codes (reason table)
    repository  tasks in the configured store, compare-and-set on their version
    documents   the stored task and the A2A JSON it is shown as
"""

from .endpoint import A2AEndpoint
from .jsonrpc import sniff_envelope
from .service import A2AService

__all__ = ["A2AEndpoint", "A2AService", "sniff_envelope"]

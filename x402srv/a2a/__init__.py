"""A2A JSON-RPC (0.3 and 1.0) with the a2a-x402 extension: buying a plan over A2A.

An adapter, like the HTTP routes: it reads JSON-RPC, calls the same
``AccessPipeline.access`` the x402 route calls, and shows the pipeline's
answers as A2A tasks with x402 metadata. Modules, outside in:

    endpoint      HTTP <-> JSON-RPC (Sanic responses, SSE, extension header echo)
    jsonrpc       envelopes and error codes
    versions      0.3 or 1.0 for a request (A2A-Version), and each version's method names
    v1            1.0 JSON <-> the 0.3 JSON the rest speaks
    service       the methods
    conversation  what each message does to a task (start, plan, pay, cancel, refresh)
    streams       message/stream and tasks/resubscribe: a task's events, from the store
    progress      settlement steps observed on the pipeline, for the task being paid
    intent        what a client's message asks for
    wire          the A2A params we read
    outcomes      THE table: pipeline answer -> task state and x402 metadata
    extension     the extension's keys, statuses and error codes (reason table)
    repository    tasks in the configured store, compare-and-set on their version
    documents     the stored task and its log
    render        the A2A 0.3 JSON a task is shown as
"""

from x402srv.a2a.endpoint import A2AEndpoint
from x402srv.a2a.jsonrpc import sniff_envelope
from x402srv.a2a.service import A2AService

__all__ = ["A2AEndpoint", "A2AService", "sniff_envelope"]

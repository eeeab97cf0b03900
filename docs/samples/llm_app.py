"""A FastAPI "LLM" that sells 1,000 completions for $1 (pip install "x402srv[asgi]").

x402srv serves the same seller.toml: it sells the plan and credits each purchase in the
store. This app spends the credits there, one per completion, before the model runs.
"""

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, Field
from starlette.types import Scope

from x402srv import AccessMiddleware, Meter, TokenVerifier, Usage, load_config

config = load_config("seller.toml")  # the same file x402srv serves
meter = Meter.from_config(config)  # the store x402srv credits: the sqlite file, or Redis


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with meter:  # opens the store in each worker
        yield


def cost(scope: Scope) -> int:
    return 5 if scope["path"] == "/v1/batch" else 1  # a batch of up to five costs five


app = FastAPI(lifespan=lifespan)
app.add_middleware(
    AccessMiddleware,
    verifier=TokenVerifier.from_config(config),
    paths=["/v1"],
    meter=meter,  # 402 CREDITS_EXHAUSTED / 429 before the model runs; RateLimit fields after
    cost=cost,
)


class Prompt(BaseModel):
    prompt: str = Field(max_length=4000)


def model(prompt: str) -> str:
    """Stands in for inference: deterministic, so the docs' tests can check its answers."""
    return f"{prompt.strip()} ... [{hashlib.sha256(prompt.encode()).hexdigest()[:8]}]"


@app.post("/v1/completions")
async def completion(body: Prompt, request: Request) -> dict[str, Any]:
    usage: Usage = request.state.x402_usage  # what this call spent and what is left
    return {"completion": model(body.prompt), "creditsLeft": usage.balance}


@app.post("/v1/batch")
async def batch(prompts: list[Prompt], request: Request) -> dict[str, Any]:
    usage: Usage = request.state.x402_usage
    return {
        "completions": [model(p.prompt) for p in prompts[:5]],
        "creditsLeft": usage.balance,
    }

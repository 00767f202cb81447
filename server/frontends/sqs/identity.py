"""sts:GetCallerIdentity on the SQS endpoint: AWS tools and test suites ask it for the account id
(as they ask LocalStack and moto), so the endpoint answers it with the account of its queue URLs
and ARNs (`serve --sqs-account-id`). The request is STS's query protocol (Action=GetCallerIdentity,
signed for service `sts` or `sqs`); the answer is STS's XML."""

from __future__ import annotations

from typing import Any

from .params import Context

ACTION = "GetCallerIdentity"
NAMESPACE = "https://sts.amazonaws.com/doc/2011-06-15/"


async def get_caller_identity(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    """The principal of the auth policy the request was signed for (an IAM user of that name),
    or the account's root without a policy."""
    if ctx.principal is None:
        return {
            "Arn": f"arn:aws:iam::{ctx.account}:root",
            "UserId": ctx.account,
            "Account": ctx.account,
        }
    return {
        "Arn": f"arn:aws:iam::{ctx.account}:user/{ctx.principal.name}",
        "UserId": ctx.principal.name,
        "Account": ctx.account,
    }

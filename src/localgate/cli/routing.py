"""What ``localgate check`` says about routing: each route's chain and its attempts."""

from __future__ import annotations

import fnmatch

from localgate.config import DEFAULT_UPSTREAM, RouteSettings, Settings

__all__ = ["describe_routes"]


def describe_routes(settings: Settings) -> list[str]:
    """One line per route (and the default), naming where requests go and the most
    attempts one request can make there; then the largest of those."""
    lines = []
    worst = settings.max_attempts_of(None)
    for index, route in enumerate(settings.routes):
        attempts = settings.max_attempts_of(route)
        worst = max(worst, attempts)
        who = f" for tenants {', '.join(route.tenants)}" if route.tenants else ""
        model = f" as {route.model}" if route.model else ""
        lines.append(
            f"route {index}: {', '.join(route.models)}{who}{model} -> "
            f"{' -> '.join(route.chain)}; at most {attempts} attempt(s)"
            f"{_unredacted(settings, route.chain)}"
        )
        total = sum(side.weight for side in route.split)
        for side in route.split:
            share = f"{100 * side.weight / total:g}%"
            as_model = f" as {side.model or route.model}" if side.model or route.model else ""
            lines.append(
                f"  split {share} (sticky per {route.sticky}){as_model} -> "
                f"{' -> '.join(route.chain_of(side))}{_unredacted(settings, route.chain_of(side))}"
            )
        if route.retry_low_confidence_on is not None:
            # A low-confidence unary answer is asked again, routed as its own model.
            # The dispatcher counts the request's attempts across both calls: the stronger
            # model's call makes one attempt at least, more while the total is below its
            # route's limit.
            again = settings.max_attempts_of(_route_of(settings, route.retry_low_confidence_on))
            in_all = max(attempts + 1, again)
            worst = max(worst, in_all)
            threshold = route.min_avg_logprob
            if threshold is None:
                threshold = settings.quality.min_avg_logprob
            below = f"below avg logprob {threshold:g}" if threshold is not None else "never"
            lines.append(
                f"  low confidence ({below}): asked again of {route.retry_low_confidence_on}; "
                f"at most {in_all} attempt(s) in all"
            )
    lines.append(
        f"other models -> {DEFAULT_UPSTREAM}; at most {settings.max_attempts_of(None)} attempt(s)"
    )
    for tenant, tenant_settings in settings.tenants.items():
        if tenant_settings.upstreams is not None:
            lines.append(
                f"tenant {tenant} may reach only: {', '.join(tenant_settings.upstreams) or 'none'}"
            )
    lines.append(f"a request makes at most {worst} upstream attempt(s)")
    return lines


def _unredacted(settings: Settings, chain: tuple[str, ...]) -> str:
    """A note when requests on ``chain`` are not redacted (every upstream in-house with
    ``redaction: false``; docs/openai-upstreams.md)."""
    named = settings.upstreams
    if all(name in named and not named[name].redaction for name in chain):
        return "; NOT redacted (every upstream in-house with redaction: false)"
    return ""


def _route_of(settings: Settings, model: str) -> RouteSettings | None:
    """The first route whose models match ``model`` (tenants aside)."""
    for route in settings.routes:
        if any(fnmatch.fnmatch(model.lower(), glob.lower()) for glob in route.models):
            return route
    return None

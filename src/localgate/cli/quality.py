"""``localgate quality report``: the quality signals of a running gateway.

Reads the gateway's ``/metrics`` (the figures Prometheus scrapes: drift per model
version, low-confidence counts, prompt similarity per tenant) and prints them as a
table or, with ``--json``, as one JSON object. The gateway computes the figures when
asked, so the report is the picture at that moment. Counters count since the gateway
started; each process has its own windows, so behind a load balancer ask each replica
(``--url``) or read the gauges in Prometheus.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click
from prometheus_client.parser import text_string_to_metric_families

from localgate.cli.options import config_option, group_config_option, load_or_exit

__all__ = ["build_report", "quality"]


@click.group()
@group_config_option
def quality() -> None:
    """Quality signals of a running gateway: drift and low-confidence answers."""


@quality.command()
@config_option
@click.option(
    "--url",
    default=None,
    help="The gateway's base URL (default: server.host and server.port of the configuration).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def report(config_path: Path | None, url: str | None, as_json: bool) -> None:
    """Print the current quality picture: each model version's reference and recent
    windows and their divergence, low-confidence answers per model, prompt similarity
    per watched tenant (docs/quality.md)."""
    if url is None:
        settings, _ = load_or_exit(config_path)
        host = settings.server.host
        if host in ("0.0.0.0", "", "::"):  # noqa: S104 - the wildcard address, read not bound
            host = "127.0.0.1"
        url = (
            f"http://[{host}]:{settings.server.port}"
            if ":" in host
            else f"http://{host}:{settings.server.port}"
        )
    base = url.rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:  # noqa: S310 - an operator's own gateway URL
            text = response.read().decode()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        click.echo(
            f"localgate: could not read {base}/metrics ({exc}); is the gateway running?", err=True
        )
        sys.exit(2)
    found = build_report(text)
    found["gateway"] = base
    if as_json:
        click.echo(json.dumps(found, indent=2, sort_keys=True))
    else:
        click.echo(_text(found))


def build_report(metrics_text: str) -> dict[str, Any]:
    """The quality picture from a /metrics exposition."""
    series: dict[tuple[str, str], dict[str, Any]] = {}
    confidence: dict[str, dict[str, Any]] = {}
    prompts: dict[str, dict[str, Any]] = {}

    def one(labels: dict[str, str]) -> dict[str, Any]:
        key = (labels["model"], labels["model_version"])
        entry = series.get(key)
        if entry is None:
            entry = series[key] = {
                "model": key[0],
                "model_version": key[1],
                "windows": {},
                "drift": {},
                "avg_logprob_shift": {},
            }
        return entry

    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if name == "localgate_quality_window_answers":
                one(labels)["windows"].setdefault(labels["window"], {})["answers"] = int(value)
            elif name == "localgate_quality_refusal_ratio":
                one(labels)["windows"].setdefault(labels["window"], {})["refusal_ratio"] = value
            elif name == "localgate_quality_avg_logprob":
                one(labels)["windows"].setdefault(labels["window"], {})["avg_logprob"] = value
            elif name == "localgate_quality_drift":
                one(labels)["drift"].setdefault(labels["against"], {})[labels["signal"]] = value
            elif name == "localgate_quality_avg_logprob_shift":
                one(labels)["avg_logprob_shift"][labels["against"]] = value
            elif name in (
                "localgate_quality_answers_scored_total",
                "localgate_quality_low_confidence_answers_total",
            ):
                entry = confidence.setdefault(
                    labels["model"], {"scored": 0, "low": 0, "retries": {}}
                )
                entry["scored" if "scored" in name else "low"] = int(value)
            elif name == "localgate_quality_low_confidence_retries_total":
                entry = confidence.setdefault(
                    labels["model"], {"scored": 0, "low": 0, "retries": {}}
                )
                entry["retries"][labels["result"]] = int(value)
            elif name in (
                "localgate_quality_prompt_samples",
                "localgate_quality_prompt_similarity",
            ):
                entry = prompts.setdefault(
                    labels["tenant"], {"tenant": labels["tenant"], "samples": {}, "similarity": {}}
                )
                kind = "samples" if name.endswith("samples") else "similarity"
                entry[kind][labels["window"]] = int(value) if kind == "samples" else value
    for entry in confidence.values():
        entry["low_ratio"] = entry["low"] / entry["scored"] if entry["scored"] else None
    return {
        "series": [series[key] for key in sorted(series)],
        "confidence": confidence,
        "prompts": [prompts[tenant] for tenant in sorted(prompts)],
    }


def _text(found: dict[str, Any]) -> str:
    lines = [f"Quality signals of {found['gateway']} (docs/quality.md)", ""]
    if not found["series"]:
        lines.append("Drift: no answers counted yet (or quality.drift.enabled is false).")
    for entry in found["series"]:
        windows = entry["windows"]
        reference, recent = windows.get("reference", {}), windows.get("recent", {})
        lines.append(f"{entry['model']} (version {entry['model_version'] or 'not given'})")
        for name, window in (("reference", reference), ("recent", recent)):
            parts = [f"{window.get('answers', 0)} answers"]
            if "refusal_ratio" in window:
                parts.append(f"refused {window['refusal_ratio']:.1%}")
            if "avg_logprob" in window:
                parts.append(f"avg logprob {window['avg_logprob']:.3f}")
            lines.append(f"  {name:<10} {', '.join(parts)}")
        if not entry["drift"]:
            lines.append(
                "  drift      not shown yet: the reference is not complete "
                "(quality.drift.reference_answers) or the recent window holds fewer than "
                "quality.drift.min_answers answers"
            )
        for against, signals in sorted(entry["drift"].items()):
            shown = ", ".join(f"{signal} {value:.3f}" for signal, value in sorted(signals.items()))
            shift = entry["avg_logprob_shift"].get(against)
            if shift is not None:
                shown += f", avg logprob shift {shift:+.3f}"
            lines.append(f"  vs {against}: JS divergence (bits) {shown}")
    lines.append("")
    if found["confidence"]:
        lines.append("Low-confidence answers (since the gateway started):")
        for model, entry in sorted(found["confidence"].items()):
            ratio = f" ({entry['low_ratio']:.1%})" if entry["low_ratio"] is not None else ""
            retried = ", ".join(
                f"{result} {count}" for result, count in sorted(entry["retries"].items())
            )
            lines.append(
                f"  {model}: {entry['low']} of {entry['scored']} scored{ratio}"
                + (f"; retried on a stronger model: {retried}" if retried else "")
            )
    else:
        lines.append("Low-confidence answers: none scored (no threshold set, or no avgLogprobs).")
    for entry in found["prompts"]:
        similarity = ", ".join(
            f"{window} {value:.3f}" for window, value in sorted(entry["similarity"].items())
        )
        samples = ", ".join(
            f"{window} {count}" for window, count in sorted(entry["samples"].items())
        )
        lines.append(
            f"Prompts of tenant {entry['tenant']}: samples {samples}; similarity to the "
            f"reference centroid {similarity or 'not yet'}"
        )
    return "\n".join(lines)

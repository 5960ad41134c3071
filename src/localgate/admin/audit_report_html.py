"""The auditor's report as one self-contained HTML document (and PDF, via WeasyPrint).

The document carries its styles and its charts (SVG drawn by matplotlib, embedded as
data: URIs): no script, no network, nothing to fetch. Only the colophon's generation time
changes between two runs over the same period and log; charts are drawn with a fixed
hash salt and no date, so they are byte-identical too.
"""

from __future__ import annotations

import base64
import io
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

import jinja2

from localgate.admin.audit_report import ACCESS_RECORDED_SINCE, REFUSALS, ReportFigures
from localgate.audit.records import ADMIN_LOG

__all__ = ["Rendering", "render_html", "render_pdf"]

# A period with very many refusals lists this many (the counts are complete regardless).
REFUSALS_LISTED = 500
TEMPLATE = "audit_report.html.j2"  # beside this module; it names the fonts, Chinese first


# Refusals red, failures orange, answers blue and green: the same in every chart.
OUTCOME_COLOURS = {
    "forwarded": "#2e6db0",
    "served from cache": "#5fa55a",
    "upstream error": "#e0a030",
    "client disconnected": "#888888",
    "internal error": "#7b52ab",
    **dict.fromkeys(sorted(REFUSALS), "#b03a2e"),
}


@dataclass(frozen=True, slots=True)
class Rendering:
    """How the document was made: stated in its colophon."""

    command: str
    version: str
    generated_at: datetime


def render_html(figures: ReportFigures, rendering: Rendering) -> str:
    """The whole report as one HTML document."""
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    source = resources.files("localgate.admin").joinpath(TEMPLATE).read_text(encoding="utf-8")
    template = environment.from_string(source)
    outcomes = figures.count("outcome")
    redaction = figures.redaction()
    return template.render(
        f=figures,
        r=rendering,
        outcomes=outcomes,
        refusals=REFUSALS,
        admin_log=ADMIN_LOG,
        access_since=ACCESS_RECORDED_SINCE,
        refused=figures.refused(),
        listed=REFUSALS_LISTED,
        blocked=sum(n for name, n in outcomes if name in REFUSALS),
        redaction=redaction,
        findings=sum(n for _, _, n in redaction),
        charts={
            "outcomes": _bar_chart("outcomes", outcomes, "requests"),
            "days": _day_chart(figures),
            "redaction": _redaction_chart(redaction),
        },
    )


def render_pdf(html: str) -> bytes:
    """The HTML report printed to PDF by WeasyPrint (needs Pango, and a CJK font)."""
    try:
        import weasyprint  # optional: the report-pdf extra and Pango
    except (ImportError, OSError) as exc:
        raise RuntimeError(
            "PDF output needs WeasyPrint and Pango: pip install 'localgate[report-pdf]' and "
            f"(Debian) apt-get install libpango-1.0-0 libpangoft2-1.0-0 ({exc})"
        ) from exc
    return bytes(weasyprint.HTML(string=html).write_pdf())


# -- charts ----------------------------------------------------------------------------


def _figure(height: float, *, counts_on: str = "x") -> tuple[Any, Any]:
    from matplotlib.backends.backend_svg import FigureCanvasSVG  # slow to import: only when drawing
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(7.0, height), dpi=72)
    FigureCanvasSVG(figure)
    axes = figure.add_subplot()
    # Counts are whole numbers; the other axis holds names or days.
    (axes.xaxis if counts_on == "x" else axes.yaxis).set_major_locator(MaxNLocator(integer=True))
    return figure, axes


def _svg(figure: Any, name: str) -> str:
    import matplotlib

    out = io.StringIO()
    # A fixed salt and no date: the same figures draw the same bytes. Text stays text
    # (the reader's fonts draw it) instead of glyph outlines.
    with matplotlib.rc_context(
        {"svg.hashsalt": f"localgate-report-{name}", "svg.fonttype": "none"}
    ):
        figure.savefig(out, format="svg", metadata={"Date": None}, bbox_inches="tight")
    encoded = base64.b64encode(out.getvalue().encode()).decode("ascii")
    return f"data:image/svg+xml;base64,{encoded}"


def _bar_chart(name: str, rows: list[tuple[str, int]], unit: str) -> str | None:
    if not rows:
        return None
    figure, axes = _figure(0.5 + 0.35 * len(rows))
    labels = [label for label, _ in rows][::-1]
    values = [value for _, value in rows][::-1]
    colours = [OUTCOME_COLOURS.get(label, "#2e6db0") for label in labels]
    bars = axes.barh(labels, values, color=colours)
    axes.bar_label(bars, padding=3)
    axes.set_xlabel(unit)
    axes.spines[["top", "right"]].set_visible(False)
    return _svg(figure, name)


def _day_chart(figures: ReportFigures) -> str | None:
    if not figures.by_day:
        return None
    days = sorted(figures.by_day)
    outcomes = sorted({name for counts in figures.by_day.values() for name in counts})
    figure, axes = _figure(2.6, counts_on="y")
    bottom = [0] * len(days)
    others = ["#7b52ab", "#888888", "#2aa5a5", "#8c6d31"]
    for index, outcome in enumerate(outcomes):
        heights = [figures.by_day[day].get(outcome, 0) for day in days]
        colour = OUTCOME_COLOURS.get(outcome, others[index % len(others)])
        axes.bar(days, heights, bottom=bottom, label=outcome, color=colour)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    axes.set_ylabel("requests")
    axes.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.spines[["top", "right"]].set_visible(False)
    axes.tick_params(axis="x", labelrotation=45, labelsize=8)
    return _svg(figure, "days")


def _redaction_chart(rows: list[tuple[str, str, int]]) -> str | None:
    if not rows:
        return None
    kinds = sorted({kind for kind, _, _ in rows})
    actions = sorted({action for _, action, _ in rows})
    counts = Counter({(kind, action): number for kind, action, number in rows})
    figure, axes = _figure(0.6 + 0.35 * len(kinds))
    left = [0] * len(kinds)
    palette = {"allow": "#b03a2e", "block": "#e0a030", "mask": "#5fa55a", "pseudonymize": "#2e6db0"}
    for action in actions:
        widths = [counts[(kind, action)] for kind in kinds]
        axes.barh(kinds, widths, left=left, label=action, color=palette.get(action, "#888888"))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.set_xlabel("findings")
    axes.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.spines[["top", "right"]].set_visible(False)
    return _svg(figure, "redaction")

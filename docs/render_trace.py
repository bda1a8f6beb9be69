"""Draw a Chrome trace (what ``Profiler.export_chrome_tracing`` writes) as a timeline PNG,
laid out as Perfetto and chrome://tracing show it: a track per thread, named on the
left; each call a labelled slice, the calls nested in it stacked below it; time on top.

    python docs/render_trace.py TRACE.json OUT.png [--around NAME] [--title TEXT]

``--around NAME`` shows the time of the first event called NAME (``ProfileStep#20``: one
training step) instead of the whole trace; ``--around "ProfileStep#*"`` picks, among
the events whose name starts so, the one of median duration (a typical step). Slices
too narrow for their name show the start of it, or nothing; a legend under the timeline
names the colours of the ops taking the most time (each its own colour). docs/profiling_trace.png is made by

    python examples/train_digits.py --epochs 1 --quiet --trace /tmp/digits.json
    python docs/render_trace.py /tmp/digits.json docs/profiling_trace.png \\
        --around "ProfileStep#*" --title "train_digits.py: one training step"
"""
from __future__ import annotations

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")   # files only: no display needed
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

ROW = 1.0          # height of one nesting level
TRACK_GAP = 0.6    # between two threads' tracks
RANGE_GREYS = ("#9a9a9a", "#b8b8b8")   # steps and user ranges: they hold the ops


def load(path: str) -> tuple[list[dict], dict[int, str]]:
    """The complete ("X") events and the thread names, by tid."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return [e for e in events if e.get("ph") == "X"], names


def focus_event(events: list[dict], around: str) -> dict:
    """The event called `around`, or of median duration among those starting with it
    when it ends in ``*``."""
    if around.endswith("*"):
        matches = sorted((e for e in events if e["name"].startswith(around[:-1])),
                         key=lambda e: e["dur"])
        found = matches[len(matches) // 2] if matches else None
    else:
        found = next((e for e in events if e["name"] == around), None)
    if found is None:
        raise SystemExit(f"render_trace: no event named {around!r} in the trace")
    return found


def window(events: list[dict], around: str | None) -> tuple[float, float, str | None]:
    """The time shown (µs) and the name of the event it is around."""
    if around is None:
        return min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events), None
    focus = focus_event(events, around)
    return focus["ts"], focus["ts"] + focus["dur"], focus["name"]


def depths(events: list[dict]) -> list[tuple[dict, int]]:
    """Each event of one thread with its nesting depth (calls on a thread nest)."""
    out, stack = [], []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1] < e["ts"] + e["dur"] - 1e-6:
            stack.pop()
        out.append((e, len(stack)))
        stack.append(e["ts"] + e["dur"])
    return out


def colours(events: list[dict]) -> tuple[dict[str, str], list[str]]:
    """A colour per name — distinct for the 20 names taking the most time (ranked), a
    grey for steps and user ranges — and those names, busiest first."""
    busy: dict[str, float] = {}
    for e in events:
        if e.get("cat") not in ("step", "user"):
            busy[e["name"]] = busy.get(e["name"], 0.0) + e["dur"]
    ranked = sorted(busy, key=busy.get, reverse=True)
    palette = plt.get_cmap("tab20").colors
    table = {name: palette[i % len(palette)] for i, name in enumerate(ranked)}
    for e in events:
        if e["name"] not in table:
            table[e["name"]] = RANGE_GREYS[e.get("cat") == "user"]
    return table, ranked


def fitted(name: str, width_pt: float) -> str:
    """`name`, or its start and an ellipsis, in `width_pt` points of 7 pt type ("" if
    not even a few letters fit)."""
    chars = int(width_pt / 5.2)
    if chars >= len(name):
        return name
    return name[:chars - 1] + "…" if chars >= 5 else ""


def render(path: str, out: str, around: str | None, title: str | None) -> None:
    events, thread_names = load(path)
    start, end, focus = window(events, around)
    visible = [e for e in events if e["ts"] < end and e["ts"] + e["dur"] > start]
    by_thread: dict[int, list[dict]] = {}
    for e in visible:
        by_thread.setdefault(e["tid"], []).append(e)
    colour, ranked = colours(visible)
    span_ms = (end - start) / 1e3
    fig_width = 16.0
    levels = {tid: depths(evs) for tid, evs in by_thread.items()}
    height = sum(max(d for _, d in lv) + 1 for lv in levels.values()) * ROW \
        + TRACK_GAP * len(levels)
    fig, ax = plt.subplots(figsize=(fig_width, 2.0 + 0.42 * height))
    points_per_ms = fig_width * 72 * 0.86 / span_ms         # width of the axes, roughly
    y, ticks, labels = 0.0, [], []
    for tid, leveled in levels.items():
        rows = max(d for _, d in leveled) + 1
        ticks.append(y + rows * ROW / 2)
        labels.append(f"{thread_names.get(tid, 'thread')}\n(tid {tid})")
        ax.add_patch(Rectangle((0, y - TRACK_GAP / 2), span_ms, rows * ROW + TRACK_GAP / 2,
                               color="#f3f3f3", zorder=0))
        for e, depth in leveled:
            x0 = max(e["ts"], start)
            x1 = min(e["ts"] + e["dur"], end)
            x, w = (x0 - start) / 1e3, (x1 - x0) / 1e3
            ax.add_patch(Rectangle((x, y + depth * ROW), w, ROW * 0.9,
                                   facecolor=colour[e["name"]], edgecolor="white",
                                   linewidth=0.3))
            label = fitted(e["name"], w * points_per_ms)
            if label:
                r, g, b = matplotlib.colors.to_rgb(colour[e["name"]])
                ax.text(x + w / 2, y + depth * ROW + ROW * 0.45, label, ha="center",
                        va="center", fontsize=7, clip_on=True,
                        color="black" if 0.3 * r + 0.59 * g + 0.11 * b > 0.6 else "white")
        y += rows * ROW + TRACK_GAP
    ax.set_xlim(0, span_ms)
    ax.set_ylim(y - TRACK_GAP / 2, -TRACK_GAP / 2)          # depth grows downwards
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("time (ms)" + (f" from the start of {focus}" if focus else ""),
                  fontsize=8)
    top = ranked[:12]
    ax.legend(handles=[Rectangle((0, 0), 1, 1, color=colour[n]) for n in top], labels=top,
              loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=4, fontsize=7,
              frameon=False)
    ax.tick_params(axis="x", labelsize=8)
    for side in ("right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    if title:
        fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace", help="a Chrome trace JSON file")
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("--around", metavar="NAME",
                        help="show the time of the first event of this name")
    parser.add_argument("--title", help="a title above the timeline")
    args = parser.parse_args(argv)
    render(args.trace, args.out, args.around, args.title)
    return 0


if __name__ == "__main__":
    sys.exit(main())

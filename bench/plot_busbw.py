#!/usr/bin/env python3
"""Draws bus bandwidth against message size from the RESULT lines of the benchmarks
(bench/run_collectives_bench.py --raw FILE, or any program using bench/harness.h): one figure
per (collective, ranks), one curve per implementation and transport, the median of the
rounds at each size (log-scaled size axis), with the spread of the rounds as a band.

With matplotlib (pinned in .venv-peers, made by bench/setup_peers.sh) it writes
COLLECTIVE_Nranks.svg and, where matplotlib's Agg backend is there, .png; without it (or with
--plain) a plain SVG of the same curves drawn by this script, no plotting library needed.

    .venv-peers/bin/python bench/plot_busbw.py results.raw [more.raw ...] --out docs/plots \
        [--title-suffix "..."]
"""

import argparse
import math
import os
import re
import statistics

RESULT = re.compile(r"^RESULT (.*)$")
# The tables' names for the implementations, and one colour each, the same in every figure.
NAMES = {"ronde": "ronde", "mpi": "OpenMPI", "mpich": "MPICH", "oneccl": "oneCCL",
         "gloo": "Gloo"}
IMPL_COLOURS = {"ronde": "#d62728", "mpi": "#1f77b4", "mpich": "#2ca02c", "oneccl": "#9467bd",
                "gloo": "#ff7f0e"}
# Shared memory solid, TCP dashed, oneCCL over its MPI ATL dash-dotted (same colour as oneCCL).
LINE_STYLES = {"shm": "-", "tcp": "--", "mpi": "-."}
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22"]
WIDTH, HEIGHT = 720, 440
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 40, 60


def read(paths):
    """(collective, ranks) -> (impl/transport) -> bytes -> [busbw GB/s of each round]."""
    series = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                match = RESULT.match(line.strip())
                if not match:
                    continue
                fields = dict(item.split("=", 1) for item in match.group(1).split())
                if "busbw" not in fields or fields.get("collective") == "memcpy":
                    continue
                figure = (fields["collective"], int(fields["ranks"]))
                curve = (fields["impl"], fields.get("transport", "-"))
                size = int(fields["bytes"])
                busbw = float(fields["busbw"].rstrip("GB/s"))
                series.setdefault(figure, {}).setdefault(curve, {}).setdefault(size, []).append(busbw)
    return series


def size_label(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            return f"{n >> shift}{unit}"
    return str(n)


def draw(title, curves):
    sizes = sorted({s for points in curves.values() for s in points})
    top = max(statistics.median(v) for points in curves.values() for v in points.values())
    top = max(top, 1e-3)
    step = 10 ** math.floor(math.log10(top / 4))
    step *= 5 if top / step > 20 else (2 if top / step > 8 else 1)
    y_max = math.ceil(top / step) * step
    x_lo, x_hi = math.log2(sizes[0]), math.log2(sizes[-1]) if len(sizes) > 1 else math.log2(sizes[0]) + 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(size):
        return LEFT + (math.log2(size) - x_lo) / (x_hi - x_lo) * plot_w

    def y(value):
        return TOP + plot_h - value / y_max * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT}" y="22" font-size="15">{title}</text>']
    value = 0.0
    while value <= y_max + 1e-9:
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y(value) + 4:.1f}" text-anchor="end">{value:g}</text>')
        value += step
    for size in sizes:
        out.append(f'<line x1="{x(size):.1f}" x2="{x(size):.1f}" y1="{TOP}" y2="{TOP + plot_h}" '
                   f'stroke="#eee"/>')
        out.append(f'<text x="{x(size):.1f}" y="{TOP + plot_h + 18}" '
                   f'text-anchor="middle">{size_label(size)}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 15}" text-anchor="middle">'
               f'message size (bytes)</text>')
    out.append(f'<text x="18" y="{TOP + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {TOP + plot_h / 2})">bus bandwidth (GB/s)</text>')
    for i, (key, points) in enumerate(sorted(curves.items())):
        name = curve_name(key)
        colour = IMPL_COLOURS.get(key[0], COLOURS[i % len(COLOURS)])
        path = " ".join(f"{x(s):.1f},{y(statistics.median(points[s])):.1f}" for s in sorted(points))
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for s in sorted(points):
            out.append(f'<circle cx="{x(s):.1f}" cy="{y(statistics.median(points[s])):.1f}" r="3" '
                       f'fill="{colour}"/>')
        ly = TOP + 14 + 20 * i
        out.append(f'<line x1="{WIDTH - RIGHT + 15}" x2="{WIDTH - RIGHT + 40}" y1="{ly}" y2="{ly}" '
                   f'stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{WIDTH - RIGHT + 46}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def curve_name(key):
    """("mpich", "shm") -> "MPICH shm"; Gloo has only TCP, so its transport is left off."""
    impl, transport = key
    name = NAMES.get(impl, impl)
    return name if transport == "-" or impl == "gloo" else f"{name} {transport}"


def curve_order(key):
    """ronde first, then the peers; shared memory before TCP."""
    impl, transport = key
    order = list(NAMES)
    return (order.index(impl) if impl in order else len(order), impl, transport != "shm",
            transport)


def load_matplotlib():
    """matplotlib's pyplot on the Agg backend (no display), and whether PNG can be written;
    None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    try:
        matplotlib.use("Agg")
        png = True
    except (ImportError, ValueError):
        png = False
    import matplotlib.pyplot as plt
    # Text as text, not glyph outlines: a tenth of the size, and searchable.
    matplotlib.rcParams["svg.fonttype"] = "none"
    matplotlib.rcParams["svg.hashsalt"] = "ronde"  # the same ids in every run: quiet diffs
    return plt, png


def draw_matplotlib(plt, title, curves, base, png):
    """One figure as base.svg (and base.png), a colour per implementation, a line style per
    transport (LINE_STYLES)."""
    figure, axes = plt.subplots(figsize=(8, 5))
    sizes = sorted({s for points in curves.values() for s in points})
    for key in sorted(curves, key=curve_order):
        points = curves[key]
        xs = sorted(points)
        median = [statistics.median(points[s]) for s in xs]
        style = LINE_STYLES.get(key[1], "-")
        width = 2.6 if key[0] == "ronde" else 1.6
        colour = IMPL_COLOURS.get(key[0])
        line, = axes.plot(xs, median, style, marker="o", markersize=3.5, linewidth=width,
                          color=colour, label=curve_name(key))
        if any(len(points[s]) > 1 for s in xs):
            axes.fill_between(xs, [min(points[s]) for s in xs], [max(points[s]) for s in xs],
                              color=line.get_color(), alpha=0.12, linewidth=0)
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [size_label(s) for s in sizes])
    axes.minorticks_off()
    axes.set_ylim(bottom=0)
    axes.set_xlabel("message size (bytes)")
    axes.set_ylabel("bus bandwidth (GB/s)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    figure.tight_layout()
    written = [base + ".svg"]
    figure.savefig(written[0])
    if png:
        written.append(base + ".png")
        figure.savefig(written[1], dpi=110)
    plt.close(figure)
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", nargs="+", help="files of RESULT lines")
    parser.add_argument("--out", default="docs/plots", help="directory for the figures")
    parser.add_argument("--title-suffix", default="", help="e.g. the machine and load average")
    parser.add_argument("--plain", action="store_true",
                        help="the plain SVG drawer even where matplotlib is installed")
    args = parser.parse_args()
    series = read(args.raw)
    if not series:
        raise SystemExit(f"no RESULT lines with busbw in {', '.join(args.raw)}")
    os.makedirs(args.out, exist_ok=True)
    plotting = None if args.plain else load_matplotlib()
    if plotting is None and not args.plain:
        print("# matplotlib not found: plain SVG only (bench/setup_peers.sh makes .venv-peers "
              "with it)", flush=True)
    for (collective, ranks), curves in sorted(series.items()):
        base = os.path.join(args.out, f"{collective}_{ranks}ranks")
        title = f"{collective}, {ranks} ranks{args.title_suffix}"
        if plotting is not None:
            for path in draw_matplotlib(plotting[0], title, curves, base, plotting[1]):
                print(path)
            continue
        with open(base + ".svg", "w") as f:
            f.write(draw(title, curves))
        print(base + ".svg")


if __name__ == "__main__":
    main()

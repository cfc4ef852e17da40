#!/usr/bin/env python3
"""Folds `perf script` output into stacks and draws a flame graph SVG (no dependencies).

    perf record -F 499 -g --call-graph dwarf -p <pid> -- sleep 20
    perf script | python3 scripts/flamegraph.py --title "origin under bench" > out.svg

`--folded` prints the folded stacks (`frame;frame;frame count`) instead of the SVG. Frames are
function names as perf resolved them (Rust hashes and generic arguments trimmed), root first.
"""

import argparse
import collections
import html
import re
import sys


def strip_generics(sym):
    out, depth = [], 0
    for ch in sym:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip() or sym


def trim(sym):
    sym = re.sub(r"::h[0-9a-f]{16}$", "", sym)
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    # `<a::B<T> as c::D>::f` -> `a::B::f` (the implementing type, not the trait).
    if sym.startswith("<"):
        depth = 0
        for i, ch in enumerate(sym):
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
                if depth == 0:
                    inner, rest = sym[1:i], sym[i + 1 :]
                    break
        else:
            inner, rest = sym, ""
        d, cut = 0, None
        for i, ch in enumerate(inner):
            if ch == "<":
                d += 1
            elif ch == ">":
                d -= 1
            elif d == 0 and inner.startswith(" as ", i):
                cut = i
                break
        sym = (inner[:cut] if cut is not None else inner) + rest
    # Drop generic arguments, keep the path: `a::b<T>::c` -> `a::b::c` (names perf cut short
    # leave unbalanced brackets: cut at the first stray one).
    return re.split(r"[,>]", strip_generics(sym))[0].strip() or sym


def fold(lines):
    stacks = collections.Counter()
    frames, comm = [], None
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if frames:
                stacks[";".join([comm] + list(reversed(frames)))] += 1
            frames, comm = [], None
            continue
        if not line.startswith((" ", "\t")):
            comm = line.split()[0] if line.split() else "?"
            continue
        parts = line.strip().split(None, 1)
        if len(parts) < 2:
            continue
        sym = parts[1]
        sym = re.sub(r"\s+\([^()]*\)$", "", sym)
        if sym == "[unknown]":
            continue
        frames.append(trim(sym))
    if frames:
        stacks[";".join([comm] + list(reversed(frames)))] += 1
    return stacks


def color(name):
    h = sum(ord(c) for c in name)
    if "alloc" in name or "malloc" in name or "free" in name or "mi_" in name:
        return "rgb(60,150,230)"
    return "rgb(%d,%d,%d)" % (205 + h % 50, 80 + h % 120, 40 + h % 40)


def svg(stacks, title, width=1600, row=16):
    tree = {}
    for stack, n in stacks.items():
        node = tree
        for frame in stack.split(";"):
            child = node.setdefault(frame, [0, {}])
            child[0] += n
            node = child[1]
    total = sum(stacks.values()) or 1
    rects = []

    def depth_of(node):
        return 1 + max((depth_of(c[1]) for c in node.values()), default=0)

    depth = depth_of(tree)
    height = (depth + 3) * row

    def walk(node, x, level):
        for name, (n, children) in sorted(node.items()):
            w = n / total * (width - 20)
            if w >= 3.0:
                y = height - (level + 2) * row
                pct = 100.0 * n / total
                label = html.escape(name)
                text = ""
                chars = int(w / 7)
                if chars >= 3:
                    shown = name if len(name) <= chars else name[: chars - 2] + ".."
                    text = '<text x="%.1f" y="%d">%s</text>' % (x + 3, y + row - 4, html.escape(shown))
                rects.append(
                    '<g><title>%s (%d samples, %.2f%%)</title><rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" rx="2"/>%s</g>'
                    % (label, n, pct, x, y, w, row - 1, color(name), text)
                )
                walk(children, x, level + 1)
            x += w

    walk(tree, 10.0, 0)
    head = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="monospace" font-size="11">'
        '<rect width="100%%" height="100%%" fill="#fdfdf5"/>'
        '<text x="10" y="16" font-size="14">%s (%d samples; hover a frame for its share; blue = allocator)</text>'
        % (width, height, html.escape(title), total)
    )
    return head + "".join(rects) + "</svg>\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--title", default="flame graph")
    ap.add_argument("--folded", action="store_true")
    args = ap.parse_args()
    stacks = fold(sys.stdin)
    if args.folded:
        for stack, n in stacks.most_common():
            print(stack, n)
    else:
        sys.stdout.write(svg(stacks, args.title))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""tests/scripts/test_render_persistent_timeline.py - scripts/render_persistent_timeline.py
on a made-up timeline: the picture holds a bar pair per instruction, the summary the right
counts and means, the chain of a layer the right spans, works and handovers, and stamps
out of order are refused."""

import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "render_persistent_timeline.py")
HEADER = "instruction,block,op,layer,what,taken_up_ns,ready_ns,done_ns\n"


def run(directory, text, *flags):
    timeline = os.path.join(directory, "step.csv")
    with open(timeline, "w", encoding="utf-8") as file:
        file.write(HEADER + text)
    picture, table = os.path.join(directory, "step.svg"), os.path.join(directory, "step.md")
    result = subprocess.run([sys.executable, SCRIPT, timeline, picture, table, *flags],
                            capture_output=True, text=True, check=False)
    return result, picture, table


def two_layers():
    """Layers 0 and 1, each phase 0.5 us after the one before; the qkv product two
    instructions (work 2 and 3 us, the 3 us one signalling last), every other phase one
    instruction of 1 us (attention 2 us); layer 1 starts 14 us after layer 0."""
    phases = [(1, "ln_1 of row 0", [(0, 1000)]),
              (2, "qkv product, split 0 of column tile 0", [(1500, 3500), (2000, 5000)]),
              (3, "attention of row 0, head 0", [(5500, 7500)]),
              (2, "attention projection, split 0 of column tile 0", [(8000, 9000)]),
              (1, "ln_2 of row 0", [(9500, 10500)]),
              (2, "MLP expansion (c_fc), split 0 of column tile 0", [(11000, 12000)]),
              (2, "MLP projection, split 0 of column tile 0", [(12500, 13500)])]
    lines, index = [], 0
    for layer in (0, 1):
        for op, what, stamps in phases:
            for ready, done in stamps:
                shift = 14000 * layer
                lines.append(f'{index},{index % 3},{op},{layer},"layer {layer}, {what}",'
                             f'{shift + max(ready - 500, 0)},{shift + ready},{shift + done}\n')
                index += 1
    return "".join(lines)


def main():
    with tempfile.TemporaryDirectory() as directory:
        result, _, table = run(directory, two_layers())
        assert result.returncode == 0, result.stderr
        with open(table, encoding="utf-8") as file:
            text = file.read()
        assert "means over layers 0 to 1 (µs)" in text, text
        # phase | instructions | span | work, median | work of the last | handover
        assert "| ln_1 | 1 | 1.00 | 1.00 | 1.00 | 0.50 |" in text, text  # layer 1 only
        assert "| qkv product | 2 | 3.50 | 2.50 | 3.00 | 0.50 |" in text, text
        assert "| attention | 1 | 2.00 | 2.00 | 2.00 | 0.50 |" in text, text
        assert "| MLP projection | 1 | 1.00 | 1.00 | 1.00 | 0.50 |" in text, text
        assert "14.00 µs on average (14.00 to 14.00)" in text, text

        result, picture, table = run(directory, (
            '0,0,0,-1,"the embedding of row 0",0,1000,2000\n'
            '1,1,1,0,"layer 0, ln_1 of row 0",0,3000,4000\n'
            '2,0,2,0,"layer 0, qkv product, split 0 of column tile 0",2000,6000,9000\n'
            '3,1,2,0,"layer 0, qkv product, split 0 of column tile 1",4000,6000,10000\n'))
        assert result.returncode == 0, result.stderr
        with open(picture, encoding="utf-8") as file:
            drawing = file.read()
        assert drawing.count("<rect") == 2 * 4 + 6, drawing.count("<rect")  # bars + legend
        with open(table, encoding="utf-8") as file:
            text = file.read()
        assert "4 instructions on 2 blocks, 10.0 µs" in text, text
        assert "| product | 2 | 3.00 | 4.00 | 3.50 | 4.00 |" in text, text
        # --layer 0: layer 0's three instructions only, over their own 10 µs.
        result, picture, table = run(directory, (
            '0,0,0,-1,"the embedding of row 0",0,1000,2000\n'
            '1,1,1,0,"layer 0, ln_1 of row 0",0,3000,4000\n'
            '2,0,2,0,"layer 0, qkv product, split 0 of column tile 0",2000,6000,9000\n'
            '3,1,2,0,"layer 0, qkv product, split 0 of column tile 1",4000,6000,10000\n'
            '4,1,2,1,"layer 1, qkv product, split 0 of column tile 0",20000,26000,30000\n'),
            "--layer", "0")
        assert result.returncode == 0, result.stderr
        with open(picture, encoding="utf-8") as file:
            drawing = file.read()
        assert drawing.count("<rect") == 2 * 3 + 6, drawing.count("<rect")
        assert "layer 0 of one decode step, 2 blocks (rows), 10.0 µs" in drawing, drawing[:300]
        with open(table, encoding="utf-8") as file:
            assert "5 instructions on 2 blocks, 30.0 µs" in file.read()
        result, _, _ = run(directory, '0,0,0,-1,"x",0,1000,2000\n', "--layer", "3")
        assert result.returncode != 0 and "no instruction of layer 3" in result.stderr, result
        result, _, _ = run(directory, '0,0,0,-1,"x",5000,1000,2000\n')
        assert result.returncode != 0 and "out of order" in result.stderr, result
    print("test_render_persistent_timeline.py: ok")


if __name__ == "__main__":
    main()

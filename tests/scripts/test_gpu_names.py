#!/usr/bin/env python3
"""tests/scripts/test_gpu_names.py - the scripts that read run.json's GPU: the workshop's
floor table (render_computed_tables.py) finds the datasheet row of each name nvidia-smi
prints, and the roofline (render_roofline.py) takes its peak rates only for GPUs whose
rates it holds; both refuse any other GPU in one line rather than guess.

    python3 tests/scripts/test_gpu_names.py
"""

import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import render_computed_tables as tables  # noqa: E402
import render_roofline as roofline  # noqa: E402


def refused(call, *arguments) -> bool:
    try:
        call(*arguments)
    except SystemExit as stop:
        return stop.code not in (None, 0)
    return False


def main():
    rows = {
        "NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H100 PCIe": "H100 PCIe",
        "NVIDIA H200": "H200", "NVIDIA A100-SXM4-80GB": "A100 80GB SXM",
        "NVIDIA A100-PCIE-40GB": "A100 40GB", "NVIDIA GeForce RTX 4090": "RTX 4090",
        "NVIDIA GeForce RTX 3090": "RTX 3090", "NVIDIA L40S": "L40S", "NVIDIA A10": "A10",
        "NVIDIA L4": "L4",
    }
    for name, row in rows.items():
        found = tables.measured_gpu(name)
        assert found == row, f"{name}: {found}, not {row}"
    for name in ("NVIDIA H100 NVL", "NVIDIA GH200 480GB", "NVIDIA GeForce RTX 4080"):
        assert refused(tables.measured_gpu, name), f"{name} was given a datasheet row"

    with tempfile.TemporaryDirectory() as directory:
        roofline.RESULTS = directory
        for name, short in (("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H200", "H200")):
            with open(os.path.join(directory, "run.json"), "w", encoding="utf-8") as file:
                json.dump({"gpu": name}, file)
            assert roofline.gpu_name() == short, f"{name}: {roofline.gpu_name()}"
        for name in ("NVIDIA L4", "NVIDIA H100 PCIe"):
            with open(os.path.join(directory, "run.json"), "w", encoding="utf-8") as file:
                json.dump({"gpu": name}, file)
            assert refused(roofline.gpu_name), f"the roofline drew {name} under SXM roofs"
    print("test_gpu_names.py: ok")


if __name__ == "__main__":
    main()

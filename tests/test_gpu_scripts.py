"""The GPU window's shell scripts: they parse, and a call brings back what fits, the named policies first."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

GPU = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"


@pytest.mark.parametrize("script", sorted(p.name for p in GPU.glob("*.sh")))
def test_every_window_script_parses(script):
    subprocess.run(["bash", "-n", str(GPU / script)], check=True)


def test_pack_takes_the_named_adapters_first_and_stops_at_the_transfer_limit(tmp_path):
    results = tmp_path / "results"
    for name in ("answers", "exact", "trim_answers", "trim_exact"):
        folder = results / name / "adapter"
        folder.mkdir(parents=True)
        (folder / "adapter.safetensors").write_bytes(b"\0" * (17 << 20))  # a 0.5B rank-16 adapter's size
        (folder / "meta.json").write_text("{}")
    (results / "window.log").write_text("all done\n")
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(GPU / "pack.sh"), str(results), str(out)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "ADAPTERS": "trim_exact trim_answers"}, check=True)
    parts = sorted(out.glob("adapters.tar.part*"))
    assert all(p.stat().st_size <= 16 << 20 for p in out.iterdir()) and len(list(out.iterdir())) <= 8
    assert sum(p.stat().st_size for p in out.iterdir()) <= 64 << 20
    joined = tmp_path / "adapters.tar"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(joined) as tar:
        names = tar.getnames()
    assert names[:2] == ["results/trim_exact/adapter/adapter.safetensors",
                         "results/trim_answers/adapter/adapter.safetensors"]
    assert len(names) == 3 and "left for a later call" in done.stdout  # the fourth waits for the next call
    with tarfile.open(out / "window.tgz") as tar:
        packed = tar.getnames()
    assert "results/window.log" in packed and "results/exact/adapter/meta.json" in packed
    assert not any(name.endswith("adapter.safetensors") for name in packed)

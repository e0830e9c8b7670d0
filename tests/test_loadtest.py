"""The short version of scripts/loadtest.py: 8 streaming clients for 10 s mixing every dialect the
daemon has and cancellations, against its own real daemon. It must pass: no errors but 503s,
every greedy answer equal to the same request run alone, no memory growth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "loadtest.py"


def test_short_load_passes():
    result = subprocess.run([sys.executable, str(SCRIPT), "--clients", "8", "--duration", "10", "--prompts", "3",
                             "--max-tokens", "16", "--json"], capture_output=True, text=True, timeout=240)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0 and summary["pass"], summary
    assert summary["errors"] == 0 and summary["mismatches"] == 0
    assert summary["completed"] >= 8 and summary["cancelled"] >= 1
    assert {"openai", "ollama"} <= set(summary["dialects"])
    assert summary["rss_growth"] is not None and summary["rss_growth"] <= 0.10
    assert summary["ttft_p50_ms"] > 0


def test_only_loopback_daemons_are_loaded():
    result = subprocess.run([sys.executable, str(SCRIPT), "--url", "http://192.0.2.1:11435", "--duration", "1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "loopback daemons only" in result.stderr

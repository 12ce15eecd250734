"""What the docs state in prose and tables about the project holds: the policy table's kinds and levels, the
shipped stacks, and the benchmark page's figures against the run it quotes (a measurement the suite does not
repeat: `make bench` takes minutes, so the page keeps its output, and its prose must say what that output says)."""

from __future__ import annotations

import re

from gpustack import policyrun
from stacktest import ROOT, STACKS

DOCS = ROOT / "docs"
BENCH_SCRIPT = ROOT / "benchmarks" / "upgrade.py"
MEASURED = "<!-- measured: the output of `make bench` (benchmarks/upgrade.py) quoted below; tests/test_doc_figures.py holds the prose to it -->"


def table(page: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table under `header`, as cells."""
    text = (DOCS / page).read_text().split(header + "\n", 1)[1]
    rows = []
    for line in text.splitlines()[1:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_the_policy_table_gives_each_policy_its_kind_default_and_prod_managed_level():
    from pulumi_policy import ResourceValidationPolicy

    _, effective = policyrun._effective(policyrun.CONFIG_DIR)
    prod = effective["prod-managed"]
    rows = {row[0].strip("`"): row for row in table("policies.md", "| policy | kind | default | prod-managed | what it checks |")}
    policies = policyrun.pack_policies()
    assert sorted(rows) == sorted(p.name for p in policies), "docs/policies.md's table lists other policies than the pack"
    for policy in policies:
        _, kind, default, in_prod, _ = rows[policy.name]
        assert kind == ("resource" if isinstance(policy, ResourceValidationPolicy) else "stack"), policy.name
        assert default == policy.enforcement_level.value, policy.name
        level, settings = prod[policy.name]
        assert in_prod.split(" ", 1)[0] == level.value, policy.name
        for key, value in re.findall(r"`(\w+)` (\d+)", in_prod):
            assert settings[key] == int(value), (policy.name, key)


def test_the_stacks_page_describes_every_shipped_stack():
    described = [row[0].strip("`") for row in table("stacks.md", "| stack | what it shows |")]
    assert sorted(described) == sorted(STACKS)


# --- docs/benchmark.md --------------------------------------------------------------------------------------------


def measured() -> str:
    """The quoted run: the indented block after the page's `measured` mark."""
    text = (DOCS / "benchmark.md").read_text()
    assert MEASURED in text, "docs/benchmark.md lost its measured mark"
    block = text.split(MEASURED, 1)[1].lstrip("\n")
    return "\n".join(line[4:] for line in block.splitlines() if line.startswith("    ") or not line.strip()).split("\n\n")[0]


def figures(run: str, key: str) -> list[float]:
    return [float(v) for v in re.findall(rf"\b{key}=([\d.]+)", run)]


def prose() -> str:
    """The page's words, the lines wrapped back together."""
    return " ".join((DOCS / "benchmark.md").read_text().split())


def test_the_quoted_run_is_what_the_benchmark_prints():
    """Every line of the quote starts as the script's lines do and uses only keys it prints: a changed output
    format makes the quote stale."""
    script = BENCH_SCRIPT.read_text()
    run = measured()
    assert run.count("\n") > 10
    keys = set(re.findall(r"(\w+)=", run))
    per_method = {k for line in run.splitlines() if line.startswith("load per method") for k in re.findall(r"(\w+)=", line)}
    assert sorted(k for k in keys - per_method if f"{k}=" not in script) == []
    for line in run.splitlines():
        assert line.split("=", 1)[0].split(" ", 1)[0] in script, line


def test_the_render_benchmarks_output_is_described_as_it_prints():
    paragraph = (DOCS / "benchmark.md").read_text().split("`benchmarks/render.py` renders", 1)[1].split("\n\n", 1)[0]
    printed = re.findall(r"(\w+)=\{", (ROOT / "benchmarks" / "render.py").read_text().split("def main", 1)[1])
    assert re.findall(r"(\w+)=", paragraph) == printed


def test_the_prose_states_what_the_quoted_run_measured():
    run, text = measured(), prose()
    load = [line for line in run.splitlines() if line.startswith("load nodes=")]
    standing = {round(v) for line in load for v in figures(line, "standing_req_per_s")}
    assert len(standing) == 1 and f"Standing load: {standing.pop()} requests/s at 10,000 nodes" in text
    assert all("waiting=9000 holding=1000" in line for line in load)
    per_node = figures(run, "requests_per_node_upgrade")
    assert f"costs {round(min(per_node))} to {round(max(per_node))} requests beyond the standing rate" in text
    assert max(figures(run, "ratio_to_physical")) <= 1.01 and "within 1 % of the physical limit" in text
    minutes = figures(run, "benchmark_wall_s")[0] / 60
    words = {7: "seven", 8: "eight", 9: "nine", 10: "ten"}
    assert f"takes about {words[round(minutes)]} minutes" in text
    fleets = re.findall(r"^fleet nodes=(\d+) pools=(\d+) gpu_jobs=(\d+)", run, re.M)
    assert {(int(n), int(p)) for n, p, _ in fleets} == {(1000, 20), (10000, 50)}
    assert "across 1,000 nodes in 20 pools and 10,000 nodes in 50 pools (a GPU job on ~90 % of them)" in text
    assert all(round(int(jobs) / int(n), 1) == 0.9 for n, _, jobs in fleets)
    budgets = re.findall(r"slots=(\d+) .*\n.*max_disrupted=(\d+) .*outside_slot=(\d+)", run)
    assert budgets and all(slots == most and outside == "0" for slots, most, outside in budgets)

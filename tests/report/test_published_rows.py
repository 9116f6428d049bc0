"""The published-results data file: every row names a known source and known columns; papers that
report ALFWorld as seen/unseen splits never fill ALFWorld All; the peer papers' rows reach Table 1."""

from __future__ import annotations

import math

from gagpo_cli.report.tables import ReportTable, load_published, paper_columns, published_rows

SPLIT_KEYS = {"alfworld/seen", "alfworld/unseen"}


def test_rows_name_known_sources_and_columns():
    data = load_published()
    known = {c.key for c in paper_columns(1)} | SPLIT_KEYS
    for row in data["rows"]:
        assert row["source"] in data["sources"], row
        assert set(row["values"]) <= known, row
        for value in row["values"].values():
            assert isinstance(value, (int, float)) or (isinstance(value, list) and len(value) == 2), row


def test_split_reports_stay_out_of_alfworld_all():
    data = load_published()
    for row in data["rows"]:
        if "alfworld/seen" in row["values"]:  # a seen/unseen report (an "All" plus OOD is fine: PlanPO)
            assert "alfworld/all" not in row["values"], row
    assert "evaluation seeds of ONE training run" in data["sources"]["pgpo"]


def test_peer_rows_in_table1():
    table = ReportTable("Table 1", paper_columns(1), [])
    rows = {(r.block, r.label): r for r in published_rows(table, 1)}
    pgpo = rows[("Qwen2.5-1.5B-Instruct", "PGPO")]
    assert math.isnan(pgpo.stats["ALFWorld All"].mean)  # reported as Seen/Unseen only
    assert pgpo.stats["WebShop Succ."].mean == 75.0 and "2609.02236" in pgpo.source
    assert rows[("Qwen2.5-7B-Instruct", "GRAFT")].stats["ALFWorld All"].mean == 98.4
    assert rows[("Qwen2.5-1.5B-Instruct", "PlanPO")].stats["ALFWorld All"].std == 4.1
    assert {"EMPG", "GraphGPO", "HGPO"} <= {label for _, label in rows}

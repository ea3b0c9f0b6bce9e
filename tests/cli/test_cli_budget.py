"""``plan --memory-budget``: the search within a per-device budget, swapping when no plan fits."""

import json

import pytest

import shardwise as sw
from shardwise import cli
from shardwise.iteration.memory import memory_plan


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_budget_above_the_plan_keeps_it_and_reports_each_device_against_the_budget(capsys):
    code, out, err = run_cli(capsys, "plan", "--model", "lenet5", "--devices", "2", "--memory-budget", "1GB",
                             "--quiet", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["memory_budget"] == 10**9 and doc["swap"] is None
    plan = sw.Plan.from_json_dict(doc, sw.models.lenet5(), sw.DeviceGraph.cluster(1, 2, "P100"))
    mp = memory_plan(plan)
    arenas = [mp.devices[d].arena_bytes for d in range(2)]
    assert [row["peak_bytes"] for row in doc["memory"]] == arenas and max(arenas) <= 10**9


def test_budget_below_every_plan_swaps_activations_to_fit(capsys):
    budget = 4 * 10**9   # ResNet-50 at batch 32 needs about 5.2 GB on one device without swapping
    code, out, err = run_cli(capsys, "plan", "--model", "resnet50", "--batch", "32", "--devices", "1",
                             "--memory-budget", "4GB", "--json")
    assert code == 0
    assert "planning activation swapping" in err
    doc = json.loads(out)
    graph, devices = sw.models.resnet50(batch=32), sw.DeviceGraph.cluster(1, 1, "P100")
    plan = sw.Plan.from_json_dict(doc, graph, devices)
    unswapped = memory_plan(plan).devices[0].arena_bytes
    assert unswapped > budget   # the search alone could not fit it
    swap = doc["swap"]
    row = swap["devices"][0]
    assert row["unswapped_bytes"] == unswapped
    assert row["peak_bytes"] <= budget < row["unswapped_bytes"] and row["offloaded_bytes"] > 0
    assert swap["feature_maps_offloaded"] > 0
    # what the command reports is what the library gives for that plan and budget
    sp = sw.swap_plan(plan, budget)
    assert sp.peak_bytes[0] == row["peak_bytes"] and len(sp.entries) == swap["feature_maps_offloaded"]
    assert swap["iteration_time"] == pytest.approx(sw.simulate(plan, swap=sp, check_memory=False).iteration_time)
    assert swap["iteration_time"] >= swap["unswapped_iteration_time"]


def test_budget_below_a_tasks_working_set_fails_naming_both_limits(capsys):
    code, out, err = run_cli(capsys, "plan", "--model", "resnet50", "--batch", "32", "--devices", "1",
                             "--memory-budget", "200MB", "--quiet")
    assert code == cli.EXIT_ERROR
    assert "no plan fits 200.00 MB per device" in err and "swapping activations to host memory cannot" in err
    assert "needs at once" in err and "Raise --memory-budget" in err and "memory=False" not in err


@pytest.mark.parametrize("value", ["8XB", "-1GB", "0", "lots"])
def test_malformed_budget_is_a_usage_error(capsys, value):
    code, out, err = run_cli(capsys, "plan", "--model", "lenet5", "--devices", "2", "--memory-budget", value)
    assert code == cli.EXIT_ERROR
    assert "--memory-budget" in err and out == ""

"""Machine files (issue 17 point 6): DeviceGraph.save / DeviceGraph.load and --devices FILE.json.

* every preset, and hand-made machines with one-way links, nodes and kinds, survive a round
  trip: devices, links, widest routes, flags and the fingerprint (so plan files made for the
  original load against the copy), and a second save writes the same bytes;
* presets are written as their structure, not as D * (D - 1) links;
* a hand-written file may name a preset kind instead of the figures and link devices by name;
* every malformed field is refused with a DeviceGraphError naming the file, the field and the
  problem; saves are atomic;
* the command line takes a machine file wherever it takes a device count.
"""
from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest

import shardwise as sw
from shardwise import cli
from shardwise.machine.devices import DEVICE_PRESETS, MAX_DEVICES
from shardwise.errors import DeviceGraphError


def hand_made() -> sw.DeviceGraph:
    """Three kinds on two nodes; links both ways, one way, and both ways at two bandwidths."""
    d = sw.DeviceGraph("lab")
    a = d.add_device("a", flops=1e12, memory=8e9, kind="small")
    b = d.add_device("b", flops=2.5e12, memory=1.6e10, mem_bandwidth=3e11, node=1)
    c = d.add_device("c", flops=9.3e12, memory=1.6e10, node=1, kind="P100")
    e = d.add_device("e", flops=0.1, memory=1.0)   # tiny numbers keep their digits too
    d.add_link(a, b, bandwidth=1e9)
    d.add_link(b, c, bandwidth=2e10, bidirectional=False)
    d.add_link(c, b, bandwidth=1.5e10, bidirectional=False)
    d.add_link(c, a, bandwidth=3.3e9, bidirectional=False)
    d.add_link(e, a, bandwidth=123456789.123)
    return d


def machines() -> dict[str, sw.DeviceGraph]:
    out = {f"cluster 2x3 {k}": sw.DeviceGraph.cluster(nodes=2, devices_per_node=3, device=k) for k in DEVICE_PRESETS}
    out.update({
        "cluster 1x1": sw.DeviceGraph.cluster(nodes=1, devices_per_node=1),
        "cluster 4x4 parse": sw.DeviceGraph.parse("4x4"),
        "cluster slow nodes": sw.DeviceGraph.cluster(nodes=3, devices_per_node=2, intra_bandwidth=1e9,
                                                     inter_bandwidth=5e9),
        "cpu 1": sw.DeviceGraph.cpu(1),
        "cpu 5": sw.DeviceGraph.cpu(5),
        "hand made": hand_made(),
    })
    touched = sw.DeviceGraph.cluster(nodes=2, devices_per_node=2)
    touched.add_link(0, 3, bandwidth=1e8)   # a preset changed by hand: an ordinary graph with listed links
    out["touched preset"] = touched
    return out


def device_rows(d: sw.DeviceGraph) -> list[tuple]:
    return [(v.index, v.name, v.kind, v.flops, v.memory, v.mem_bandwidth, v.node) for v in d.devices]


@pytest.mark.parametrize("name", list(machines()))
def test_round_trip_keeps_everything(name, tmp_path):
    d = machines()[name]
    path = tmp_path / "m.json"
    d.save(path)
    e = sw.DeviceGraph.load(path)
    assert e.name == d.name
    assert device_rows(e) == device_rows(d)
    assert e.links == d.links
    np.testing.assert_array_equal(e.route_bandwidths(), d.route_bandwidths())
    assert (e.shared_cores, e.shared_nics) == (d.shared_cores, d.shared_nics)
    assert e.fingerprint() == d.fingerprint()
    assert e.summary() == d.summary()
    assert all(e.route(a, b) == d.route(a, b) for a in range(len(d)) for b in range(len(d)))
    again = tmp_path / "again.json"
    e.save(again)
    assert again.read_bytes() == path.read_bytes()


def test_presets_are_written_as_their_structure(tmp_path):
    """A 64x16 cluster: 1,024 device rows and no links (1,047,552 of them are implied)."""
    d = sw.DeviceGraph.cluster(nodes=64, devices_per_node=16, device="V100")
    path = tmp_path / "big.json"
    d.save(path)
    doc = json.loads(path.read_text())
    assert "links" not in doc and len(doc["devices"]) == 1024
    assert doc["all_to_all"] == {"devices_per_node": 16, "intra_bandwidth": DEVICE_PRESETS["V100"].intra_bandwidth,
                                 "inter_bandwidth": sw.machine.devices.INFINIBAND_EDR}
    assert len(path.read_text().splitlines()) < 1050   # one line per device
    assert sw.DeviceGraph.load(path).fingerprint() == d.fingerprint()


def test_plan_files_made_for_the_original_load_against_the_copy(tmp_path):
    g = sw.models.lenet5(batch=16)
    for d in (sw.DeviceGraph.cluster(nodes=2, devices_per_node=2), hand_made()):
        plan = sw.search(g, d)
        plan.save(tmp_path / "plan.json")
        d.save(tmp_path / "m.json")
        copy_ = sw.DeviceGraph.load(tmp_path / "m.json")
        loaded = sw.Plan.load(tmp_path / "plan.json", g, copy_)
        assert loaded.cost == pytest.approx(plan.cost, rel=1e-12)


def test_hand_written_file_with_preset_kinds_and_names(tmp_path):
    """Figures a preset kind gives need not be written; links may name their devices."""
    doc = {"format": "shardwise-machine", "version": 1, "name": "mixed",
           "devices": [{"name": "fast", "kind": "V100"},
                       {"name": "slow", "kind": "K80", "memory": 2.4e10, "node": 1},
                       {"name": "custom", "flops": 1e12, "memory": 4e9}],
           "links": [{"from": "fast", "to": "slow", "bandwidth": 1e10},
                     {"from": 2, "to": "fast", "bandwidth": 5e9, "bidirectional": False},
                     {"from": "fast", "to": "custom", "bandwidth": 4e9, "bidirectional": False}]}
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(doc))
    d = sw.DeviceGraph.load(path)
    v100, k80 = DEVICE_PRESETS["V100"], DEVICE_PRESETS["K80"]
    assert (d["fast"].flops, d["fast"].memory, d["fast"].mem_bandwidth, d["fast"].kind) == \
        (v100.flops, v100.memory, v100.mem_bandwidth, "V100")
    assert (d["slow"].flops, d["slow"].memory, d["slow"].node) == (k80.flops, 2.4e10, 1)
    assert d["custom"].mem_bandwidth == pytest.approx(1e12 * 0.08)   # add_device's default ratio
    assert d.links == {(0, 1): 1e10, (1, 0): 1e10, (2, 0): 5e9, (0, 2): 4e9}
    assert d.route_bandwidths()[2, 1] == 5e9   # custom -> fast -> slow: the slower hop
    assert (d.shared_cores, d.shared_nics) == (None, False)


# ----------------------------------------------------------------------------------------- validation
VALID = {"format": "shardwise-machine", "version": 1, "name": "v",
         "devices": [{"name": "a", "flops": 1e12, "memory": 8e9, "mem_bandwidth": 1e11, "node": 0},
                     {"name": "b", "flops": 1e12, "memory": 8e9, "node": 0}],
         "links": [{"from": 0, "to": 1, "bandwidth": 1e9}]}
UNIFORM = {**{k: v for k, v in VALID.items() if k != "links"},
           "all_to_all": {"devices_per_node": 1, "intra_bandwidth": 1e9, "inter_bandwidth": 2e9}}


def edit(base, path, value=None, delete=False):
    """A deep copy of ``base`` with the field at ``path`` (keys and indices) set or deleted."""
    doc = copy.deepcopy(base)
    *parents, last = path
    target = doc
    for key in parents:
        target = target[key]
    if delete:
        del target[last]
    elif isinstance(target, list) and last == len(target):
        target.append(value)   # one more entry
    else:
        target[last] = value
    return doc


BAD = [
    (edit(VALID, ["format"], delete=True), "not a shardwise machine file"),
    (edit(VALID, ["format"], "shardwise-plan"), "\"format\" must be 'shardwise-machine'"),
    (edit(VALID, ["version"], delete=True), "version: missing field"),
    (edit(VALID, ["version"], 2), "version: machine file version 2 is not supported"),
    (edit(VALID, ["version"], True), "version: machine file version true"),
    (edit(VALID, ["latency"], 1e-6), "unknown field 'latency'"),
    (edit(VALID, ["name"], 7), "name: must be a non-empty string, got a number 7"),
    (edit(VALID, ["devices"], delete=True), "devices: missing field"),
    (edit(VALID, ["devices"], []), "devices: must be a non-empty array"),
    (edit(VALID, ["devices"], {"a": 1}), "devices: must be a non-empty array"),
    (edit(VALID, ["devices", 1], "b"), "devices[1]: must be a JSON object, got a string"),
    (edit(VALID, ["devices", 1, "name"], delete=True), "devices[1]: missing field 'name'"),
    (edit(VALID, ["devices", 1, "name"], ""), "devices[1].name: must be a non-empty string"),
    (edit(VALID, ["devices", 1, "name"], "a"), "devices[1].name: duplicate device name 'a' (also devices[0])"),
    (edit(VALID, ["devices", 1, "flops"], delete=True), "devices[1]: missing field 'flops' (or a preset kind"),
    (edit(VALID, ["devices", 0, "memory"], delete=True), "devices[0]: missing field 'memory'"),
    (edit(VALID, ["devices", 0, "flops"], -1), "devices[0].flops: must be a positive number (FLOP/s), got -1"),
    (edit(VALID, ["devices", 0, "flops"], 0), "devices[0].flops: must be a positive number"),
    (edit(VALID, ["devices", 0, "flops"], "1e12"),
     "devices[0].flops: must be a positive number (FLOP/s), got a string"),
    (edit(VALID, ["devices", 0, "flops"], True), "devices[0].flops: must be a positive number (FLOP/s), got a boolean"),
    (edit(VALID, ["devices", 0, "flops"], 10**400),
     "devices[0].flops: must be a positive number (FLOP/s), got a number of 401 digits"),
    (edit(VALID, ["devices", 0, "memory"], None), "devices[0].memory: must be a positive number (bytes), got null"),
    (edit(VALID, ["devices", 0, "mem_bandwidth"], -5.0), "devices[0].mem_bandwidth: must be a positive number"),
    (edit(VALID, ["devices", 0, "node"], -1), "devices[0].node: must be an integer from 0"),
    (edit(VALID, ["devices", 0, "node"], 1.0), "devices[0].node: must be an integer, got a number 1.0"),
    (edit(VALID, ["devices", 0, "node"], False), "devices[0].node: must be an integer, got a boolean"),
    (edit(VALID, ["devices", 0, "kind"], 3), "devices[0].kind: must be a non-empty string"),
    (edit(VALID, ["devices", 0, "bandwith"], 1e9), "devices[0]: unknown field 'bandwith'"),
    (edit(VALID, ["links"], {"from": 0}), "links: must be an array, got an object"),
    (edit(VALID, ["links", 0], [0, 1]), "links[0]: must be a JSON object"),
    (edit(VALID, ["links", 0, "bandwidth"], delete=True), "links[0]: missing field 'bandwidth'"),
    (edit(VALID, ["links", 0, "to"], delete=True), "links[0]: missing field 'to'"),
    (edit(VALID, ["links", 0, "to"], 2), "links[0].to: device index 2 is out of range: the machine has devices 0..1"),
    (edit(VALID, ["links", 0, "from"], -1), "links[0].from: device index -1 is out of range"),
    (edit(VALID, ["links", 0, "from"], "z"), "links[0].from: no device named 'z'"),
    (edit(VALID, ["links", 0, "from"], 0.0), "links[0].from: must be a device index or name, got a number 0.0"),
    (edit(VALID, ["links", 0, "to"], 0), "links[0]: links device 'a' to itself"),
    (edit(VALID, ["links", 0, "bandwidth"], 0), "links[0].bandwidth: must be a positive number (bytes/s), got 0"),
    (edit(VALID, ["links", 0, "bidirectional"], "yes"), "links[0].bidirectional: must be true or false"),
    (edit(VALID, ["links", 0, "latency"], 1e-6), "links[0]: unknown field 'latency'"),
    (edit(VALID, ["links", 1], {"from": 1, "to": 0, "bandwidth": 2e9}),
     "links[1]: duplicate link b -> a (also links[0])"),
    (edit(VALID, ["links", 1], {"from": "a", "to": "b", "bandwidth": 2e9, "bidirectional": False}),
     "links[1]: duplicate link a -> b (also links[0])"),
    (edit(VALID, ["all_to_all"], UNIFORM["all_to_all"]), "give either \"links\" or \"all_to_all\", not both"),
    (edit(UNIFORM, ["all_to_all", "inter_bandwidth"], delete=True), "all_to_all: missing field 'inter_bandwidth'"),
    (edit(UNIFORM, ["all_to_all", "devices_per_node"], 0), "all_to_all.devices_per_node: must be an integer from 1"),
    (edit(UNIFORM, ["all_to_all", "devices_per_node"], 3), "3 does not divide the 2 devices into whole nodes"),
    (UNIFORM, "devices[1].node: is 0, but all_to_all with 1 devices per node puts device 1 on node 1"),
    (edit(UNIFORM, ["all_to_all"], [1, 2]), "all_to_all: must be a JSON object, got an array"),
    (edit(VALID, ["shared_cores"], 0), "shared_cores: must be an integer from 1"),
    (edit(VALID, ["shared_cores"], "2"), "shared_cores: must be an integer, got a string"),
    (edit(VALID, ["shared_nics"], 1), "shared_nics: must be true or false, got a number 1"),
    ([VALID], "not a shardwise machine file"),
]


@pytest.mark.parametrize("doc, message", BAD, ids=[m[:40] for _, m in BAD])
def test_malformed_fields_are_named(tmp_path, doc, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DeviceGraphError) as info:
        sw.DeviceGraph.load(path)
    assert message in str(info.value)
    assert str(info.value).startswith(f"{path}: ")


def test_the_valid_documents_above_load(tmp_path):
    """The cases are edits of a valid document: without the edit it loads."""
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(VALID))
    assert len(sw.DeviceGraph.load(path)) == 2
    fixed = edit(UNIFORM, ["devices", 1, "node"], 1)
    assert sw.DeviceGraph.from_dict(fixed).route_bandwidths()[0, 1] == 2e9   # between nodes


@pytest.mark.parametrize("text, message", [
    (b'{"format": "shardwise-machine", "version": 1, "version": 2}', "the key 'version' appears twice"),
    (b'{"format": "shardwise-machine", ', "invalid JSON"),
    (b"\xff\xfe not text", "not UTF-8 text"),
    (b'{"format": "shardwise-machine", "version": 1, "devices": [{"name": "a", "flops": NaN, "memory": 1}]}',
     "devices[0].flops: must be a positive number (FLOP/s), got NaN"),
    (b'{"format": "shardwise-machine", "version": 1, "devices": [{"name": "a", "flops": Infinity, "memory": 1}]}',
     "devices[0].flops: must be a positive number"),
])
def test_unreadable_text_is_refused(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_bytes(text)
    with pytest.raises(DeviceGraphError, match=None) as info:
        sw.DeviceGraph.load(path)
    assert message in str(info.value)


def test_too_many_devices_are_refused_before_building():
    doc = edit(VALID, ["devices"], [{"name": f"d{k}", "kind": "cpu"} for k in range(MAX_DEVICES + 1)])
    del doc["links"]
    with pytest.raises(DeviceGraphError, match=f"devices: {MAX_DEVICES + 1} devices; shardwise plans for at most"):
        sw.DeviceGraph.from_dict(doc)


def test_a_missing_file_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        sw.DeviceGraph.load(tmp_path / "absent.json")


# ----------------------------------------------------------------------------------------- atomic saves
def test_saves_are_atomic(tmp_path, monkeypatch):
    """The old file stays whole when a save fails (while writing, or a graph with no devices),
    and no temporary file is left behind."""
    path = tmp_path / "m.json"
    sw.DeviceGraph.cpu(2).save(path)
    before = path.read_bytes()
    with pytest.raises(DeviceGraphError, match="no devices"):
        sw.DeviceGraph("empty").save(path)

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space left"):
        sw.DeviceGraph.cpu(3).save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.json"]
    sw.DeviceGraph.cpu(3).save(path)   # and a save that succeeds replaces it
    assert len(sw.DeviceGraph.load(path)) == 3 and os.listdir(tmp_path) == ["m.json"]


# ----------------------------------------------------------------------------------------- command line
def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_plans_and_simulates_on_a_machine_file(capsys, tmp_path):
    """--devices FILE.json gives the same plan as the preset it was saved from."""
    path = tmp_path / "machine.json"
    sw.DeviceGraph.parse("2x2", device="V100").save(path)
    code, from_file, err = run_cli(capsys, "plan", "--model", "lenet5", "--devices", str(path), "--json", "--quiet")
    assert code == 0, err
    code, from_spec, err = run_cli(capsys, "plan", "--model", "lenet5", "--devices", "2x2", "--device-type", "V100",
                                   "--json", "--quiet")
    assert code == 0, err
    a, b = json.loads(from_file), json.loads(from_spec)
    assert a["devices"]["fingerprint"] == b["devices"]["fingerprint"] and a["ops"] == b["ops"]
    code, out, err = run_cli(capsys, "simulate", "--model", "lenet5", "--devices", str(path), "--quiet")
    assert code == 0 and "searched" in out, err


def test_cli_trains_on_a_machine_file(capsys, tmp_path):
    pytest.importorskip("sklearn")
    path = tmp_path / "workers.JSON"   # the suffix in any case
    sw.DeviceGraph.cpu(2).save(path)
    code, out, err = run_cli(capsys, "train", "--model", "lenet5", "--devices", str(path), "--epochs", "1",
                             "--plan", "data", "--quiet")
    assert code == 0, err
    assert "accuracy" in out


@pytest.mark.parametrize("command", ["plan", "simulate", "train"])
def test_cli_reports_bad_machine_files(capsys, tmp_path, command):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(edit(VALID, ["devices", 0, "flops"], -1)))
    for spec, message in ((str(bad), "devices[0].flops: must be a positive number"),
                          (str(tmp_path / "absent.json"), "cannot read the machine file")):
        code, out, err = run_cli(capsys, command, "--model", "lenet5", "--devices", spec, "--quiet")
        assert code == 2 and message in err and "Traceback" not in err, err


def test_the_example_in_the_docs_loads():
    """docs/machines.md's example: preset figures filled in, links by index and by name, one way."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "machines.md").read_text()
    d = sw.DeviceGraph.from_dict(json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1)))
    assert [v.name for v in d.devices] == ["gpu0", "gpu1", "old"]
    assert d["gpu1"].flops == DEVICE_PRESETS["V100"].flops
    assert d.links[(2, 0)] == 5e9 and (0, 2) not in d.links

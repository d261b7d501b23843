from __future__ import annotations

import json

import pytest

import ccl
import topologies as T
from ccl import InputError
from ccl.core.collective import (
    MULTI_ROOT_KINDS,
    allgather,
    builtin,
    custom,
    multi_root,
    replicated_broadcast,
)
from ccl.core.serialize import (
    algorithm_from_json,
    algorithm_to_json,
    collective_from_json,
    collective_to_json,
    dumps,
    load_algorithm,
    save_algorithm,
    topology_from_json,
    topology_to_json,
)


@pytest.mark.parametrize("spec", ["dgx1", "ring:5", "ndv2:2", "dgx-a100:2", "torus:2x3", "switch:4", "amd8"])
def test_topology_round_trip(spec):
    topo = T.build(spec)
    back = topology_from_json(json.loads(json.dumps(topology_to_json(topo))))
    assert back == topo
    assert back.flat() == topo.flat()


def test_builtin_collective_stored_by_spec():
    coll = builtin("alltoall", 4, chunks=3)
    data = collective_to_json(coll)
    assert "inputs" not in data
    assert collective_from_json(data) == coll


def test_custom_collective_stored_explicitly():
    coll = custom("shift", 3, pre=[(r, r) for r in range(3)], post=[(r, (r + 1) % 3) for r in range(3)])
    data = json.loads(json.dumps(collective_to_json(coll)))
    assert data["explicit"] is True
    assert collective_from_json(data) == coll


@pytest.mark.parametrize("coll", [multi_root(kind, 4, (0, 3), chunks=2) for kind in MULTI_ROOT_KINDS]
                         + [replicated_broadcast(4, (1, 2))], ids=lambda c: c.name)
def test_multi_root_collectives_round_trip(coll):
    data = json.loads(json.dumps(collective_to_json(coll)))
    assert data["explicit"] is True and data["chunk_factor"] == coll.chunk_factor
    assert collective_from_json(data) == coll


def test_renamed_builtin_round_trips():
    from dataclasses import replace

    coll = replace(allgather(4), name="my_ag")
    assert collective_from_json(collective_to_json(coll)) == coll


def test_algorithm_round_trip_is_lossless_and_deterministic(tmp_path):
    result = ccl.synthesize(ccl.problem("ndv2:2", "allreduce", solver="hierarchical", chunks=2))
    a = result.algorithm
    path = tmp_path / "a.json"
    save_algorithm(a, path)
    text = path.read_text()
    assert load_algorithm(path) == a
    save_algorithm(load_algorithm(path), tmp_path / "b.json")
    assert (tmp_path / "b.json").read_text() == text
    assert json.loads(text) == json.loads(json.dumps(algorithm_to_json(a)))
    assert algorithm_from_json(json.loads(dumps(algorithm_to_json(a)))) == a


def test_one_transfer_per_line(tmp_path):
    a = ccl.synthesize(ccl.problem("ring:4", "allgather")).algorithm
    save_algorithm(a, tmp_path / "a.json")
    lines = [x for x in (tmp_path / "a.json").read_text().splitlines() if x.strip().startswith("[0,") or x.strip().startswith("[1,") or x.strip().startswith("[2,")]
    assert sum(1 for x in lines if '"output"' in x) == len(a.transfers)


def test_load_errors_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_algorithm(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(InputError, match="bad.json:1:3: invalid JSON"):
        load_algorithm(bad)
    bad.write_text(json.dumps({"format": "something"}))
    with pytest.raises(InputError, match="not an algorithm file"):
        load_algorithm(bad)
    a = ccl.synthesize(ccl.problem("ring:3", "allgather")).algorithm
    data = algorithm_to_json(a)
    data["version"] = 99
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError, match="version 99 is not supported"):
        load_algorithm(bad)
    data = json.loads(json.dumps(algorithm_to_json(a)))
    del data["topology"]
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError, match="missing field 'topology'"):
        load_algorithm(bad)
    data = json.loads(json.dumps(algorithm_to_json(a)))
    data["transfers"][0] = [0, 0, "output"]
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError, match="transfer 0: expected an array of 9 fields"):
        load_algorithm(bad)
    data = json.loads(json.dumps(algorithm_to_json(a)))
    data["transfers"][0][4] = 17
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError, match="rank 17 is not in 0..2"):
        load_algorithm(bad)


def test_save_is_atomic_and_reports_missing_folder(tmp_path):
    a = ccl.synthesize(ccl.problem("ring:3", "allgather")).algorithm
    with pytest.raises(InputError, match="does not exist"):
        save_algorithm(a, tmp_path / "no" / "such" / "a.json")
    assert list(tmp_path.iterdir()) == []

from __future__ import annotations

import pytest

import topologies as T
from ccl import CollectiveError, InputError, Problem, Request, Sketch
from ccl.core.collective import allgather


def test_request_validation():
    with pytest.raises(InputError, match="chunks must be a positive integer"):
        Request(chunks=0)
    with pytest.raises(InputError, match="steps must be a positive integer"):
        Request(steps=-1)
    with pytest.raises(InputError, match="time limit must be positive"):
        Request(time_limit=0)
    with pytest.raises(InputError, match="sketch must be a Sketch"):
        Request(sketch={"relays": [0]})
    assert Request(options=(("b", 1), ("a", 2))).option("a") == 2


def test_sketch_normalizes_and_validates():
    s = Sketch(relays=(3, 1, 1), internode=((1, 1), (0, 0)), symmetry=(8, 8))
    assert s.relays == (1, 3) and s.internode == ((0, 0), (1, 1)) and s.symmetry == (8,)
    with pytest.raises(InputError, match="switch policy"):
        Sketch(switch_policy="some")
    with pytest.raises(InputError, match="chunk partition"):
        Sketch(chunk_partition=0)


def test_problem_rank_mismatch():
    with pytest.raises(CollectiveError, match="has 4 ranks but topology"):
        Problem(T.ring(8), allgather(4))

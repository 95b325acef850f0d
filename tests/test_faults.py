"""Issue 33, faults and bad inputs that still got through: each test names its item and the exact input."""

from __future__ import annotations

import pytest

from cone.errors import InputError
from cone.indexing import postprocess as pp
from cone.indexing import store

# --- item 11: --postprocess values round-trip exactly ------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "canonical"),
    [
        ("rogue:1:1000000", "rogue:1:1000000"),
        ("rogue:1:0.00001", "rogue:1:1e-05"),
        ("cone:0.00001", "cone:1e-05"),
        ("cone:0.99999999", "cone:0.99999999"),
        ("cone:0.1234567", "cone:0.1234567"),
        ("rogue:2:1e+20", "rogue:2:1e20"),
        ("cone:0.5e-3+whiten", "cone:0.0005+whiten"),
    ],
)
def test_postprocess_canonical_form_round_trips_and_keeps_the_value(spec, canonical):
    assert pp.parse(spec) == canonical
    assert pp.parse(canonical) == canonical
    value = spec.split("+")[0] if "whiten" in spec else spec
    assert float(canonical.split("+")[0].rsplit(":", 1)[1]) == float(value.rsplit(":", 1)[1])


def test_postprocess_folder_names_stay_portable_and_distinct():
    specs = ["rogue:1:1000000", "rogue:1:0.00001", "cone:0.00001", "cone:0.99999999", "rogue:2:1e20", "rogue:2:30"]
    names = [store.index_name("minilm", pp.parse(s)) for s in specs]
    assert len(set(names)) == len(names)
    assert all(set(n) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") for n in names)
    assert store.index_name("minilm", "rogue:2:30") == "minilm-rogue2x30"  # earlier builds' names unchanged


@pytest.mark.parametrize("bad", ["cone:1e0", "cone:0.99999999999999999", "rogue:1:0", "rogue:1:1e999", "cone:nan"])
def test_postprocess_refuses_out_of_range_values_in_any_notation(bad):
    with pytest.raises(InputError):
        pp.parse(bad)


# --- item 14: st: index names are unique, the built-in names unchanged --------------------------------------------


def test_st_index_names_do_not_collide():
    names = {store.index_name(m, "none") for m in ("st:/m/a_b", "st:/m_a/b", "st:/m/a/b")}
    assert len(names) == 3
    assert all(n.startswith("st__m_a_b-") for n in names)
    assert [store.index_name(m, "none") for m in ("baseline", "minilm", "regularized-ft")] == [
        "baseline",
        "minilm",
        "regularized-ft",
    ]
